//! Configuration import (feature `serde`): gRPC service config, and
//! stagger's own policy file ([`PolicyFile`], TOML or JSON).
//!
//! gRPC's retry design ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)) is configured per method in a JSON service
//! config — a `retryPolicy` per method and one `retryThrottling` for the
//! channel — but no Rust gRPC stack implements it. This module reads that
//! JSON, validates it the way A6 says a client must, and turns it into
//! stagger's parts: a [`Policy`] per method (with the channel's
//! [`TokenBucket`] attached as its budget) and the set of retryable status
//! codes.
//!
//! A6's rules, as applied here: `maxAttempts` must be an integer above 1 and
//! values above 5 are treated as 5; `initialBackoff` and `maxBackoff` must be
//! positive durations written as protobuf JSON strings (`"0.1s"`);
//! `backoffMultiplier` must be positive (below 1 the schedule shrinks) and
//! an `initialBackoff` above `maxBackoff` is valid (every delay is capped);
//! `retryableStatusCodes` must be non-empty, each code a name
//! (`"UNAVAILABLE"`) or a number (`14`); `retryThrottling.maxTokens` must be
//! in (0, 1000] and `tokenRatio` positive (it may exceed `maxTokens`), both
//! kept to three decimals with further digits dropped. Every error names
//! the field.
//! Delays use gRPC's jitter, `proportional(0.2)`. A `hedgingPolicy`
//! (`maxAttempts` capped at 5 the same way, `hedgingDelay` default 0,
//! `nonFatalStatusCodes` possibly empty) is read too; a method with both a
//! `retryPolicy` and a `hedgingPolicy` is an error, as A6 says. Either reads
//! as the one type for a method's policy, [`MethodPolicy`] (also what the
//! gRPC layer takes in code), in [`MethodConfig::policy`].
//!
//! ```
//! use stagger::config::ServiceConfig;
//!
//! let json = r#"{
//!   "methodConfig": [{
//!     "name": [{ "service": "shop.Cart" }],
//!     "timeout": "2s",
//!     "retryPolicy": {
//!       "maxAttempts": 4,
//!       "initialBackoff": "0.1s",
//!       "maxBackoff": "1s",
//!       "backoffMultiplier": 2,
//!       "retryableStatusCodes": ["UNAVAILABLE", 8]
//!     }
//!   }],
//!   "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
//! }"#;
//! let config = ServiceConfig::from_json(json)?;
//! let method = config.method("shop.Cart", "Add").unwrap();
//! let retry = &method.policy;
//! assert!(retry.has_retry_policy());
//! assert_eq!(retry.max_attempts(), 4);
//! assert_eq!(retry.retryable_codes(), Some(&[8, 14][..])); // sorted
//!
//! let policy = config.policy("shop.Cart", "Add")?.unwrap();
//! assert_eq!(policy.max_attempts(), 4);
//!
//! let err = ServiceConfig::from_json(r#"{"methodConfig":[{"retryPolicy":{"maxAttempts":1}}]}"#).unwrap_err();
//! assert_eq!(err.field(), "retryPolicy.maxAttempts");
//! # Ok::<(), stagger::ConfigError>(())
//! ```

use std::time::Duration;

use serde_json::{Map, Value};

use crate::engine::policy::Policy;
use crate::grpc::MethodPolicy;
use crate::guardrails::budget::{TokenBucket, TokenBucketConfig};
use crate::outcome::error::ConfigError;

mod duration;
mod policy_file;

pub use duration::{parse_duration, Bare, DurationError};
pub use policy_file::{BudgetSpec, PolicyFile, RetryOn};

/// A parsed gRPC service config: its method configs and channel throttling.
///
/// The `retryThrottling` bucket is one per config (clones share it): every
/// [`policy`](ServiceConfig::policy) taken from the same config draws on the
/// same tokens, as [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) asks of a channel.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceConfig {
    /// `methodConfig`, in order.
    pub methods: Vec<MethodConfig>,
    /// `retryThrottling`, if present.
    pub throttling: Option<Throttling>,
    /// The channel's one bucket, made from `throttling` at parse time.
    bucket: Option<TokenBucket>,
}

