//! stagger's own policy file: everything the checklist asks about is a
//! field, so each finding names the field to change.

use std::time::Duration;

use stagger::classify::GRPC_CODE_NAMES as GRPC_CODES;
use stagger::config::{PolicyFile, RetryOn};
use stagger::guardrails::BreakerConfig;
use stagger::{Breaker, Class, Jitter};

use super::amplify::{Engine, Subject};
use super::{numbers, transient_grpc, transient_http, AuditError, Finding, Input, Layer, SEED};

pub(crate) fn layer(f: &Input<'_>) -> Result<Layer, AuditError> {
    let parsed = if f.name.ends_with(".toml") {
        PolicyFile::from_toml(f.text)
    } else {
        PolicyFile::from_json(f.text)
    };
    let file = parsed.map_err(|e| AuditError {
        file: f.name.to_string(),
        field: e.field().to_string(),
        problem: super::one_line(e.problem()),
    })?;
    let mut layer = Layer {
        findings: Vec::new(),
        methods: Vec::new(),
        attempts: 1,
    };
    if file.attempts <= 1 {
        return Ok(layer);
    }
    let name = file.name.clone().unwrap_or_else(|| "*".to_string());
    let found = schedule_checks(&file)
        .into_iter()
        .chain(guard_checks(&file));
    for (id, message) in found {
        layer.findings.push(Finding {
            file: String::new(),
            id,
            method: name.clone(),
            message,
        });
    }
    // The breaker's open periods are jittered from its own seed: fix it so
    // a report replays exactly.
    let make = || -> Result<Engine, super::Fault> {
        let mut b = file.policy_builder()?;
        if file.breaker {
            b = b.breaker(Breaker::new(BreakerConfig {
                seed: Some(SEED),
                ..Default::default()
            })?);
        }
        Ok(Engine::Retry(b.build()?))
    };
    let subject = Subject {
        make: &make,
        failure: Class::Transient.into(),
        deadline: file.deadline,
        shared: file.budget.is_some() || file.breaker,
    };
    let numbers = numbers(name.clone(), vec![name], &subject).map_err(|e| e.in_file(f.name))?;
    layer.methods.push(numbers);
    layer.attempts = u64::from(file.attempts);
    Ok(layer)
}

/// A finding's id and message.
type Found = (&'static str, String);

/// What the checklist finds in the codes retried and the schedule.
fn schedule_checks(file: &PolicyFile) -> Vec<Found> {
    let mut found = Vec::new();
    let mut push = |id: &'static str, message: String| found.push((id, message));
    let bad: Vec<String> = file
        .retry_on
        .iter()
        .filter_map(|r| match *r {
            RetryOn::Grpc(c) if !transient_grpc(c) => Some(GRPC_CODES[c as usize].to_string()),
            RetryOn::Http(s) if !transient_http(s) => Some(s.to_string()),
            _ => None,
        })
        .collect();
    if !bad.is_empty() {
        push(
            "non_transient_codes",
            format!(
                "retry_on lists {}: these report a bug or a request that will fail again, not a passing fault; keep UNAVAILABLE, 429, 502, 503, 504",
                bad.join(", ")
            ),
        );
    }
    if file.attempts > 3 {
        push(
            "attempts_high",
            format!(
                "attempts = {}: up to {}× load on a failing dependency; use 3 or fewer",
                file.attempts, file.attempts
            ),
        );
    }
    if matches!(file.jitter, Jitter::None) || file.jitter == Jitter::Proportional(0.0) {
        push(
            "no_jitter",
            format!(
                "jitter = \"{}\": clients that failed together retry together, in waves; use jitter = \"full\"",
                file.jitter
            ),
        );
    }
    if file.base.is_zero() {
        push(
            "no_backoff",
            "base = \"0s\": retries follow each failure at once; use base = \"100ms\"".to_string(),
        );
    } else if file.multiplier <= 1.0 {
        push(
            "no_backoff",
            format!(
                "multiplier = {}: every wait stays at base, so retries keep arriving at the same rate while the dependency is down; use multiplier = 2",
                file.multiplier
            ),
        );
    } else if file.cap <= file.base {
        push(
            "no_backoff",
            format!(
                "cap {:?} is not above base {:?}, so the backoff cannot grow; raise cap to at least 10× base",
                file.cap, file.base
            ),
        );
    }
    found
}

/// What the checklist finds in the guards around the retries: budget,
/// deadline, server hints and breaker.
fn guard_checks(file: &PolicyFile) -> Vec<Found> {
    let mut found = Vec::new();
    let mut push = |id: &'static str, message: String| found.push((id, message));
    if file.budget.is_none() {
        push(
            "no_budget",
            "no budget: nothing stops every call from retrying at once when the dependency fails; add [budget] with kind = \"ratio\" and ratio = 0.1".to_string(),
        );
    }
    if file.deadline.is_none() {
        push(
            "no_deadline",
            "no deadline: retries and waits have no overall limit, so a call can outlive its caller; set deadline to what the caller will wait (e.g. \"2s\")".to_string(),
        );
    }
    if file.max_retry_after < Duration::from_secs(1) {
        push(
            "retry_after_ignored",
            format!(
                "max_retry_after = {:?}: Retry-After is given in whole seconds, so every server hint stops the call instead of waiting for it; set max_retry_after to the longest wait you accept (e.g. \"30s\")",
                file.max_retry_after
            ),
        );
    }
    if !file.breaker {
        push(
            "no_breaker",
            "no breaker: a dependency that stays down still gets every first attempt and its retries; set breaker = true".to_string(),
        );
    }
    found
}
