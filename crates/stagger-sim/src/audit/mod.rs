//! `stagger audit`: a production checklist for retry configs, with the
//! engine's own numbers.
//!
//! Teams keep their retry settings in files — gRPC service configs above all
//! — and nobody checks those files against what a retry policy must do, let
//! alone says what they would do to a dependency that falls over. This
//! module reads gRPC service configs (gRPC A6: `methodConfig` with a
//! `retryPolicy` or a `hedgingPolicy`, `timeout`, `retryThrottling`) and
//! stagger's own policy file ([`stagger::config::PolicyFile`]), reports one
//! [`Finding`] per checklist item that fails, and measures each method's
//! amplification by driving the real [`stagger::Policy`] in virtual time
//! (see [`amplify`](self#amplification)).
//!
//! Several files are the layers of one call path, outermost first: the
//! attempts that reach the bottom are the product of each layer's attempts.
//!
//! ```
//! use stagger_sim::audit::{audit, Input};
//!
//! let json = r#"{"methodConfig":[{"name":[{"service":"shop.Cart","method":"Get"}],
//!   "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s",
//!   "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
//! let report = audit(&[Input::new("svc.json", json)]).unwrap();
//! let ids: Vec<_> = report.findings.iter().map(|f| f.id).collect();
//! assert_eq!(ids, ["no_budget", "no_deadline"]);
//! assert_eq!(report.methods[0].amplification.dead, 3.0);
//! assert_eq!(report.bottom_attempts, 3);
//! ```
//!
//! # Findings
//!
//! | id | when |
//! |---|---|
//! | `non_transient_codes` | it retries a failure that will not pass by itself: a gRPC code other than UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED and ABORTED, or an HTTP status other than 408, 429, 502, 503, 504 |
//! | `attempts_high` | more than 3 attempts (and above 5, which gRPC silently treats as 5) |
//! | `no_jitter` | a policy file with `jitter = "none"` or `proportional:0` (gRPC always jitters) |
//! | `no_backoff` | multiplier 1 or below, a cap not above the base, a zero base, or hedging that resends at once on a non-fatal status |
//! | `no_budget` | no `retryThrottling` in the service config, no `[budget]` in a policy file |
//! | `no_deadline` | no `timeout` for the method, no `deadline` in a policy file |
//! | `retry_after_ignored` | a policy file whose `max_retry_after` is under 1 s: `Retry-After` counts whole seconds, so every hint would stop the call (gRPC clients honour pushback by A6) |
//! | `duplicate_layers` | more than one file of the path retries |
//! | `no_breaker` | a policy file without `breaker = true` (a service config cannot express one) |
//! | `invalid` | a value gRPC A6 rejects, naming the field |
//!
//! # Amplification
//!
//! For every method that retries: [`amplify::REQUESTS`] logical requests
//! arrive every 10 ms and each attempt answers after 5 ms, first with every
//! attempt failing (`dead`), then with each failing independently with
//! probability ½ (`half`). A gRPC method fails with UNAVAILABLE, what a dead
//! or unreachable server gives; a policy file's method with a transient
//! failure. The service config's `retryThrottling` (or the file's budget and
//! breaker) is attached, fresh for each scenario, and the method's `timeout`
//! is every call's deadline. A hedged method is measured as the engine
//! resending at once after a non-fatal status (A6 sends the next hedge
//! immediately then); with a zero `hedgingDelay` every hedge leaves at once
//! whatever the answers, so `half` equals `dead`.

use std::fmt;

use serde::Serialize;

pub mod amplify;
mod grpc;
mod policy;

/// A file to audit: its name (for messages) and its text.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    name: &'a str,
    text: &'a str,
}

impl<'a> Input<'a> {
    /// A file named `name` (a path; a `.toml` name is read as a policy file)
    /// holding `text`.
    pub fn new(name: &'a str, text: &'a str) -> Self {
        Input { name, text }
    }
}

/// One checklist item that fails.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The stable id (`no_budget`, `attempts_high`, …).
    pub id: &'static str,
    /// The method it concerns (`pkg.Svc/Get`, `pkg.Svc/*`, `*`).
    pub method: String,
    /// What is wrong and what to change.
    pub message: String,
}

