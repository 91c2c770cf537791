//! # stagger-audit — retry configs checked, and their attempts counted
//!
//! This crate holds `stagger audit`: the checklist for one retry config
//! (this page), and [`path`], the readers of the retry objects a call path
//! is made of — service meshes (Istio, Linkerd, Envoy), the Kubernetes
//! Gateway API and Envoy Gateway, proxies that retry by default (nginx,
//! ingress-nginx, HAProxy, Traefik), client libraries (gRPC, the AWS SDKs,
//! resilience4j) and stagger's own policy file — with the attempts their
//! layers multiply into at the bottom. It simulates nothing: attempts are
//! measured by driving the library's own engine ([`stagger::Policy`]).
//! Every reader reads durations with the library's one grammar,
//! [`stagger::config::parse_duration`].
//!
//! Teams keep their retry settings in files — gRPC service configs above all
//! — and nobody checks those files against what a retry policy must do, let
//! alone says what they would do to a dependency that falls over. The
//! checklist reads gRPC service configs (gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md): `methodConfig` with a
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
//! use stagger_audit::{audit, Input};
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
//! | `non_transient_codes` | it retries a failure that will not pass by itself: a gRPC code the library's classification calls permanent (anything but UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED — ABORTED included), or an HTTP status other than 408, 429, 502, 503, 504 |
//! | `attempts_high` | more than 3 attempts (and above 5, which gRPC silently treats as 5) |
//! | `no_max_attempts` | a `retryPolicy` without `maxAttempts`: gRPC's clients reject or ignore it (1 attempt), a client that retries until the method's `timeout` makes [`MethodNumbers::until_timeout`] attempts |
//! | `no_jitter` | a policy file with `jitter = "none"` or `proportional:0` (gRPC always jitters) |
//! | `no_backoff` | multiplier 1 or below, a cap not above the base, a zero base, or hedging that resends at once on a non-fatal status |
//! | `no_budget` | no `retryThrottling` in the service config, no `[budget]` in a policy file |
//! | `no_deadline` | no `timeout` for the method, no `deadline` in a policy file |
//! | `retry_after_ignored` | a policy file whose `max_retry_after` is under 1 s: `Retry-After` counts whole seconds, so every hint would stop the call (gRPC clients honour pushback by A6) |
//! | `duplicate_layers` | more than one file of the path retries |
//! | `duplicate_names` | a method named by more than one `methodConfig` entry (gRPC rejects the config) |
//! | `nonstandard_spelling` | keys in another case or snake_case, or `.1s` durations: read, and the finding says which gRPC implementations read them |
//! | `no_breaker` | a policy file without `breaker = true` (a service config cannot express one) |
//! | `invalid` | a value the library's import rejects, naming the field |
//!
//! A service config is read by the library's import
//! ([`stagger::config::ServiceConfig`], after
//! [`lenient::normalize`]); gRPC's DNS TXT form (a list of
//! choices) is audited choice by choice, and `{}` is an empty service config.
//!
//! # Amplification
//!
//! For every method that retries or hedges, attempts per logical request
//! when every attempt fails (`dead`) and when each fails independently with
//! probability ½ (`half`), measured on the library's own engine — its
//! [`stagger::Policy`], or its [`stagger::HedgePolicy`] for a
//! `hedgingPolicy` — in virtual time (see [`amplify`]). A gRPC method fails
//! with UNAVAILABLE, classified by the method's codes as the library
//! classifies them; a policy file's method with a transient failure. The
//! method's `timeout` is every call's deadline. Without shared state the
//! figures are exact (path enumeration, [`Amplification::exact`]);
//! with a budget, throttling or breaker they are estimates over
//! [`amplify::REQUESTS`] requests ([`Amplification::sample`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

use serde::Serialize;
use stagger_sim::rounded;

pub mod amplify;
pub mod checks;
mod grpc;
pub mod lenient;
pub mod path;
mod policy;

pub(crate) use grpc::spelling_messages;

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
    /// The stable id (`no_budget`, `attempts_high`, …; see [`checks`]).
    pub id: &'static str,
    /// The file it concerns, as named in its [`Input`].
    pub file: String,
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
    /// Whether both figures are exact (computed by enumerating every
    /// outcome path of one call); otherwise they are estimates.
    pub exact: bool,
    /// For an estimate, the logical requests it sampled (`None` when exact).
    pub sample: Option<u32>,
}

/// One method's numbers: one `methodConfig` entry (or policy file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MethodNumbers {
    /// The method: the entry's first name, with `(+N)` when it lists more.
    pub method: String,
    /// Every name the entry lists.
    pub names: Vec<String>,
    /// Its amplification, as the method's gRPC client (or policy) runs it.
    pub amplification: Amplification,
    /// For a `retryPolicy` without `maxAttempts`: the attempts of one call
    /// when every attempt fails, by a client that retries until the
    /// method's `timeout` at the policy's backoff (without jitter), exact.
    /// `None` otherwise, and when the method has no timeout either.
    pub until_timeout: Option<u64>,
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

