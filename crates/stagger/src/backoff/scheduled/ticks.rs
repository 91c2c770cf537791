//! Jittered periodic schedules, anchored to a fixed grid.

use std::time::{Duration, Instant};

use super::uniform;
use crate::outcome::error::ConfigError;
use crate::random::RandomSource;

/// A periodic schedule whose every tick is moved by a random amount in
/// `[−spread, +spread)` around a fixed grid `anchor + k·period`.
///
/// **What it prevents:** instances that run periodic work in step. Every
/// instance of a rollout starts within seconds, so `every 60 s` means every
/// instance polls, flushes or refreshes in the same second, forever. A random
/// phase ([`Ticks::with_random_phase`]) spreads the instances over the whole
/// period; the per-tick spread keeps two instances that happen to share a
/// phase from colliding on every tick.
///
/// **No drift:** ticks are anchored to the nominal grid, not to the previous
/// jittered tick. Sleeping `period ± spread` after each tick would make the
/// schedule a random walk that wanders ever further from its intended rate
/// (by about `spread·√(n/3)` after `n` ticks); here tick `k` is always within
/// `spread` of `anchor + k·period`.
///
/// `spread` is at most half the period, so ticks keep their order. A caller
/// that falls behind skips the slots whose whole window has passed instead
/// of firing a burst of them.
///
/// This is the sans-IO core: it says when the next tick is due and the
/// caller waits. With the `tokio` feature, `JitteredInterval` does the
/// waiting.
///
/// ```
/// use stagger::scheduled::Ticks;
/// use stagger::random::FastRng;
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// let period = Duration::from_secs(60);
/// let spread = Duration::from_secs(5);
/// let mut ticks = Ticks::new(start, period, spread)?;
/// let mut rng = FastRng::seeded(1);
/// for k in 0..1000u32 {
///     let due = ticks.next_tick(start, &mut rng);
///     let nominal = start + period * k;
///     assert!(due + spread >= nominal && due < nominal + spread);
/// }
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Ticks {
    anchor: Instant,
    period: Duration,
    spread: Duration,
    next_slot: u64,
}

impl Ticks {
    /// Ticks around `anchor + k·period` for k = 0, 1, 2, …; errors name
    /// `period` (zero) or `spread` (more than half the period).
    pub fn new(anchor: Instant, period: Duration, spread: Duration) -> Result<Self, ConfigError> {
        if period.is_zero() {
            return Err(ConfigError::new("period", "must be greater than zero"));
        }
        if spread > period / 2 {
            return Err(ConfigError::new(
                "spread",
                format!(
                    "{spread:?} is more than half the period {period:?}; ticks could change order"
                ),
            ));
        }
        Ok(Ticks {
            anchor,
            period,
            spread,
            next_slot: 0,
        })
    }

    /// Like [`new`](Ticks::new), with the grid started at a random phase:
    /// slot 0 is centred on `now + spread + U(0, period)`, so the first tick
    /// falls in `[now, now + period + 2·spread)`, never before `now`, and
    /// instances started together are spread over a whole period.
    ///
    /// ```
    /// use stagger::scheduled::Ticks;
    /// use stagger::random::FastRng;
    /// use std::time::{Duration, Instant};
    ///
    /// let now = Instant::now();
    /// let period = Duration::from_secs(10);
    /// let mut rng = FastRng::seeded(4);
    /// let mut ticks = Ticks::with_random_phase(now, period, Duration::from_secs(1), &mut rng)?;
    /// let first = ticks.next_tick(now, &mut rng);
    /// assert!(first >= now && first < now + Duration::from_secs(12));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn with_random_phase<R: RandomSource + ?Sized>(
        now: Instant,
        period: Duration,
        spread: Duration,
        rng: &mut R,
    ) -> Result<Self, ConfigError> {
        let phase = uniform(Duration::ZERO, period, rng);
        let anchor = now.checked_add(spread.saturating_add(phase)).unwrap_or(now);
        Self::new(anchor, period, spread)
    }

    /// The instant slot 0 is centred on.
    #[cfg(test)]
    pub(crate) fn anchor(&self) -> Instant {
        self.anchor
    }

    /// How far a tick may move from its slot.
    pub fn spread(&self) -> Duration {
        self.spread
    }

    /// The slot the next call to [`next_tick`](Ticks::next_tick) considers
    /// first.
    #[cfg(test)]
    pub(crate) fn next_slot(&self) -> u64 {
        self.next_slot
    }

    /// The nominal instant of slot `k`, `anchor + k·period` (`None` past
    /// what an `Instant` can hold).
    pub(crate) fn nominal(&self, slot: u64) -> Option<Instant> {
        let ns = self.period.as_nanos().checked_mul(u128::from(slot))?;
        let secs = u64::try_from(ns / 1_000_000_000).ok()?;
        let offset = Duration::new(secs, (ns % 1_000_000_000) as u32);
        self.anchor.checked_add(offset)
    }

    /// When the next tick is due, given the time `now`: the next slot whose
    /// window `[nominal − spread, nominal + spread)` has not entirely passed,
    /// moved by a fresh draw from `rng`. The result may be slightly before
    /// `now` (then the tick is due at once).
    pub fn next_tick<R: RandomSource + ?Sized>(&mut self, now: Instant, rng: &mut R) -> Instant {
        let mut slot = self.next_slot;
        let late = self
            .nominal(slot)
            .and_then(|n| n.checked_add(self.spread))
            .is_some_and(|end| now >= end);
        if late {
            // The first slot whose window ends after `now`.
            let since = now.saturating_duration_since(self.anchor);
            let past = since.saturating_sub(self.spread).as_nanos();
            let first = past / self.period.as_nanos() + 1;
            slot = slot.max(u64::try_from(first).unwrap_or(u64::MAX));
        }
        self.next_slot = slot.saturating_add(1);
        let Some(nominal) = self.nominal(slot) else {
            return now;
        };
        let offset = uniform(Duration::ZERO, self.spread.saturating_mul(2), rng);
        match nominal.checked_sub(self.spread) {
            Some(lo) => lo.checked_add(offset).unwrap_or(nominal),
            None => nominal,
        }
    }
}

