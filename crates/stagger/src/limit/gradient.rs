//! The latency gradient: the limit follows how much slower recent work is
//! than the server's usual, with the usual re-learned now and then.

use std::time::Duration;

use super::{check_range, nanos, update_limit, Completion, OncePerRoundTrip, Sample};
use crate::guardrails::sync::{AtomicU64, Ordering, Origin};
use crate::outcome::error::ConfigError;
use crate::random::splitmix64;

/// The `gradient` limit (after Netflix's Gradient2). Two running averages
/// of the latency of finished work: a short-term one over about
/// [`short`](Self::short) samples and a long-term one over about
/// [`long`](Self::long). Their ratio is the gradient
/// `g = clamp(tolerance · long ÷ short, 0.5, 1)`: 1 while recent work is no
/// slower than `tolerance` times the usual, down to 0.5 as a queue builds.
/// Each sample moves the limit a [`smoothing`](Self::smoothing) share of
/// the way to `limit · g + √limit` (the square root is room for a small
/// queue), and it never grows while less than half of it is in use. Work
/// answered after its caller's deadline or dropped because the deadline
/// passed ([`Completion::Overloaded`](super::Completion::Overloaded))
/// counts as `g = 0.5` whatever the averages say — once per round trip,
/// as in [`Aimd`](super::Aimd), so a burst of late answers from one
/// overload does not collapse the limit.
///
/// The averages count samples, not seconds: at a high request rate the
/// long-term one catches up with a lasting queue within seconds, and after
/// it ends stays high for as long, blind to the next queue. So at jittered
/// intervals (`probe` × U(0.5,
/// 1.5), default 5 s), it is reset to the no-load latency as last seen:
/// the lowest short-term average since the previous reset.
///
/// A plain value: set its public fields over [`Gradient::new`]'s defaults
/// (start at 20, between 4 and 1000, tolerance 2, windows 10 and 500
/// samples, smoothing 0.2, probe every 5 s, jittered); the
/// [`Limiter`](super::Limiter) checks them when it is built.
///
/// ```
/// use stagger::limit::{Completion, Gradient, Limiter};
/// use std::time::{Duration, Instant};
///
/// let limiter = Limiter::builder(Gradient { initial: 40, ..Gradient::new() }).seed(1).build()?;
/// let t0 = Instant::now();
/// let ms = Duration::from_millis;
/// // Steady 10 ms answers with the server busy: the limit grows.
/// for i in 0..200u64 {
///     let at = t0 + ms(i);
///     let held: Vec<_> = (0..30).map(|_| limiter.try_acquire(false, at).unwrap()).collect();
///     for t in held {
///         limiter.release(t, Completion::Served, at + ms(10));
///     }
/// }
/// let grown = limiter.limit();
/// assert!(grown > 40);
/// // Then answers take ten times as long: the limit falls.
/// for i in 200..300u64 {
///     let at = t0 + ms(i);
///     let t = limiter.try_acquire(false, at).unwrap();
///     limiter.release(t, Completion::Served, at + ms(100));
/// }
/// assert!(limiter.limit() < grown / 2);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gradient {
    /// The limit to start from (default 20).
    pub initial: u32,
    /// The smallest the limit gets (default 4).
    pub min: u32,
    /// The largest the limit gets (default 1000).
    pub max: u32,
    /// How much slower than the long-term average recent work may be before
    /// the limit falls, at least 1 (default 2).
    pub tolerance: f64,
    /// The share of the way to its target the limit moves per sample, in
    /// (0, 1] (default 0.2).
    pub smoothing: f64,
    /// The samples the short-term average spans, at least 1 and below
    /// `long` (default 10).
    pub short: u32,
    /// The samples the long-term average spans (default 500).
    pub long: u32,
    /// The mean interval between re-probes of the no-load latency (each
    /// drawn from 0.5 to 1.5 times it; default 5 s).
    pub probe: Duration,
}

impl Default for Gradient {
    fn default() -> Self {
        Self::new()
    }
}

