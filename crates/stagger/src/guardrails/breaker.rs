//! The circuit breaker: zero retries at a dependency that is plainly down.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guardrails::event::{BreakerState, Event, Observer};
use crate::guardrails::sync::{nanos, AtomicU32, AtomicU64, Ordering::*, Padded};
use crate::guardrails::window::{Timebase, Window};
use crate::outcome::error::ConfigError;
use crate::outcome::{Class, Outcome};
use crate::random::splitmix64;

mod config;
mod control;
#[cfg(all(test, loom))]
mod loom;
mod ring;

pub use config::BreakerConfig;
pub use control::{BreakerControl, Transition};
use ring::CountRing;

const BUCKETS: usize = if cfg!(loom) { 2 } else { 10 };
const PPM: u128 = 1_000_000;
const MS: u64 = 1_000_000;

// The state word: [until_ms: 40 | gen: 14 | in-flight probes: 8 | state: 2].
// In the operator's state (FORCED) the probes field holds which one.
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;
const FORCED: u64 = 3;
const DISABLED: u64 = 1;
const METRICS_ONLY: u64 = 2;
const FORCED_OPEN: u64 = 3;
const GEN_MASK: u64 = (1 << 14) - 1;

#[inline]
const fn state_of(w: u64) -> u64 {
    w & 0b11
}
#[inline]
const fn in_flight(w: u64) -> u64 {
    (w >> 2) & 0xff
}
#[inline]
const fn gen_of(w: u64) -> u64 {
    (w >> 10) & GEN_MASK
}
#[inline]
const fn until_ns(w: u64) -> u64 {
    (w >> 24).saturating_mul(MS)
}
#[inline]
const fn word(state: u64, probes: u64, gen: u64, until_ns: u64) -> u64 {
    let until_ms = until_ns.div_ceil(MS);
    let until_ms = if until_ms > (1 << 40) - 1 {
        (1 << 40) - 1
    } else {
        until_ms
    };
    (until_ms << 24) | ((gen & GEN_MASK) << 10) | ((probes & 0xff) << 2) | state
}

/// The admission a call needs to record its outcome: which breaker period
/// admitted it and whether it is a half-open probe.
///
/// ```
/// use stagger::{Breaker, Outcome};
/// use std::time::Instant;
///
/// let breaker = Breaker::default();
/// let now = Instant::now();
/// let permit = breaker.acquire(now).unwrap();
/// assert!(!permit.is_probe(), "a closed breaker admits ordinary calls");
/// breaker.record(permit, &Outcome::Success, None, now);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "record the call's outcome with this permit (or release it)"]
pub struct Permit {
    gen: u16,
    probe: bool,
}

impl Permit {
    /// Whether this call is a half-open trial call.
    pub const fn is_probe(self) -> bool {
        self.probe
    }

    /// Packs the permit in 16 bits (for a call's ticket).
    pub(crate) const fn to_bits(self) -> u16 {
        (self.gen & GEN_MASK as u16) | if self.probe { 1 << 15 } else { 0 }
    }

    pub(crate) const fn from_bits(bits: u16) -> Self {
        Permit {
            gen: bits & GEN_MASK as u16,
            probe: bits & (1 << 15) != 0,
        }
    }
}

/// A breaker refused a call: it is open (or every half-open probe slot is
/// taken). `retry_in` is when it may admit again.
///
/// ```
/// use stagger::{Breaker, Class, Outcome};
/// use stagger::guardrails::BreakerConfig;
/// use std::time::{Duration, Instant};
///
/// let breaker = Breaker::new(BreakerConfig { min_calls: 1, open_jitter: 0.0, ..Default::default() })?;
/// let now = Instant::now();
/// let p = breaker.acquire(now).unwrap();
/// breaker.record(p, &Outcome::from(Class::Transient), None, now);
/// let open = breaker.acquire(now).unwrap_err();
/// assert_eq!(open.retry_in, Duration::from_secs(5));
/// assert!(open.to_string().contains("open"));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerOpen {
    /// Time until the open period ends (or a probe slot may free).
    pub retry_in: Duration,
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit breaker open; retry in {:?}", self.retry_in)
    }
}

impl std::error::Error for BreakerOpen {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Good,
    Bad,
    Neutral,
}

