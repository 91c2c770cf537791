//! Jitter for scheduled work: cache TTLs, periodic timers, reconnects.
//!
//! Retries are one way a fleet falls into step; schedules are the others.
//! Entries cached during a deploy all expire in the same second and send
//! their misses to the database together. Every instance of a rollout polls
//! on the same beat. Every client of a restarted server reconnects at the
//! same instant, and again after the same backoff. The cure is the one
//! retries need — move each event by a random amount drawn from the caller's
//! own stream — but each case needs its own shape:
//!
//! - [`JitteredTtl`]: `ttl ± spread`, so entries written together expire
//!   apart.
//! - [`Ticks`] (and, with the `tokio` feature, `JitteredInterval`): a
//!   periodic schedule whose every tick moves by up to `±spread` around a
//!   fixed grid, with a random phase, so instances started together spread
//!   out, stay spread, and never drift.
//! - [`Reconnect`]: a jittered reconnect backoff that starts over only after
//!   a connection has stayed up for a stable period, so a flapping server is
//!   not hammered at the base rate.
//!
//! Randomness comes from a [`RandomSource`] (one per instance or client:
//! never share or clone one, or the spreading is undone), and time from a
//! [`Clock`], so tests and the simulator replay every schedule exactly.
//!
//! ```
//! use stagger::scheduled::JitteredTtl;
//! use stagger::random::FastRng;
//! use std::time::Duration;
//!
//! let ttl = JitteredTtl::with_fraction(Duration::from_secs(300), 0.1)?; // 5 min ± 30 s
//! let mut rng = FastRng::fresh();
//! let d = ttl.sample(&mut rng);
//! assert!(d >= Duration::from_secs(270) && d < Duration::from_secs(330));
//! # Ok::<(), stagger::ConfigError>(())
//! ```
//!
//! [`RandomSource`]: crate::random::RandomSource
//! [`Clock`]: crate::time::Clock

use std::time::Duration;

use crate::random::RandomSource;

mod reconnect;
mod ticks;
mod ttl;

pub use reconnect::Reconnect;
#[cfg(feature = "tokio")]
pub use ticks::JitteredInterval;
pub use ticks::Ticks;
pub use ttl::JitteredTtl;

/// A uniform draw from `[lo, hi)` (`lo` when the window is empty): the
/// building block of every helper here, for schedules of your own (a
/// start-up delay, a job's offset in its window).
///
/// Spans up to 584 years use an exact integer mapping of 64 random bits
/// (no floating-point rounding can reach `hi`); longer ones use `f64`.
///
/// ```
/// use stagger::scheduled::uniform;
/// use stagger::random::FastRng;
/// use std::time::Duration;
///
/// let mut rng = FastRng::fresh();
/// let (lo, hi) = (Duration::from_secs(30), Duration::from_secs(90));
/// let d = uniform(lo, hi, &mut rng);
/// assert!(d >= lo && d < hi);
/// assert_eq!(uniform(hi, lo, &mut rng), hi); // an empty window gives its start
/// ```
pub fn uniform<R: RandomSource + ?Sized>(lo: Duration, hi: Duration, rng: &mut R) -> Duration {
    let Some(span) = hi.checked_sub(lo).filter(|s| !s.is_zero()) else {
        return lo;
    };
    let offset = match u64::try_from(span.as_nanos()) {
        Ok(n) => {
            let x = (u128::from(rng.next_u64()) * u128::from(n)) >> 64;
            Duration::from_nanos(x as u64)
        }
        Err(_) => Duration::try_from_secs_f64(span.as_secs_f64() * rng.next_f64())
            .unwrap_or(Duration::ZERO)
            .min(span),
    };
    lo.saturating_add(offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::FastRng;

    #[test]
    fn uniform_stays_in_its_window() {
        let mut rng = FastRng::seeded(11);
        let (lo, hi) = (Duration::from_millis(3), Duration::from_millis(5));
        for _ in 0..10_000 {
            let d = uniform(lo, hi, &mut rng);
            assert!(d >= lo && d < hi, "{d:?}");
        }
        assert_eq!(uniform(hi, hi, &mut rng), hi);
        assert_eq!(uniform(hi, lo, &mut rng), hi);
        for _ in 0..1000 {
            assert!(uniform(Duration::ZERO, Duration::MAX, &mut rng) <= Duration::MAX);
        }
    }
}
