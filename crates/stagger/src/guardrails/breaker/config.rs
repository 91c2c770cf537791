//! The settings of a [`Breaker`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Breaker, Config};
use crate::guardrails::budget::scaled;
use crate::guardrails::event::Observer;
use crate::guardrails::sync::nanos;
use crate::outcome::error::ConfigError;
use crate::random::{FastRng, RandomSource};

/// The settings of a [`Breaker`], checked by [`Breaker::new`], which names
/// the first bad field. [`Default`] trips at 50 % failures over a 10 s
/// window with at least 20 calls, or, while the window holds fewer calls,
/// after 5 failures in a row; open 5 s plus up to 20 % jitter, one probe,
/// probe timeout 10 s, no count window, no consecutive-failure trip for
/// busy clients, no slow-call threshold.
///
/// ```
/// use stagger::guardrails::BreakerConfig;
/// use stagger::Breaker;
/// use std::time::Duration;
///
/// let breaker = Breaker::new(BreakerConfig {
///     failure_rate: 0.25,
///     min_calls: 50,
///     count_window: Some(200), // the last 200 outcomes instead of 10 s
///     consecutive_failures: Some(10),
///     slow_call: Some(Duration::from_secs(2)),
///     open_for: Duration::from_secs(30),
///     probes: 3,
///     ..Default::default()
/// })?;
/// # let _ = breaker;
/// let err = Breaker::new(BreakerConfig { probes: 0, ..Default::default() }).unwrap_err();
/// assert_eq!(err.field(), "probes");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct BreakerConfig {
    /// Trip when failures ÷ calls reaches this, in `(0, 1]`.
    pub failure_rate: f64,
    /// Calls the window must hold before the rate can trip it (≥ 1).
    pub min_calls: u32,
    /// The sliding time window, between 1 s and 1 hour; it moves in tenths.
    pub window: Duration,
    /// Counts the last `n` outcomes (1 to 65 536) instead of a time window.
    pub count_window: Option<u32>,
    /// Also trip after `n` failures in a row (≥ 1), whatever the rate.
    pub consecutive_failures: Option<u32>,
    /// While the window holds fewer than [`min_calls`](Self::min_calls)
    /// calls, trip after `n` failures in a row (≥ 1; default 5). A thin
    /// client — a few calls per window — never reaches the minimum, so
    /// without this it could never open; a busy client is judged by the
    /// rate alone. `None` judges only on the rate, however few the calls
    /// (a thin client's breaker then never opens by the rate rule).
    ///
    /// ```
    /// use stagger::{Breaker, Class, Outcome};
    /// use stagger::guardrails::BreakerState;
    /// use std::time::Instant;
    ///
    /// let breaker = Breaker::default(); // 5 in a row below 20 calls
    /// let now = Instant::now();
    /// let fail = Outcome::from(Class::Transient);
    /// for _ in 0..4 {
    ///     let p = breaker.acquire(now).unwrap();
    ///     breaker.record(p, &fail, None, now);
    /// }
    /// assert_eq!(breaker.state(), BreakerState::Closed, "4 failures: a blip");
    /// let p = breaker.acquire(now).unwrap();
    /// breaker.record(p, &fail, None, now);
    /// assert_eq!(breaker.state(), BreakerState::Open, "5 in a row: down");
    /// ```
    pub sparse_failures: Option<u32>,
    /// Count a call that took longer than this as a failure.
    pub slow_call: Option<Duration>,
    /// How long an open period lasts before jitter (1 ms to 1 day).
    pub open_for: Duration,
    /// Each open period is lengthened by `U(0, jitter)` of itself, `jitter`
    /// in `[0, 1]` (default 0.2).
    pub open_jitter: f64,
    /// Concurrent half-open trial calls (1 to 255).
    pub probes: u32,
    /// After this long without a report from any probe, their slots are
    /// reclaimed (1 ms to 1 day; default 10 s).
    pub probe_timeout: Duration,
    /// Seeds the open-period jitter so a run replays exactly (default
    /// `None`: a fresh seed per breaker, so breakers in different processes
    /// differ).
    pub seed: Option<u64>,
    /// Receives `BreakerStateChanged` events.
    pub observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for BreakerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerConfig")
            .field("failure_rate", &self.failure_rate)
            .field("min_calls", &self.min_calls)
            .field("window", &self.window)
            .field("count_window", &self.count_window)
            .field("consecutive_failures", &self.consecutive_failures)
            .field("sparse_failures", &self.sparse_failures)
            .field("slow_call", &self.slow_call)
            .field("open_for", &self.open_for)
            .field("open_jitter", &self.open_jitter)
            .field("probes", &self.probes)
            .field("probe_timeout", &self.probe_timeout)
            .field("seed", &self.seed)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_rate: 0.5,
            min_calls: 20,
            window: Duration::from_secs(10),
            count_window: None,
            consecutive_failures: None,
            sparse_failures: Some(5),
            slow_call: None,
            open_for: Duration::from_secs(5),
            open_jitter: 0.2,
            probes: 1,
            probe_timeout: Duration::from_secs(10),
            seed: None,
            observer: None,
        }
    }
}

