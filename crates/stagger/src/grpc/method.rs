//! Retry policies per gRPC method, and the lookup that finds a request's.

#[cfg(feature = "grpc")]
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::engine::hedge::{HedgeDelay, HedgePolicy, HedgePolicyConfig};
use crate::engine::policy::Policy;
use crate::guardrails::adaptive::AdaptiveLimiter;
use crate::guardrails::budget::{Budget, TokenBucket};
use crate::guardrails::event::Observer;
use crate::outcome::error::ConfigError;

pub(crate) use crate::backoff::a6::MAX_ATTEMPTS;

/// One method's retry policy, as a gRPC service config's `retryPolicy`
/// states it: max attempts (capped at 5), the backoff, the retryable status
/// codes, and the method's `timeout`. Delays are [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s
/// `min(initial · multiplier^(n-1), max) · U(0.8, 1.2)`;
/// [`full_jitter`](MethodPolicyBuilder::full_jitter) draws `U(0, b_n)`
/// instead, for peers that expect the older rule.
///
/// ```
/// use stagger::grpc::MethodPolicy;
/// use std::time::Duration;
///
/// let policy = MethodPolicy::builder()
///     .max_attempts(9) // A6 caps this at 5
///     .initial_backoff(Duration::from_millis(50))
///     .max_backoff(Duration::from_secs(1))
///     .retryable_codes([14, 8])
///     .build()?;
/// assert_eq!(policy.max_attempts(), 5);
/// assert_eq!(policy.retryable_codes(), Some(&[8, 14][..])); // sorted
///
/// let err = MethodPolicy::builder().retryable_codes([]).build().unwrap_err();
/// assert_eq!(err.field(), "retryable_codes");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MethodPolicy {
    backoff: Backoff,
    max_attempts: u32,
    retryable: Option<Arc<[u32]>>,
    timeout: Option<Duration>,
    attempt_timeout: Option<Duration>,
    /// `Some(hedgingDelay)` for a `hedgingPolicy`: `retryable` then holds
    /// its `nonFatalStatusCodes`.
    hedge_delay: Option<Duration>,
}

