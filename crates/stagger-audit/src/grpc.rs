//! A gRPC service config, read by the library's import: the lenient front
//! ([`crate::lenient`]) puts published spellings into [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s, then
//! each `methodConfig` entry goes through [`ServiceConfig::from_json`] on
//! its own, so one bad entry is a finding and the others are still audited.
//! Only `maxAttempts` is looked up in the file as written, for the message
//! of a value gRPC caps at 5.

use std::time::Duration;

use serde_json::{json, Map, Value};
use stagger::classify::GRPC_CODE_NAMES as GRPC_CODES;
use stagger::config::{MethodConfig, ServiceConfig, Throttling};
use stagger::{Backoff, Class, Jitter, Policy};

use super::amplify::{self, Engine, Subject};
use super::lenient::{self, Leniency, UnboundedRetry};
use super::{numbers, transient_grpc, AuditError, Fault, Finding, Input, Layer};

const UNAVAILABLE: u32 = 14;

/// Builds a fresh engine for each measured scenario.
type MakeEngine = Box<dyn Fn() -> Result<Engine, Fault>>;

/// Audits a service config file: one config, or the DNS TXT list of
/// choices, each audited as a config of its own.
pub(crate) fn file(f: &Input<'_>) -> Result<Layer, AuditError> {
    let bad = |e: Fault| e.in_file(f.name);
    // One choice as a Go program embeds it: `{"clientLanguage": […],
    // "serviceConfig": {…}}` is a list of one.
    let wrapped;
    let text = if is_one_choice(f.text) {
        wrapped = format!("[{}]", f.text);
        wrapped.as_str()
    } else {
        f.text
    };
    if let Some(list) = lenient::choices(text).map_err(bad)? {
        let mut layer = Layer::default();
        for (i, c) in list.into_iter().enumerate() {
            let who = if c.client_language.is_empty() {
                String::new()
            } else {
                format!(" {}", c.client_language.join(","))
            };
            let one = config(f, c.service_config, &format!("[choice {}{who}] ", i + 1))?;
            layer.findings.extend(one.findings);
            layer.methods.extend(one.methods);
            layer.attempts = layer.attempts.max(one.attempts);
        }
        return Ok(layer);
    }
    let root: Value = serde_json::from_str(f.text)
        .map_err(|e| bad(Fault::new("serviceConfig", format!("not valid JSON: {e}"))))?;
    config(f, root, "")
}

/// Whether `text` is one DNS TXT choice object (a `serviceConfig` key
/// beside the choice's own keys), not a service config.
pub(crate) fn is_one_choice(text: &str) -> bool {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => {
            m.contains_key("serviceConfig")
                && m.keys().all(|k| {
                    matches!(
                        k.as_str(),
                        "serviceConfig" | "clientLanguage" | "percentage" | "clientHostname"
                    )
                })
        }
        _ => false,
    }
}

/// The `nonstandard_spelling` messages for the spellings a lenient read
/// accepted.
pub(crate) fn spelling_messages(seen: &[Leniency]) -> Vec<String> {
    let mut out = Vec::new();
    spelling(seen, "", &mut out);
    out.into_iter().map(|f| f.message).collect()
}

/// Everything known about one entry once the library has read it.
struct Entry<'a> {
    label: String,
    names: Vec<String>,
    raw: &'a Map<String, Value>,
    parsed: ServiceConfig,
    unbounded: Option<UnboundedRetry>,
}

