//! Configuration of a [`Policy`]: the builder, its validation, and the
//! presets.

use std::sync::Arc;
use std::time::Duration;

use super::Policy;
use crate::backoff::{Backoff, Jitter};
use crate::guardrails::breaker::Breaker;
use crate::guardrails::budget::{Budget, RatioBudget};
use crate::guardrails::event::Observer;
use crate::guardrails::guard::{Guardrail, Parts};
use crate::guardrails::throttle::Throttle;
use crate::outcome::deadline::LatencyEstimate;
use crate::outcome::error::ConfigError;

/// Builds a [`Policy`]; [`build`](PolicyBuilder::build) validates every field
/// and names the first bad one.
///
/// ```
/// use stagger::{Backoff, Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .max_attempts(4)
///     .backoff(Backoff {
///         base: Duration::from_millis(50),
///         cap: Duration::from_secs(2),
///         jitter: Jitter::Equal,
///         ..Backoff::new()
///     })
///     .attempt_timeout(Duration::from_millis(800))
///     .build()
///     .unwrap();
/// assert_eq!(policy.max_attempts(), 4);
///
/// let err = Policy::builder().max_attempts(0).build().unwrap_err();
/// assert_eq!(err.field(), "max_attempts");
/// ```
#[derive(Clone)]
pub struct PolicyBuilder {
    backoff: Backoff,
    max_attempts: u32,
    max_retry_after: Duration,
    attempt_timeout: Option<Duration>,
    typical_attempt: Duration,
    measure_latency: bool,
    guardrail: Option<Arc<dyn Guardrail>>,
    observer: Option<Arc<dyn Observer>>,
    /// Budget, breaker and throttle set through the builder's conveniences
    /// (see `guard.rs`), combined into one [`Guardrails`](crate::Guardrails)
    /// at build time.
    pub(crate) parts: Parts,
    /// The schedule is a gRPC `retryPolicy`'s, checked as [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) checks it.
    a6_schedule: bool,
}

impl Default for PolicyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PolicyBuilder {
    /// The defaults of docs/behaviour.md §1.
    pub(crate) fn new() -> Self {
        PolicyBuilder {
            backoff: Backoff::new(),
            max_attempts: 3,
            max_retry_after: Duration::from_secs(60),
            attempt_timeout: None,
            typical_attempt: Duration::ZERO,
            measure_latency: true,
            guardrail: None,
            observer: None,
            parts: Parts::default(),
            a6_schedule: false,
        }
    }

    /// Takes `backoff` as a gRPC `retryPolicy` states it, checked as A6
    /// checks it (a multiplier below 1, a base above the cap).
    #[cfg_attr(not(any(feature = "serde", feature = "grpc")), allow(dead_code))]
    pub(crate) fn a6_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self.a6_schedule = true;
        self
    }

    /// Replaces the whole backoff schedule.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Max attempts, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The longest server hint honoured; a longer one stops the call with
    /// `hint_too_long`. Default 60 s.
    pub fn max_retry_after(mut self, d: Duration) -> Self {
        self.max_retry_after = d;
        self
    }

    /// A timeout for each attempt (further bounded by the call's deadline).
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.attempt_timeout = Some(d);
        self
    }

    /// The floor of the typical-attempt estimate used by the deadline rule.
    pub fn typical_attempt(mut self, d: Duration) -> Self {
        self.typical_attempt = d;
        self
    }

    /// Whether to measure the attempts of calls that have a deadline
    /// (successes, failures and attempts cut by their timeout) and use the
    /// mean when it exceeds the floor (default on).
    pub fn measure_latency(mut self, on: bool) -> Self {
        self.measure_latency = on;
        self
    }

    /// Attaches a custom guardrail. For stagger's own budget, breaker and
    /// throttle use [`budget`](PolicyBuilder::budget),
    /// [`breaker`](PolicyBuilder::breaker) and
    /// [`throttle`](PolicyBuilder::throttle) instead (setting both is a
    /// configuration error naming `guardrail`).
    pub fn guardrail(mut self, g: Arc<dyn Guardrail>) -> Self {
        self.guardrail = Some(g);
        self
    }

    /// Attaches an observer of every event (and tells it so, see
    /// [`Observer::on_attach`]).
    pub fn observer(mut self, o: Arc<dyn Observer>) -> Self {
        o.on_attach();
        self.observer = Some(o);
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Policy, ConfigError> {
        if self.a6_schedule {
            self.backoff.validate_a6()?;
        } else {
            self.backoff.validate()?;
        }
        if self.max_attempts == 0 {
            return Err(ConfigError::new(
                "max_attempts",
                "must be at least 1 (the first attempt counts)",
            ));
        }
        if self.attempt_timeout == Some(Duration::ZERO) {
            return Err(ConfigError::new(
                "attempt_timeout",
                "must be greater than zero",
            ));
        }
        if self.guardrail.is_some() && !self.parts.is_empty() {
            return Err(ConfigError::new(
                "guardrail",
                "a custom guardrail cannot be combined with budget/breaker/throttle/pacing",
            ));
        }
        Ok(self.build_unchecked())
    }

    pub(crate) fn build_unchecked(self) -> Policy {
        let guardrail = match self.guardrail {
            Some(g) => Some(g),
            None => self.parts.into_guardrail(self.observer.clone()),
        };
        Policy {
            backoff: self.backoff,
            max_attempts: self.max_attempts.max(1),
            max_retry_after: self.max_retry_after,
            attempt_timeout: self.attempt_timeout,
            typical_attempt: self.typical_attempt,
            estimate: self
                .measure_latency
                .then(|| Arc::new(LatencyEstimate::new())),
            guardrail,
            observer: self.observer,
        }
    }
}