impl MethodPolicy {
    /// A6's `hedgingPolicy`: up to `max_attempts` attempts (at least 2;
    /// above 5 counts as 5), each sent `delay` after the previous while none
    /// has answered; a status in `non_fatal` sends the next one at once, any
    /// other status (or response headers) ends the call and cancels the
    /// rest (docs/behaviour.md §12).
    ///
    /// ```
    /// use stagger::grpc::MethodPolicy;
    /// use std::time::Duration;
    ///
    /// let p = MethodPolicy::hedging(3, Duration::from_millis(20), [14])?;
    /// assert_eq!(p.hedging_delay(), Some(Duration::from_millis(20)));
    /// assert_eq!(p.retryable_codes(), Some(&[14][..]));
    /// let err = MethodPolicy::hedging(1, Duration::ZERO, []).unwrap_err();
    /// assert_eq!(err.field(), "max_attempts");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn hedging(
        max_attempts: u32,
        delay: Duration,
        non_fatal: impl IntoIterator<Item = u32>,
    ) -> Result<MethodPolicy, ConfigError> {
        if max_attempts < 2 {
            return Err(ConfigError::new(
                "max_attempts",
                "must be at least 2 (use MethodPolicy::no_retries for one attempt)",
            ));
        }
        let mut codes: Vec<u32> = non_fatal.into_iter().collect();
        codes.sort_unstable();
        codes.dedup();
        if let Some(c) = codes.iter().find(|c| **c > 16) {
            return Err(ConfigError::new(
                "non_fatal_codes",
                format!("{c} is not a gRPC status code (0-16)"),
            ));
        }
        Ok(MethodPolicy {
            backoff: Backoff {
                base: Duration::ZERO,
                jitter: Jitter::None,
                ..Backoff::new()
            },
            max_attempts: crate::backoff::a6::effective_attempts(u64::from(max_attempts)),
            retryable: Some(codes.into()),
            timeout: None,
            attempt_timeout: None,
            hedge_delay: Some(delay),
        })
    }

    /// The `hedgingDelay` of a hedging policy; `None` for a retry policy.
    pub fn hedging_delay(&self) -> Option<Duration> {
        self.hedge_delay
    }

    /// A builder with A6's defaults: 5 attempts, 100 ms ×2 up to 1 s,
    /// ±20 % jitter, UNAVAILABLE retryable.
    pub fn builder() -> MethodPolicyBuilder {
        MethodPolicyBuilder {
            policy: MethodPolicy {
                backoff: Backoff {
                    base: Duration::from_millis(100),
                    multiplier: 2.0,
                    cap: Duration::from_secs(1),
                    jitter: crate::backoff::a6::JITTER,
                },
                max_attempts: MAX_ATTEMPTS,
                retryable: Some(Arc::from([14u32].as_slice())),
                timeout: None,
                attempt_timeout: None,
                hedge_delay: None,
            },
        }
    }

    /// No retries (one attempt; transparent retries still apply): the
    /// policy of a method a service config gives no `retryPolicy`.
    pub(crate) fn no_retries() -> Self {
        MethodPolicy {
            backoff: Backoff {
                base: Duration::from_millis(100),
                cap: Duration::from_secs(1),
                jitter: crate::backoff::a6::JITTER,
                ..Backoff::new()
            },
            max_attempts: 1,
            retryable: None,
            timeout: None,
            attempt_timeout: None,
            hedge_delay: None,
        }
    }

    /// The same policy with the method's `timeout` set (or cleared).
    #[cfg_attr(not(feature = "serde"), allow(dead_code))]
    pub(crate) fn with_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// Max attempts, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// Whether this is a `retryPolicy` (not a hedging policy, nor a method
    /// without either).
    pub fn has_retry_policy(&self) -> bool {
        self.hedge_delay.is_none() && self.retryable.is_some()
    }

    /// The backoff schedule: `initialBackoff` as its base, `maxBackoff` as
    /// its cap, `backoffMultiplier`, and A6's jitter.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// `perAttemptRecvTimeout`, if set.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// How a later attempt's status `code` bears on retrying under this
    /// policy: a listed code is `transient` (A6 retries it, pushback or
    /// not), any other is `permanent`.
    ///
    /// ```
    /// use stagger::grpc::MethodPolicy;
    /// use stagger::Class;
    /// let p = MethodPolicy::builder().retryable_codes([14, 8]).build()?;
    /// assert_eq!(p.class_of(8), Class::Transient);
    /// assert_eq!(p.class_of(13), Class::Permanent);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn class_of(&self, code: u32) -> crate::outcome::Class {
        crate::classify::grpc_code_listed(code, self.retryable.as_deref().unwrap_or(&[]))
    }

    /// The codes a later attempt may clear: a retry policy's
    /// `retryableStatusCodes`, a hedging policy's `nonFatalStatusCodes`
    /// (`None` for a method with neither).
    pub fn retryable_codes(&self) -> Option<&[u32]> {
        self.retryable.as_deref()
    }

    /// The method's timeout (its calls' deadline), if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The engine policy for this method, drawing on the channel's
    /// throttling `bucket`, paced by the channel's adaptive limiter, and
    /// telling `observer` its events.
    pub(crate) fn engine(
        &self,
        bucket: Option<&TokenBucket>,
        pacing: Option<&AdaptiveLimiter>,
        observer: Option<&Arc<dyn Observer>>,
    ) -> Result<Policy, ConfigError> {
        let mut b = Policy::builder()
            .a6_backoff(self.backoff)
            .max_attempts(self.max_attempts);
        if let Some(t) = self.attempt_timeout {
            b = b.attempt_timeout(t);
        }
        if let Some(t) = bucket {
            b = b.budget(t.clone());
        }
        if let Some(l) = pacing {
            b = b.pacing(l.clone());
        }
        if let Some(o) = observer {
            b = b.observer(o.clone());
        }
        b.build()
    }

    /// The hedging engine for a hedging policy: attempts `delay` apart, the
    /// engine policy judging each status, and the channel's throttling
    /// bucket admitting every timed hedge.
    pub(crate) fn hedge_engine(
        &self,
        engine: &Policy,
        bucket: Option<&TokenBucket>,
    ) -> Result<Option<HedgePolicy>, ConfigError> {
        let Some(delay) = self.hedge_delay else {
            return Ok(None);
        };
        HedgePolicy::new(HedgePolicyConfig {
            max_attempts: self.max_attempts,
            delay: HedgeDelay::Fixed(delay),
            policy: Some(engine.clone()),
            shared_budget: bucket.map(|t| Arc::new(t.clone()) as Arc<dyn Budget>),
            max_extra_load: None,
            ..Default::default()
        })
        .map(Some)
    }
}

