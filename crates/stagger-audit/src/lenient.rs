//! Service configs as they are published, not only as [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) spells them.
//!
//! Real service configs bend A6's JSON in ways some gRPC implementations
//! accept and others do not: keys in another case (`MaxAttempts`, which
//! grpc-go reads because Go's JSON decoder ignores case), protobuf field
//! names (`max_attempts`), durations without a digit before the point
//! (`.1s`, which grpc-go parses and grpc-java's parser refuses), a
//! `retryPolicy` without `maxAttempts` (Google's generated client libraries
//! retry such a method until its timeout; gRPC's own clients reject or
//! ignore the policy), the DNS TXT form (a list of choices, each holding a
//! service config), and one method named by two entries (gRPC rejects the
//! config). This module reads those forms *before* the strict parse
//! ([`ServiceConfig::from_json`]) and says which of them it met, so a tool
//! can report them instead of calling the file invalid or passing it.
//!
//! ```
//! use stagger_audit::lenient::{normalize, Leniency};
//! use stagger::config::ServiceConfig;
//!
//! let mut v: serde_json::Value = serde_json::from_str(
//!     r#"{"methodConfig":[{"name":[{"service":"a.A"}],"retryPolicy":{"MaxAttempts":3,
//!     "InitialBackoff":".1s","MaxBackoff":"1s","BackoffMultiplier":2,
//!     "RetryableStatusCodes":["UNAVAILABLE"]}}]}"#,
//! ).unwrap();
//! let seen = normalize(&mut v);
//! assert!(seen.iter().any(|l| matches!(l, Leniency::KeyCase { .. })));
//! assert!(seen.iter().any(|l| matches!(l, Leniency::BareFraction { .. })));
//! let config = ServiceConfig::from_json(&v.to_string())?;
//! assert_eq!(config.methods[0].policy.max_attempts(), 3);
//! # Ok::<(), stagger::ConfigError>(())
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use stagger::config::ServiceConfig;
use stagger::grpc::MethodPolicy;

use crate::Fault;

/// One way a service config departs from [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s spelling, and who reads it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Leniency {
    /// A key that differs from A6's only in case (`MaxAttempts` for
    /// `maxAttempts`).
    KeyCase {
        /// As written.
        written: String,
        /// A6's spelling.
        key: &'static str,
    },
    /// A key in snake_case, the protobuf field name (`max_attempts`).
    SnakeCase {
        /// As written.
        written: String,
        /// A6's spelling.
        key: &'static str,
    },
    /// A duration with no digit before its point (`.1s` for `0.1s`).
    BareFraction {
        /// The key it was found under.
        key: &'static str,
        /// As written.
        written: String,
    },
}

impl Leniency {
    /// Which implementations read this form and which do not.
    pub fn who_accepts(&self) -> &'static str {
        match self {
            Leniency::KeyCase { .. } => {
                "grpc-go reads it (Go's JSON decoding ignores case); grpc-java's parser does not (it matches keys exactly, so the field is missing there)"
            }
            Leniency::SnakeCase { .. } => {
                "a protobuf JSON parser reads it (it is the proto field name); grpc-go and grpc-java's parsers do not (the field is missing there)"
            }
            Leniency::BareFraction { .. } => {
                "grpc-go parses it; grpc-java's parser refuses it (it needs a digit before the point)"
            }
        }
    }
}

/// [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s keys, in A6's spelling, by the object they belong to.
const TOP: &[&str] = &[
    "methodConfig",
    "retryThrottling",
    "loadBalancingConfig",
    "loadBalancingPolicy",
    "healthCheckConfig",
];
const ENTRY: &[&str] = &[
    "name",
    "timeout",
    "waitForReady",
    "maxRequestMessageBytes",
    "maxResponseMessageBytes",
    "retryPolicy",
    "hedgingPolicy",
];
const NAME: &[&str] = &["service", "method"];
const RETRY: &[&str] = &[
    "maxAttempts",
    "initialBackoff",
    "maxBackoff",
    "backoffMultiplier",
    "retryableStatusCodes",
    "perAttemptRecvTimeout",
];
const HEDGE: &[&str] = &["maxAttempts", "hedgingDelay", "nonFatalStatusCodes"];
const THROTTLE: &[&str] = &["maxTokens", "tokenRatio"];
const DURATIONS: &[&str] = &[
    "timeout",
    "initialBackoff",
    "maxBackoff",
    "perAttemptRecvTimeout",
    "hedgingDelay",
];