/// Everything [`BreakerConfig`] holds, validated.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) failure_rate_ppm: u64,
    pub(crate) min_calls: u64,
    pub(crate) window: Duration,
    pub(crate) count_window: Option<u32>,
    pub(crate) consecutive: Option<u32>,
    pub(crate) sparse: Option<u32>,
    pub(crate) slow_call: Option<Duration>,
    pub(crate) open_ns: u64,
    pub(crate) jitter_ppm: u64,
    pub(crate) probes: u64,
    pub(crate) probe_timeout_ns: u64,
    pub(crate) seed: u64,
}

/// The circuit breaker: zero retries at a dependency that is plainly down.
///
/// A retry budget limits how much a client retries; a breaker stops it
/// calling at all once most calls fail, so a dead dependency gets no load
/// to dig out from under, and callers get an answer in nanoseconds instead
/// of after a timeout.
///
/// - **Closed**: calls flow and their outcomes are counted over a sliding
///   window (10 s in 1 s buckets by default). When failures ÷ calls ≥ 50 %
///   and calls ≥ 20, it opens. While the window holds fewer than 20 calls
///   (a client too quiet for a rate to mean anything), it opens after 5
///   failures in a row instead. Optionally also after N consecutive
///   failures whatever the traffic, and with a count window (a true ring of
///   the last N outcomes) instead of the time window. A call slower than an
///   optional threshold counts as a failure.
/// - **Open**: calls fail fast with [`BreakerOpen`], which says when to try
///   again. Each open period lasts 5 s plus up to 20 % of jitter drawn for
///   that period, so a fleet of clients does not probe in step.
/// - **Half-open**: exactly `probes` (default 1) trial calls are let through
///   at a time. A success closes the breaker and clears the window; a
///   failure opens it again.
///
/// Only calls admitted in the current period move the breaker: an outcome
/// that arrives after the breaker changed state (a slow call admitted
/// before it opened) is ignored. A permanent failure (the dependency
/// answered, the request was wrong) counts as a success; a cancellation
/// counts as nothing.
///
/// **Thin clients.** A service that runs as many small processes gives
/// each breaker little to judge: 400 pods at half a request per second see
/// about 5 calls per 10 s window, so a minimum of 20 calls would never be
/// reached and the breaker would never open, however dead the dependency.
/// Below the minimum the breaker judges on a run of failures instead
/// ([`sparse_failures`](BreakerConfig::sparse_failures), default 5 in a
/// row, no success between them). One failure, or a retried blip, never
/// opens it; a dependency that failed every one of the last five attempts
/// is treated as down. A busy client, whose window is full, is judged by
/// the rate alone, so a 10 % failure rate never opens it by a run of bad
/// luck.
///
/// **Abandoned probes.** A probe whose outcome never arrives (its caller
/// was dropped) would hold its half-open slot forever. Front-ends give it
/// back with [`Breaker::release`] (the engine's
/// [`Policy::abandon`](crate::Policy::abandon)); failing that, every slot
/// is reclaimed once `probe_timeout` (default 10 s) has passed since the
/// last probe was admitted, and new probes are admitted.
///
/// The closed-state hot path is one load of the state word to admit, and
/// one uncontended compare-and-swap on the caller's own stripe of the
/// window to record a success, plus a read of the shared failure-run
/// counter (written only by failures, and by the success that ends a run).
/// Time always comes in as an argument.
///
/// ```
/// use stagger::{Breaker, Class, Outcome};
/// use stagger::guardrails::BreakerConfig;
/// use stagger::guardrails::BreakerState;
/// use std::time::{Duration, Instant};
///
/// let breaker = Breaker::new(BreakerConfig { min_calls: 4, ..Default::default() })?;
/// let t0 = Instant::now();
/// for _ in 0..4 {
///     let permit = breaker.acquire(t0).unwrap();
///     breaker.record(permit, &Outcome::from(Class::Transient), None, t0);
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// let open = breaker.acquire(t0).unwrap_err();
/// assert!(open.retry_in >= Duration::from_secs(5) && open.retry_in <= Duration::from_secs(6));
///
/// let later = t0 + Duration::from_secs(6);
/// let probe = breaker.acquire(later).unwrap();
/// assert!(probe.is_probe());
/// assert!(breaker.acquire(later).is_err(), "one probe at a time");
/// breaker.record(probe, &Outcome::Success, None, later);
/// assert_eq!(breaker.state(), BreakerState::Closed);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
///
/// A circuit breaker, shared by every call to one dependency.
/// Cheap to clone; clones share the breaker.
///
/// ```
/// use stagger::{Breaker, Outcome};
/// use std::time::Instant;
///
/// let breaker = Breaker::default();
/// let worker = breaker.clone(); // the same breaker
/// let now = Instant::now();
/// let permit = worker.acquire(now).expect("closed");
/// worker.record(permit, &Outcome::Success, None, now);
/// assert_eq!(breaker.counts(now), (1, 0));
/// ```
#[derive(Clone)]
pub struct Breaker {
    inner: Arc<Inner>,
}

