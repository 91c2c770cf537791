//! The shedding order as numbers: how much of a server's capacity each
//! kind of request may fill, so that the lowest level is refused first and
//! each level keeps a share no lower level can take.

use super::Priority;
use crate::outcome::error::ConfigError;

/// A request as the shedding rule sees it: its level and whether it is a
/// retry (an inbound attempt number of 2 or more).
///
/// ```
/// use stagger::priority::{Class, Priority};
/// let c = Class::new(Priority::SHEDDABLE, true);
/// assert!(c.retry && c.priority == Priority::SHEDDABLE);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub struct Class {
    /// Its level.
    pub priority: Priority,
    /// Whether it is a retry.
    pub retry: bool,
}

impl Class {
    /// How many classes there are: every level, first attempt or retry.
    pub const COUNT: usize = Priority::LEVELS * 2;

    /// The class of a request of `priority`, a retry or not.
    pub const fn new(priority: Priority, retry: bool) -> Self {
        Class { priority, retry }
    }

    /// Its place in the shedding order: 0 (a `critical_plus` first
    /// attempt, shed last) to 15 (a retry of the lowest level, shed
    /// first).
    pub(crate) const fn index(self) -> usize {
        self.priority.rank() as usize * 2 + self.retry as usize
    }

    /// The class at place `index` of the shedding order (taken modulo
    /// [`COUNT`](Self::COUNT)).
    #[cfg(test)]
    pub(crate) const fn at(index: usize) -> Self {
        let i = index % Self::COUNT;
        Class {
            priority: Priority((i / 2) as u8),
            retry: i % 2 == 1,
        }
    }
}

/// Parts per million.
const PPM: u64 = 1_000_000;

/// How much of a server's capacity (its concurrency limit, or its queue)
/// each level may fill. A request is admitted while fewer than its
/// level's ceiling are in flight, so as load rises the lowest level is
/// refused first, and the part between one level's ceiling and the next
/// lower one's is that level's guaranteed share: no flood of lower work
/// can take it. Within a level, retries stop at a point inside that share
/// (the limiter's [`reserve`](crate::limit::LimiterBuilder::reserve) of
/// it), so they are refused before the level's first attempts and after
/// every request of the levels below.
///
/// The default ceilings, by rank: 100 %, 90 %, 75 %, 60 % (critical_plus
/// to sheddable), then 50, 40, 30 and 20 % for the numbered levels — so
/// `critical_plus` keeps 10 % of the capacity for itself, `critical` 15 %
/// more, and so on. Levels given the same ceiling are one level to this
/// rule: their retries are refused together, before their first attempts.
/// First-attempt ceilings round up, so a server with nothing in flight
/// admits any first attempt. With a capacity of 2 or more and a reserve
/// above zero, a level's retries always stop at least one place below its
/// first attempts, however small the capacity: at a limit of 8, sheddable
/// first attempts may fill 5 places and its retries 4. When rounding gives
/// two levels the same first-attempt ceiling, they are one level at that
/// capacity, as above. So at the smallest capacities the lowest levels'
/// retries may get no place at all.
///
/// ```
/// use stagger::priority::{Ceilings, Class, Priority};
///
/// let c = Ceilings::default();
/// // With a limit of 100 and 20 % of each share kept for first attempts:
/// let cap = |p, retry| c.cap(100, Class::new(p, retry), 0.2);
/// assert_eq!(cap(Priority::CRITICAL_PLUS, false), 100);
/// assert_eq!(cap(Priority::CRITICAL_PLUS, true), 98);
/// assert_eq!(cap(Priority::CRITICAL, false), 90);
/// assert_eq!(cap(Priority::SHEDDABLE, false), 60);
/// // Every level below sheddable is refused before any sheddable request.
/// assert!(cap(Priority::SHEDDABLE, true) > cap(Priority::LOWEST, false));
///
/// // However small the limit, a level's retries stop below its first attempts.
/// let small = |p, retry| c.cap(8, Class::new(p, retry), 0.2);
/// assert_eq!((small(Priority::SHEDDABLE, false), small(Priority::SHEDDABLE, true)), (5, 4));
///
/// let mine = Ceilings::new(&[1.0, 0.8, 0.5])?; // rank 2 and below: 50 %
/// assert_eq!(mine.cap(10, Class::new(Priority::SHEDDABLE, false), 0.0), 5);
/// assert!(Ceilings::new(&[0.5, 0.9]).is_err(), "a lower level may not fill more");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// Each level's ceiling, in parts per million of the capacity.
    ppm: [u32; Priority::LEVELS],
}