impl PolicyBuilder {
    /// Adds a retry budget, checked before every retry (a refusal stops the
    /// call with `budget`, without sleeping).
    ///
    /// ```
    /// use stagger::{guardrails::budget::QuotaBudget, Policy};
    /// let policy = Policy::builder().budget(QuotaBudget::default()).build().unwrap();
    /// # let _ = policy;
    /// ```
    pub fn budget(mut self, budget: impl Budget + 'static) -> Self {
        self.parts.budget = Some(Arc::new(budget));
        self
    }

    /// Adds a circuit breaker, checked before every attempt and every retry
    /// (`breaker_open`). Its state changes also go to the policy's observer.
    ///
    /// ```
    /// use stagger::{Breaker, Policy};
    /// let policy = Policy::builder().breaker(Breaker::default()).build().unwrap();
    /// # let _ = policy;
    /// ```
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.parts.breaker = Some(breaker);
        self
    }

    /// Adds adaptive throttling, checked before every attempt, the first
    /// included (`throttled`).
    ///
    /// ```
    /// use stagger::{Policy, Throttle};
    /// let policy = Policy::builder().throttle(Throttle::default()).build().unwrap();
    /// # let _ = policy;
    /// ```
    pub fn throttle(mut self, throttle: Throttle) -> Self {
        self.parts.throttle = Some(throttle);
        self
    }

    /// Paces every attempt, the first included, by an adaptive client rate
    /// limiter (the AWS SDKs' adaptive mode), told of every throttle
    /// ([`Failure::throttled`](crate::Failure::throttled)): after the first,
    /// an attempt waits for the rate the server accepts; a wait that would
    /// pass the call's deadline stops it (`throttled`). Every front-end
    /// driven by the policy waits it (the tower, reqwest and gRPC layers and
    /// the executors); a caller of [`Policy::start_attempt`] is refused with
    /// `throttled` and [`Call::retry_in`](crate::Call::retry_in) saying
    /// how long to wait. One limiter per client: clones share it.
    ///
    /// ```
    /// use stagger::guardrails::AdaptiveLimiter;
    /// use stagger::Policy;
    /// use std::time::Instant;
    ///
    /// let limiter = AdaptiveLimiter::new(Instant::now());
    /// let policy = Policy::builder().pacing(limiter.clone()).build().unwrap();
    /// # let _ = policy;
    /// ```
    pub fn pacing(mut self, limiter: crate::guardrails::AdaptiveLimiter) -> Self {
        self.parts.pacing = Some(limiter);
        self
    }
}

impl Policy {
    /// The guarded preset: the default schedule (5 attempts,
    /// full jitter, base 100 ms ×2, cap 10 s) with the default
    /// [`RatioBudget`] (10 % over 10 s, plus a floor of 0.1 retries per
    /// request, between 1 and 10) and the default [`Breaker`] (opens at
    /// 50 % failures over 10 s with at least 20 calls, or after 5 failures in
    /// a row while it sees fewer, for 5 s (+ up to 20 %), then lets one probe
    /// through). Both follow the client's own traffic, so they engage for a
    /// thin client as well as a busy one. Each call to `guarded` makes a new
    /// budget and breaker: build one policy per dependency and share it.
    ///
    /// A process that has just started has sent nothing, so its budget
    /// grants one retry per window until its traffic earns more (0.1 per
    /// request): the first call to an endpoint that answers 503, then 429,
    /// then 200 stops after its second attempt with `budget`, and the error
    /// says "the retry budget refused: a new client earns retries with
    /// traffic". This is deliberate. A fleet restarted by a deploy is a
    /// fleet of new clients, and giving each one more retry (a floor of two
    /// per window instead of one) took the simulator's 400 thin processes
    /// from 1.14× to 1.33× the load and from 0.45 s to 2.96 s to recover
    /// after an outage (`stagger simulate --clients 400 --strategy
    /// full+budget+breaker`, seed 1), past the bars of 1.3× and 2 s. A client
    /// that needs more from its first calls can give its policy a fixed
    /// floor: [`RatioBudgetConfig`](crate::guardrails::budget::RatioBudgetConfig) with
    /// `floor_per_request: None`.
    ///
    /// ```
    /// use stagger::Policy;
    /// let policy = Policy::guarded();
    /// assert_eq!(policy.max_attempts(), 5);
    /// ```
    pub fn guarded() -> Policy {
        Policy::builder()
            .max_attempts(5)
            .backoff(Backoff {
                jitter: Jitter::Full,
                base: Duration::from_millis(100),
                cap: Duration::from_secs(10),
                ..Backoff::new()
            })
            .budget(RatioBudget::default())
            .breaker(Breaker::default())
            .build_unchecked()
    }
}