struct Inner {
    state: Padded<AtomicU64>,
    cfg: Config,
    time: Timebase,
    /// Per bucket: successes (0) and failures (1), striped by thread.
    window: Window<BUCKETS, 2>,
    ring: Option<CountRing>,
    consecutive: Padded<AtomicU32>,
    observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("state", &self.state())
            .field("config", &self.inner.cfg)
            .field("observer", &self.inner.observer.is_some())
            .finish()
    }
}

/// The settings in words, as a report prints them: "opens at ≥ 50 %
/// failures of ≥ 20 calls over 10 s (fewer calls: 5 failures in a row);
/// open 5 s + up to 20 %, then 1 probe" for the defaults.
///
/// ```
/// let said = stagger::Breaker::default().to_string();
/// assert!(said.starts_with("opens at ≥ 50 % failures of ≥ 20 calls over 10 s"), "{said}");
/// ```
impl fmt::Display for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::outcome::describe::{Percent, Spoken};
        let c = &self.inner.cfg;
        write!(
            f,
            "opens at ≥ {} failures of ≥ {} calls ",
            Percent(c.failure_rate_ppm),
            c.min_calls
        )?;
        match c.count_window {
            Some(n) => write!(f, "among the last {n}")?,
            None => write!(f, "over {}", Spoken(c.window))?,
        }
        if let Some(n) = c.sparse {
            write!(f, " (fewer calls: {n} failures in a row)")?;
        }
        if let Some(n) = c.consecutive {
            write!(f, " or after {n} failures in a row")?;
        }
        if let Some(d) = c.slow_call {
            write!(f, ", a call slower than {} counting as failed", Spoken(d))?;
        }
        write!(f, "; open {}", Spoken(Duration::from_nanos(c.open_ns)))?;
        if c.jitter_ppm > 0 {
            write!(f, " + up to {}", Percent(c.jitter_ppm))?;
        }
        let s = if c.probes == 1 { "" } else { "s" };
        write!(f, ", then {} probe{s}", c.probes)
    }
}

impl Default for Breaker {
    /// 50 % over 10 s with at least 20 calls (below that, 5 failures in a
    /// row), open 5 s (+ up to 20 %), one probe.
    fn default() -> Self {
        BreakerConfig::default().build_unchecked()
    }
}

impl Breaker {
    /// Validates `config` and builds the breaker; the error names the first
    /// bad field (see [`BreakerConfig`] for an example).
    pub fn new(config: BreakerConfig) -> Result<Self, ConfigError> {
        config.build()
    }

    pub(crate) fn from_config(cfg: Config, observer: Option<Arc<dyn Observer>>) -> Self {
        let width = Duration::from_nanos(nanos(cfg.window) / BUCKETS as u64);
        Breaker {
            inner: Arc::new(Inner {
                state: Padded(AtomicU64::new(word(CLOSED, 0, 0, 0))),
                time: Timebase::new(width),
                window: Window::new(),
                ring: cfg.count_window.map(CountRing::new),
                consecutive: Padded(AtomicU32::new(0)),
                observer,
                cfg,
            }),
        }
    }

    /// The state the next call would meet now: an open breaker whose open
    /// period has ended is `HalfOpen` (the next call is its probe) even
    /// before any call arrives, so an idle client does not look open. Reads
    /// the monotonic clock; [`state_at`](Breaker::state_at) takes the time.
    pub fn state(&self) -> BreakerState {
        self.state_at(Instant::now())
    }