/// A tokio timer that ticks on a [`Ticks`] schedule (feature `tokio`).
///
/// [`tick`](JitteredInterval::tick) waits for the next jittered tick and
/// returns the instant it was due. It is cancel-safe: a tick whose wait is
/// dropped is kept and awaited by the next call, not skipped. Time comes
/// from the [`Clock`](crate::time::Clock) `C`, randomness from `R`, one stream per
/// interval.
///
/// ```
/// use stagger::scheduled::JitteredInterval;
/// use std::time::Duration;
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// # rt.block_on(async {
/// // Refresh about every 20 ms (±5 ms), at a random phase.
/// let mut every = JitteredInterval::new(Duration::from_millis(20), Duration::from_millis(5))?;
/// for _ in 0..3 {
///     let due = every.tick().await;
///     assert!(std::time::Instant::now() >= due);
///     // … refresh …
/// }
/// # Ok::<(), stagger::ConfigError>(())
/// # }).unwrap();
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct JitteredInterval<C = crate::time::MonotonicClock, R = crate::random::FastRng> {
    ticks: Ticks,
    clock: C,
    rng: R,
    pending: Option<Instant>,
}

#[cfg(feature = "tokio")]
impl JitteredInterval {
    /// Ticks about every `period`, each moved by up to `±spread`, starting at
    /// a random phase, on the monotonic clock with a fresh random stream.
    pub fn new(period: Duration, spread: Duration) -> Result<Self, ConfigError> {
        use crate::time::Clock;
        let clock = crate::time::MonotonicClock;
        let mut rng = crate::random::FastRng::fresh();
        let ticks = Ticks::with_random_phase(clock.now(), period, spread, &mut rng)?;
        Ok(Self::from_parts(ticks, clock, rng))
    }
}

#[cfg(feature = "tokio")]
impl<C: crate::time::Clock, R: RandomSource> JitteredInterval<C, R> {
    /// An interval on the schedule `ticks`, reading time from `clock` and
    /// drawing from `rng`.
    pub fn from_parts(ticks: Ticks, clock: C, rng: R) -> Self {
        JitteredInterval {
            ticks,
            clock,
            rng,
            pending: None,
        }
    }

    /// The schedule.
    pub fn ticks(&self) -> &Ticks {
        &self.ticks
    }