impl PartialEq for ServiceConfig {
    /// Equal configs say the same thing (their buckets' current tokens are
    /// state, not configuration).
    fn eq(&self, other: &Self) -> bool {
        self.methods == other.methods && self.throttling == other.throttling
    }
}

/// One `methodConfig` entry.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MethodConfig {
    /// The methods it applies to: `(service, method)`, where an empty
    /// method means every method of the service and an empty service the
    /// default for every service.
    pub names: Vec<(String, String)>,
    /// What the entry says about retrying: its `retryPolicy` or
    /// `hedgingPolicy` (never both), or no retries, each with the entry's
    /// `timeout` ([`MethodPolicy::timeout`]).
    pub policy: MethodPolicy,
}

/// A validated `retryThrottling`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Throttling {
    /// `maxTokens`, in (0, 1000].
    pub max_tokens: f64,
    /// `tokenRatio`, positive.
    pub token_ratio: f64,
}

impl Throttling {
    /// The shared `token_bucket` budget this describes (docs/behaviour.md §5).
    pub fn token_bucket(&self) -> Result<TokenBucket, ConfigError> {
        TokenBucket::new(TokenBucketConfig {
            max_tokens: self.max_tokens,
            token_ratio: self.token_ratio,
        })
        .map_err(|e| {
            let field = match e.field() {
                "max_tokens" => "retryThrottling.maxTokens",
                _ => "retryThrottling.tokenRatio",
            };
            ConfigError::new(field, e.problem().to_string())
        })
    }
}

impl ServiceConfig {
    /// Parses and validates a service config.
    pub fn from_json(json: &str) -> Result<ServiceConfig, ConfigError> {
        let root: Value = serde_json::from_str(json)
            .map_err(|e| ConfigError::new("serviceConfig", format!("not valid JSON: {e}")))?;
        let root = root
            .as_object()
            .ok_or_else(|| ConfigError::new("serviceConfig", "must be a JSON object"))?;
        let mut methods = Vec::new();
        if let Some(list) = root.get("methodConfig") {
            let list = list
                .as_array()
                .ok_or_else(|| ConfigError::new("methodConfig", "must be a list"))?;
            for (i, m) in list.iter().enumerate() {
                let m = m.as_object().ok_or_else(|| {
                    ConfigError::new("methodConfig", format!("entry {i} must be an object"))
                })?;
                methods.push(method_config(m)?);
            }
        }
        let throttling = match root.get("retryThrottling") {
            None | Some(Value::Null) => None,
            Some(t) => Some(throttling(t)?),
        };
        let bucket = throttling
            .as_ref()
            .map(Throttling::token_bucket)
            .transpose()?;
        Ok(ServiceConfig {
            methods,
            throttling,
            bucket,
        })
    }

    /// The method config that applies to `service`/`method`: an exact
    /// match, else the service's default, else the channel default (gRPC's
    /// lookup order).
    pub fn method(&self, service: &str, method: &str) -> Option<&MethodConfig> {
        let find = |s: &str, m: &str| {
            self.methods
                .iter()
                .find(|c| c.names.iter().any(|(ns, nm)| ns == s && nm == m))
        };
        find(service, method)
            .or_else(|| find(service, ""))
            .or_else(|| find("", ""))
    }