    /// The state the next call would meet at `now` (see
    /// [`state`](Breaker::state)).
    ///
    /// ```
    /// use stagger::guardrails::BreakerState;
    /// use stagger::{Breaker, Failure, Outcome};
    /// use stagger::guardrails::BreakerConfig;
    /// use std::time::{Duration, Instant};
    ///
    /// let b = Breaker::new(BreakerConfig {
    ///     consecutive_failures: Some(1),
    ///     open_jitter: 0.0,
    ///     ..Default::default()
    /// })?;
    /// let t0 = Instant::now();
    /// let permit = b.acquire(t0).unwrap();
    /// b.record(permit, &Outcome::Failure(Failure::transient()), None, t0);
    /// assert_eq!(b.state_at(t0), BreakerState::Open);
    /// // Nobody called for a minute: the next call would be let through as a probe.
    /// assert_eq!(b.state_at(t0 + Duration::from_secs(60)), BreakerState::HalfOpen);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn state_at(&self, now: Instant) -> BreakerState {
        let w = self.inner.state.load(Acquire);
        view(w, || self.inner.time.nanos(now))
    }

    /// An operator's hand on the breaker: disable it, let it only count,
    /// force it open, close and reset it, or open it for a while. Returns
    /// the state it is left in. The breaker's observer sees the change as
    /// a [`BreakerStateChanged`](Event::BreakerStateChanged) event.
    ///
    /// Every transition starts a new period: outcomes of calls admitted
    /// before it change nothing, and a half-open probe still in flight
    /// loses its slot. [`CloseAndReset`](Transition::CloseAndReset) is also
    /// the way back from a forced state to automatic behaviour, from clean
    /// counts. To drive many breakers at once, attach them to a
    /// [`BreakerControl`].
    ///
    /// ```
    /// use stagger::guardrails::{BreakerState, Transition};
    /// use stagger::{Breaker, Outcome};
    /// use std::time::{Duration, Instant};
    ///
    /// let breaker = Breaker::default();
    /// let now = Instant::now();
    /// assert_eq!(breaker.transition(Transition::ForceOpen, now), BreakerState::ForcedOpen);
    /// assert!(breaker.acquire(now).is_err(), "isolated until released");
    /// breaker.transition(Transition::CloseAndReset, now);
    /// let permit = breaker.acquire(now).unwrap();
    /// breaker.record(permit, &Outcome::Success, None, now);
    ///
    /// // Open for a minute, then half-open as usual.
    /// breaker.transition(Transition::OpenFor(Duration::from_secs(60)), now);
    /// assert_eq!(breaker.state_at(now + Duration::from_secs(61)), BreakerState::HalfOpen);
    /// ```
    pub fn transition(&self, to: Transition, now: Instant) -> BreakerState {
        self.inner.force(to, now).1
    }

    /// Half-open probes currently admitted and not yet reported.
    pub fn probes_in_flight(&self) -> u32 {
        let w = self.inner.state.load(Acquire);
        if state_of(w) == HALF_OPEN {
            in_flight(w) as u32
        } else {
            0
        }
    }

    /// `(calls, failures)` in the active window at `now` (the count ring's
    /// when one is configured).
    pub fn counts(&self, now: Instant) -> (u64, u64) {
        self.inner.counts(now)
    }

    /// Admits a call, or refuses it with when to come back. Emits a state
    /// change when an open period has ended and this call becomes a probe.
    #[inline]
    pub fn acquire(&self, now: Instant) -> Result<Permit, BreakerOpen> {
        self.inner.admit(now, None)
    }

    /// Records the outcome of a call admitted with `permit`, with its
    /// latency when known (for the slow-call rule).
    #[inline]
    pub fn record(
        &self,
        permit: Permit,
        outcome: &Outcome,
        latency: Option<Duration>,
        now: Instant,
    ) {
        self.inner.record(permit, outcome, latency, now, None);
    }

    /// Gives back a permit whose call will never report (it was dropped):
    /// frees its half-open slot without counting an outcome.
    pub fn release(&self, permit: Permit, now: Instant) {
        self.inner.finish_probe(permit, Verdict::Neutral, now, None);
    }

    pub(crate) fn admit_with(
        &self,
        now: Instant,
        extra: Option<&dyn Observer>,
    ) -> Result<Permit, BreakerOpen> {
        self.inner.admit(now, extra)
    }

    pub(crate) fn record_with(
        &self,
        permit: Permit,
        outcome: &Outcome,
        latency: Option<Duration>,
        now: Instant,
        extra: Option<&dyn Observer>,
    ) {
        self.inner.record(permit, outcome, latency, now, extra);
    }

    pub(crate) fn release_with(&self, permit: Permit, now: Instant, extra: Option<&dyn Observer>) {
        self.inner
            .finish_probe(permit, Verdict::Neutral, now, extra);
    }

    /// How long the breaker will still be open at `at`, if it is open then.
    #[inline]
    pub(crate) fn open_at(&self, at: Instant) -> Option<Duration> {
        let w = self.inner.state.load(Acquire);
        if state_of(w) == FORCED && in_flight(w) == FORCED_OPEN {
            return Some(self.inner.forced_retry_in());
        }
        if state_of(w) != OPEN {
            return None;
        }
        let t = self.inner.time.nanos(at);
        (t < until_ns(w)).then(|| Duration::from_nanos(until_ns(w) - t))
    }
}

