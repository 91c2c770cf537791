//! Reconnect backoff that resets only after a stable connection.

use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::outcome::error::ConfigError;
use crate::random::{FastRng, RandomSource};
use crate::time::Clock;

/// How long to wait before reconnecting: a jittered [`Backoff`] over the
/// consecutive failures, which starts over only once a connection has stayed
/// up for `stable_after`.
///
/// **What it prevents:** the reconnect storm. When a server restarts, every
/// client loses its connection in the same instant; a fixed reconnect delay
/// (or none) brings them all back in the same instant, and again after each
/// failure. Jittered delays spread the fleet over the backoff window. Two
/// naive reset rules make it worse: never resetting punishes the next,
/// unrelated blip with the longest wait; resetting on every successful
/// connect lets a server that accepts and then drops (overloaded, crashing
/// on a bad request) be hammered at the base rate forever. Resetting only
/// after a *stable* period avoids both.
///
/// Sans-IO: tell it when a connection comes up and when the link is down;
/// it answers how long to wait. A failed connection attempt and a dropped
/// connection are both [`disconnected`](Reconnect::disconnected).
///
/// ```
/// use stagger::scheduled::Reconnect;
/// use stagger::Backoff;
/// use stagger::time::ManualClock;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let backoff = Backoff { base: Duration::from_millis(500), cap: Duration::from_secs(30), ..Backoff::new() };
/// let mut link = Reconnect::new(backoff, Duration::from_secs(60))?;
///
/// // The server flaps: each connection dies after 2 s, so the waits grow.
/// for n in 1..=4 {
///     link.connected(&clock);
///     clock.advance(Duration::from_secs(2));
///     let wait = link.disconnected(&clock);
///     assert_eq!(link.failures(), n);
///     assert!(wait < backoff.backoff(n));
/// }
///
/// // A connection that lasts a stable minute starts the backoff over.
/// link.connected(&clock);
/// clock.advance(Duration::from_secs(90));
/// let wait = link.disconnected(&clock);
/// assert_eq!(link.failures(), 1);
/// assert!(wait < Duration::from_millis(500));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Reconnect<R = FastRng> {
    backoff: Backoff,
    stable_after: Duration,
    failures: u32,
    previous: Option<Duration>,
    up_since: Option<Instant>,
    rng: R,
}

impl Reconnect<FastRng> {
    /// A reconnect policy with its own fresh random stream; an error names
    /// the first bad field of `backoff`.
    pub fn new(backoff: Backoff, stable_after: Duration) -> Result<Self, ConfigError> {
        Self::with_rng(backoff, stable_after, FastRng::fresh())
    }
}

impl<R: RandomSource> Reconnect<R> {
    /// A reconnect policy drawing from `rng` (seed it to replay a schedule).
    pub fn with_rng(backoff: Backoff, stable_after: Duration, rng: R) -> Result<Self, ConfigError> {
        backoff.validate()?;
        Ok(Reconnect {
            backoff,
            stable_after,
            failures: 0,
            previous: None,
            up_since: None,
            rng,
        })
    }

    /// A connection is up, as of now.
    pub fn connected<C: Clock>(&mut self, clock: C) {
        self.up_since = Some(clock.now());
    }

    /// The link is down (a connection dropped, or a connection attempt
    /// failed): returns how long to wait before the next attempt. If the
    /// connection that just ended had been up for at least `stable_after`,
    /// the backoff first starts over.
    pub fn disconnected<C: Clock>(&mut self, clock: C) -> Duration {
        if let Some(up) = self.up_since.take() {
            if clock.now().saturating_duration_since(up) >= self.stable_after {
                self.reset();
            }
        }
        self.failures = self.failures.saturating_add(1);
        let d = self
            .backoff
            .delay(self.failures, self.previous, &mut self.rng);
        self.previous = Some(d);
        d
    }

    /// Forgets the failures: the next wait is drawn from the first step.
    pub fn reset(&mut self) {
        self.failures = 0;
        self.previous = None;
    }