impl Gradient {
    /// The defaults.
    pub const fn new() -> Self {
        Gradient {
            initial: 20,
            min: 4,
            max: 1000,
            tolerance: 2.0,
            smoothing: 0.2,
            short: 10,
            long: 500,
            probe: Duration::from_secs(5),
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_range(self.min, self.max, self.initial)?;
        if !(self.tolerance >= 1.0 && self.tolerance.is_finite()) {
            return Err(ConfigError::new(
                "tolerance",
                format!("{} is not a finite factor of at least 1", self.tolerance),
            ));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(ConfigError::new(
                "smoothing",
                format!("{} is not a share in (0, 1]", self.smoothing),
            ));
        }
        if self.short == 0 || self.long <= self.short {
            return Err(ConfigError::new(
                "windows",
                format!(
                    "short {} and long {}: need 1 ≤ short < long",
                    self.short, self.long
                ),
            ));
        }
        if self.probe.is_zero() {
            return Err(ConfigError::new(
                "probe",
                "the probe interval must be positive",
            ));
        }
        Ok(())
    }
}

/// The shared state of a gradient limit besides the limit itself.
pub(super) struct State {
    cfg: Gradient,
    origin: Origin,
    /// Running averages in nanoseconds (0: no sample yet).
    pub(super) short: AtomicU64,
    long: AtomicU64,
    /// The lowest short-term average since the last probe.
    noload: AtomicU64,
    /// When the next probe is due, in nanoseconds from the origin + 1 (0:
    /// not scheduled yet).
    next_probe: AtomicU64,
    /// The jitter stream: a counter mixed by splitmix64.
    jitter: AtomicU64,
    cuts: OncePerRoundTrip,
}

/// Moves `avg` towards `x` by 1/`window` of the way; returns the new value.
fn average(avg: &AtomicU64, x: u64, window: u32) -> u64 {
    let w = u128::from(window);
    let step = |old: u64| {
        if old == 0 {
            x
        } else {
            ((u128::from(old) * (w - 1) + u128::from(x)) / w).max(1) as u64
        }
    };
    match avg.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| Some(step(old))) {
        Ok(old) | Err(old) => step(old),
    }
}

impl State {
    pub(super) fn new(cfg: Gradient, seed: u64) -> Self {
        State {
            cfg,
            origin: Origin::default(),
            short: AtomicU64::new(0),
            long: AtomicU64::new(0),
            noload: AtomicU64::new(u64::MAX),
            next_probe: AtomicU64::new(0),
            jitter: AtomicU64::new(seed),
            cuts: OncePerRoundTrip::default(),
        }
    }

    /// The interval to the next probe: `probe` × U(0.5, 1.5).
    fn next_interval(&self) -> u64 {
        let k = self
            .jitter
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let u = (splitmix64(k) >> 11) as f64 / (1u64 << 53) as f64;
        (nanos(self.cfg.probe) as f64 * (0.5 + u)) as u64
    }

