//! Client-side adaptive throttling (Google SRE book, "Handling Overload").

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guardrails::budget::thousandths;
use crate::guardrails::sync::nanos;
use crate::guardrails::window::{Timebase, Window};
use crate::outcome::error::ConfigError;
use crate::outcome::Outcome;
use crate::random::RandomSource;

const BUCKETS: usize = if cfg!(loom) { 2 } else { 12 };
const REQUESTS: usize = 0;
const ACCEPTS: usize = 1;

/// Client-side adaptive throttling (Google SRE book, "Handling Overload").
///
/// A budget limits retries; when a backend is overloaded even first
/// attempts are too many, and a rejection still costs it work. Adaptive
/// throttling has every client shed its own load: over a sliding window
/// (2 minutes) the client counts the requests it attempted and the ones the
/// backend accepted, and rejects a new request locally with probability
///
/// ```text
/// max(0, (requests − K · accepts) / (requests + 1))      K = 2
/// ```
///
/// While the backend accepts at least half of what is sent, nothing is
/// rejected; past that, the client sends roughly `K · accepts` and drops the
/// rest without a round trip. It applies to every attempt, first attempts
/// included; the stop reason is `throttled`.
///
/// The random draw comes from the caller's own stream (the engine passes the
/// call's), never from a generator shared between calls; counts live in
/// per-thread stripes of a bucketed window, and the arithmetic is in
/// integers.
///
/// ```
/// use stagger::{Class, Outcome, Throttle};
/// use stagger::random::FastRng;
/// use std::time::Instant;
///
/// let throttle = Throttle::default();
/// let mut rng = FastRng::seeded(7);
/// let now = Instant::now();
/// // The backend accepts everything: nothing is ever rejected.
/// for _ in 0..100 {
///     assert!(throttle.admit(&mut rng, now));
///     throttle.record(&Outcome::Success, now);
/// }
/// // Now it rejects everything: the client starts shedding.
/// let mut admitted = 0;
/// for _ in 0..1_000 {
///     if throttle.admit(&mut rng, now) {
///         admitted += 1;
///         throttle.record(&Outcome::from(Class::Transient), now);
///     }
/// }
/// // The first 100 are free (2 × 100 accepts); after that it sheds more and
/// // more: about 440 of the 1 000 go out, and now ~82 % are dropped.
/// assert!((350..550).contains(&admitted), "{admitted}");
/// assert!(throttle.reject_probability(now) > 0.8);
/// ```
///
/// Adaptive throttling (docs/behaviour.md §7). Cheap to clone; clones share the counts.
///
/// ```
/// use stagger::Throttle;
/// use stagger::random::FastRng;
/// use std::time::Instant;
///
/// let throttle = Throttle::default();
/// assert!(throttle.admit(&mut FastRng::seeded(1), Instant::now()));
/// assert_eq!(throttle.counts(Instant::now()), (1, 0));
/// ```
#[derive(Clone)]
pub struct Throttle {
    inner: Arc<Inner>,
}

struct Inner {
    k_milli: u64,
    window: Duration,
    time: Timebase,
    counts: Window<BUCKETS, 2>,
}

impl fmt::Debug for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("k_milli", &self.inner.k_milli)
            .field("window", &self.inner.window)
            .finish()
    }
}

/// The settings in words, as a report prints them: "rejects locally with
/// probability (requests − 2·accepts) ÷ (requests + 1) over 2 min" for the
/// defaults.
///
/// ```
/// let said = stagger::Throttle::default().to_string();
/// assert!(said.contains("2·accepts") && said.ends_with("over 2 min"), "{said}");
/// ```
impl fmt::Display for Throttle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::outcome::describe::{Spoken, Trimmed};
        write!(
            f,
            "rejects locally with probability (requests − {}·accepts) ÷ (requests + 1) over {}",
            Trimmed(self.inner.k_milli as f64 / 1e3),
            Spoken(self.inner.window)
        )
    }
}

impl Default for Throttle {
    /// K = 2 over a 2-minute window.
    fn default() -> Self {
        ThrottleConfig::default().build_unchecked()
    }
}

/// Whether a draw rejects, given the counts: `draw / 2^64 < (requests −
/// K·accepts) / (requests + 1)`, in integers (32 bits of the draw).
#[inline]
pub(crate) fn rejects(requests: u64, accepts: u64, k_milli: u64, draw: u64) -> bool {
    let num =
        (u128::from(requests) * 1000).saturating_sub(u128::from(k_milli) * u128::from(accepts));
    if num == 0 {
        return false;
    }
    let den = (u128::from(requests) + 1) * 1000;
    u128::from(draw >> 32) * den < num << 32
}