    /// The policy for `service`/`method` (`None` when it has no
    /// `retryPolicy`), with the config's token bucket attached as its
    /// budget: every policy taken from this config (or a clone of it)
    /// shares that one bucket.
    ///
    /// ```
    /// use stagger::config::ServiceConfig;
    /// let json = r#"{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,
    ///   "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
    ///   "retryableStatusCodes":["UNAVAILABLE"]}}],
    ///   "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}"#;
    /// let config = ServiceConfig::from_json(json)?;
    /// let a = config.policy("a.A", "Get")?.unwrap();
    /// let b = config.policy("b.B", "Put")?.unwrap();
    /// # let _ = (a, b);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn policy(&self, service: &str, method: &str) -> Result<Option<Policy>, ConfigError> {
        self.policy_with(service, method, self.bucket.as_ref())
    }

    /// The config's own throttling bucket, shared by every
    /// [`policy`](ServiceConfig::policy) it gives (`None` without
    /// `retryThrottling`).
    pub fn throttling_bucket(&self) -> Option<&TokenBucket> {
        self.bucket.as_ref()
    }

    /// [`policy`](ServiceConfig::policy) with `bucket` as its budget
    /// instead of the config's own (a channel that keeps its own bucket
    /// passes it here).
    pub fn policy_with(
        &self,
        service: &str,
        method: &str,
        bucket: Option<&TokenBucket>,
    ) -> Result<Option<Policy>, ConfigError> {
        match self.method(service, method) {
            Some(m) if m.policy.has_retry_policy() => m.policy.engine(bucket, None, None).map(Some),
            _ => Ok(None),
        }
    }
}

impl ServiceConfig {
    /// The hedging engine for `service`/`method` (`None` when it has no
    /// `hedgingPolicy`): attempts `hedgingDelay` apart, each status judged
    /// by `nonFatalStatusCodes`, with `bucket` admitting every attempt after
    /// the first, as the gRPC layer drives it.
    ///
    /// ```
    /// use stagger::config::ServiceConfig;
    /// let json = r#"{"methodConfig":[{"name":[{}],"hedgingPolicy":{"maxAttempts":3,
    ///   "hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}"#;
    /// let config = ServiceConfig::from_json(json)?;
    /// let hedging = config.hedge_policy_with("a.A", "Get", None)?.unwrap();
    /// assert_eq!(hedging.max_attempts(), 3);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn hedge_policy_with(
        &self,
        service: &str,
        method: &str,
        bucket: Option<&TokenBucket>,
    ) -> Result<Option<crate::engine::hedge::HedgePolicy>, ConfigError> {
        let Some(m) = self.method(service, method) else {
            return Ok(None);
        };
        let engine = m.policy.engine(bucket, None, None)?;
        m.policy.hedge_engine(&engine, bucket)
    }
}

// The gRPC layer's service-config entry points live here, beside the
// config they read, so the layer never imports this module (which imports
// the layer's method policy).
#[cfg(feature = "grpc")]
impl crate::tower::grpc::RetryLayer {
    /// A layer for the methods and throttling of a gRPC service config
    /// (feature `serde`): each method's `retryPolicy` or `hedgingPolicy`
    /// and `timeout`, found
    /// by exact name, then service, then the default entry; a method with
    /// no `retryPolicy` is not retried (transparent retries still apply).
    ///
    /// ```
    /// use stagger::config::ServiceConfig;
    /// use stagger::tower::grpc::RetryLayer;
    ///
    /// let config = ServiceConfig::from_json(r#"{
    ///   "methodConfig": [{ "name": [{ "service": "grpc.health.v1.Health" }],
    ///     "retryPolicy": { "maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
    ///       "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"] } }],
    ///   "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 } }"#)?;
    /// let layer = RetryLayer::from_service_config(&config)?;
    /// # let _ = layer;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn from_service_config(config: &ServiceConfig) -> Result<Self, ConfigError> {
        Self::builder().service_config(config)?.build()
    }
}

#[cfg(feature = "grpc")]
impl crate::tower::grpc::RetryLayerBuilder {
    /// Takes the methods, timeouts and throttling of a service config
    /// (feature `serde`).
    pub fn service_config(mut self, config: &ServiceConfig) -> Result<Self, ConfigError> {
        for m in &config.methods {
            for (service, method) in &m.names {
                self = self.method(service, method, m.policy.clone());
            }
        }
        if let Some(t) = &config.throttling {
            self = self.throttling(t.max_tokens, t.token_ratio);
        }
        Ok(self)
    }
}

