//! The retry-amplification SLI (docs/behaviour.md §9).

use std::fmt;
use std::time::Duration;

use crate::guardrails::budget::scaled;
use crate::guardrails::event::{Event, Observer};
use crate::guardrails::sync::{nanos, AtomicU64, Ordering::*};
use crate::guardrails::window::{Timebase, Window};
use crate::outcome::error::ConfigError;
use crate::time::{Clock, MonotonicClock};

const BUCKETS: usize = if cfg!(loom) { 2 } else { 12 };
/// The span the ratio is taken over.
const WINDOW: Duration = Duration::from_secs(60);
const REQUESTS: usize = 0;
const RETRIES: usize = 1;
const PPM: u128 = 1_000_000;

/// How the retry ratio looks.
///
/// ```
/// assert_eq!(stagger::export::SliState::Alarm.as_str(), "alarm");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SliState {
    /// Under the healthy threshold (10 %).
    Healthy,
    /// Between the thresholds, or above the alarm threshold for less than
    /// the sustain time.
    Elevated,
    /// Above the alarm threshold (20 %) for the sustain time (1 minute).
    Alarm,
}

impl SliState {
    /// The lower-case name used in metrics and JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            SliState::Healthy => "healthy",
            SliState::Elevated => "elevated",
            SliState::Alarm => "alarm",
        }
    }
}

impl fmt::Display for SliState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The SLI at one moment.
///
/// ```
/// let s = stagger::export::SliWindow::default().snapshot();
/// assert_eq!((s.requests, s.retries, s.ratio), (0, 0, 0.0));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SliSnapshot {
    /// Logical requests in the last minute.
    pub requests: u64,
    /// Retries sent in the last minute.
    pub retries: u64,
    /// `retries / requests` (0 without requests).
    pub ratio: f64,
    /// The verdict.
    pub state: SliState,
}

/// The retry-amplification SLI (docs/behaviour.md §9).
///
/// A logical request is one call, counted once whether its first attempt
/// ran or a guardrail refused it; a retry is counted when it is sent
/// ([`Event::RetryStarted`]), so retries a breaker or throttle stopped
/// before they left do not raise the ratio while the guardrail protects
/// the dependency.
///
/// Retries ÷ logical requests over a sliding minute is the earliest sign of
/// a retry storm: it climbs before the dependency falls over. Healthy is
/// under 10 % (about what a retry budget lets through); alarm is above 20 %
/// held for a whole minute, so one bad second does not page anyone; in
/// between it is elevated.
///
/// [`SliWindow`] is an [`Observer`]: attach it to a policy (or several) and
/// read its [`snapshot`](SliWindow::snapshot) (the ratio and the state)
/// from code, a health check or a metrics exporter. It reads time from the
/// [`Clock`] it was built with, so tests drive it with a
/// [`ManualClock`](crate::time::ManualClock). The minute is twelve 5 s buckets.
/// The state is judged on the ratio so far in the minute; "held above 20 %"
/// is judged once per bucket, on the complete buckets before it, so the
/// order of events inside a bucket does not matter and an alarm is raised
/// within one bucket (5 s) of the ratio having held for a minute.
///
/// ```
/// use stagger::{Event, Observer};
/// use stagger::export::{SliState, SliWindow};
/// use stagger::time::ManualClock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let sli = SliWindow::with_clock(clock.clone());
/// let retry = Event::RetryStarted {
///     attempt: 2,
///     cause: stagger::Class::Transient,
/// };
/// for _ in 0..10 {
///     sli.on_event(&Event::AttemptStarted { attempt: 1 });
/// }
/// assert_eq!(sli.snapshot().state, SliState::Healthy);
/// for _ in 0..3 {
///     sli.on_event(&retry); // 30 %
/// }
/// assert_eq!(sli.snapshot().state, SliState::Elevated, "above 20 %, but not for a minute yet");
/// for _ in 0..13 {
///     clock.advance(Duration::from_secs(5));
///     for _ in 0..10 {
///         sli.on_event(&Event::AttemptStarted { attempt: 1 });
///     }
///     for _ in 0..3 {
///         sli.on_event(&retry);
///     }
/// }
/// assert_eq!(sli.snapshot().state, SliState::Alarm);
/// ```
///
/// The sliding-minute retry ratio, as an [`Observer`].
///
/// ```
/// use stagger::Policy;
/// use stagger::export::{SliState, SliWindow};
/// use std::sync::Arc;
///
/// let sli = Arc::new(SliWindow::default());
/// let policy = Policy::builder().observer(sli.clone()).build().unwrap();
/// # let _ = policy;
/// assert_eq!(sli.snapshot().state, SliState::Healthy);
/// ```
pub struct SliWindow<C = MonotonicClock> {
    clock: C,
    time: Timebase,
    counts: Window<BUCKETS, 2>,
    /// 1 + nanoseconds since the origin when the ratio was first seen above
    /// the alarm threshold in the current run; 0 when it is not above.
    above_since: AtomicU64,
    /// 1 + the last epoch evaluated.
    evaluated: AtomicU64,
    healthy_ppm: u64,
    alarm_ppm: u64,
    sustain_ns: u64,
}