/// Builds a [`MethodPolicy`]; [`build`](Self::build) names the first bad
/// field.
#[derive(Debug, Clone)]
pub struct MethodPolicyBuilder {
    policy: MethodPolicy,
}

impl MethodPolicyBuilder {
    /// Max attempts, the first included: at least 2; above 5 counts as 5.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.policy.max_attempts = n;
        self
    }

    /// `initialBackoff`: the first retry's backoff step.
    pub fn initial_backoff(mut self, d: Duration) -> Self {
        self.policy.backoff.base = d;
        self
    }

    /// `maxBackoff`: the cap of the backoff steps.
    pub fn max_backoff(mut self, d: Duration) -> Self {
        self.policy.backoff.cap = d;
        self
    }

    /// `backoffMultiplier`: positive; below 1 the schedule shrinks.
    pub fn multiplier(mut self, m: f64) -> Self {
        self.policy.backoff.multiplier = m;
        self
    }

    /// Draws delays as `U(0, b_n)` (full jitter) instead of [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s ±20 %.
    pub fn full_jitter(mut self) -> Self {
        self.policy.backoff.jitter = Jitter::Full;
        self
    }

    /// `retryableStatusCodes`, as numbers (non-empty).
    pub fn retryable_codes(mut self, codes: impl IntoIterator<Item = u32>) -> Self {
        let mut v: Vec<u32> = codes.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        self.policy.retryable = Some(v.into());
        self
    }

    /// The method's `timeout`: a deadline over every attempt and wait.
    pub fn timeout(mut self, d: Duration) -> Self {
        self.policy.timeout = Some(d);
        self
    }

    /// `perAttemptRecvTimeout`: a timeout for each attempt.
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.policy.attempt_timeout = Some(d);
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<MethodPolicy, ConfigError> {
        let mut p = self.policy;
        if p.max_attempts < 2 {
            return Err(ConfigError::new(
                "max_attempts",
                "must be at least 2 (use MethodPolicy::no_retries for one attempt)",
            ));
        }
        p.max_attempts = crate::backoff::a6::effective_attempts(u64::from(p.max_attempts));
        p.backoff.validate_a6()?;
        if p.backoff.base.is_zero() {
            return Err(ConfigError::new(
                "initial_backoff",
                "must be greater than zero",
            ));
        }
        if p.retryable.as_deref().is_none_or(<[u32]>::is_empty) {
            return Err(ConfigError::new("retryable_codes", "must not be empty"));
        }
        if let Some(c) = p
            .retryable
            .as_deref()
            .and_then(|c| c.iter().find(|c| **c > 16))
        {
            return Err(ConfigError::new(
                "retryable_codes",
                format!("{c} is not a gRPC status code (0-16)"),
            ));
        }
        for (field, t) in [
            ("timeout", p.timeout),
            ("attempt_timeout", p.attempt_timeout),
        ] {
            if t == Some(Duration::ZERO) {
                return Err(ConfigError::new(field, "must be greater than zero"));
            }
        }
        Ok(p)
    }
}

/// A method's policy made ready for calls: the engine policy (with the
/// channel's bucket) and the facts the driver reads.
#[cfg(feature = "grpc")]
#[derive(Debug)]
pub(crate) struct Resolved {
    pub(crate) engine: Policy,
    /// The hedging engine, for a method with a hedging policy.
    pub(crate) hedge: Option<HedgePolicy>,
    pub(crate) retryable: Option<Arc<[u32]>>,
    pub(crate) timeout: Option<Duration>,
}

