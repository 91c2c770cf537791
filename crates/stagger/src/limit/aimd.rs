//! Additive increase, multiplicative decrease: TCP's congestion rule applied
//! to a server's concurrency.

use std::time::Duration;

use super::{check_range, update_limit, Completion, OncePerRoundTrip, Sample};
use crate::guardrails::sync::{AtomicU64, Ordering};
use crate::outcome::error::ConfigError;

/// The `aimd` limit: grows by `1/limit` for each answer in time while at
/// least half the limit is in use (so one round trip at the limit adds
/// about one place), and is multiplied by [`backoff`](Self::backoff) on a
/// sign of overload — an answer after the caller's deadline, work dropped
/// because the deadline passed, or (with a
/// [`latency_threshold`](Self::latency_threshold)) an answer slower than it. Only
/// work admitted after the last decrease can cause the next one, so a
/// burst of late answers from one overload cuts the limit once, not once
/// per answer.
///
/// A plain value: set its public fields over [`Aimd::new`]'s defaults (start
/// at 20, between 1 and 1000, backoff 0.9, no latency threshold); the
/// [`Limiter`](super::Limiter) checks them when it is built.
///
/// ```
/// use stagger::limit::{Aimd, Completion, Limiter};
/// use std::time::{Duration, Instant};
///
/// let limiter = Limiter::builder(Aimd { initial: 10, backoff: 0.5, ..Aimd::new() }).build()?;
/// let now = Instant::now();
/// let t = limiter.try_acquire(false, now).unwrap();
/// limiter.release(t, Completion::Overloaded, now + Duration::from_secs(2));
/// assert_eq!(limiter.limit(), 5);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Aimd {
    /// The limit to start from (default 20).
    pub initial: u32,
    /// The smallest the limit gets (default 1).
    pub min: u32,
    /// The largest the limit gets (default 1000).
    pub max: u32,
    /// The factor a sign of overload multiplies the limit by, in (0, 1)
    /// (default 0.9).
    pub backoff: f64,
    /// Also count an answer slower than this as a sign of overload
    /// (default `None`: only late and dropped work counts).
    pub latency_threshold: Option<Duration>,
}

impl Default for Aimd {
    fn default() -> Self {
        Self::new()
    }
}

impl Aimd {
    /// The defaults.
    pub const fn new() -> Self {
        Aimd {
            initial: 20,
            min: 1,
            max: 1000,
            backoff: 0.9,
            latency_threshold: None,
        }
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        check_range(self.min, self.max, self.initial)?;
        if !(self.backoff > 0.0 && self.backoff < 1.0) {
            return Err(ConfigError::new(
                "backoff",
                format!("{} is not a factor in (0, 1)", self.backoff),
            ));
        }
        Ok(())
    }
}

/// The shared state of an AIMD limit besides the limit itself.
pub(super) struct State {
    cfg: Aimd,
    cuts: OncePerRoundTrip,
}

impl State {
    pub(super) fn new(cfg: Aimd) -> Self {
        State {
            cfg,
            cuts: OncePerRoundTrip::default(),
        }
    }

    pub(super) fn on_sample(&self, limit: &AtomicU64, s: &Sample) {
        let Aimd { min, max, .. } = self.cfg;
        let overloaded = s.how == Completion::Overloaded
            || self.cfg.latency_threshold.is_some_and(|t| s.rtt > t);
        if overloaded {
            if self.cuts.claim(s.admitted, s.now) {
                let b = self.cfg.backoff;
                update_limit(limit, min, max, |l| l * b);
            }
        } else if s.busy.saturating_mul(2) * super::MILLI >= limit.load(Ordering::Relaxed) {
            update_limit(limit, min, max, |l| l + 1.0 / l.max(1.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Limiter;
    use super::*;
    use std::time::Instant;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn answers_in_time_grow_the_limit_by_about_one_per_round_trip() {
        let l = Limiter::builder(Aimd {
            initial: 10,
            ..Aimd::new()
        })
        .build()
        .unwrap();
        let t0 = Instant::now();
        // Ten rounds of as many concurrent requests as admitted, all in time.
        for round in 0..10u64 {
            let at = t0 + ms(10 * round);
            let held: Vec<_> = (0..100)
                .filter_map(|_| l.try_acquire(false, at).ok())
                .collect();
            for t in held {
                l.release(t, Completion::Served, at + ms(5));
            }
        }
        // +1/l per answer: about +1 per round, whole places only.
        assert!((18..=20).contains(&l.limit()), "{}", l.limit());
    }

    #[test]
    fn an_idle_server_does_not_grow_its_limit() {
        let l = Limiter::builder(Aimd {
            initial: 10,
            ..Aimd::new()
        })
        .build()
        .unwrap();
        let t0 = Instant::now();
        for i in 0..1000 {
            let t = l.try_acquire(false, t0 + ms(i)).unwrap();
            l.release(t, Completion::Served, t0 + ms(i + 1));
        }
        assert_eq!(l.limit(), 10);
    }

    #[test]
    fn a_burst_of_late_answers_cuts_once_per_round_trip() {
        let l = Limiter::builder(Aimd {
            initial: 100,
            backoff: 0.5,
            ..Aimd::new()
        })
        .build()
        .unwrap();
        let t0 = Instant::now();
        let held: Vec<_> = (0..50).map(|_| l.try_acquire(false, t0).unwrap()).collect();
        for t in held {
            l.release(t, Completion::Overloaded, t0 + ms(1500));
        }
        assert_eq!(l.limit(), 50, "fifty late answers of one round: one cut");
        // Work admitted after the cut may cut again.
        let t = l.try_acquire(false, t0 + ms(1600)).unwrap();
        l.release(t, Completion::Overloaded, t0 + ms(3000));
        assert_eq!(l.limit(), 25);
    }

    #[test]
    fn the_latency_threshold_counts_slow_answers_as_overload_and_the_floor_holds() {
        let l = Limiter::builder(Aimd {
            initial: 4,
            min: 2,
            max: 8,
            backoff: 0.5,
            latency_threshold: Some(ms(100)),
        })
        .build()
        .unwrap();
        let t0 = Instant::now();
        for i in 0..5 {
            let at = t0 + ms(1000 * i);
            let t = l.try_acquire(false, at).unwrap();
            l.release(t, Completion::Served, at + ms(200));
        }
        assert_eq!(l.limit(), 2);
        // A cancelled request says nothing about load.
        let t = l.try_acquire(false, t0 + ms(9000)).unwrap();
        l.release(t, Completion::Cancelled, t0 + ms(20_000));
        assert_eq!(l.limit(), 2);
    }
}
