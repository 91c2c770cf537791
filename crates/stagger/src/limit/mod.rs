//! Concurrency limits for servers: how much work to take on, learned from
//! the latency of the work already taken.
//!
//! Clients alone cannot break a retry storm once a server's queue is full of
//! requests whose callers have given up: every answer comes too late, every
//! late answer causes a retry, and the queue never drains. A server breaks
//! that loop by taking on no more than it can finish in time and answering
//! the rest at once. A fixed limit has to be guessed and goes stale when the
//! service gets slower; an adaptive one follows what the server measures.
//!
//! A [`Limiter`] admits a request while fewer than its limit are in flight,
//! and keeps a share of the limit for first attempts
//! ([`reserve`](LimiterBuilder::reserve)): under load, retries are shed
//! before first attempts, so the callers who have not yet failed are the
//! ones served. Three ways to set the limit ([`Algorithm`]):
//!
//! | algorithm | the limit | defaults |
//! |---|---|---|
//! | `static:N` ([`Algorithm::Fixed`]) | N, always | — |
//! | `aimd` ([`Aimd`]) | +1/limit per answer in time while at least half of it is used; ×`backoff` on an overloaded answer (late, dropped, or slower than a threshold), at most once per round trip | 20, between 1 and 1000, backoff 0.9 |
//! | `gradient` ([`Gradient`]) | `limit·g + √limit`, smoothed, with `g = clamp(tolerance · long ÷ short, 0.5, 1)` of a long-term and a short-term latency average; the long-term one is reset at jittered intervals to the lowest short-term latency seen since the last reset (a re-probe of the no-load latency) | 20, between 4 and 1000, tolerance 2 |
//!
//! With request priorities, [`Limiter::try_acquire_as`] admits by the
//! shedding order of [`Ceilings`]: the lowest
//! level first, each level keeping a guaranteed share. Beside the limit, a
//! [`CpuTrigger`] sheds when the process's CPU runs above a threshold,
//! with a [`CpuController`] that moves its shed rate smoothly.
//!
//! The limiter is sans-IO: it takes `now` and the facts (was this a retry,
//! how did the work end) and never reads a clock itself, so the simulator
//! drives the same code in virtual time. Its state is a few atomics behind
//! an `Arc`, updated with compare-and-swap: no lock and no allocation per
//! request. The server layer that uses it is `tower::ShedLayer` (feature
//! `tower`); `docs/behaviour.md` §13 states the behaviour.
//!
//! ```
//! use stagger::limit::{Algorithm, Completion, Limiter};
//! use std::time::{Duration, Instant};
//!
//! // At most 5 in flight; one place is kept for first attempts.
//! let limiter = Limiter::builder(Algorithm::Fixed(5)).reserve(0.2).build()?;
//! let now = Instant::now();
//! let mut held = Vec::new();
//! for _ in 0..4 {
//!     held.push(limiter.try_acquire(true, now).expect("retries may use 4 places"));
//! }
//! assert!(limiter.try_acquire(true, now).is_err(), "the fifth is kept for first attempts");
//! let first = limiter.try_acquire(false, now).expect("a first attempt gets it");
//! assert!(limiter.try_acquire(false, now).is_err(), "full");
//! limiter.release(first, Completion::Served, now + Duration::from_millis(5));
//! assert_eq!(limiter.in_flight(), 4);
//! # for t in held { limiter.release(t, Completion::Cancelled, now); }
//! # Ok::<(), stagger::ConfigError>(())
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guardrails::sync::{AtomicU64, Ordering, Padded};
use crate::outcome::error::ConfigError;
use crate::priority::{Ceilings, Class};

mod aimd;
mod cpu;
mod gradient;

#[cfg(all(test, loom))]
mod loom;

pub use aimd::Aimd;
pub use cpu::{CpuController, CpuTrigger, CpuTriggerBuilder};
pub use gradient::Gradient;

/// The limit is kept in thousandths so AIMD's `+1/limit` accumulates.
const MILLI: u64 = 1000;

