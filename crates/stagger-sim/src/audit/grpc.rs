//! A gRPC service config, read raw: the library's parser validates each
//! entry the way A6 does, but it caps `maxAttempts` at 5 and does not read
//! `hedgingPolicy`, and the checklist needs what the file actually says.

use std::time::Duration;

use serde_json::{json, Map, Value};
use stagger::config::{parse_proto_duration, ServiceConfig, GRPC_CODES, MAX_ATTEMPTS_CEILING};
use stagger::{Backoff, Class, Jitter, Policy};

use super::amplify::Subject;
use super::{numbers, transient_grpc, AuditError, Finding, Input, Layer};

const UNAVAILABLE: u32 = 14;

pub(crate) fn layer(f: &Input<'_>) -> Result<Layer, AuditError> {
    let bad = |field: &str, problem: String| AuditError {
        file: f.name.to_string(),
        field: field.to_string(),
        problem,
    };
    let root: Value = serde_json::from_str(f.text)
        .map_err(|e| bad("serviceConfig", format!("not valid JSON: {e}")))?;
    let root = root
        .as_object()
        .ok_or_else(|| bad("serviceConfig", "must be a JSON object".into()))?;
    let entries = match root.get("methodConfig") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(bad("methodConfig", "must be a list".into())),
    };
    let mut layer = Layer {
        findings: Vec::new(),
        methods: Vec::new(),
        attempts: 1,
    };
    // The channel's throttling, validated by the library.
    let throttle_json = root.get("retryThrottling").filter(|v| !v.is_null());
    let throttling = match throttle_json {
        None => None,
        Some(t) => match ServiceConfig::from_json(&json!({ "retryThrottling": t }).to_string()) {
            Ok(c) => c.throttling,
            Err(e) => {
                layer.findings.push(invalid("*", e.field(), e.problem()));
                None
            }
        },
    };
    for (i, entry) in entries.iter().enumerate() {
        let m = entry
            .as_object()
            .ok_or_else(|| bad("methodConfig", format!("entry {i} must be an object")))?;
        method(m, throttle_json.is_some(), throttling, &mut layer);
    }
    Ok(layer)
}

fn invalid(method: &str, field: &str, problem: &str) -> Finding {
    Finding {
        id: "invalid",
        method: method.to_string(),
        message: format!(
            "`{field}` {problem}: gRPC rejects this service config (A6), so the client runs without it; fix the field"
        ),
    }
}