    /// Waits for the next tick; returns the instant it was due.
    pub async fn tick(&mut self) -> Instant {
        let now = self.clock.now();
        let due = match self.pending {
            Some(t) => t,
            None => {
                let t = self.ticks.next_tick(now, &mut self.rng);
                self.pending = Some(t);
                t
            }
        };
        let wait = due.saturating_duration_since(now);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        self.pending = None;
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::FastRng;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn offset_ms(t: Instant, nominal: Instant) -> f64 {
        if t >= nominal {
            (t - nominal).as_secs_f64() * 1e3
        } else {
            -((nominal - t).as_secs_f64() * 1e3)
        }
    }

    /// 100 000 ticks of 1 s ± 200 ms: every tick within its slot's window,
    /// strictly after the previous one; the mean offset within 1 ms of zero
    /// (standard error 400/√12/√100000 ≈ 0.37 ms: about 2.7σ).
    #[test]
    fn ticks_stay_on_the_grid() {
        let start = Instant::now();
        let mut t = Ticks::new(start, MS(1000), MS(200)).unwrap();
        let mut rng = FastRng::seeded(77);
        let mut previous: Option<Instant> = None;
        let mut sum = 0.0;
        let n = 100_000u64;
        for k in 0..n {
            let due = t.next_tick(start, &mut rng);
            let nominal = t.nominal(k).unwrap();
            let off = offset_ms(due, nominal);
            assert!((-200.0..200.0).contains(&off), "tick {k}: {off} ms");
            if let Some(p) = previous {
                assert!(due > p, "tick {k} out of order");
            }
            previous = Some(due);
            sum += off;
        }
        let mean = sum / n as f64;
        assert!(mean.abs() < 1.0, "mean offset {mean} ms");
    }

    /// The drift it prevents: the naive loop `sleep(period ± spread)` after
    /// each tick wanders by about spread·√(n/3) ≈ 36 s after 100 000 ticks of
    /// 1 s ± 200 ms; with the same draws, the grid-anchored tick is never more
    /// than 200 ms off.
    #[test]
    fn naive_rescheduling_drifts_and_the_grid_does_not() {
        let start = Instant::now();
        let mut t = Ticks::new(start, MS(1000), MS(200)).unwrap();
        let (mut a, mut b) = (FastRng::seeded(9), FastRng::seeded(9));
        let mut naive = start;
        let mut last = start;
        let n = 100_000u64;
        for k in 0..n {
            last = t.next_tick(start, &mut a);
            let jitter = uniform(Duration::ZERO, MS(400), &mut b);
            if k > 0 {
                naive = naive + MS(800) + jitter;
            }
        }
        let nominal = t.nominal(n - 1).unwrap();
        assert!(offset_ms(last, nominal).abs() < 200.0);
        assert!(
            offset_ms(naive, nominal).abs() > 1000.0,
            "naive drift {} ms",
            offset_ms(naive, nominal)
        );
    }

    /// 10 000 instances started in the same instant: their grids are spread
    /// over the whole period (each tenth of it holds 10 % ± 1.5 % of the
    /// phases; one tenth's standard deviation is 0.3 %, so that is 5σ),
    /// where un-phased ones would all tick within ±spread of the start.
    #[test]
    fn random_phase_spreads_a_fleet_started_together() {
        let now = Instant::now();
        let period = MS(10_000);
        let spread = MS(500);
        let mut seeds = FastRng::seeded(12);
        let mut tenths = [0u32; 10];
        let n = 10_000;
        for _ in 0..n {
            let mut rng = seeds.fork();
            let mut t = Ticks::with_random_phase(now, period, spread, &mut rng).unwrap();
            let first = t.next_tick(now, &mut rng);
            assert!(first >= now && first < now + period + spread * 2);
            let phase = (t.anchor() - now - spread).as_millis() as usize;
            tenths[(phase * 10 / 10_000).min(9)] += 1;
        }
        for (i, c) in tenths.iter().enumerate() {
            let share = f64::from(*c) / f64::from(n);
            assert!((share - 0.1).abs() < 0.015, "tenth {i}: {share}");
        }
    }

    #[test]
    fn a_caller_that_falls_behind_skips_instead_of_bursting() {
        let start = Instant::now();
        let mut t = Ticks::new(start, MS(100), MS(10)).unwrap();
        let mut rng = FastRng::seeded(1);
        let _ = t.next_tick(start, &mut rng);
        // Asleep for 1.05 s: slots 1..=10 have passed (slot 10's window ends
        // at 1.01 s); the next tick is slot 11, not a burst of ten.
        let now = start + MS(1050);
        let due = t.next_tick(now, &mut rng);
        assert_eq!(t.next_slot(), 12);
        assert!(
            due >= start + MS(1090) && due < start + MS(1110),
            "{:?}",
            due - start
        );
        // Inside a slot's window, the slot is still taken.
        let mut t = Ticks::new(start, MS(100), MS(10)).unwrap();
        let _ = t.next_tick(start + MS(5), &mut rng);
        assert_eq!(t.next_slot(), 1);
    }

    #[test]
    fn bad_schedules_name_the_field() {
        let now = Instant::now();
        assert_eq!(
            Ticks::new(now, Duration::ZERO, Duration::ZERO)
                .unwrap_err()
                .field(),
            "period"
        );
        assert_eq!(
            Ticks::new(now, MS(100), MS(51)).unwrap_err().field(),
            "spread"
        );
        assert!(Ticks::new(now, MS(100), MS(50)).is_ok());
        let mut t = Ticks::new(now, Duration::MAX, Duration::ZERO).unwrap();
        let mut rng = FastRng::seeded(1);
        let _ = t.next_tick(now, &mut rng);
        let _ = t.next_tick(now, &mut rng);
        assert_eq!(t.nominal(u64::MAX), None);
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn tokio_interval_ticks_near_its_grid() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            let clock = crate::time::MonotonicClock;
            let start = Instant::now();
            let ticks = Ticks::new(start, MS(30), MS(5)).unwrap();
            let mut every = JitteredInterval::from_parts(ticks, clock, FastRng::seeded(3));
            for k in 0..5 {
                let due = every.tick().await;
                let nominal = every.ticks().nominal(k).unwrap();
                assert!(Instant::now() >= due);
                assert!(offset_ms(due, nominal).abs() <= 5.0);
            }
            // Cancel safety: a dropped wait keeps its tick.
            let slot = every.ticks().next_slot();
            let _ = tokio::time::timeout(MS(1), every.tick()).await;
            let due = every.tick().await;
            assert_eq!(every.ticks().next_slot(), slot + 1);
            assert!(offset_ms(due, every.ticks().nominal(slot).unwrap()).abs() <= 5.0);
        });
    }
}