#[cfg(feature = "http")]
impl ServiceConfig {
    /// HTTP client settings for `service`/`method` (feature `http`): the
    /// [`policy`](ServiceConfig::policy) (with the channel's token bucket),
    /// its `retryableStatusCodes` as the gRPC codes the tower layer and the
    /// reqwest middleware retry, and the method's `timeout` as each call's
    /// deadline. `None` when the method has no `retryPolicy`.
    ///
    /// ```
    /// use stagger::config::ServiceConfig;
    /// let json = r#"{"methodConfig":[{"name":[{}],"timeout":"1s","retryPolicy":{
    ///   "maxAttempts":3,"initialBackoff":"0.05s","maxBackoff":"0.5s",
    ///   "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE","INTERNAL"]}}]}"#;
    /// let settings = ServiceConfig::from_json(json)?.settings("any.Service", "Call")?.unwrap();
    /// let layer = stagger::tower::RetryLayer::new(settings);
    /// # let _ = layer;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn settings(
        &self,
        service: &str,
        method: &str,
    ) -> Result<Option<crate::http::Settings>, ConfigError> {
        let Some(policy) = self.policy(service, method)? else {
            return Ok(None);
        };
        let m = self.method(service, method).map(|m| &m.policy);
        let codes = m
            .and_then(MethodPolicy::retryable_codes)
            .unwrap_or_default();
        Ok(Some(crate::http::Settings {
            grpc_retryable_codes: Some(codes.into()),
            timeout: m.and_then(MethodPolicy::timeout),
            ..crate::http::Settings::from(policy)
        }))
    }
}

fn method_config(m: &Map<String, Value>) -> Result<MethodConfig, ConfigError> {
    let mut names = Vec::new();
    if let Some(list) = m.get("name") {
        let list = list
            .as_array()
            .ok_or_else(|| ConfigError::new("methodConfig.name", "must be a list"))?;
        for n in list {
            let n = n
                .as_object()
                .ok_or_else(|| ConfigError::new("methodConfig.name", "entries must be objects"))?;
            let text = |k: &str| -> Result<String, ConfigError> {
                match n.get(k) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(_) => Err(ConfigError::new(
                        "methodConfig.name",
                        format!("`{k}` must be a string"),
                    )),
                }
            };
            let (service, method) = (text("service")?, text("method")?);
            if service.is_empty() && !method.is_empty() {
                return Err(ConfigError::new(
                    "methodConfig.name",
                    "a method needs its service",
                ));
            }
            names.push((service, method));
        }
    }
    let timeout = match m.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => Some(duration("methodConfig.timeout", v, false)?),
    };
    let present = |key: &str| m.get(key).filter(|v| !v.is_null());
    let policy = match (present("retryPolicy"), present("hedgingPolicy")) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::new(
                "methodConfig",
                "has both retryPolicy and hedgingPolicy; a method takes one or the other",
            ))
        }
        (Some(v), None) => retry_policy(v)?,
        (None, Some(v)) => hedging_policy(v)?,
        (None, None) => MethodPolicy::no_retries(),
    };
    Ok(MethodConfig {
        names,
        policy: policy.with_timeout(timeout),
    })
}