/// The state a word shows at the time `now_ns` gives (read only when it
/// matters: an open period may have ended).
#[inline]
fn view(w: u64, now_ns: impl FnOnce() -> u64) -> BreakerState {
    match state_of(w) {
        CLOSED => BreakerState::Closed,
        FORCED => match in_flight(w) {
            DISABLED => BreakerState::Disabled,
            METRICS_ONLY => BreakerState::MetricsOnly,
            _ => BreakerState::ForcedOpen,
        },
        OPEN if now_ns() < until_ns(w) => BreakerState::Open,
        _ => BreakerState::HalfOpen,
    }
}

impl Inner {
    /// Applies an operator's transition; returns the states before and
    /// after.
    fn force(&self, to: Transition, now: Instant) -> (BreakerState, BreakerState) {
        let now_ns = self.time.nanos(now);
        let mut w = self.state.load(Acquire);
        loop {
            let gen = gen_of(w) + 1;
            let new = match to {
                Transition::Disable => word(FORCED, DISABLED, gen, 0),
                Transition::MetricsOnly => word(FORCED, METRICS_ONLY, gen, 0),
                Transition::ForceOpen => word(FORCED, FORCED_OPEN, gen, 0),
                Transition::CloseAndReset => word(CLOSED, 0, gen, 0),
                Transition::OpenFor(d) => word(OPEN, 0, gen, now_ns.saturating_add(nanos(d))),
            };
            match self.state.compare_exchange(w, new, AcqRel, Acquire) {
                Ok(_) => {
                    if matches!(to, Transition::CloseAndReset | Transition::MetricsOnly) {
                        // A new period judged from clean counts; only an
                        // outcome racing this very transition may slip in.
                        self.clear_counts();
                    }
                    let (from, to) = (view(w, || now_ns), view(new, || now_ns));
                    if from != to {
                        self.emit(from, to, None);
                    }
                    return (from, to);
                }
                Err(seen) => w = seen,
            }
        }
    }

    fn emit(&self, from: BreakerState, to: BreakerState, extra: Option<&dyn Observer>) {
        self.emit_event(&Event::BreakerStateChanged { from, to }, extra);
    }

    fn emit_event(&self, event: &Event, extra: Option<&dyn Observer>) {
        if let Some(o) = &self.observer {
            o.on_event(event);
        }
        if let Some(o) = extra {
            o.on_event(event);
        }
    }

    /// Forgets every counted outcome and the run of failures.
    fn clear_counts(&self) {
        self.window.clear();
        if let Some(ring) = &self.ring {
            ring.clear();
        }
        self.consecutive.store(0, Relaxed);
    }

    /// What a forced-open breaker tells a refused call: nothing will
    /// change by itself, so come back after one open period.
    fn forced_retry_in(&self) -> Duration {
        Duration::from_nanos(self.cfg.open_ns)
    }