impl Default for Ceilings {
    fn default() -> Self {
        Ceilings::from_ppm([
            1_000_000, 900_000, 750_000, 600_000, 500_000, 400_000, 300_000, 200_000,
        ])
    }
}

impl Ceilings {
    /// Ceilings from the shares of the first levels, highest first (one to
    /// eight values, each in (0, 1], none above the one before it); the
    /// levels after the last value given take its share.
    pub fn new(shares: &[f64]) -> Result<Self, ConfigError> {
        if shares.is_empty() || shares.len() > Priority::LEVELS {
            return Err(ConfigError::new(
                "ceilings",
                format!(
                    "{} shares given; one to {} are expected",
                    shares.len(),
                    Priority::LEVELS
                ),
            ));
        }
        let mut ppm = [0u32; Priority::LEVELS];
        let mut above = 1.0f64;
        for (rank, slot) in ppm.iter_mut().enumerate() {
            let share = shares[rank.min(shares.len() - 1)];
            let name = Priority(rank as u8);
            if !(share > 0.0 && share <= 1.0) {
                return Err(ConfigError::new(
                    "ceilings",
                    format!("{share} for {name} is not a share in (0, 1]"),
                ));
            }
            if share > above {
                return Err(ConfigError::new(
                    "ceilings",
                    format!("{name} may not fill more ({share}) than the level above it ({above})"),
                ));
            }
            above = share;
            *slot = (share * PPM as f64).round() as u32;
        }
        Ok(Ceilings::from_ppm(ppm))
    }

    const fn from_ppm(ppm: [u32; Priority::LEVELS]) -> Self {
        Ceilings { ppm }
    }

    /// The share of the capacity level `p` may fill.
    pub fn share(&self, p: Priority) -> f64 {
        f64::from(self.ppm[usize::from(p.rank())]) / PPM as f64
    }

    /// The most requests that may be in flight (or waiting) for one more of
    /// `class` to be admitted, out of a capacity of `total`, when the share
    /// `retry_reserve` (0 to 1) of each level's own part is kept for its
    /// first attempts. For a first attempt, at least 1 for a capacity of at
    /// least 1. For a retry with a capacity of at least 2 and a reserve
    /// above zero, at least one less than the level's first attempts (so
    /// possibly 0); see the [type](Self) for levels that round together.
    pub fn cap(&self, total: u64, class: Class, retry_reserve: f64) -> u64 {
        let ppm = (retry_reserve.clamp(0.0, 1.0) * PPM as f64) as u64;
        self.cap_ppm(total, class, ppm)
    }

    /// [`cap`](Self::cap) with the reserve in parts per million: integer
    /// arithmetic only, for the request path.
    #[inline]
    pub(crate) fn cap_ppm(&self, total: u64, class: Class, reserve_ppm: u64) -> u64 {
        let rank = usize::from(class.priority.rank());
        let top = ceil_share(total, self.ppm[rank]);
        if !class.retry || reserve_ppm == 0 || total < 2 {
            return top;
        }
        // The level's own part at this capacity: down to the next lower
        // level whose rounded ceiling is lower (levels that round to the
        // same ceiling share one part).
        let below = self.ppm[rank + 1..]
            .iter()
            .map(|&ppm| ceil_share(total, ppm))
            .find(|&c| c < top)
            .unwrap_or(0);
        let own = top - below;
        // At least one place of it is kept for first attempts: rounding the
        // kept share down to nothing would let retries fill the level.
        let kept = (own.saturating_mul(reserve_ppm.min(PPM)) / PPM).max(1);
        top - kept
    }
}

/// `⌈total · ppm / 10⁶⌉` without overflow for any capacity a server has.
#[inline]
fn ceil_share(total: u64, ppm: u32) -> u64 {
    match total.checked_mul(u64::from(ppm)) {
        // Every limit and queue a server has: a division by a constant.
        Some(t) => t.div_ceil(PPM),
        None => {
            let t = u128::from(total) * u128::from(ppm);
            t.div_ceil(u128::from(PPM)).min(u128::from(u64::MAX)) as u64
        }
    }
}