/// How a [`Limiter`] sets its limit.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Algorithm {
    /// A fixed limit (at least 1): `static:N`.
    Fixed(u32),
    /// Additive increase, multiplicative decrease: `aimd`.
    Aimd(Aimd),
    /// The latency gradient: `gradient`.
    Gradient(Gradient),
}

impl From<Aimd> for Algorithm {
    fn from(a: Aimd) -> Self {
        Algorithm::Aimd(a)
    }
}

impl From<Gradient> for Algorithm {
    fn from(g: Gradient) -> Self {
        Algorithm::Gradient(g)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Algorithm::Fixed(n) => write!(f, "static:{n}"),
            Algorithm::Aimd(_) => f.write_str("aimd"),
            Algorithm::Gradient(_) => f.write_str("gradient"),
        }
    }
}

/// Parses `static:N`, `aimd` or `gradient` (the last two with their
/// defaults).
///
/// ```
/// use stagger::limit::Algorithm;
/// assert_eq!("static:64".parse::<Algorithm>().unwrap(), Algorithm::Fixed(64));
/// assert_eq!("aimd".parse::<Algorithm>().unwrap().to_string(), "aimd");
/// assert!("static:0".parse::<Algorithm>().is_err());
/// ```
impl FromStr for Algorithm {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.trim() {
            "aimd" => Ok(Aimd::new().into()),
            "gradient" => Ok(Gradient::new().into()),
            other => match other.strip_prefix("static:").map(str::parse::<u32>) {
                Some(Ok(n)) if n >= 1 => Ok(Algorithm::Fixed(n)),
                Some(_) => Err(ConfigError::new(
                    "limit",
                    format!("`{other}`: static:N needs a whole number N of at least 1"),
                )),
                None => Err(ConfigError::new(
                    "limit",
                    format!("unknown limit `{other}` (expected static:N, aimd or gradient)"),
                )),
            },
        }
    }
}

/// Configures a [`Limiter`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimiterBuilder {
    algorithm: Algorithm,
    reserve: f64,
    seed: Option<u64>,
}

impl LimiterBuilder {
    /// The share of the limit only first attempts may use (default 0.2):
    /// a retry is admitted while fewer than `limit − ⌊limit · share⌋` are in
    /// flight, a first attempt while fewer than `limit`. 0 treats retries
    /// like first attempts; below 1 (a share of 1 would shed every retry).
    pub fn reserve(mut self, share: f64) -> Self {
        self.reserve = share;
        self
    }

    /// Seeds the limiter's own jitter (the gradient's re-probe times), for a
    /// replayable simulation. Default: a fresh random seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The limiter, or the first setting that is out of range.
    pub fn build(self) -> Result<Limiter, ConfigError> {
        if !(0.0..1.0).contains(&self.reserve) {
            return Err(ConfigError::new(
                "reserve",
                format!("{} is not a share in [0, 1)", self.reserve),
            ));
        }
        let (initial, algo) = match self.algorithm {
            Algorithm::Fixed(0) => {
                return Err(ConfigError::new(
                    "limit",
                    "a static limit must be at least 1",
                ))
            }
            Algorithm::Fixed(n) => (n, Algo::Fixed),
            Algorithm::Aimd(a) => {
                a.validate()?;
                (a.initial, Algo::Aimd(aimd::State::new(a)))
            }
            Algorithm::Gradient(g) => {
                g.validate()?;
                let seed = self.seed.unwrap_or_else(|| {
                    crate::random::RandomSource::next_u64(&mut crate::random::FastRng::fresh())
                });
                (g.initial, Algo::Gradient(gradient::State::new(g, seed)))
            }
        };
        Ok(Limiter {
            inner: Arc::new(Inner {
                in_flight: Padded(AtomicU64::new(0)),
                limit: AtomicU64::new(u64::from(initial) * MILLI),
                reserve_ppm: (self.reserve * 1e6).round() as u64,
                algo,
            }),
        })
    }
}