/// A `retryPolicy` as [`MethodPolicy`]: the JSON's shape is checked here,
/// the values by the policy's builder ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s rules, in one place), its
/// errors named by their JSON field.
fn retry_policy(v: &Value) -> Result<MethodPolicy, ConfigError> {
    let p = v
        .as_object()
        .ok_or_else(|| ConfigError::new("retryPolicy", "must be an object"))?;
    let field = |name: &'static str, key: &str| required(p, name, key);
    let max = field("retryPolicy.maxAttempts", "maxAttempts")?;
    let max_attempts = attempts("retryPolicy.maxAttempts", max)?;
    let initial_backoff = duration(
        "retryPolicy.initialBackoff",
        field("retryPolicy.initialBackoff", "initialBackoff")?,
        true,
    )?;
    let max_backoff = duration(
        "retryPolicy.maxBackoff",
        field("retryPolicy.maxBackoff", "maxBackoff")?,
        true,
    )?;
    let m = field("retryPolicy.backoffMultiplier", "backoffMultiplier")?;
    let multiplier = m.as_f64().ok_or_else(|| {
        ConfigError::new(
            "retryPolicy.backoffMultiplier",
            format!("must be a positive number, got {m}"),
        )
    })?;
    let codes = field("retryPolicy.retryableStatusCodes", "retryableStatusCodes")?
        .as_array()
        .ok_or_else(|| ConfigError::new("retryPolicy.retryableStatusCodes", "must be a list"))?;
    let mut retryable = Vec::with_capacity(codes.len());
    for c in codes {
        retryable.push(status_code("retryPolicy.retryableStatusCodes", c)?);
    }
    let mut b = MethodPolicy::builder()
        .max_attempts(max_attempts)
        .initial_backoff(initial_backoff)
        .max_backoff(max_backoff)
        .multiplier(multiplier)
        .retryable_codes(retryable);
    if let Some(v) = p.get("perAttemptRecvTimeout").filter(|v| !v.is_null()) {
        b = b.attempt_timeout(duration("retryPolicy.perAttemptRecvTimeout", v, true)?);
    }
    b.build().map_err(|e| {
        let field = match e.field() {
            "max_attempts" => "retryPolicy.maxAttempts",
            "initial_backoff" | "base" => "retryPolicy.initialBackoff",
            "max_backoff" | "cap" => "retryPolicy.maxBackoff",
            "multiplier" => "retryPolicy.backoffMultiplier",
            "retryable_codes" => "retryPolicy.retryableStatusCodes",
            "attempt_timeout" => "retryPolicy.perAttemptRecvTimeout",
            _ => "retryPolicy",
        };
        ConfigError::new(field, e.problem().to_string())
    })
}

/// `maxAttempts` as a whole number (the policy checks that it is above 1
/// and caps it at 5).
fn attempts(field: &'static str, v: &Value) -> Result<u32, ConfigError> {
    match v.as_u64().or_else(|| whole(v.as_f64())) {
        Some(n) if n > 1 => Ok(crate::backoff::a6::effective_attempts(n)),
        _ => Err(ConfigError::new(
            field,
            format!("must be an integer above 1, got {v}"),
        )),
    }
}

fn whole(x: Option<f64>) -> Option<u64> {
    x.filter(|x| x.is_finite() && x.fract() == 0.0 && *x >= 0.0 && *x < 1e15)
        .map(|x| x as u64)
}

/// The value of `key` in `obj`, or an error naming `name`. When the key is
/// there in another spelling (grpc-go's `MaxAttempts`, proto's
/// `max_attempts`), the error says so and names the reader that accepts it.
fn required<'a>(
    obj: &'a Map<String, Value>,
    name: &'static str,
    key: &str,
) -> Result<&'a Value, ConfigError> {
    if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
        return Ok(v);
    }
    let folded = |k: &str| k.replace('_', "").to_ascii_lowercase();
    let problem = match obj.keys().find(|k| folded(k) == folded(key)) {
        Some(written) => format!(
            "is required (the config spells it `{written}`, which grpc-go also reads \
             and `stagger audit` accepts and names)"
        ),
        None => "is required".to_string(),
    };
    Err(ConfigError::new(name, problem))
}

/// A `hedgingPolicy` as [`MethodPolicy::hedging`].
fn hedging_policy(v: &Value) -> Result<MethodPolicy, ConfigError> {
    let p = v
        .as_object()
        .ok_or_else(|| ConfigError::new("hedgingPolicy", "must be an object"))?;
    let max = required(p, "hedgingPolicy.maxAttempts", "maxAttempts")?;
    let max_attempts = attempts("hedgingPolicy.maxAttempts", max)?;
    let delay = match p.get("hedgingDelay") {
        None | Some(Value::Null) => Duration::ZERO,
        Some(v) => duration("hedgingPolicy.hedgingDelay", v, false)?,
    };
    let mut non_fatal = Vec::new();
    match p.get("nonFatalStatusCodes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(codes)) => {
            for c in codes {
                non_fatal.push(status_code("hedgingPolicy.nonFatalStatusCodes", c)?);
            }
        }
        Some(_) => {
            return Err(ConfigError::new(
                "hedgingPolicy.nonFatalStatusCodes",
                "must be a list",
            ))
        }
    }
    MethodPolicy::hedging(max_attempts, delay, non_fatal).map_err(|e| {
        let field = match e.field() {
            "max_attempts" => "hedgingPolicy.maxAttempts",
            "non_fatal_codes" => "hedgingPolicy.nonFatalStatusCodes",
            _ => "hedgingPolicy",
        };
        ConfigError::new(field, e.problem().to_string())
    })
}