/// How much longer a level's `Retry-After` (or pushback) is than the
/// configured range: ×1 for `critical_plus` and `critical`, ×2 for
/// `sheddable_plus`, ×4 for `sheddable`, doubling for each numbered level
/// below (×64 for rank 7). Lower work comes back later, so the clients that
/// matter most find room first.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) const fn retry_after_factor(p: Priority) -> u64 {
    1 << p.rank().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_level_keeps_at_least_one_place_for_first_attempts() {
        // A single level of 100 %: first attempts up to the limit, retries
        // up to `limit − max(1, ⌊limit · reserve⌋)` from a limit of 2.
        let one = Ceilings::new(&[1.0]).unwrap();
        for (limit, retries) in [(1u64, 1), (2, 1), (4, 3), (5, 4), (10, 8), (37, 30)] {
            let c = |retry| one.cap(limit, Class::new(Priority::SHEDDABLE, retry), 0.2);
            assert_eq!((c(false), c(true)), (limit, retries), "{limit}");
        }
    }

    #[test]
    fn sheddable_retries_stop_below_first_attempts_at_small_limits() {
        // Rounding once gave sheddable retries the whole level below a
        // limit of about 40 (5 of 5 at 8, 12 of 12 at 20, 24 of 24 at 40).
        let c = Ceilings::default();
        for (limit, first, retries) in [(8u64, 5, 4), (20, 12, 11), (40, 24, 23), (50, 30, 29)] {
            let cap = |retry| c.cap(limit, Class::new(Priority::SHEDDABLE, retry), 0.2);
            assert_eq!((cap(false), cap(true)), (first, retries), "{limit}");
        }
    }

    #[test]
    fn no_reserve_lets_retries_fill_the_level() {
        let c = Ceilings::default();
        let cap = |retry| c.cap(8, Class::new(Priority::SHEDDABLE, retry), 0.0);
        assert_eq!((cap(false), cap(true)), (5, 5));
    }

    #[test]
    fn the_shedding_order_is_level_first_then_retries() {
        let c = Ceilings::default();
        for total in [1u64, 3, 10, 64, 100, 1000, 1 << 40] {
            let caps: Vec<u64> = (0..Class::COUNT)
                .map(|i| c.cap(total, Class::at(i), 0.2))
                .collect();
            // A retry comes before the next level's first attempt unless
            // the two levels round to one ceiling at this capacity.
            let merged = |i: usize| i % 2 == 1 && i + 1 < caps.len() && caps[i - 1] == caps[i + 1];
            let ordered = |i: usize| caps[i] >= caps[i + 1] || merged(i);
            assert!((0..caps.len() - 1).all(ordered), "{total}: {caps:?}");
            assert!(caps.iter().all(|&n| n <= total), "{caps:?}");
            assert!(caps.iter().step_by(2).all(|&n| n >= 1), "{caps:?}");
            if total >= 100 {
                // Room enough: every class is refused at its own point.
                assert!(caps.windows(2).all(|w| w[0] > w[1]), "{total}: {caps:?}");
            }
        }
        assert_eq!(c.cap(0, Class::default(), 0.5), 0, "no capacity");
    }

    #[test]
    fn retry_after_grows_for_lower_levels() {
        let f: Vec<u64> = Priority::all().map(retry_after_factor).collect();
        assert_eq!(f, [1, 1, 2, 4, 8, 16, 32, 64]);
    }

    #[test]
    fn bad_shares_name_the_level() {
        for (bad, says) in [
            (&[][..], "0 shares"),
            (&[1.0, 0.0][..], "critical"),
            (&[1.0, f64::NAN][..], "NaN"),
            (&[1.0, 1.5][..], "1.5"),
            (&[0.9, 0.95][..], "than the level above"),
        ] {
            let e = Ceilings::new(bad).unwrap_err();
            assert_eq!(e.field(), "ceilings");
            assert!(e.to_string().contains(says), "{bad:?}: {e}");
        }
        assert!(Ceilings::new(&[1.0; 9]).is_err());
    }
}