/// Attempts per logical request in two scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Amplification {
    /// Every attempt fails.
    pub dead: f64,
    /// Each attempt fails independently with probability ½.
    pub half: f64,
}

/// One method's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodNumbers {
    /// The method.
    pub method: String,
    /// Its amplification.
    pub amplification: Amplification,
}

/// The audit of one call path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Every finding, file by file in path order.
    pub findings: Vec<Finding>,
    /// Every method that retries or hedges, in path order.
    pub methods: Vec<MethodNumbers>,
    /// Attempts that reach the bottom of the path for one call when every
    /// attempt fails: the product of each file's largest effective attempts.
    pub bottom_attempts: u64,
}

/// A file that cannot be read as a service config or a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditError {
    /// The file's name.
    pub file: String,
    /// The field at fault.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for AuditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: invalid `{}`: {}",
            self.file, self.field, self.problem
        )
    }
}

impl std::error::Error for AuditError {}

/// One method of one file, as the audit sees it.
pub(crate) struct Layer {
    /// Findings of the file (invalid and checklist).
    pub findings: Vec<Finding>,
    /// The methods that retry, with their numbers.
    pub methods: Vec<MethodNumbers>,
    /// The largest effective attempts of any method (1 if none retries).
    pub attempts: u64,
}

impl Report {
    /// Whether the path passed every check.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// The seed of every amplification run, so a report replays exactly.
pub(crate) const SEED: u64 = 0x5EED_A0D1;

/// Audits `files`, the layers of one call path, outermost first.
pub fn audit(files: &[Input<'_>]) -> Result<Report, AuditError> {
    let mut layers = Vec::with_capacity(files.len());
    for f in files {
        let layer = if is_policy_file(f) {
            policy::layer(f)?
        } else {
            grpc::layer(f)?
        };
        layers.push(layer);
    }
    let bottom_attempts = layers
        .iter()
        .fold(1u64, |acc, l| acc.saturating_mul(l.attempts));
    let mut report = Report {
        findings: Vec::new(),
        methods: Vec::new(),
        bottom_attempts,
    };
    let retrying: Vec<usize> = (0..layers.len())
        .filter(|&i| !layers[i].methods.is_empty() && layers[i].attempts > 1)
        .collect();
    let chain = layers
        .iter()
        .map(|l| l.attempts.to_string())
        .collect::<Vec<_>>()
        .join(" × ");
    for (i, layer) in layers.into_iter().enumerate() {
        report.findings.extend(layer.findings);
        if retrying.len() > 1 && retrying[0] != i && retrying.contains(&i) {
            let outer = files[retrying[0]].name;
            report.findings.push(Finding {
                id: "duplicate_layers",
                method: layer.methods[0].method.clone(),
                message: format!(
                    "{} retries and so does {outer} above it: {chain} = {bottom_attempts} attempts reach the bottom for one call when it is down; retry in one layer only and let the others fail fast (pass the failure up)",
                    files[i].name
                ),
            });
        }
        report.methods.extend(layer.methods);
    }
    Ok(report)
}

fn is_policy_file(f: &Input<'_>) -> bool {
    if f.name.ends_with(".toml") {
        return true;
    }
    // JSON: a service config has one of A6's top-level keys.
    match serde_json::from_str::<serde_json::Value>(f.text) {
        Ok(serde_json::Value::Object(m)) => !m.keys().any(|k| {
            matches!(
                k.as_str(),
                "methodConfig"
                    | "retryThrottling"
                    | "loadBalancingConfig"
                    | "loadBalancingPolicy"
                    | "healthCheckConfig"
            )
        }),
        _ => false,
    }
}

/// gRPC code names a retry may clear by itself.
pub(crate) fn transient_grpc(code: u32) -> bool {
    matches!(code, 4 | 8 | 10 | 14)
}

/// HTTP statuses a retry may clear by itself.
pub(crate) fn transient_http(status: u16) -> bool {
    matches!(status, 408 | 429 | 502..=504)
}

/// Rounds to three decimals, so a report is stable and readable.
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub(crate) fn numbers(method: String, s: &amplify::Subject<'_>) -> MethodNumbers {
    MethodNumbers {
        method,
        amplification: Amplification {
            dead: round3(amplify::amplification(s, 1.0, SEED)),
            half: round3(amplify::amplification(s, 0.5, SEED)),
        },
    }
}