impl BreakerConfig {
    pub(crate) fn build(self) -> Result<Breaker, ConfigError> {
        let rate = scaled("failure_rate", self.failure_rate, 0.0, 1.0, 1e6)?;
        if rate == 0 {
            return Err(ConfigError::new("failure_rate", "must be above 0"));
        }
        if self.min_calls == 0 {
            return Err(ConfigError::new("min_calls", "must be at least 1"));
        }
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(3600) {
            return Err(ConfigError::new("window", "must be between 1 s and 1 hour"));
        }
        if let Some(n) = self.count_window {
            if n == 0 || n > 65_536 {
                return Err(ConfigError::new(
                    "count_window",
                    "must be between 1 and 65536",
                ));
            }
            if self.min_calls > n {
                return Err(ConfigError::new(
                    "min_calls",
                    "must not exceed count_window, or the breaker could never trip",
                ));
            }
        }
        if self.consecutive_failures == Some(0) {
            return Err(ConfigError::new(
                "consecutive_failures",
                "must be at least 1",
            ));
        }
        if self.sparse_failures == Some(0) {
            return Err(ConfigError::new("sparse_failures", "must be at least 1"));
        }
        if self.slow_call == Some(Duration::ZERO) {
            return Err(ConfigError::new("slow_call", "must be above 0"));
        }
        let day = Duration::from_secs(86_400);
        if self.open_for < Duration::from_millis(1) || self.open_for > day {
            return Err(ConfigError::new(
                "open_for",
                "must be between 1 ms and 1 day",
            ));
        }
        scaled("open_jitter", self.open_jitter, 0.0, 1.0, 1e6)?;
        if self.probes == 0 || self.probes > 255 {
            return Err(ConfigError::new("probes", "must be between 1 and 255"));
        }
        if self.probe_timeout < Duration::from_millis(1) || self.probe_timeout > day {
            return Err(ConfigError::new(
                "probe_timeout",
                "must be between 1 ms and 1 day",
            ));
        }
        Ok(self.build_unchecked())
    }

    pub(crate) fn build_unchecked(self) -> Breaker {
        let cfg = Config {
            failure_rate_ppm: scaled("", self.failure_rate, 0.0, 1.0, 1e6).unwrap_or(500_000),
            min_calls: u64::from(self.min_calls.max(1)),
            window: self.window,
            count_window: self.count_window,
            consecutive: self.consecutive_failures,
            sparse: self.sparse_failures.map(|n| n.max(1)),
            slow_call: self.slow_call,
            open_ns: nanos(self.open_for),
            jitter_ppm: scaled("", self.open_jitter, 0.0, 1.0, 1e6).unwrap_or(200_000),
            probes: u64::from(self.probes.clamp(1, 255)),
            probe_timeout_ns: nanos(self.probe_timeout),
            seed: self.seed.unwrap_or_else(|| FastRng::fresh().next_u64()),
        };
        if let Some(o) = &self.observer {
            o.on_attach();
        }
        Breaker::from_config(cfg, self.observer)
    }
}