    /// Consecutive failures since the last stable connection.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether a connection is up (between `connected` and `disconnected`).
    #[cfg(test)]
    pub(crate) fn is_up(&self) -> bool {
        self.up_since.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Jitter;
    use crate::time::ManualClock;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn backoff() -> Backoff {
        Backoff {
            base: MS(1000),
            cap: MS(60_000),
            ..Backoff::new()
        }
    }

    /// The storm it prevents: 10 000 clients, each up for an hour, lose the
    /// server in the same instant. Every first wait is below the base (1 s);
    /// the mean is 500 ms within 10 ms (standard error 1000/√12/√10000 ≈
    /// 2.9 ms: about 3.5σ); no 100 ms window gets more than 12 % of the fleet
    /// (expected 10 %, standard deviation 0.3 %). Without jitter all 10 000
    /// would come back in one instant.
    #[test]
    fn a_fleet_dropped_together_comes_back_spread() {
        let clock = ManualClock::new();
        let mut seeds = FastRng::seeded(31);
        let n = 10_000u32;
        let mut tenths = [0u32; 10];
        let mut sum = 0.0;
        for _ in 0..n {
            let mut c = Reconnect::with_rng(backoff(), MS(60_000), seeds.fork()).unwrap();
            c.connected(&clock);
            let t0 = clock.now();
            let wait = c.disconnected(t0 + Duration::from_secs(3600));
            assert!(wait < MS(1000));
            sum += wait.as_secs_f64() * 1e3;
            tenths[(wait.as_millis() / 100) as usize] += 1;
        }
        let mean = sum / f64::from(n);
        assert!((mean - 500.0).abs() < 10.0, "mean {mean} ms");
        assert!(
            tenths.iter().all(|c| f64::from(*c) / f64::from(n) < 0.12),
            "{tenths:?}"
        );
    }

    /// A server that accepts and drops at once never resets the backoff;
    /// the waits reach the cap instead of staying at the base rate.
    #[test]
    fn a_flapping_server_is_not_hammered() {
        let clock = ManualClock::new();
        let b = Backoff {
            jitter: Jitter::None,
            ..backoff()
        };
        let mut c = Reconnect::with_rng(b, MS(30_000), FastRng::seeded(1)).unwrap();
        let mut waits = Vec::new();
        for _ in 0..10 {
            c.connected(&clock);
            clock.advance(MS(500));
            let w = c.disconnected(&clock);
            clock.advance(w);
            waits.push(w.as_millis());
        }
        assert_eq!(
            waits,
            [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000]
        );
        assert_eq!(c.failures(), 10);
    }

    #[test]
    fn only_a_stable_connection_resets() {
        let clock = ManualClock::new();
        let b = Backoff {
            jitter: Jitter::None,
            ..backoff()
        };
        let mut c = Reconnect::with_rng(b, MS(10_000), FastRng::seeded(1)).unwrap();
        // Failed connection attempts (never up) grow the backoff.
        assert_eq!(c.disconnected(&clock), MS(1000));
        assert_eq!(c.disconnected(&clock), MS(2000));
        assert!(!c.is_up());
        // Up for just under the stable period: no reset.
        c.connected(&clock);
        assert!(c.is_up());
        clock.advance(MS(9_999));
        assert_eq!(c.disconnected(&clock), MS(4000));
        // Up for exactly the stable period: reset.
        c.connected(&clock);
        clock.advance(MS(10_000));
        assert_eq!(c.disconnected(&clock), MS(1000));
        assert_eq!(c.failures(), 1);
        c.reset();
        assert_eq!(c.failures(), 0);
    }

    #[test]
    fn same_seed_same_waits_and_bad_backoffs_name_the_field() {
        let clock = ManualClock::new();
        let mut a = Reconnect::with_rng(backoff(), MS(1), FastRng::seeded(8)).unwrap();
        let mut b = Reconnect::with_rng(backoff(), MS(1), FastRng::seeded(8)).unwrap();
        for _ in 0..20 {
            assert_eq!(a.disconnected(&clock), b.disconnected(&clock));
        }
        let err = Reconnect::new(
            Backoff {
                multiplier: 0.5,
                ..Backoff::new()
            },
            MS(1),
        )
        .unwrap_err();
        assert_eq!(err.field(), "multiplier");
        let mut c = Reconnect::new(backoff(), MS(1)).unwrap();
        for _ in 0..100_000 {
            assert!(c.disconnected(&clock) <= MS(60_000));
        }
    }
}