impl Throttle {
    /// Validates `config` and builds the throttle; the error names the
    /// first bad field.
    ///
    /// ```
    /// use stagger::guardrails::ThrottleConfig;
    /// use stagger::Throttle;
    /// use std::time::Duration;
    /// let t = Throttle::new(ThrottleConfig { k: 1.5, window: Duration::from_secs(60) })?;
    /// # let _ = t;
    /// let bad = ThrottleConfig { k: 0.5, ..Default::default() };
    /// assert_eq!(Throttle::new(bad).unwrap_err().field(), "k");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new(config: ThrottleConfig) -> Result<Self, ConfigError> {
        config.build()
    }

    /// `(requests, accepts)` in the window ending at `now`.
    pub fn counts(&self, now: Instant) -> (u64, u64) {
        let i = &*self.inner;
        let e = i.time.epoch(now);
        (i.counts.total(e, REQUESTS), i.counts.total(e, ACCEPTS))
    }

    /// The probability that the next request is rejected locally.
    pub fn reject_probability(&self, now: Instant) -> f64 {
        let (requests, accepts) = self.counts(now);
        let k = self.inner.k_milli as f64 / 1000.0;
        ((requests as f64 - k * accepts as f64) / (requests as f64 + 1.0)).max(0.0)
    }

    /// Counts one request and decides, with a draw from `rng`, whether it
    /// may be sent (`true`) or is rejected locally (`false`).
    #[inline]
    pub fn admit<R: RandomSource + ?Sized>(&self, rng: &mut R, now: Instant) -> bool {
        let i = &*self.inner;
        let e = i.time.epoch(now);
        let requests = i.counts.total(e, REQUESTS);
        let accepts = i.counts.total(e, ACCEPTS);
        i.counts.add(e, REQUESTS, 1);
        // Cheap exit before drawing: nothing is rejected while accepts
        // keep up.
        if u128::from(requests) * 1000 <= u128::from(i.k_milli) * u128::from(accepts) {
            return true;
        }
        !rejects(requests, accepts, i.k_milli, rng.next_u64())
    }

    /// Records how a sent request ended: the backend accepted it unless it
    /// failed in a way that [counts against the
    /// dependency](crate::Failure::counts_against_dependency) (a transient,
    /// unknown or hint-only failure, or a server's "do not retry"), the one
    /// rule budgets and the breaker count by too. Other permanent errors and
    /// cancellations count as accepted: the backend did the work, or was
    /// never asked to stop.
    #[inline]
    pub fn record(&self, outcome: &Outcome, now: Instant) {
        let accepted = match outcome {
            Outcome::Success => true,
            Outcome::Failure(f) => !f.counts_against_dependency(),
        };
        if accepted {
            let i = &*self.inner;
            i.counts.add(i.time.epoch(now), ACCEPTS, 1);
        }
    }
}

/// The settings of a [`Throttle`], checked by [`Throttle::new`].
/// [`Default`] gives K = 2 over a 2-minute window.
#[derive(Debug, Clone, Copy)]
pub struct ThrottleConfig {
    /// The multiplier K, in `[1, 100]` (kept in thousandths): lower sheds
    /// earlier, higher wastes more backend work on rejections.
    pub k: f64,
    /// The sliding window, between 1 s and 1 hour; it moves in twelfths.
    pub window: Duration,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        ThrottleConfig {
            k: 2.0,
            window: Duration::from_secs(120),
        }
    }
}

impl ThrottleConfig {
    fn build(self) -> Result<Throttle, ConfigError> {
        thousandths("k", self.k, 1.0, 100.0)?;
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(3600) {
            return Err(ConfigError::new("window", "must be between 1 s and 1 hour"));
        }
        Ok(self.build_unchecked())
    }

    fn build_unchecked(self) -> Throttle {
        let width = Duration::from_nanos(nanos(self.window) / BUCKETS as u64);
        Throttle {
            inner: Arc::new(Inner {
                k_milli: thousandths("k", self.k, 1.0, 100.0).unwrap_or(2_000),
                window: self.window,
                time: Timebase::new(width),
                counts: Window::new(),
            }),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::random::FastRng;

    /// The empirical rejection rate of `rejects` matches the formula. With
    /// n = 200 000 draws the standard error is at most 0.0012; the
    /// tolerance is 5 sigma (0.006).
    #[test]
    fn rejection_rate_matches_the_formula() {
        let mut rng = FastRng::seeded(2024);
        for (requests, accepts) in [(100, 0), (100, 25), (100, 40), (1_000, 100), (10, 1)] {
            let p = ((requests as f64 - 2.0 * accepts as f64) / (requests as f64 + 1.0)).max(0.0);
            let n = 200_000;
            let hits = (0..n)
                .filter(|_| rejects(requests, accepts, 2_000, rng.next_u64()))
                .count();
            let rate = hits as f64 / n as f64;
            assert!(
                (rate - p).abs() < 0.006,
                "requests {requests} accepts {accepts}: {rate} vs {p}"
            );
        }
    }

    #[test]
    fn nothing_is_rejected_while_accepts_keep_up() {
        let mut rng = FastRng::seeded(1);
        for _ in 0..10_000 {
            assert!(!rejects(100, 50, 2_000, rng.next_u64()));
        }
        assert!(!rejects(0, 0, 2_000, u64::MAX));
    }
}