fn config(f: &Input<'_>, mut root: Value, prefix: &str) -> Result<Layer, AuditError> {
    let bad = |e: Fault| e.in_file(f.name);
    if !root.is_object() {
        return Err(bad(Fault::new("serviceConfig", "must be a JSON object")));
    }
    let seen = lenient::normalize(&mut root);
    let mut layer = Layer::default();
    spelling(&seen, prefix, &mut layer.findings);
    let root = root.as_object().cloned().unwrap_or_default();
    let entries = match root.get("methodConfig") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(bad(Fault::new("methodConfig", "must be a list"))),
    };
    let throttle_json = root.get("retryThrottling").filter(|v| !v.is_null());
    let throttling = match throttle_json {
        None => None,
        Some(t) => match ServiceConfig::from_json(&json!({ "retryThrottling": t }).to_string()) {
            Ok(c) => c.throttling,
            Err(e) => {
                layer
                    .findings
                    .push(invalid(&format!("{prefix}*"), &e.into()));
                None
            }
        },
    };
    let mut valid = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let raw = entry.as_object().ok_or_else(|| {
            bad(Fault::new(
                "methodConfig",
                format!("entry {i} must be an object"),
            ))
        })?;
        let mut e = raw.clone();
        let unbounded = lenient::take_retry_without_max_attempts(&mut e);
        let parsed = ServiceConfig::from_json(&json!({ "methodConfig": [e] }).to_string())
            .map_err(Fault::from);
        let (label, names) = match &parsed {
            Ok(c) => label(prefix, &c.methods[0].names),
            Err(_) => label(prefix, &raw_names(raw)),
        };
        let parsed = match (parsed, unbounded) {
            (Err(err), _) | (Ok(_), Some(Err(err))) => {
                layer.findings.push(invalid(&label, &err));
                continue;
            }
            (Ok(c), u) => (c, u.and_then(Result::ok)),
        };
        valid.push(Value::Object(e));
        let entry = Entry {
            label,
            names,
            raw,
            parsed: parsed.0,
            unbounded: parsed.1,
        };
        method(&entry, throttle_json.is_some(), throttling, &mut layer);
    }
    // Names repeated across entries, by the library's own reading.
    if let Ok(all) = ServiceConfig::from_json(&json!({ "methodConfig": valid }).to_string()) {
        for n in lenient::duplicate_names(&all) {
            layer.findings.push(Finding {
                file: String::new(),
                id: "duplicate_names",
                method: label(prefix, std::slice::from_ref(&n)).0,
                message: "is named by more than one methodConfig entry: gRPC rejects a service config that names a method twice, so the client runs without it; keep each name in one entry".to_string(),
            });
        }
    }
    // gRPC takes a service config whole or not at all (A6; grpc-go's
    // `serviceconfig` parse fails the config on any bad entry): a rejected
    // one retries nothing, so its methods multiply nothing.
    if layer
        .findings
        .iter()
        .any(|f| f.id == "invalid" || f.id == "duplicate_names")
    {
        layer.methods.clear();
        layer.attempts = 1;
    }
    Ok(layer)
}

/// One finding per spelling [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) does not use, saying who reads it.
fn spelling(seen: &[Leniency], prefix: &str, out: &mut Vec<Finding>) {
    let mut groups: Vec<(&'static str, Vec<String>, &'static str)> = Vec::new();
    for l in seen {
        let (kind, what) = match l {
            Leniency::KeyCase { written, key } => (
                "keys in another case than A6's",
                format!("`{written}` for `{key}`"),
            ),
            Leniency::SnakeCase { written, key } => {
                ("snake_case keys", format!("`{written}` for `{key}`"))
            }
            Leniency::BareFraction { key, written } => (
                "durations without a digit before the point",
                format!("{key} \"{written}\""),
            ),
        };
        match groups.iter_mut().find(|g| g.0 == kind) {
            Some(g) => g.1.push(what),
            None => groups.push((kind, vec![what], l.who_accepts())),
        }
    }
    for (kind, whats, who) in groups {
        let shown = whats.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
        let more = match whats.len() {
            n if n > 3 => format!(" and {} more", n - 3),
            _ => String::new(),
        };
        out.push(Finding {
            file: String::new(),
            id: "nonstandard_spelling",
            method: format!("{prefix}*"),
            message: format!(
                "{kind} ({shown}{more}), read here as A6's: {who}; write A6's spelling so every client runs the same policy"
            ),
        });
    }
}

fn invalid(method: &str, e: &Fault) -> Finding {
    Finding {
        file: String::new(),
        id: "invalid",
        method: method.to_string(),
        message: format!(
            "`{}` {}: gRPC rejects this service config (A6), so the client runs without it; fix the field",
            e.field, e.problem
        ),
    }
}