/// A concurrency limit shared by every request of a server: a cheap
/// [`Clone`] handle, lock-free, no allocation per request. See the
/// [module](self) for the rules.
///
/// The protocol: [`try_acquire`](Self::try_acquire) when a request arrives
/// (a refusal is a [`Shed`]: answer at once, with a hint to come back
/// later); when the admitted work ends, [`release`](Self::release) its
/// [`Token`] with how it ended. A token never released holds its place
/// forever, so a driver releases on every path (the tower layer does it
/// when the response future is dropped).
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    in_flight: Padded<AtomicU64>,
    /// The current limit, in thousandths.
    limit: AtomicU64,
    reserve_ppm: u64,
    algo: Algo,
}

enum Algo {
    Fixed,
    Aimd(aimd::State),
    Gradient(gradient::State),
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let algo = match self.inner.algo {
            Algo::Fixed => "static",
            Algo::Aimd(_) => "aimd",
            Algo::Gradient(_) => "gradient",
        };
        f.debug_struct("Limiter")
            .field("algorithm", &algo)
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// A place in a [`Limiter`], held while the admitted work runs. Give it back
/// with [`Limiter::release`].
#[derive(Debug)]
#[must_use = "a token not released holds its place forever"]
pub struct Token {
    start: Instant,
    /// Requests in flight once this one was admitted (this one included).
    in_flight: u64,
}

/// A request the [`Limiter`] turned away: answer it at once (503 with a
/// jittered `Retry-After`, or gRPC UNAVAILABLE with a jittered
/// `grpc-retry-pushback-ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shed {
    /// Whether the request was a retry (retries are shed first).
    pub retry: bool,
}

/// How admitted work ended: the facts the limit learns from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Completion {
    /// Answered (whatever the answer) while its caller was still waiting.
    Served,
    /// A sign of overload: answered after the caller's deadline, or dropped
    /// because the deadline passed (work for nobody).
    Overloaded,
    /// Ended without saying anything about load (the caller hung up, the
    /// service failed before doing the work). Only gives the place back.
    Cancelled,
}

impl Limiter {
    /// A fixed limit of `n` (at least 1) with the default reserve:
    /// `Limiter::builder(Algorithm::Fixed(n)).build()`.
    pub fn fixed(n: u32) -> Self {
        Self::builder(Algorithm::Fixed(n.max(1)))
            .build()
            .unwrap_or_else(|_| unreachable!("a fixed limit of at least 1 is valid"))
    }

    /// Starts configuring a limiter of `algorithm` (an [`Algorithm`], an
    /// [`Aimd`] or a [`Gradient`]).
    pub fn builder(algorithm: impl Into<Algorithm>) -> LimiterBuilder {
        LimiterBuilder {
            algorithm: algorithm.into(),
            reserve: 0.2,
            seed: None,
        }
    }

    /// The current limit (whole requests, at least 1).
    pub fn limit(&self) -> u32 {
        let l = self.inner.limit.load(Ordering::Relaxed) / MILLI;
        l.clamp(1, u64::from(u32::MAX)) as u32
    }

    /// Requests admitted and not yet released.
    pub fn in_flight(&self) -> u32 {
        self.inner
            .in_flight
            .load(Ordering::Relaxed)
            .min(u64::from(u32::MAX)) as u32
    }

    /// The most requests of a kind that may be in flight for one more to be
    /// admitted: the whole limit for first attempts, the limit less the
    /// reserve for retries. From a limit of 2, a reserve above 0 keeps at
    /// least one place (rounding down would give retries the whole limit
    /// below 5 places at the default 20 %); a limit of 1 keeps none, so an
    /// idle server still serves a retry.
    fn admits(&self, retry: bool) -> u64 {
        let limit = u64::from(self.limit());
        if retry {
            let ppm = self.inner.reserve_ppm;
            let reserved = (limit * ppm / 1_000_000).max(u64::from(limit >= 2 && ppm > 0));
            limit - reserved
        } else {
            limit
        }
    }

    /// Admits a request arriving at `now` (`retry`: an inbound attempt
    /// number of 2 or more), or sheds it. The check and the increment are
    /// one compare-and-swap: two requests never both take the last place.
    pub fn try_acquire(&self, retry: bool, now: Instant) -> Result<Token, Shed> {
        self.take_below(self.admits(retry), retry, now)
    }