    pub(super) fn on_sample(&self, limit: &AtomicU64, s: &Sample) {
        let rtt = nanos(s.rtt);
        let short = average(&self.short, rtt, self.cfg.short);
        let mut long = average(&self.long, rtt, self.cfg.long);
        self.noload.fetch_min(short, Ordering::AcqRel);
        let at = self.origin.nanos(s.now).saturating_add(1);
        let due = self.next_probe.load(Ordering::Acquire);
        if due == 0 || at >= due {
            let next = at.saturating_add(self.next_interval());
            let won = self
                .next_probe
                .compare_exchange(due, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if won && due != 0 {
                // The re-probe: the usual latency falls back to the lowest
                // recent one, and the search for the lowest starts again.
                let noload = self.noload.swap(short, Ordering::AcqRel);
                let prev = self.long.fetch_min(noload, Ordering::AcqRel);
                long = long.min(prev).min(noload);
            }
        }
        let g = if s.how == Completion::Overloaded && self.cuts.claim(s.admitted, s.now) {
            // Work for nobody: whatever the averages say, too much queued.
            0.5
        } else {
            (self.cfg.tolerance * long as f64 / short as f64).clamp(0.5, 1.0)
        };
        let Gradient {
            min,
            max,
            smoothing,
            ..
        } = self.cfg;
        let busy = s.busy as f64;
        update_limit(limit, min, max, |l| {
            let mut target = l * g + l.sqrt();
            if busy * 2.0 < l {
                target = target.min(l);
            }
            l * (1.0 - smoothing) + target * smoothing
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Completion, Limiter};
    use super::*;
    use std::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// `n` rounds of `k` concurrent requests each taking `rtt`, one round
    /// per `rtt` from `t`; returns the time after the last.
    fn rounds(l: &Limiter, t: Instant, n: u32, k: usize, rtt: Duration) -> Instant {
        let mut at = t;
        for _ in 0..n {
            let held: Vec<_> = (0..k)
                .filter_map(|_| l.try_acquire(false, at).ok())
                .collect();
            for tok in held {
                l.release(tok, Completion::Served, at + rtt);
            }
            at += rtt;
        }
        at
    }

    /// A gradient limiter between 4 and 100, seeded, starting at `initial`.
    fn between_4_and_100(initial: u32) -> Limiter {
        Limiter::builder(Gradient {
            initial,
            min: 4,
            max: 100,
            ..Gradient::new()
        })
        .seed(3)
        .build()
        .unwrap()
    }

    #[test]
    fn steady_latency_grows_a_used_limit_to_its_ceiling() {
        let l = between_4_and_100(Gradient::new().initial);
        rounds(&l, Instant::now(), 100, 100, ms(10));
        assert_eq!(l.limit(), 100);
    }

    #[test]
    fn a_queue_building_up_halves_the_limit_towards_its_floor() {
        let l = between_4_and_100(100);
        let t = rounds(&l, Instant::now(), 50, 100, ms(10));
        assert_eq!(l.limit(), 100);
        // Latency ×10: g = 0.5 until the long average catches up.
        rounds(&l, t, 3, 10, ms(100));
        assert!(l.limit() < 20, "{}", l.limit());
    }

    #[test]
    fn work_for_nobody_cuts_the_limit_whatever_the_latency() {
        let l = between_4_and_100(100);
        let t0 = Instant::now();
        // One after the other: each admitted after the last cut.
        for i in 0..40 {
            let t = l.try_acquire(false, t0 + ms(20 * i)).unwrap();
            l.release(t, Completion::Overloaded, t0 + ms(20 * i + 10));
        }
        assert!(l.limit() < 20, "{}", l.limit());
        // A burst of late answers admitted together cuts once.
        let before = l.limit();
        let held: Vec<_> = (0..4)
            .map(|_| l.try_acquire(false, t0 + ms(900)).unwrap())
            .collect();
        for t in held {
            l.release(t, Completion::Overloaded, t0 + ms(950));
        }
        assert!(l.limit() * 10 >= before * 8, "{before} → {}", l.limit());
    }

    fn long_ns(l: &Limiter) -> u64 {
        match &l.inner.algo {
            super::super::Algo::Gradient(s) => s.long.load(Ordering::Relaxed),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_probe_relearns_the_no_load_latency_after_a_long_overload() {
        // After a lasting overload the long-term average stays high, and a
        // new queue goes unnoticed; a probe re-learns the usual latency.
        let run = |probe: Duration| {
            let l = Limiter::builder(Gradient {
                initial: 20,
                min: 4,
                max: 20,
                probe,
                ..Gradient::new()
            })
            .seed(9)
            .build()
            .unwrap();
            let t = rounds(&l, Instant::now(), 100, 20, ms(10));
            // 60 s of 300 ms answers, then 10 s back at 10 ms (10 per round).
            let t = rounds(&l, t, 200, 20, ms(300));
            let t = rounds(&l, t, 1000, 1, ms(10));
            let long = long_ns(&l);
            // Then a queue builds: 60 ms answers, the server busy.
            rounds(&l, t, 10, 20, ms(60));
            (long, l.limit())
        };
        let (long_without, limit_without) = run(Duration::from_secs(100_000));
        let (long_with, limit_with) = run(Duration::from_secs(4));
        assert!(
            long_without > 40_000_000,
            "without probes {long_without} ns"
        );
        assert!(long_with < 20_000_000, "with probes {long_with} ns");
        assert_eq!(limit_without, 20, "blind to the new queue");
        assert!(limit_with < 10, "with probes {limit_with}");
    }

    /// Regression for congestion-limiter 0.1's gradient, whose moving
    /// average subtracts durations and panics on the first sample below it.
    #[test]
    fn latency_falling_below_the_averages_moves_them_down_without_a_panic() {
        let l = Limiter::builder(Gradient::new()).seed(1).build().unwrap();
        let t = rounds(&l, Instant::now(), 50, 10, ms(100));
        rounds(&l, t, 50, 10, ms(1));
        let long = long_ns(&l);
        assert!(long < 100_000_000, "{long}");
        let Some(short) = (match &l.inner.algo {
            super::super::Algo::Gradient(s) => Some(s.short.load(Ordering::Relaxed)),
            _ => None,
        }) else {
            unreachable!()
        };
        assert!(short < 2_000_000, "{short}");
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let l = Limiter::builder(Gradient::new()).seed(1).build().unwrap();
        rounds(&l, Instant::now(), 500, 2, ms(10));
        assert_eq!(l.limit(), 20);
    }

    #[test]
    fn probe_times_replay_for_a_seed() {
        let every = Gradient {
            probe: Duration::from_secs(30),
            ..Gradient::new()
        };
        let a = State::new(every, 5);
        let b = State::new(every, 5);
        let c = State::new(every, 6);
        let xs: Vec<u64> = (0..5).map(|_| a.next_interval()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_interval()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], c.next_interval());
        let (lo, hi) = (nanos(ms(15_000)), nanos(ms(45_000)));
        assert!(xs.iter().all(|x| (lo..hi).contains(x)), "{xs:?}");
    }
}