/// A field at fault and what is wrong with it: the library's
/// [`stagger::ConfigError`], or the audit's own for the file's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The field at fault.
    pub field: String,
    /// What is wrong with it, in one line.
    pub problem: String,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for Fault {}

impl Fault {
    pub(crate) fn new(field: &str, problem: impl Into<String>) -> Self {
        Fault {
            field: field.to_string(),
            problem: one_line(&problem.into()),
        }
    }

    pub(crate) fn in_file(self, file: &str) -> AuditError {
        AuditError {
            file: file.to_string(),
            field: self.field,
            problem: self.problem,
        }
    }
}

impl From<stagger::ConfigError> for Fault {
    fn from(e: stagger::ConfigError) -> Self {
        Fault::new(e.field(), e.problem())
    }
}

/// A parser's message in one line: a TOML or YAML error that draws the
/// line and a caret under it keeps its first line and its last words.
pub(crate) fn one_line(problem: &str) -> String {
    let words: Vec<&str> = problem
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with('|')
                && !l
                    .split_once('|')
                    .is_some_and(|(n, _)| n.trim().chars().all(|c| c.is_ascii_digit()))
        })
        .collect();
    match words.as_slice() {
        [] => problem.trim().replace('\n', " "),
        [one] => (*one).to_string(),
        [first, .., last] => format!("{first}: {last}"),
    }
}

/// One method of one file, as the audit sees it.
pub(crate) struct Layer {
    /// Findings of the file (invalid and checklist).
    pub findings: Vec<Finding>,
    /// The methods that retry, with their numbers.
    pub methods: Vec<MethodNumbers>,
    /// The largest effective attempts of any method (1 if none retries).
    pub attempts: u64,
}

impl Default for Layer {
    fn default() -> Self {
        Layer {
            findings: Vec::new(),
            methods: Vec::new(),
            attempts: 1,
        }
    }
}

impl Report {
    /// Whether the path passed every check.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// The largest file the audit reads (a config file, not a data dump), as
/// the call-path readers do.
pub const MAX_BYTES: usize = 4 << 20;

/// The seed of every amplification run, so a report replays exactly.
pub(crate) const SEED: u64 = 0x5EED_A0D1;

/// Audits `files`, the layers of one call path, outermost first.
pub fn audit(files: &[Input<'_>]) -> Result<Report, AuditError> {
    let mut layers = Vec::with_capacity(files.len());
    for f in files {
        if f.text.len() > MAX_BYTES {
            return Err(Fault::new(
                "file",
                format!(
                    "{} bytes, larger than the {MAX_BYTES} (4 MiB) the audit reads",
                    f.text.len()
                ),
            )
            .in_file(f.name));
        }
        let layer = if is_policy_file(f) {
            policy::layer(f)?
        } else {
            grpc::file(f)?
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
        let name = files[i].name;
        report
            .findings
            .extend(layer.findings.into_iter().map(|f| Finding {
                file: name.to_string(),
                ..f
            }));
        if retrying.len() > 1 && retrying[0] != i && retrying.contains(&i) {
            let outer = files[retrying[0]].name;
            report.findings.push(Finding {
                id: "duplicate_layers",
                file: files[i].name.to_string(),
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

pub(crate) fn is_policy_file(f: &Input<'_>) -> bool {
    if f.name.ends_with(".toml") {
        return true;
    }
    if grpc::is_one_choice(f.text) {
        return false;
    }
    // JSON: a policy file has keys and none of A6's top-level ones (in any
    // case or spelling); `{}` and a list of choices are service configs.
    match serde_json::from_str::<serde_json::Value>(f.text) {
        Ok(serde_json::Value::Object(m)) => {
            !m.is_empty()
                && !m.keys().any(|k| {
                    let k = k.replace('_', "");
                    [
                        "methodConfig",
                        "retryThrottling",
                        "loadBalancingConfig",
                        "loadBalancingPolicy",
                        "healthCheckConfig",
                    ]
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(&k))
                })
        }
        _ => false,
    }
}

/// Whether a gRPC code is worth retrying, by the library's classification.
pub(crate) fn transient_grpc(code: u32) -> bool {
    stagger::classify::grpc_code(code) != stagger::Class::Permanent
}

/// Whether an HTTP status is worth retrying, by the library's
/// classification.
pub(crate) fn transient_http(status: u16) -> bool {
    stagger::classify::http_status(status, false) != stagger::Class::Permanent
}

/// A method's numbers measured on its engine; an engine that does not
/// build is the library's error, naming its field.
pub(crate) fn numbers(
    method: String,
    names: Vec<String>,
    s: &amplify::Subject<'_>,
) -> Result<MethodNumbers, Fault> {
    let m = amplify::measure(s, SEED)?;
    let (dead, half) = match m.sample {
        None => (m.dead, m.half),
        Some(_) => (rounded(m.dead, 3), rounded(m.half, 3)),
    };
    Ok(MethodNumbers {
        method,
        names,
        amplification: Amplification {
            dead,
            half,
            exact: m.sample.is_none(),
            sample: m.sample,
        },
        until_timeout: None,
    })
}