    /// Takes a place while fewer than `cap` are in flight: the check and
    /// the increment are one compare-and-swap.
    #[inline]
    fn take_below(&self, cap: u64, retry: bool, now: Instant) -> Result<Token, Shed> {
        match self
            .inner
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            }) {
            Ok(before) => Ok(Token {
                start: now,
                in_flight: before + 1,
            }),
            Err(_) => Err(Shed { retry }),
        }
    }

    /// Admits a request of `class` arriving at `now` under the shedding
    /// order of `ceilings`, or sheds it: it may take a place while fewer
    /// than its level's ceiling of the limit are in flight, a retry only
    /// up to the point inside its level's own share that this limiter's
    /// [`reserve`](LimiterBuilder::reserve) keeps for first attempts. So
    /// under load the lowest level is shed first and, within a level,
    /// retries before first attempts. One compare-and-swap, as
    /// [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use stagger::limit::Limiter;
    /// use stagger::priority::{Ceilings, Class, Priority};
    /// use std::time::Instant;
    ///
    /// let limiter = Limiter::fixed(10);
    /// let ceilings = Ceilings::default(); // sheddable may fill 60 %
    /// let now = Instant::now();
    /// let crawler = Class::new(Priority::SHEDDABLE, false);
    /// let held: Vec<_> = (0..6).map(|_| limiter.try_acquire_as(crawler, &ceilings, now).unwrap()).collect();
    /// assert!(limiter.try_acquire_as(crawler, &ceilings, now).is_err());
    /// let checkout = Class::new(Priority::CRITICAL, false);
    /// assert!(limiter.try_acquire_as(checkout, &ceilings, now).is_ok(), "room kept above");
    /// ```
    pub fn try_acquire_as(
        &self,
        class: Class,
        ceilings: &Ceilings,
        now: Instant,
    ) -> Result<Token, Shed> {
        let cap = ceilings.cap_ppm(u64::from(self.limit()), class, self.inner.reserve_ppm);
        self.take_below(cap, class.retry, now)
    }

    /// Gives `token`'s place back at `now` and lets the limit learn from how
    /// the work ended and how long it took (from admission to `now`).
    pub fn release(&self, token: Token, how: Completion, now: Instant) {
        let before = self.inner.in_flight.fetch_sub(1, Ordering::AcqRel);
        if how == Completion::Cancelled {
            return;
        }
        let sample = Sample {
            admitted: token.start,
            rtt: now.saturating_duration_since(token.start),
            // The most in flight the work is known to have seen: at its
            // admission or at its end.
            busy: before.max(token.in_flight),
            how,
            now,
        };
        match &self.inner.algo {
            Algo::Fixed => {}
            Algo::Aimd(s) => s.on_sample(&self.inner.limit, &sample),
            Algo::Gradient(s) => s.on_sample(&self.inner.limit, &sample),
        }
    }
}

/// What a finished piece of work tells the limit.
struct Sample {
    admitted: Instant,
    rtt: Duration,
    /// Requests in flight while it ran (itself included), at least.
    busy: u64,
    how: Completion,
    now: Instant,
}

/// The round-trip rule of a decrease: only work admitted after the last
/// decrease may cause the next, so a burst of late answers from one
/// overload counts once, not once per answer.
#[derive(Default)]
struct OncePerRoundTrip {
    origin: crate::guardrails::sync::Origin,
    /// When the limit was last cut, in nanoseconds from the origin (+1, so
    /// 0 means never).
    last: AtomicU64,
}

impl OncePerRoundTrip {
    /// Whether work admitted at `admitted` and ending at `now` may cut the
    /// limit; if so, `now` becomes the last cut.
    fn claim(&self, admitted: Instant, now: Instant) -> bool {
        let admitted = self.origin.nanos(admitted).saturating_add(1);
        let at = self.origin.nanos(now).saturating_add(1);
        self.last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                (admitted > last).then_some(at)
            })
            .is_ok()
    }
}