/// The policies of a channel, found as gRPC finds a method config: the
/// exact `service/method`, else the service's, else the default.
#[cfg(feature = "grpc")]
#[derive(Debug)]
pub(crate) struct Methods {
    exact: HashMap<String, Arc<Resolved>>,
    services: HashMap<String, Arc<Resolved>>,
    default: Arc<Resolved>,
}

/// A method's name as the builder collects it: `(service, method)`, empty
/// method for the whole service, both empty for the default.
#[cfg(feature = "grpc")]
pub(crate) type Entry = ((String, String), MethodPolicy);

#[cfg(feature = "grpc")]
impl Methods {
    pub(crate) fn build(
        entries: &[Entry],
        fallback: &MethodPolicy,
        bucket: Option<&TokenBucket>,
        pacing: Option<&AdaptiveLimiter>,
        observer: Option<&Arc<dyn Observer>>,
    ) -> Result<Methods, ConfigError> {
        let resolve = |p: &MethodPolicy| -> Result<Arc<Resolved>, ConfigError> {
            let engine = p.engine(bucket, pacing, observer)?;
            Ok(Arc::new(Resolved {
                hedge: p.hedge_engine(&engine, bucket)?,
                engine,
                retryable: p.retryable.clone(),
                timeout: p.timeout,
            }))
        };
        let mut exact = HashMap::new();
        let mut services = HashMap::new();
        let mut default = None;
        // The first entry naming a method wins, as in a service config.
        for ((service, method), p) in entries {
            let slot = match (service.is_empty(), method.is_empty()) {
                (true, _) => {
                    if default.is_none() {
                        default = Some(resolve(p)?);
                    }
                    continue;
                }
                (false, true) => services.entry(service.clone()),
                (false, false) => exact.entry(format!("{service}/{method}")),
            };
            if let std::collections::hash_map::Entry::Vacant(v) = slot {
                v.insert(resolve(p)?);
            }
        }
        let default = match default {
            Some(d) => d,
            None => resolve(fallback)?,
        };
        Ok(Methods {
            exact,
            services,
            default,
        })
    }

    /// The policy for a request path `/package.Service/Method`.
    pub(crate) fn find(&self, path: &str) -> &Arc<Resolved> {
        let name = path.strip_prefix('/').unwrap_or(path);
        if !self.exact.is_empty() {
            if let Some(r) = self.exact.get(name) {
                return r;
            }
        }
        if !self.services.is_empty() {
            if let Some(r) = name
                .split_once('/')
                .and_then(|(service, _)| self.services.get(service))
            {
                return r;
            }
        }
        &self.default
    }
}

#[cfg(all(test, feature = "grpc"))]
mod tests {
    use super::*;

    fn p(n: u32) -> MethodPolicy {
        MethodPolicy::builder().max_attempts(n).build().unwrap()
    }

    #[test]
    fn lookup_goes_exact_then_service_then_default() {
        let entries: Vec<Entry> = vec![
            (("shop.Cart".into(), "Add".into()), p(2)),
            (("shop.Cart".into(), String::new()), p(3)),
            (("shop.Cart".into(), "Add".into()), p(4)),
            ((String::new(), String::new()), p(5)),
        ];
        let m = Methods::build(&entries, &MethodPolicy::no_retries(), None, None, None).unwrap();
        let attempts = |path| m.find(path).engine.max_attempts();
        assert_eq!(attempts("/shop.Cart/Add"), 2, "the first entry wins");
        assert_eq!(attempts("/shop.Cart/Remove"), 3);
        assert_eq!(attempts("/shop.Till/Pay"), 5);
        let none = Methods::build(&[], &MethodPolicy::no_retries(), None, None, None).unwrap();
        assert_eq!(none.find("/a.B/C").engine.max_attempts(), 1);
    }

    #[test]
    fn builder_caps_and_names_fields() {
        assert_eq!(p(100).max_attempts(), 5);
        assert_eq!(
            MethodPolicy::builder()
                .max_attempts(1)
                .build()
                .unwrap_err()
                .field(),
            "max_attempts"
        );
        let e = MethodPolicy::builder()
            .initial_backoff(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "initial_backoff");
        let e = MethodPolicy::builder()
            .retryable_codes([17])
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "retryable_codes");
    }
}