    /// Admission in a state an operator set: no clock read, no write.
    #[inline]
    fn admit_forced(&self, w: u64) -> Result<Permit, BreakerOpen> {
        if in_flight(w) == FORCED_OPEN {
            return Err(BreakerOpen {
                retry_in: self.forced_retry_in(),
            });
        }
        Ok(Permit {
            gen: gen_of(w) as u16,
            probe: false,
        })
    }

    fn counts(&self, now: Instant) -> (u64, u64) {
        match &self.ring {
            Some(ring) => ring.counts(),
            None => {
                let e = self.time.epoch(now);
                let good = self.window.total(e, 0);
                let bad = self.window.total(e, 1);
                (good.saturating_add(bad), bad)
            }
        }
    }

    /// When an open period starting at `now_ns` in generation `gen` ends.
    fn open_until(&self, now_ns: u64, gen: u64) -> u64 {
        let c = &self.cfg;
        let draw = splitmix64(c.seed ^ (gen << 48) ^ now_ns) >> 32;
        let extra =
            u128::from(c.open_ns) * u128::from(c.jitter_ppm) * u128::from(draw) / (PPM << 32);
        now_ns
            .saturating_add(c.open_ns)
            .saturating_add(extra as u64)
    }

    #[inline]
    fn admit(&self, now: Instant, extra: Option<&dyn Observer>) -> Result<Permit, BreakerOpen> {
        let w = self.state.load(Acquire);
        if state_of(w) == CLOSED {
            return Ok(Permit {
                gen: gen_of(w) as u16,
                probe: false,
            });
        }
        if state_of(w) == FORCED {
            return self.admit_forced(w);
        }
        self.admit_slow(w, now, extra)
    }

    #[cold]
    fn admit_slow(
        &self,
        mut w: u64,
        now: Instant,
        extra: Option<&dyn Observer>,
    ) -> Result<Permit, BreakerOpen> {
        let now_ns = self.time.nanos(now);
        let deadline = now_ns.saturating_add(self.cfg.probe_timeout_ns);
        loop {
            let gen = gen_of(w);
            let (new, from_open) = match state_of(w) {
                CLOSED => {
                    return Ok(Permit {
                        gen: gen as u16,
                        probe: false,
                    })
                }
                FORCED => return self.admit_forced(w),
                OPEN if now_ns < until_ns(w) => {
                    return Err(BreakerOpen {
                        retry_in: Duration::from_nanos(until_ns(w) - now_ns),
                    })
                }
                OPEN => (word(HALF_OPEN, 1, gen + 1, deadline), true),
                _ if in_flight(w) < self.cfg.probes => {
                    (word(HALF_OPEN, in_flight(w) + 1, gen, deadline), false)
                }
                // Every slot is taken and none reported in time: reclaim them.
                // A new generation, so the permits of the reclaimed probes
                // are stale: their late outcomes or releases change nothing.
                _ if now_ns >= until_ns(w) => (word(HALF_OPEN, 1, gen + 1, deadline), false),
                _ => {
                    return Err(BreakerOpen {
                        retry_in: Duration::from_nanos(until_ns(w) - now_ns),
                    })
                }
            };
            match self.state.compare_exchange(w, new, AcqRel, Acquire) {
                Ok(_) => {
                    if from_open {
                        self.emit(BreakerState::Open, BreakerState::HalfOpen, extra);
                    }
                    return Ok(Permit {
                        gen: gen_of(new) as u16,
                        probe: true,
                    });
                }
                Err(seen) => w = seen,
            }
        }
    }

    #[inline]
    fn verdict(&self, outcome: &Outcome, latency: Option<Duration>) -> Verdict {
        let slow = match (self.cfg.slow_call, latency) {
            (Some(limit), Some(l)) => l > limit,
            _ => false,
        };
        match outcome {
            Outcome::Failure(f) if f.class == Class::Cancelled => Verdict::Neutral,
            Outcome::Failure(f) if f.counts_against_dependency() => Verdict::Bad,
            _ if slow => Verdict::Bad,
            _ => Verdict::Good,
        }
    }