impl<C> fmt::Debug for SliWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SliWindow")
            .field("healthy_ppm", &self.healthy_ppm)
            .field("alarm_ppm", &self.alarm_ppm)
            .field("sustain_ns", &self.sustain_ns)
            .finish()
    }
}

/// The settings in words, as a report prints them: "healthy under 10 %
/// retries per request over 1 min, alarm above 20 % for 1 min" for the
/// defaults.
///
/// ```
/// let said = stagger::export::SliWindow::default().to_string();
/// assert_eq!(said, "healthy under 10 % retries per request over 1 min, alarm above 20 % for 1 min");
/// ```
impl<C> fmt::Display for SliWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::outcome::describe::{Percent, Spoken};
        write!(
            f,
            "healthy under {} retries per request over {}, alarm above {} for {}",
            Percent(self.healthy_ppm),
            Spoken(WINDOW),
            Percent(self.alarm_ppm),
            Spoken(Duration::from_nanos(self.sustain_ns))
        )
    }
}

impl Default for SliWindow<MonotonicClock> {
    /// An SLI window on the monotonic clock: healthy under 10 %, alarm above
    /// 20 % for 1 minute.
    fn default() -> Self {
        SliWindow::with_clock(MonotonicClock)
    }
}

impl<C: Clock> SliWindow<C> {
    /// An SLI window reading time from `clock`.
    pub fn with_clock(clock: C) -> Self {
        SliWindow {
            clock,
            time: Timebase::new(WINDOW / BUCKETS as u32),
            counts: Window::new(),
            above_since: AtomicU64::new(0),
            evaluated: AtomicU64::new(0),
            healthy_ppm: 100_000,
            alarm_ppm: 200_000,
            sustain_ns: 60_000_000_000,
        }
    }

    /// Sets the thresholds (fractions in `[0, 10]`, `healthy ≤ alarm`).
    ///
    /// ```
    /// let sli = stagger::export::SliWindow::default().thresholds(0.05, 0.1)?;
    /// # let _ = sli;
    /// assert!(stagger::export::SliWindow::default().thresholds(0.3, 0.2).is_err());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn thresholds(mut self, healthy: f64, alarm: f64) -> Result<Self, ConfigError> {
        let h = scaled("healthy", healthy, 0.0, 10.0, 1e6)?;
        let a = scaled("alarm", alarm, 0.0, 10.0, 1e6)?;
        if h > a {
            return Err(ConfigError::new("healthy", "must not exceed alarm"));
        }
        self.healthy_ppm = h;
        self.alarm_ppm = a;
        Ok(self)
    }

    /// How long the ratio must stay above the alarm threshold (default 1
    /// minute).
    pub fn sustain(mut self, d: Duration) -> Self {
        self.sustain_ns = nanos(d);
        self
    }

    /// The ratio and state now.
    pub fn snapshot(&self) -> SliSnapshot {
        let ns = self.time.nanos(self.clock.now());
        let e = self.time.epoch_of(ns);
        self.evaluate(e, ns);
        let requests = self.counts.total(e, REQUESTS);
        let retries = self.counts.total(e, RETRIES);
        let ratio = if requests == 0 {
            0.0
        } else {
            retries as f64 / requests as f64
        };
        let r = Self::ppm(requests, retries);
        let since = self.above_since.load(Acquire);
        let state = if r < u128::from(self.healthy_ppm) {
            SliState::Healthy
        } else if r > u128::from(self.alarm_ppm)
            && since != 0
            && ns.saturating_sub(since - 1) >= self.sustain_ns
        {
            SliState::Alarm
        } else {
            SliState::Elevated
        };
        SliSnapshot {
            requests,
            retries,
            ratio,
            state,
        }
    }

    fn ppm(requests: u64, retries: u64) -> u128 {
        if requests == 0 {
            0
        } else {
            u128::from(retries) * PPM / u128::from(requests)
        }
    }

    /// Once per bucket: judges the window of complete buckets before `e`
    /// and moves the "above since" mark.
    fn evaluate(&self, e: u64, ns: u64) {
        let seen = self.evaluated.load(Acquire);
        if seen > e
            || self
                .evaluated
                .compare_exchange(seen, e + 1, AcqRel, Acquire)
                .is_err()
        {
            return;
        }
        let requests = self.counts.past(e, REQUESTS);
        let retries = self.counts.past(e, RETRIES);
        if Self::ppm(requests, retries) > u128::from(self.alarm_ppm) {
            let _ = self
                .above_since
                .compare_exchange(0, ns.saturating_add(1), AcqRel, Acquire);
        } else if self.above_since.load(Acquire) != 0 {
            self.above_since.store(0, Release);
        }
    }
}

impl<C: Clock> Observer for SliWindow<C> {
    fn on_event(&self, event: &Event) {
        let counter = match event {
            // One logical request per call: its first attempt started, or
            // the call ended before one could (an open breaker, throttling).
            Event::AttemptStarted { attempt: 1 } | Event::Stopped { attempts: 0, .. } => {
                Some(REQUESTS)
            }
            // A retry counts when it is sent, not when it is scheduled.
            Event::RetryStarted { .. } => Some(RETRIES),
            _ => None,
        };
        let ns = self.time.nanos(self.clock.now());
        let e = self.time.epoch_of(ns);
        self.evaluate(e, ns);
        if let Some(k) = counter {
            self.counts.add(e, k, 1);
        }
    }
}