fn status_code(field: &'static str, c: &Value) -> Result<u32, ConfigError> {
    let bad = || {
        ConfigError::new(
            field,
            format!("`{c}` is not a gRPC status code name or number (0-16)"),
        )
    };
    match c {
        Value::String(s) => crate::classify::GRPC_CODE_NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s.trim()))
            .map(|i| i as u32)
            .ok_or_else(bad),
        Value::Number(_) => whole(c.as_f64())
            .filter(|n| *n <= 16)
            .map(|n| n as u32)
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

fn throttling(v: &Value) -> Result<Throttling, ConfigError> {
    let t = v
        .as_object()
        .ok_or_else(|| ConfigError::new("retryThrottling", "must be an object"))?;
    let number = |name: &'static str, key: &str| -> Result<f64, ConfigError> {
        match t.get(key) {
            None | Some(Value::Null) => required(t, name, key).map(|_| 0.0),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .ok_or_else(|| ConfigError::new(name, format!("must be a number, got {v}"))),
        }
    };
    let max_tokens = number("retryThrottling.maxTokens", "maxTokens")?;
    if !(max_tokens > 0.0 && max_tokens <= 1000.0) {
        return Err(ConfigError::new(
            "retryThrottling.maxTokens",
            format!("must be in (0, 1000], got {max_tokens}"),
        ));
    }
    let token_ratio = number("retryThrottling.tokenRatio", "tokenRatio")?;
    if token_ratio <= 0.0 {
        return Err(ConfigError::new(
            "retryThrottling.tokenRatio",
            format!("must be positive, got {token_ratio}"),
        ));
    }
    let t = Throttling {
        max_tokens,
        token_ratio,
    };
    t.token_bucket()?;
    Ok(t)
}

/// Parses a protobuf JSON duration: decimal seconds with an `s` suffix and
/// at most 9 fractional digits (`"0.1s"`, `"2s"`); `positive` requires it to
/// be above zero.
///
/// ```
/// use stagger::config::parse_proto_duration;
/// use std::time::Duration;
/// assert_eq!(parse_proto_duration("0.1s"), Some(Duration::from_millis(100)));
/// assert_eq!(parse_proto_duration("1.5"), None);
/// assert_eq!(parse_proto_duration("-1s"), None);
/// ```
pub fn parse_proto_duration(s: &str) -> Option<Duration> {
    let body = s.strip_suffix('s')?;
    let (secs, frac) = match body.split_once('.') {
        Some((a, b)) => (a, b),
        None => (body, ""),
    };
    if secs.is_empty()
        || secs.len() > 12
        || frac.len() > 9
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || (body.contains('.') && frac.is_empty())
    {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let mut nanos: u32 = 0;
    for (i, b) in frac.bytes().enumerate() {
        nanos += u32::from(b - b'0') * 10u32.pow(8 - i as u32);
    }
    Some(Duration::new(secs, nanos))
}

fn duration(field: &'static str, v: &Value, positive: bool) -> Result<Duration, ConfigError> {
    let d = v.as_str().and_then(parse_proto_duration).ok_or_else(|| {
        ConfigError::new(
            field,
            format!("must be a duration string such as \"0.1s\", got {v}"),
        )
    })?;
    if positive && d.is_zero() {
        return Err(ConfigError::new(field, "must be greater than zero"));
    }
    Ok(d)
}