fn name(service: &str, method: &str) -> String {
    match (service, method) {
        ("", _) => "*".to_string(),
        (s, "") => format!("{s}/*"),
        (s, m) => format!("{s}/{m}"),
    }
}

/// The entry's row label (its first name, and how many more) and every name.
fn label(prefix: &str, names: &[(String, String)]) -> (String, Vec<String>) {
    let all: Vec<String> = names.iter().map(|(s, m)| name(s, m)).collect();
    let first = all.first().cloned().unwrap_or_else(|| "*".to_string());
    let label = match all.len() {
        0 | 1 => format!("{prefix}{first}"),
        n => format!("{prefix}{first} (+{})", n - 1),
    };
    (label, all)
}

/// Names as written, for the label of an entry the library refused.
fn raw_names(m: &Map<String, Value>) -> Vec<(String, String)> {
    let text = |n: &Value, k: &str| n.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    m.get("name")
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .map(|n| (text(n, "service"), text(n, "method")))
                .collect()
        })
        .unwrap_or_default()
}

fn code_names(codes: &[u32]) -> String {
    codes
        .iter()
        .map(|&c| GRPC_CODES.get(c as usize).copied().unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The codes of `codes` the library's classification calls permanent.
fn non_transient(codes: &[u32]) -> Vec<u32> {
    codes
        .iter()
        .copied()
        .filter(|c| !transient_grpc(*c))
        .collect()
}

/// `maxAttempts` as the file wrote it (the library caps it at 5).
fn written_attempts(raw: &Map<String, Value>, policy: &str) -> Option<u64> {
    let v = raw.get(policy)?.get("maxAttempts")?;
    v.as_u64().or_else(|| v.as_f64().map(|x| x as u64))
}

fn method(e: &Entry<'_>, throttled: bool, throttling: Option<Throttling>, layer: &mut Layer) {
    let mc: &MethodConfig = &e.parsed.methods[0];
    let policy = &mc.policy;
    if !policy.has_retry_policy() && policy.hedging_delay().is_none() {
        if let Some(u) = &e.unbounded {
            unbounded(e, u, throttled, layer);
        }
        return;
    }
    let mut out: Vec<Finding> = Vec::new();
    let mut push = |id: &'static str, message: String| {
        out.push(Finding {
            file: String::new(),
            id,
            method: e.label.clone(),
            message,
        })
    };
    let alone = under_default_name(&e.parsed);
    let bucket = move || throttling.map(|t| t.token_bucket()).transpose();
    let (written, field, effective, failure, make): (Option<u64>, &str, u32, Class, MakeEngine) =
        if policy.has_retry_policy() {
            let r = policy;
            let codes = r.retryable_codes().unwrap_or(&[]);
            codes_finding(&mut push, "retryableStatusCodes", codes, "not a passing fault; retry only UNAVAILABLE (and RESOURCE_EXHAUSTED where the server sends pushback: a listed code is retried with or without it)");
            let b = r.backoff();
            backoff_findings(&mut push, b.multiplier, b.base, b.cap);
            let make = move || -> Result<Engine, Fault> {
                let b = bucket()?;
                let p = alone.policy_with("", "", b.as_ref())?;
                p.map(Engine::Retry)
                    .ok_or_else(|| Fault::new("retryPolicy", "could not be read"))
            };
            (
                written_attempts(e.raw, "retryPolicy"),
                "retryPolicy.maxAttempts",
                r.max_attempts(),
                r.class_of(UNAVAILABLE),
                Box::new(make),
            )
        } else if let Some(delay) = policy.hedging_delay() {
            let h = policy;
            hedging_findings(&mut push, delay, h.retryable_codes().unwrap_or(&[]));
            // The engine the gRPC layer drives for this hedging policy.
            let make = move || -> Result<Engine, Fault> {
                let b = bucket()?;
                let p = alone.hedge_policy_with("", "", b.as_ref())?;
                p.map(Engine::Hedge)
                    .ok_or_else(|| Fault::new("hedgingPolicy", "could not be read"))
            };
            (
                written_attempts(e.raw, "hedgingPolicy"),
                "hedgingPolicy.maxAttempts",
                h.max_attempts(),
                h.class_of(UNAVAILABLE),
                Box::new(make),
            )
        } else {
            return;
        };
    attempts_finding(&mut push, written, field, effective);
    common(&mut push, throttled, mc.policy.timeout());
    layer.findings.append(&mut out);
    let subject = Subject {
        make: &*make,
        failure: failure.into(),
        deadline: mc.policy.timeout(),
        shared: throttling.is_some(),
    };
    match numbers(e.label.clone(), e.names.clone(), &subject) {
        Ok(n) => {
            layer.attempts = layer.attempts.max(u64::from(effective));
            layer.methods.push(n);
        }
        // The policy does not build: the library's error, no numbers.
        Err(err) => layer.findings.push(invalid(&e.label, &err)),
    }
}

/// A `retryPolicy` without `maxAttempts`, both ways: gRPC's clients make
/// one attempt; a client that retries until the timeout makes
/// [`until_timeout`] attempts.
fn unbounded(e: &Entry<'_>, u: &UnboundedRetry, throttled: bool, layer: &mut Layer) {
    let mc: &MethodConfig = &e.parsed.methods[0];
    let mut out: Vec<Finding> = Vec::new();
    let mut push = |id: &'static str, message: String| {
        out.push(Finding {
            file: String::new(),
            id,
            method: e.label.clone(),
            message,
        })
    };
    codes_finding(&mut push, "retryableStatusCodes", &u.retryable, "not a passing fault; retry only UNAVAILABLE (and RESOURCE_EXHAUSTED where the server sends pushback: a listed code is retried with or without it)");
    backoff_findings(&mut push, u.multiplier, u.initial_backoff, u.max_backoff);
    let until = match mc.policy.timeout() {
        Some(t) => match until_timeout(u, t) {
            Ok(n) => Some(n),
            Err(err) => {
                layer.findings.append(&mut out);
                layer.findings.push(invalid(&e.label, &err));
                return;
            }
        },
        None => None,
    };
    let schedule = format!(
        "{:?} ×{} up to {:?}",
        u.initial_backoff, u.multiplier, u.max_backoff
    );
    push(
        "no_max_attempts",
        match (mc.policy.timeout(), until) {
            (Some(t), Some(n)) => format!(
                "retryPolicy has no maxAttempts: gRPC's clients reject or ignore the policy (1 attempt), while a client that retries until the timeout (Google's generated client libraries) makes {n} attempts in {t:?} at {schedule} when the dependency is down; set maxAttempts (3) so every client does the same"
            ),
            _ => format!(
                "retryPolicy has no maxAttempts and the method has no timeout: gRPC's clients reject or ignore the policy (1 attempt), while a client that retries until the timeout retries without end at {schedule}; set maxAttempts (3) and a timeout"
            ),
        },
    );
    let make = || -> Result<Engine, Fault> {
        Ok(Engine::Retry(Policy::builder().max_attempts(1).build()?))
    };
    common(&mut push, throttled, mc.policy.timeout());
    layer.findings.append(&mut out);
    let subject = Subject {
        make: &make,
        failure: Class::Transient.into(),
        deadline: mc.policy.timeout(),
        shared: false,
    };
    match numbers(e.label.clone(), e.names.clone(), &subject) {
        Ok(mut n) => {
            n.until_timeout = until;
            layer.methods.push(n);
        }
        Err(err) => layer.findings.push(invalid(&e.label, &err)),
    }
}