/// Rewrites `config` (a service config) into [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s spelling: keys of
/// another case or in snake_case become A6's keys, `.1s` becomes `0.1s`.
/// Returns each form met, once, in a stable order. Where a key is written
/// both ways, A6's spelling wins and the other is dropped. Anything that is
/// not a service config's shape is left for the strict parse to report.
pub fn normalize(config: &mut Value) -> Vec<Leniency> {
    let mut seen = Vec::new();
    if let Some(top) = config.as_object_mut() {
        keys(top, TOP, &mut seen);
        if let Some(Value::Array(list)) = top.get_mut("methodConfig") {
            for entry in list.iter_mut().filter_map(Value::as_object_mut) {
                keys(entry, ENTRY, &mut seen);
                durations(entry, &mut seen);
                if let Some(Value::Array(names)) = entry.get_mut("name") {
                    for n in names.iter_mut().filter_map(Value::as_object_mut) {
                        keys(n, NAME, &mut seen);
                    }
                }
                for (key, known) in [("retryPolicy", RETRY), ("hedgingPolicy", HEDGE)] {
                    if let Some(p) = entry.get_mut(key).and_then(Value::as_object_mut) {
                        keys(p, known, &mut seen);
                        durations(p, &mut seen);
                    }
                }
            }
        }
        if let Some(t) = top
            .get_mut("retryThrottling")
            .and_then(Value::as_object_mut)
        {
            keys(t, THROTTLE, &mut seen);
        }
    }
    seen.sort();
    seen.dedup();
    seen
}

fn keys(obj: &mut Map<String, Value>, known: &[&'static str], seen: &mut Vec<Leniency>) {
    let renames: Vec<(String, &'static str)> = obj
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .filter_map(|k| {
            let bare = k.replace('_', "");
            known
                .iter()
                .find(|c| c.eq_ignore_ascii_case(&bare))
                .map(|c| (k.clone(), *c))
        })
        .collect();
    for (written, key) in renames {
        let v = obj.remove(&written).unwrap_or(Value::Null);
        obj.entry(key).or_insert(v);
        seen.push(if written.contains('_') {
            Leniency::SnakeCase { written, key }
        } else {
            Leniency::KeyCase { written, key }
        });
    }
}

fn durations(obj: &mut Map<String, Value>, seen: &mut Vec<Leniency>) {
    for key in DURATIONS {
        if let Some(Value::String(s)) = obj.get_mut(*key) {
            if s.starts_with('.') {
                seen.push(Leniency::BareFraction {
                    key,
                    written: s.clone(),
                });
                s.insert(0, '0');
            }
        }
    }
}

/// One choice of the DNS TXT form: the service config a client picks when
/// its language, hostname and a random percentage match.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Choice {
    /// `clientLanguage` (empty: every language).
    pub client_language: Vec<String>,
    /// `clientHostname` (empty: every host).
    pub client_hostname: Vec<String>,
    /// `percentage` (absent: every client).
    pub percentage: Option<u32>,
    /// `serviceConfig`, unparsed.
    pub service_config: Value,
}

/// Reads gRPC's DNS TXT form: `[{"clientLanguage": […], "percentage": 50,
/// "serviceConfig": {…}}, …]`, optionally after a `grpc_config=` prefix.
/// `Ok(None)` when `text` is not a list (an ordinary service config);
/// errors name the field at fault.
pub fn choices(text: &str) -> Result<Option<Vec<Choice>>, Fault> {
    let body = text.trim_start();
    let body = body.strip_prefix("grpc_config=").unwrap_or(body);
    if !body.starts_with('[') {
        return Ok(None);
    }
    let v: Value = serde_json::from_str(body)
        .map_err(|e| Fault::new("serviceConfig", format!("not valid JSON: {e}")))?;
    let Value::Array(list) = v else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, c) in list.into_iter().enumerate() {
        let Value::Object(mut c) = c else {
            return Err(Fault::new(
                "serviceConfigChoice",
                format!("choice {} must be an object", i + 1),
            ));
        };
        let strings = |c: &Map<String, Value>, key: &'static str| -> Result<Vec<String>, Fault> {
            match c.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(l)) => l
                    .iter()
                    .map(|s| {
                        s.as_str().map(str::to_string).ok_or_else(|| {
                            Fault::new(key, format!("choice {}: entries must be strings", i + 1))
                        })
                    })
                    .collect(),
                Some(_) => Err(Fault::new(
                    key,
                    format!("choice {}: must be a list of strings", i + 1),
                )),
            }
        };
        let client_language = strings(&c, "clientLanguage")?;
        let client_hostname = strings(&c, "clientHostname")?;
        let percentage = match c.get("percentage") {
            None | Some(Value::Null) => None,
            Some(p) => Some(
                p.as_u64()
                    .filter(|p| *p <= 100)
                    .map(|p| p as u32)
                    .ok_or_else(|| {
                        Fault::new(
                            "percentage",
                            format!("choice {}: must be an integer in [0, 100], got {p}", i + 1),
                        )
                    })?,
            ),
        };
        let service_config = match c.remove("serviceConfig") {
            Some(v @ Value::Object(_)) => v,
            None | Some(Value::Null) => {
                return Err(Fault::new(
                    "serviceConfig",
                    format!("choice {}: is required", i + 1),
                ))
            }
            Some(_) => {
                return Err(Fault::new(
                    "serviceConfig",
                    format!("choice {}: must be an object", i + 1),
                ))
            }
        };
        out.push(Choice {
            client_language,
            client_hostname,
            percentage,
            service_config,
        });
    }
    Ok(Some(out))
}

