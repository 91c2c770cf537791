//! Jittered TTLs.

use std::time::Duration;

use super::uniform;
use crate::outcome::error::ConfigError;
use crate::random::RandomSource;

/// A time-to-live drawn uniformly from `[ttl − spread, ttl + spread)`.
///
/// **What it prevents:** entries written together expiring together. A
/// deploy, a cold start or a cache flush fills thousands of entries within
/// seconds; with one fixed TTL they all expire within the same seconds, and
/// every miss lands on the database at once — every TTL later, again. Drawn
/// from a window of width `2·spread`, the same entries expire spread over
/// that window, so the refill load is spread with them. The mean TTL stays
/// `ttl`.
///
/// The spread may not exceed the TTL: an entry must never expire as soon as
/// it is written.
///
/// ```
/// use stagger::scheduled::JitteredTtl;
/// use stagger::random::FastRng;
/// use std::time::Duration;
///
/// let ttl = JitteredTtl::new(Duration::from_secs(60), Duration::from_secs(6))?;
/// let mut rng = FastRng::seeded(1);
/// for _ in 0..100 {
///     let d = ttl.sample(&mut rng);
///     assert!(d >= Duration::from_secs(54) && d < Duration::from_secs(66));
/// }
/// let err = JitteredTtl::new(Duration::from_secs(1), Duration::from_secs(2)).unwrap_err();
/// assert_eq!(err.field(), "spread");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JitteredTtl {
    ttl: Duration,
    spread: Duration,
}

impl JitteredTtl {
    /// `ttl ± spread`; an error naming `spread` if it exceeds `ttl`.
    pub fn new(ttl: Duration, spread: Duration) -> Result<Self, ConfigError> {
        if spread > ttl {
            return Err(ConfigError::new(
                "spread",
                format!(
                    "{spread:?} is more than the ttl {ttl:?}: entries could expire as soon as written"
                ),
            ));
        }
        Ok(JitteredTtl { ttl, spread })
    }

    /// `ttl ± fraction·ttl`, with `fraction` in `[0, 1]` (0.1 is ±10 %).
    ///
    /// ```
    /// use stagger::scheduled::JitteredTtl;
    /// use std::time::Duration;
    ///
    /// let ttl = JitteredTtl::with_fraction(Duration::from_secs(100), 0.2)?;
    /// assert_eq!(ttl.spread(), Duration::from_secs(20));
    /// assert!(JitteredTtl::with_fraction(Duration::from_secs(100), 1.5).is_err());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn with_fraction(ttl: Duration, fraction: f64) -> Result<Self, ConfigError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(ConfigError::new(
                "spread",
                format!("fraction {fraction} is outside [0, 1]"),
            ));
        }
        let spread = Duration::try_from_secs_f64(ttl.as_secs_f64() * fraction)
            .unwrap_or(ttl)
            .min(ttl);
        Self::new(ttl, spread)
    }

    /// The mean TTL.
    pub const fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How far a sample may be from the mean.
    pub const fn spread(&self) -> Duration {
        self.spread
    }

    /// The window `[ttl − spread, ttl + spread)` samples come from
    /// (the upper end saturates at `Duration::MAX`).
    pub fn range(&self) -> (Duration, Duration) {
        (
            self.ttl.saturating_sub(self.spread),
            self.ttl.saturating_add(self.spread),
        )
    }

    /// Draws one TTL: one draw per entry, from the writer's own stream.
    pub fn sample<R: RandomSource + ?Sized>(&self, rng: &mut R) -> Duration {
        let (lo, hi) = self.range();
        uniform(lo, hi, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::FastRng;

    const S: fn(u64) -> Duration = Duration::from_secs;

    /// 100 000 draws of 60 s ± 6 s: all inside the window; the mean within
    /// 0.05 s of 60 s (standard error 12/√12/√100000 ≈ 0.011 s, so about
    /// 4.5σ); each of 12 one-second buckets within 5 % of n/12 (a bucket's
    /// standard deviation is about 1.05 % of its expected count: 5 % ≈ 4.8σ).
    #[test]
    fn samples_are_uniform_over_the_window() {
        let ttl = JitteredTtl::new(S(60), S(6)).unwrap();
        let mut rng = FastRng::seeded(2024);
        let n = 100_000usize;
        let mut buckets = [0usize; 12];
        let mut sum = 0.0;
        for _ in 0..n {
            let d = ttl.sample(&mut rng);
            assert!(d >= S(54) && d < S(66), "{d:?}");
            sum += d.as_secs_f64();
            buckets[(d - S(54)).as_secs() as usize] += 1;
        }
        let mean = sum / n as f64;
        assert!((mean - 60.0).abs() < 0.05, "mean {mean}");
        let expected = n as f64 / 12.0;
        for (i, b) in buckets.iter().enumerate() {
            let err = (*b as f64 - expected).abs() / expected;
            assert!(err < 0.05, "bucket {i}: {b} vs {expected}");
        }
    }

    /// The synchronization it prevents: 1 000 entries written in the same
    /// instant. With a fixed TTL all expire in one instant; with ±10 % no
    /// one-second window holds more than 117 (expected 83, standard
    /// deviation 8.8: the allowance is 3.8σ).
    #[test]
    fn entries_written_together_expire_apart() {
        let fixed = JitteredTtl::new(S(60), Duration::ZERO).unwrap();
        let spread = JitteredTtl::with_fraction(S(60), 0.1).unwrap();
        let mut rng = FastRng::seeded(5);
        let same: Vec<Duration> = (0..1000).map(|_| fixed.sample(&mut rng)).collect();
        assert!(same.iter().all(|d| *d == S(60)));
        let mut per_second = [0usize; 12];
        for _ in 0..1000 {
            per_second[(spread.sample(&mut rng) - S(54)).as_secs() as usize] += 1;
        }
        let worst = per_second.iter().max().copied().unwrap_or(0);
        assert!(worst <= 117, "{per_second:?}");
    }

    #[test]
    fn bad_spreads_name_the_field() {
        assert_eq!(JitteredTtl::new(S(1), S(2)).unwrap_err().field(), "spread");
        for f in [-0.1, 1.01, f64::NAN, f64::INFINITY] {
            assert_eq!(
                JitteredTtl::with_fraction(S(1), f).unwrap_err().field(),
                "spread",
                "{f}"
            );
        }
        let t = JitteredTtl::with_fraction(Duration::MAX, 1.0).unwrap();
        let mut rng = FastRng::seeded(1);
        let _ = t.sample(&mut rng);
        assert_eq!(t.range().1, Duration::MAX);
    }

    #[test]
    fn same_seed_same_ttls() {
        let ttl = JitteredTtl::with_fraction(S(30), 0.5).unwrap();
        let (mut a, mut b) = (FastRng::seeded(3), FastRng::seeded(3));
        for _ in 0..100 {
            assert_eq!(ttl.sample(&mut a), ttl.sample(&mut b));
        }
    }
}
