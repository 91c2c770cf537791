//! Configuration of a [`Breaker`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Breaker, Config};
use crate::budget::scaled;
use crate::error::ConfigError;
use crate::event::Observer;
use crate::rng::{FastRng, RandomSource};
use crate::sync::nanos;

/// Configures a [`Breaker`]; [`build`](BreakerBuilder::build) names the
/// first bad field. Defaults: trip at 50 % failures over a 10 s window with
/// at least 20 calls, or, while the window holds fewer calls, after 5
/// failures in a row; open 5 s plus up to 20 % jitter, one probe, probe
/// timeout 10 s, no count window, no consecutive-failure trip for busy
/// clients, no slow-call threshold.
///
/// ```
/// use stagger::Breaker;
/// use std::time::Duration;
///
/// let breaker = Breaker::builder()
///     .failure_rate(0.25)
///     .min_calls(50)
///     .count_window(200) // the last 200 outcomes instead of 10 s
///     .consecutive_failures(10)
///     .slow_call(Duration::from_secs(2))
///     .open_for(Duration::from_secs(30))
///     .probes(3)
///     .build()?;
/// # let _ = breaker;
/// let err = Breaker::builder().probes(0).build().unwrap_err();
/// assert_eq!(err.field(), "probes");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct BreakerBuilder {
    failure_rate: f64,
    min_calls: u32,
    window: Duration,
    count_window: Option<u32>,
    consecutive: Option<u32>,
    sparse: Option<u32>,
    slow_call: Option<Duration>,
    open_for: Duration,
    open_jitter: f64,
    probes: u32,
    probe_timeout: Duration,
    seed: Option<u64>,
    observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for BreakerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerBuilder")
            .field("failure_rate", &self.failure_rate)
            .field("min_calls", &self.min_calls)
            .field("window", &self.window)
            .field("count_window", &self.count_window)
            .field("consecutive", &self.consecutive)
            .field("sparse", &self.sparse)
            .field("slow_call", &self.slow_call)
            .field("open_for", &self.open_for)
            .field("open_jitter", &self.open_jitter)
            .field("probes", &self.probes)
            .field("probe_timeout", &self.probe_timeout)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Default for BreakerBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BreakerBuilder {
    /// The defaults.
    pub(crate) fn new() -> Self {
        BreakerBuilder {
            failure_rate: 0.5,
            min_calls: 20,
            window: Duration::from_secs(10),
            count_window: None,
            consecutive: None,
            sparse: Some(5),
            slow_call: None,
            open_for: Duration::from_secs(5),
            open_jitter: 0.2,
            probes: 1,
            probe_timeout: Duration::from_secs(10),
            seed: None,
            observer: None,
        }
    }

    /// Trip when failures ÷ calls reaches this, in `(0, 1]`.
    pub fn failure_rate(mut self, rate: f64) -> Self {
        self.failure_rate = rate;
        self
    }

    /// Calls the window must hold before the rate can trip it (≥ 1).
    pub fn min_calls(mut self, n: u32) -> Self {
        self.min_calls = n;
        self
    }

    /// The sliding time window, between 1 s and 1 hour; it moves in tenths.
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Counts the last `n` outcomes (1 to 65 536) instead of a time window.
    pub fn count_window(mut self, n: u32) -> Self {
        self.count_window = Some(n);
        self
    }

    /// Also trip after `n` failures in a row (≥ 1), whatever the rate.
    pub fn consecutive_failures(mut self, n: u32) -> Self {
        self.consecutive = Some(n);
        self
    }

    /// While the window holds fewer than [`min_calls`](Self::min_calls)
    /// calls, trip after `n` failures in a row (≥ 1; default 5). A thin
    /// client — a few calls per window — never reaches the minimum, so
    /// without this it could never open; a busy client is judged by the
    /// rate alone. [`no_sparse_failures`](Self::no_sparse_failures) turns
    /// it off.
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
    pub fn sparse_failures(mut self, n: u32) -> Self {
        self.sparse = Some(n);
        self
    }

    /// Judges only on the rate, however few the calls (a thin client's
    /// breaker then never opens by the rate rule).
    pub fn no_sparse_failures(mut self) -> Self {
        self.sparse = None;
        self
    }

    /// Count a call that took longer than `limit` as a failure.
    pub fn slow_call(mut self, limit: Duration) -> Self {
        self.slow_call = Some(limit);
        self
    }

    /// How long an open period lasts before jitter (1 ms to 1 day).
    pub fn open_for(mut self, d: Duration) -> Self {
        self.open_for = d;
        self
    }

    /// Each open period is lengthened by `U(0, jitter)` of itself, `jitter`
    /// in `[0, 1]` (default 0.2).
    pub fn open_jitter(mut self, jitter: f64) -> Self {
        self.open_jitter = jitter;
        self
    }

    /// Concurrent half-open trial calls (1 to 255).
    pub fn probes(mut self, n: u32) -> Self {
        self.probes = n;
        self
    }

    /// After this long without a report from any probe, their slots are
    /// reclaimed (1 ms to 1 day; default 10 s).
    pub fn probe_timeout(mut self, d: Duration) -> Self {
        self.probe_timeout = d;
        self
    }

    /// Seeds the open-period jitter so a run replays exactly (default: a
    /// fresh seed per breaker, so breakers in different processes differ).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Receives `BreakerStateChanged` events.
    pub fn observer(mut self, o: Arc<dyn Observer>) -> Self {
        o.on_attach();
        self.observer = Some(o);
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Breaker, ConfigError> {
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
        if self.consecutive == Some(0) {
            return Err(ConfigError::new(
                "consecutive_failures",
                "must be at least 1",
            ));
        }
        if self.sparse == Some(0) {
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
            consecutive: self.consecutive,
            sparse: self.sparse.map(|n| n.max(1)),
            slow_call: self.slow_call,
            open_ns: nanos(self.open_for),
            jitter_ppm: scaled("", self.open_jitter, 0.0, 1.0, 1e6).unwrap_or(200_000),
            probes: u64::from(self.probes.clamp(1, 255)),
            probe_timeout_ns: nanos(self.probe_timeout),
            seed: self.seed.unwrap_or_else(|| FastRng::fresh().next_u64()),
        };
        Breaker::from_config(cfg, self.observer)
    }
}