/// The names (`(service, method)`, as in [`MethodConfig::names`](stagger::config::MethodConfig::names))
/// that more than one `methodConfig` entry lists, each once, sorted. gRPC
/// rejects a service config with any.
pub fn duplicate_names(config: &ServiceConfig) -> Vec<(String, String)> {
    let mut count: BTreeMap<&(String, String), usize> = BTreeMap::new();
    for m in &config.methods {
        for n in &m.names {
            *count.entry(n).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter(|(_, c)| *c > 1)
        .map(|(n, _)| n.clone())
        .collect()
}

/// A `retryPolicy` written without `maxAttempts`, validated field by field
/// like any other: how long to wait between attempts, and on which codes.
/// gRPC's clients reject or ignore such a policy (`maxAttempts` is
/// required); Google's generated client libraries retry it until the
/// method's `timeout`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct UnboundedRetry {
    /// `initialBackoff`.
    pub initial_backoff: Duration,
    /// `maxBackoff`.
    pub max_backoff: Duration,
    /// `backoffMultiplier`.
    pub multiplier: f64,
    /// `retryableStatusCodes`, as numbers, sorted, without duplicates.
    pub retryable: Vec<u32>,
}

/// When the `retryPolicy` of `entry` (one `methodConfig` entry, in [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s
/// spelling) has no `maxAttempts`: removes it from `entry`, which then reads
/// as a method that does not retry, and returns it validated (errors name
/// the field). `None` when the entry has no such policy.
pub fn take_retry_without_max_attempts(
    entry: &mut Map<String, Value>,
) -> Option<Result<UnboundedRetry, Fault>> {
    let p = entry.get("retryPolicy")?.as_object()?;
    if p.get("maxAttempts").is_some_and(|v| !v.is_null()) {
        return None;
    }
    let mut p = p.clone();
    entry.remove("retryPolicy");
    // Every other field goes through the strict parse; the placeholder is
    // dropped with the parsed policy's attempt count.
    p.insert("maxAttempts".into(), Value::from(2));
    let doc = serde_json::json!({ "methodConfig": [{ "retryPolicy": p }] });
    Some(
        ServiceConfig::from_json(&doc.to_string())
            .map_err(Fault::from)
            .and_then(|c| {
                let r = c
                    .methods
                    .into_iter()
                    .next()
                    .map(|m| m.policy)
                    .filter(MethodPolicy::has_retry_policy)
                    .ok_or_else(|| Fault::new("retryPolicy", "could not be read"))?;
                let b = r.backoff();
                Ok(UnboundedRetry {
                    initial_backoff: b.base,
                    max_backoff: b.cap,
                    multiplier: b.multiplier,
                    retryable: r.retryable_codes().unwrap_or(&[]).to_vec(),
                })
            }),
    )
}

/// [`normalize`], then the library's strict parse
/// ([`ServiceConfig::from_json`]): the config and the forms it needed.
///
/// ```
/// let (c, seen) = stagger_audit::lenient::read(
///     r#"{"method_config":[{"name":[{"service":"a.A"}],"timeout":".5s"}]}"#,
/// )?;
/// assert_eq!(c.methods[0].policy.timeout(), Some(std::time::Duration::from_millis(500)));
/// assert_eq!(seen.len(), 2);
/// # Ok::<(), stagger_audit::Fault>(())
/// ```
pub fn read(json: &str) -> Result<(ServiceConfig, Vec<Leniency>), Fault> {
    let mut v: Value = serde_json::from_str(json)
        .map_err(|e| Fault::new("serviceConfig", format!("not valid JSON: {e}")))?;
    let seen = normalize(&mut v);
    Ok((ServiceConfig::from_json(&v.to_string())?, seen))
}