    #[inline]
    fn record(
        &self,
        permit: Permit,
        outcome: &Outcome,
        latency: Option<Duration>,
        now: Instant,
        extra: Option<&dyn Observer>,
    ) {
        let verdict = self.verdict(outcome, latency);
        if permit.probe {
            return self.finish_probe(permit, verdict, now, extra);
        }
        if verdict == Verdict::Neutral {
            return;
        }
        let w = self.state.load(Acquire);
        if gen_of(w) != u64::from(permit.gen) {
            return; // admitted in an earlier period
        }
        let shadow = match state_of(w) {
            CLOSED => false,
            FORCED if in_flight(w) == METRICS_ONLY => true,
            _ => return, // disabled or forced open: nothing is counted
        };
        let bad = verdict == Verdict::Bad;
        let epoch = match &self.ring {
            Some(ring) => {
                ring.push(bad);
                0
            }
            None => {
                let e = self.time.epoch(now);
                self.window.add(e, usize::from(bad), 1);
                e
            }
        };
        let counts_runs = self.cfg.consecutive.is_some() || self.cfg.sparse.is_some();
        if !bad {
            if counts_runs && self.consecutive.load(Relaxed) != 0 {
                self.consecutive.store(0, Relaxed);
            }
            return;
        }
        let run = if counts_runs {
            self.consecutive.fetch_add(1, AcqRel).saturating_add(1)
        } else {
            0
        };
        let mut trip = self.cfg.consecutive.is_some_and(|n| run >= n);
        if !trip {
            let (calls, failures) = match &self.ring {
                Some(ring) => ring.counts(),
                None => {
                    let bad = self.window.total(epoch, 1);
                    (bad.saturating_add(self.window.total(epoch, 0)), bad)
                }
            };
            trip = if calls >= self.cfg.min_calls {
                u128::from(failures) * PPM
                    >= u128::from(self.cfg.failure_rate_ppm) * u128::from(calls)
            } else {
                // Too few calls for a rate: judge on the run of failures.
                self.cfg.sparse.is_some_and(|n| run >= n)
            };
        }
        if trip && shadow {
            // It would open: say so, and judge afresh from clean counts.
            let next = word(FORCED, METRICS_ONLY, gen_of(w) + 1, 0);
            if self
                .state
                .compare_exchange(w, next, AcqRel, Acquire)
                .is_ok()
            {
                self.clear_counts();
                self.emit_event(&Event::BreakerWouldOpen, extra);
            }
        } else if trip {
            let now_ns = self.time.nanos(now);
            let gen = gen_of(w) + 1;
            let open = word(OPEN, 0, gen, self.open_until(now_ns, gen));
            if self
                .state
                .compare_exchange(w, open, AcqRel, Acquire)
                .is_ok()
            {
                self.emit(BreakerState::Closed, BreakerState::Open, extra);
            }
        }
    }

    fn finish_probe(
        &self,
        permit: Permit,
        verdict: Verdict,
        now: Instant,
        extra: Option<&dyn Observer>,
    ) {
        if !permit.probe {
            return;
        }
        let mut w = self.state.load(Acquire);
        let mut cleared = false;
        loop {
            if state_of(w) != HALF_OPEN || gen_of(w) != u64::from(permit.gen) {
                return; // another probe already decided this period
            }
            let gen = gen_of(w);
            let (new, to) = match verdict {
                Verdict::Neutral => (
                    word(HALF_OPEN, in_flight(w).saturating_sub(1), gen, until_ns(w)),
                    None,
                ),
                Verdict::Good => {
                    if !cleared {
                        // Cleared before closing: nothing can record into
                        // the window while the breaker is half-open.
                        self.clear_counts();
                        cleared = true;
                    }
                    (word(CLOSED, 0, gen + 1, 0), Some(BreakerState::Closed))
                }
                Verdict::Bad => {
                    let until = self.open_until(self.time.nanos(now), gen + 1);
                    (word(OPEN, 0, gen + 1, until), Some(BreakerState::Open))
                }
            };
            match self.state.compare_exchange(w, new, AcqRel, Acquire) {
                Ok(_) => {
                    if let Some(to) = to {
                        self.emit(BreakerState::HalfOpen, to, extra);
                    }
                    return;
                }
                Err(seen) => w = seen,
            }
        }
    }
}