/// The entry's service config with the entry under the default name: the
/// measured engine reads it there, so the library's own lookup finds it
/// whatever the entry names.
fn under_default_name(parsed: &ServiceConfig) -> ServiceConfig {
    let mut alone = parsed.clone();
    alone.methods[0].names = vec![(String::new(), String::new())];
    alone
}

/// A hedging policy's delay and non-fatal codes.
fn hedging_findings(
    push: &mut impl FnMut(&'static str, String),
    delay: Duration,
    non_fatal: &[u32],
) {
    codes_finding(
        push,
        "nonFatalStatusCodes",
        non_fatal,
        "so hedging on them only repeats the failure; keep UNAVAILABLE at most",
    );
    if delay.is_zero() {
        push(
            "no_backoff",
            "hedgingDelay is 0 (or absent): every hedge is sent at once, so every call costs maxAttempts requests even when the dependency is healthy; set hedgingDelay near the method's p95 latency".to_string(),
        );
    } else if !non_fatal.is_empty() {
        push(
            "no_backoff",
            "a non-fatal status sends the next hedge at once, with no backoff, while the dependency is failing; leave nonFatalStatusCodes empty or use a retryPolicy".to_string(),
        );
    }
}

/// `maxAttempts` above gRPC's ceiling of 5 (as `written`) or above 3 (as
/// applied, `effective`).
fn attempts_finding(
    push: &mut impl FnMut(&'static str, String),
    written: Option<u64>,
    field: &str,
    effective: u32,
) {
    match written {
        Some(w) if w > u64::from(effective) => push(
            "attempts_high",
            format!(
                "{field} is {w}, which gRPC silently treats as {effective}: up to {effective}× load on a failing dependency; use 3"
            ),
        ),
        _ if effective > 3 => push(
            "attempts_high",
            format!(
                "{field} is {effective}: up to {effective}× load on a failing dependency; use 3 or fewer"
            ),
        ),
        _ => {}
    }
}

fn codes_finding(
    push: &mut impl FnMut(&'static str, String),
    field: &str,
    codes: &[u32],
    advice: &str,
) {
    let bad = non_transient(codes);
    if !bad.is_empty() {
        push(
            "non_transient_codes",
            format!(
                "{field} lists {}: these report a bug or a request that will fail again, {advice}",
                code_names(&bad)
            ),
        );
    }
}

fn backoff_findings(
    push: &mut impl FnMut(&'static str, String),
    multiplier: f64,
    initial: Duration,
    max: Duration,
) {
    if multiplier <= 1.0 {
        push(
            "no_backoff",
            format!(
                "backoffMultiplier {multiplier} keeps every wait at or below initialBackoff, so retries keep arriving at the same rate while the dependency is down; use 2"
            ),
        );
    } else if max <= initial {
        push(
            "no_backoff",
            format!(
                "maxBackoff {max:?} is not above initialBackoff {initial:?}, so the backoff cannot grow; raise maxBackoff to at least 10× initialBackoff"
            ),
        );
    }
}

fn common(push: &mut impl FnMut(&'static str, String), throttled: bool, timeout: Option<Duration>) {
    if !throttled {
        push(
            "no_budget",
            "no retryThrottling: nothing stops every call from retrying at once when the dependency fails; add \"retryThrottling\": {\"maxTokens\": 10, \"tokenRatio\": 0.1}".to_string(),
        );
    }
    if timeout.is_none() {
        push(
            "no_deadline",
            "no timeout: retries and waits have no overall deadline, so a call can outlive its caller; set \"timeout\" to what the caller will wait (e.g. \"2s\")".to_string(),
        );
    }
}

/// Attempts of one call against a dead dependency by a client that retries
/// `u` until `timeout`, at its backoff without jitter: the library's engine
/// driven once, so the count is exact.
pub(crate) fn until_timeout(u: &UnboundedRetry, timeout: Duration) -> Result<u64, Fault> {
    let policy = Policy::builder()
        .backoff(Backoff {
            base: u.initial_backoff,
            cap: u.max_backoff,
            multiplier: u.multiplier,
            jitter: Jitter::None,
        })
        .max_attempts(u32::MAX)
        .build()
        .map_err(|e| {
            let field = match e.field() {
                "multiplier" => "retryPolicy.backoffMultiplier",
                "cap" => "retryPolicy.maxBackoff",
                "base" => "retryPolicy.initialBackoff",
                _ => "retryPolicy",
            };
            Fault::new(field, e.problem())
        })?;
    let make = || -> Result<Engine, Fault> { Err(Fault::new("retryPolicy", "unused")) };
    let s = Subject {
        make: &make,
        failure: Class::Transient.into(),
        deadline: Some(timeout),
        shared: false,
    };
    Ok(amplify::drive(
        &Engine::Retry(policy),
        &s,
        1,
        &mut |_| stagger::Call::seeded(super::SEED),
        &mut |_, _| true,
        &mut |_, _| {},
    ))
}