/// Checks a limiter's range: `min` at least 1, `max` not below it, and
/// `initial` inside it; the error names the field.
fn check_range(min: u32, max: u32, initial: u32) -> Result<(), ConfigError> {
    if min == 0 {
        return Err(ConfigError::new(
            "min",
            "the smallest limit must be at least 1",
        ));
    }
    if max < min {
        return Err(ConfigError::new(
            "max",
            format!("{max} is below the smallest limit {min}"),
        ));
    }
    if !(min..=max).contains(&initial) {
        return Err(ConfigError::new(
            "initial",
            format!("{initial} is outside {min}..={max}"),
        ));
    }
    Ok(())
}

/// Applies `f` to the limit (in thousandths) with compare-and-swap, keeping
/// it within `[min, max]` whole requests.
fn update_limit(limit: &AtomicU64, min: u32, max: u32, f: impl Fn(f64) -> f64) {
    let (lo, hi) = (u64::from(min) * MILLI, u64::from(max) * MILLI);
    let _ = limit.fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
        let next = f(l as f64 / MILLI as f64) * MILLI as f64;
        let next = if next.is_finite() { next as u64 } else { l };
        Some(next.clamp(lo, hi))
    });
}

/// A duration in nanoseconds as the gradient averages it.
fn nanos(d: Duration) -> u64 {
    crate::guardrails::sync::nanos(d).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_shed_before_first_attempts() {
        let l = Limiter::builder(Algorithm::Fixed(10))
            .reserve(0.3)
            .build()
            .unwrap();
        let now = Instant::now();
        let mut held: Vec<Token> = (0..7).map(|_| l.try_acquire(true, now).unwrap()).collect();
        assert_eq!(l.try_acquire(true, now).unwrap_err(), Shed { retry: true });
        held.extend((0..3).map(|_| l.try_acquire(false, now).unwrap()));
        assert_eq!(
            l.try_acquire(false, now).unwrap_err(),
            Shed { retry: false }
        );
        assert_eq!(l.in_flight(), 10);
        for t in held {
            l.release(t, Completion::Served, now);
        }
        assert_eq!(l.in_flight(), 0);
    }

    #[test]
    fn retries_stop_below_first_attempts_at_small_limits() {
        // 2 to 4 places at the default 20 % reserve rounded to 0 reserved,
        // so retries could take every place first attempts could.
        for n in 2..=12u32 {
            let l = Limiter::fixed(n);
            assert!(l.admits(true) < l.admits(false), "limit {n}");
            assert_eq!(l.admits(false), u64::from(n));
        }
        let none = Limiter::builder(Algorithm::Fixed(4))
            .reserve(0.0)
            .build()
            .unwrap();
        assert_eq!(none.admits(true), 4, "no reserve asked, none kept");
    }

    #[test]
    fn a_small_limit_still_admits_a_retry_when_idle() {
        // ⌊1 · 0.2⌋ = 0 places reserved: an idle server serves a retry.
        let l = Limiter::fixed(1);
        let t = l.try_acquire(true, Instant::now()).unwrap();
        assert!(l.try_acquire(false, Instant::now()).is_err());
        l.release(t, Completion::Cancelled, Instant::now());
    }

    #[test]
    fn bad_settings_name_their_field() {
        let e = Limiter::builder(Algorithm::Fixed(3))
            .reserve(1.0)
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "reserve");
        assert_eq!(
            Limiter::builder(Algorithm::Fixed(0))
                .build()
                .unwrap_err()
                .field(),
            "limit"
        );
        assert_eq!(
            Limiter::builder(Aimd {
                backoff: 1.5,
                ..Aimd::new()
            })
            .build()
            .unwrap_err()
            .field(),
            "backoff"
        );
        assert_eq!(
            Limiter::builder(Gradient {
                min: 10,
                max: 5,
                ..Gradient::new()
            })
            .build()
            .unwrap_err()
            .field(),
            "max"
        );
        for bad in ["static:", "static:x", "static:0", "fifo", ""] {
            let e = bad.parse::<Algorithm>().unwrap_err();
            assert_eq!(e.field(), "limit", "{bad}");
        }
        assert_eq!(
            "gradient".parse::<Algorithm>().unwrap().to_string(),
            "gradient"
        );
    }
}