fn label(m: &Map<String, Value>) -> String {
    let names: Vec<String> = m
        .get("name")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|n| {
                    let s = n.get("service").and_then(Value::as_str).unwrap_or("");
                    let m = n.get("method").and_then(Value::as_str).unwrap_or("");
                    match (s, m) {
                        ("", _) => "*".to_string(),
                        (s, "") => format!("{s}/*"),
                        (s, m) => format!("{s}/{m}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if names.is_empty() {
        "*".to_string()
    } else {
        names.join(", ")
    }
}

fn code_names(codes: &[u32]) -> String {
    codes
        .iter()
        .map(|&c| GRPC_CODES.get(c as usize).copied().unwrap_or("?"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The codes of `codes` that are not worth retrying or hedging on.
fn non_transient(codes: &[u32]) -> Vec<u32> {
    codes
        .iter()
        .copied()
        .filter(|c| !transient_grpc(*c))
        .collect()
}

fn raw_codes(v: Option<&Value>) -> Vec<u32> {
    let mut out: Vec<u32> = v
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(|c| match c {
                    Value::String(s) => GRPC_CODES
                        .iter()
                        .position(|n| n.eq_ignore_ascii_case(s.trim()))
                        .map(|i| i as u32),
                    _ => c.as_u64().filter(|n| *n <= 16).map(|n| n as u32),
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out.dedup();
    out
}

fn method(
    m: &Map<String, Value>,
    throttled: bool,
    throttling: Option<stagger::config::Throttling>,
    layer: &mut Layer,
) {
    let name = label(m);
    let retry = m.get("retryPolicy").filter(|v| !v.is_null());
    let hedge = m.get("hedgingPolicy").filter(|v| !v.is_null());
    // Everything the library validates (name, timeout, retryPolicy).
    let mut alone = m.clone();
    alone.remove("hedgingPolicy");
    let parsed = match ServiceConfig::from_json(&json!({ "methodConfig": [alone] }).to_string()) {
        Ok(c) => c,
        Err(e) => {
            layer.findings.push(invalid(&name, e.field(), e.problem()));
            return;
        }
    };
    if retry.is_some() && hedge.is_some() {
        layer.findings.push(invalid(
            &name,
            "methodConfig.hedgingPolicy",
            "is set together with retryPolicy (only one may be)",
        ));
        return;
    }
    let timeout = parsed.methods[0].timeout;
    let mut out: Vec<Finding> = Vec::new();
    let mut push = |id: &'static str, message: String| {
        out.push(Finding {
            id,
            method: name.clone(),
            message,
        })
    };
    let (raw_attempts, field, subject_policy, failure, all_at_once): (
        u64,
        &str,
        Box<dyn Fn() -> Policy>,
        Class,
        bool,
    ) = if let Some(r) = parsed.methods[0].retry.clone() {
        let p = retry.and_then(Value::as_object).expect("validated");
        let raw = p
            .get("maxAttempts")
            .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|x| x as u64)))
            .unwrap_or(u64::from(r.max_attempts));
        let listed = raw_codes(p.get("retryableStatusCodes"));
        let bad = non_transient(&listed);
        if !bad.is_empty() {
            push(
                "non_transient_codes",
                format!(
                    "retryableStatusCodes lists {}: these report a bug or a request that will fail again, not a passing fault; retry only UNAVAILABLE (and RESOURCE_EXHAUSTED, which gRPC retries only with pushback)",
                    code_names(&bad)
                ),
            );
        }
        if r.multiplier <= 1.0 {
            push(
                "no_backoff",
                format!(
                    "backoffMultiplier {} keeps every wait at or below initialBackoff, so retries keep arriving at the same rate while the dependency is down; use 2",
                    r.multiplier
                ),
            );
        } else if r.max_backoff <= r.initial_backoff {
            push(
                "no_backoff",
                format!(
                    "maxBackoff {:?} is not above initialBackoff {:?}, so the backoff cannot grow; raise maxBackoff to at least 10× initialBackoff",
                    r.max_backoff, r.initial_backoff
                ),
            );
        }
        let r2 = r.clone();
        let make = move || {
            let mut b = r2.policy_builder().multiplier(r2.multiplier.max(1.0));
            if let Some(t) = &throttling {
                if let Ok(bucket) = t.token_bucket() {
                    b = b.budget(bucket);
                }
            }
            b.build().unwrap_or_default()
        };
        (
            raw,
            "retryPolicy.maxAttempts",
            Box::new(make),
            r.class_of(UNAVAILABLE),
            false,
        )
    } else if let Some(h) = hedge {
        let Some(h) = h.as_object() else {
            layer
                .findings
                .push(invalid(&name, "hedgingPolicy", "must be an object"));
            return;
        };
        let raw = match h.get("maxAttempts").filter(|v| !v.is_null()) {
            None => {
                layer
                    .findings
                    .push(invalid(&name, "hedgingPolicy.maxAttempts", "is required"));
                return;
            }
            Some(v) => match v.as_u64() {
                Some(n) if n > 1 => n,
                _ => {
                    layer.findings.push(invalid(
                        &name,
                        "hedgingPolicy.maxAttempts",
                        &format!("must be an integer above 1, got {v}"),
                    ));
                    return;
                }
            },
        };
        let delay = match h.get("hedgingDelay").filter(|v| !v.is_null()) {
            None => Duration::ZERO,
            Some(v) => match v.as_str().and_then(parse_proto_duration) {
                Some(d) => d,
                None => {
                    layer.findings.push(invalid(
                        &name,
                        "hedgingPolicy.hedgingDelay",
                        &format!("must be a duration string such as \"0.1s\", got {v}"),
                    ));
                    return;
                }
            },
        };
        let nonfatal_json = h.get("nonFatalStatusCodes").filter(|v| !v.is_null());
        if let Some(v) = nonfatal_json {
            let ok = v.as_array().is_some_and(|l| {
                l.iter().all(|c| {
                    c.as_str().is_some_and(|s| {
                        GRPC_CODES.iter().any(|n| n.eq_ignore_ascii_case(s.trim()))
                    }) || c.as_u64().is_some_and(|n| n <= 16)
                })
            });
            if !ok {
                layer.findings.push(invalid(
                    &name,
                    "hedgingPolicy.nonFatalStatusCodes",
                    &format!("must be a list of gRPC status code names or numbers, got {v}"),
                ));
                return;
            }
        }
        let nonfatal = raw_codes(nonfatal_json);
        let bad = non_transient(&nonfatal);
        if !bad.is_empty() {
            push(
                "non_transient_codes",
                format!(
                    "nonFatalStatusCodes lists {}: these report a bug or a request that will fail again, so hedging on them only repeats the failure; keep UNAVAILABLE at most",
                    code_names(&bad)
                ),
            );
        }
        if delay.is_zero() {
            push(
                "no_backoff",
                "hedgingDelay is 0 (or absent): every hedge is sent at once, so every call costs maxAttempts requests even when the dependency is healthy; set hedgingDelay near the method's p95 latency".to_string(),
            );
        } else if !nonfatal.is_empty() {
            push(
                "no_backoff",
                "a non-fatal status sends the next hedge at once, with no backoff, while the dependency is failing; leave nonFatalStatusCodes empty or use a retryPolicy".to_string(),
            );
        }
        let n = u32::try_from(raw.min(u64::from(MAX_ATTEMPTS_CEILING))).unwrap_or(5);
        let make = move || {
            let mut b = Policy::builder().max_attempts(n).backoff(
                Backoff::new()
                    .base(Duration::ZERO)
                    .cap(Duration::ZERO)
                    .jitter(Jitter::None),
            );
            if let Some(t) = &throttling {
                if let Ok(bucket) = t.token_bucket() {
                    b = b.budget(bucket);
                }
            }
            b.build().unwrap_or_default()
        };
        let failure = if delay.is_zero() {
            Class::Transient
        } else {
            stagger::classify::grpc_code_listed(UNAVAILABLE, &nonfatal)
        };
        (
            raw,
            "hedgingPolicy.maxAttempts",
            Box::new(make),
            failure,
            delay.is_zero(),
        )
    } else {
        return;
    };
    if raw_attempts > u64::from(MAX_ATTEMPTS_CEILING) {
        push(
            "attempts_high",
            format!(
                "{field} is {raw_attempts}, which gRPC silently treats as {MAX_ATTEMPTS_CEILING}: up to {MAX_ATTEMPTS_CEILING}× load on a failing dependency; use 3"
            ),
        );
    } else if raw_attempts > 3 {
        push(
            "attempts_high",
            format!(
                "{field} is {raw_attempts}: up to {raw_attempts}× load on a failing dependency; use 3 or fewer"
            ),
        );
    }
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
    layer.findings.append(&mut out);
    let subject = Subject {
        make: &*subject_policy,
        failure,
        deadline: timeout,
    };
    let mut numbers = numbers(name.clone(), &subject);
    if all_at_once {
        numbers.amplification.half = numbers.amplification.dead;
    }
    let effective = raw_attempts.min(u64::from(MAX_ATTEMPTS_CEILING));
    layer.attempts = layer.attempts.max(effective);
    layer.methods.push(numbers);
}
