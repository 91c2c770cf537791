//! The backoff schedule and its jitters.

pub(crate) mod a6;
pub mod scheduled;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::outcome::error::ConfigError;
use crate::random::RandomSource;

/// How a delay is drawn from the capped backoff `b_n`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// Exactly `b_n`: every client that failed together retries together.
    /// Kept to be shown wrong.
    None,
    /// `U(0, b_n)`: the least total work in AWS's comparison. The default.
    #[default]
    Full,
    /// `b_n/2 + U(0, b_n/2)`: a guaranteed minimum wait of half the backoff.
    Equal,
    /// `d_n = min(cap, U(base, 3·d_{n-1}))` with `d_0 = base`: AWS's
    /// decorrelated jitter; the previous delay is carried per call.
    Decorrelated,
    /// `b_n · U(1-f, 1+f)`, as gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) does with f = 0.2. The only jitter that
    /// may exceed the cap, by at most the factor `1+f`.
    Proportional(f64),
}

impl Jitter {
    /// The name used on the command line and in config files.
    pub fn name(&self) -> String {
        match self {
            Jitter::None => "none".into(),
            Jitter::Full => "full".into(),
            Jitter::Equal => "equal".into(),
            Jitter::Decorrelated => "decorrelated".into(),
            Jitter::Proportional(f) => format!("proportional:{f}"),
        }
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Jitter {
    type Err = ConfigError;

    /// Parses `none`, `full`, `equal`, `decorrelated` or `proportional:F`
    /// (F in [0, 1]; `proportional` alone means gRPC's 0.2).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let j = match s.trim() {
            "none" => Jitter::None,
            "full" => Jitter::Full,
            "equal" => Jitter::Equal,
            "decorrelated" => Jitter::Decorrelated,
            "proportional" => Jitter::Proportional(0.2),
            other => match other.strip_prefix("proportional:") {
                Some(f) => {
                    let f: f64 = f.parse().map_err(|_| {
                        ConfigError::new("jitter", format!("`{f}` is not a number"))
                    })?;
                    let j = Jitter::Proportional(f);
                    j.validate()?;
                    j
                }
                None => {
                    return Err(ConfigError::new(
                        "jitter",
                        format!(
                        "unknown jitter `{other}` (expected none, full, equal, decorrelated or proportional:F)"
                    ),
                    ))
                }
            },
        };
        Ok(j)
    }
}

impl Jitter {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Jitter::Proportional(f) = *self {
            if !(0.0..=1.0).contains(&f) {
                return Err(ConfigError::new(
                    "jitter",
                    format!("proportional factor {f} is outside [0, 1]"),
                ));
            }
        }
        Ok(())
    }
}

/// The backoff schedule and its jitters.
///
/// Exponential growth keeps a struggling dependency from being hammered in a
/// tight loop; jitter keeps clients that failed together from coming back
/// together. The capped backoff before retry `n` is
/// `b_n = min(cap, base · multiplier^(n-1))`, and the delay actually slept is
/// drawn from it by a [`Jitter`].
///
/// Every delay is computed as a pure function of the configuration, the retry
/// number and a random source, so a seeded generator replays a schedule
/// exactly, and jitter is applied *inside* the cap (a peer added it after the
/// cap, letting delays reach twice the cap).
///
/// ```
/// use stagger::{Backoff, Jitter};
/// use stagger::random::FastRng;
/// use std::time::Duration;
///
/// let backoff = Backoff { jitter: Jitter::Full, ..Backoff::new() };
/// assert_eq!(backoff.backoff(1), Duration::from_millis(100));
/// assert_eq!(backoff.backoff(4), Duration::from_millis(800));
/// assert_eq!(backoff.backoff(u32::MAX), Duration::from_secs(10));
///
/// let mut rng = FastRng::seeded(1);
/// let delays: Vec<Duration> = backoff.delays(&mut rng).take(4).collect();
/// assert!(delays.iter().zip(1..).all(|(d, n)| *d < backoff.backoff(n)));
/// ```
///
/// A plain `Copy` value with public fields, so a schedule can be a `static`
/// (`Backoff { base: …, ..Backoff::new() }` works in a `const`); a
/// [`Policy`](crate::Policy) checks it with [`validate`](Backoff::validate)
/// when it is built. Defaults (docs/behaviour.md §1): base 100 ms, multiplier 2, cap 10 s, full jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first backoff `b_1`. Zero is allowed (immediate retries).
    pub base: Duration,
    /// The growth factor between steps (at least 1).
    pub multiplier: f64,
    /// The largest backoff (at least `base`).
    pub cap: Duration,
    /// How the delay slept is drawn from the capped backoff.
    pub jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

#[inline(always)]
const fn nanos(d: Duration) -> u64 {
    let n = d.as_nanos();
    if n > u64::MAX as u128 {
        u64::MAX
    } else {
        n as u64
    }
}

impl Backoff {
    /// The default schedule: 100 ms, ×2, capped at 10 s, full jitter.
    pub const fn new() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            multiplier: 2.0,
            cap: Duration::from_secs(10),
            jitter: Jitter::Full,
        }
    }

    /// The base and the cap in nanoseconds, as the schedule computes.
    #[inline(always)]
    const fn bounds_ns(&self) -> (u64, u64) {
        (nanos(self.base), nanos(self.cap))
    }

    /// Checks the schedule, naming the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let m = self.multiplier;
        if m.is_nan() || m < 1.0 || m.is_infinite() {
            return Err(ConfigError::new(
                "multiplier",
                format!("{m} must be a finite number of at least 1"),
            ));
        }
        if self.cap < self.base {
            return Err(ConfigError::new(
                "cap",
                format!("cap {:?} is smaller than base {:?}", self.cap, self.base),
            ));
        }
        self.jitter.validate()
    }

    /// The checks gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) makes of a `retryPolicy`'s schedule, which are
    /// looser than [`validate`](Backoff::validate)'s: any positive finite
    /// multiplier (below 1 the schedule shrinks) and a base above the cap
    /// (every delay is then capped).
    pub(crate) fn validate_a6(&self) -> Result<(), ConfigError> {
        let m = self.multiplier;
        if !(m.is_finite() && m > 0.0) {
            return Err(ConfigError::new(
                "multiplier",
                format!("{m} must be a positive finite number"),
            ));
        }
        self.jitter.validate()
    }

    /// The capped backoff `b_n` before retry `n` (1-based; 0 is treated as 1),
    /// saturating at the cap for any `n`.
    #[inline]
    pub fn backoff(&self, retry: u32) -> Duration {
        Duration::from_nanos(self.backoff_ns(retry))
    }

    #[inline(always)]
    pub(crate) fn backoff_ns(&self, retry: u32) -> u64 {
        let (base_ns, cap_ns) = self.bounds_ns();
        let shrinking = self.multiplier < 1.0;
        if base_ns >= cap_ns && !shrinking {
            return cap_ns;
        }
        let exp = retry.saturating_sub(1);
        if exp == 0 || base_ns == 0 {
            return base_ns.min(cap_ns);
        }
        if self.multiplier == 2.0 {
            // The common case, exactly and without a float power.
            return match base_ns.checked_shl(exp) {
                Some(b) if exp < 64 && b >> exp == base_ns => b.min(cap_ns),
                _ => cap_ns,
            };
        }
        let exp = i32::try_from(exp).unwrap_or(i32::MAX);
        let b = base_ns as f64 * self.multiplier.powi(exp);
        // NaN (a bad multiplier) or beyond the cap both land on the cap.
        if b < cap_ns as f64 {
            if shrinking {
                // A6 allows a multiplier below 1: a shrinking schedule.
                return b as u64;
            }
            // Float rounding of a huge base must not dip below it.
            (b as u64).clamp(base_ns, cap_ns)
        } else {
            cap_ns
        }
    }

    /// The delay to sleep before retry `n`.
    ///
    /// `previous` is the delay slept before the previous retry (only
    /// [`Jitter::Decorrelated`] uses it; pass `None` before the first retry).
    #[inline]
    pub fn delay<R: RandomSource + ?Sized>(
        &self,
        retry: u32,
        previous: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        let prev = previous.map(nanos);
        Duration::from_nanos(self.delay_ns(retry, prev, rng))
    }

    #[inline(always)]
    pub(crate) fn delay_ns<R: RandomSource + ?Sized>(
        &self,
        retry: u32,
        previous: Option<u64>,
        rng: &mut R,
    ) -> u64 {
        match self.jitter {
            Jitter::None => self.backoff_ns(retry),
            Jitter::Full => {
                // Nothing to spread: no draw (a zero base, for immediate retries).
                let b = self.backoff_ns(retry);
                if b == 0 {
                    0
                } else {
                    scale(b, rng.next_f64())
                }
            }
            Jitter::Equal => {
                let b = self.backoff_ns(retry);
                let half = b / 2;
                if b == 0 {
                    0
                } else {
                    half + scale(b - half, rng.next_f64())
                }
            }
            Jitter::Decorrelated => {
                let (base_ns, cap_ns) = self.bounds_ns();
                let prev = previous.unwrap_or(base_ns).max(base_ns);
                let hi = (prev as f64 * 3.0).min(u64::MAX as f64);
                let span = (hi - base_ns as f64).max(0.0);
                let d = base_ns as f64 + span * rng.next_f64();
                let d = if d.is_nan() { 0 } else { d as u64 };
                d.min(cap_ns)
            }
            Jitter::Proportional(f) => {
                let b = self.backoff_ns(retry) as f64;
                let f = if (0.0..=1.0).contains(&f) { f } else { 0.0 };
                let d = b * (1.0 - f + 2.0 * f * rng.next_f64());
                d as u64
            }
        }
    }

    /// The smallest and largest delay the jitter can produce before retry `n`
    /// (the upper end excluded for the random jitters). For
    /// [`Jitter::Decorrelated`] this is the widest range reachable at step `n`:
    /// `[base, min(cap, base · 3^n))`.
    pub fn range(&self, retry: u32) -> (Duration, Duration) {
        let b = self.backoff_ns(retry);
        let (lo, hi) = match self.jitter {
            Jitter::None => (b, b),
            Jitter::Full => (0, b),
            Jitter::Equal => (b / 2, b),
            Jitter::Decorrelated => {
                let (base_ns, cap_ns) = self.bounds_ns();
                let hi = base_ns as f64 * 3f64.powi(i32::try_from(retry).unwrap_or(i32::MAX));
                let hi = if hi < cap_ns as f64 {
                    hi as u64
                } else {
                    cap_ns
                };
                (base_ns.min(cap_ns), hi)
            }
            Jitter::Proportional(f) => {
                let f = if (0.0..=1.0).contains(&f) { f } else { 0.0 };
                ((b as f64 * (1.0 - f)) as u64, (b as f64 * (1.0 + f)) as u64)
            }
        };
        (Duration::from_nanos(lo), Duration::from_nanos(hi))
    }

    /// An endless iterator of delays for retries 1, 2, 3, … drawn from `rng`
    /// (bound it with `take`, or let a [`Policy`](crate::Policy) bound it).
    pub fn delays<R: RandomSource>(&self, mut rng: R) -> impl Iterator<Item = Duration> {
        let backoff = *self;
        let mut previous = None;
        (1..=u32::MAX)
            .chain(std::iter::repeat(u32::MAX))
            .map(move |retry| {
                let d = backoff.delay_ns(retry, previous, &mut rng);
                previous = Some(d);
                Duration::from_nanos(d)
            })
    }
}

#[inline]
fn scale(b: u64, u: f64) -> u64 {
    // u in [0, 1), so the product is in [0, b) and never rounds up to b
    // for b < 2^53; for larger b clamp to stay strictly inside.
    let d = (b as f64 * u) as u64;
    if d >= b && b > 0 {
        b - 1
    } else {
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::FastRng;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn default_schedule_doubles_from_100ms_to_10s() {
        let b = Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        };
        let got: Vec<u128> = (1..=9).map(|n| b.backoff(n).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000]);
    }

    #[test]
    fn zero_base_means_immediate() {
        let b = Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        };
        assert!(b.validate().is_ok());
        let mut rng = FastRng::seeded(3);
        for n in [1, 2, 50, u32::MAX] {
            assert_eq!(b.backoff(n), Duration::ZERO);
            assert_eq!(b.delay(n, None, &mut rng), Duration::ZERO);
        }
    }

    #[test]
    fn validation_names_the_field() {
        let cases = [
            (
                Backoff {
                    multiplier: 0.99,
                    ..Backoff::new()
                },
                "multiplier",
            ),
            (
                Backoff {
                    multiplier: f64::NAN,
                    ..Backoff::new()
                },
                "multiplier",
            ),
            (
                Backoff {
                    multiplier: -2.0,
                    ..Backoff::new()
                },
                "multiplier",
            ),
            (
                Backoff {
                    multiplier: f64::INFINITY,
                    ..Backoff::new()
                },
                "multiplier",
            ),
            (
                Backoff {
                    cap: 50 * MS,
                    ..Backoff::new()
                },
                "cap",
            ),
            (
                Backoff {
                    jitter: Jitter::Proportional(1.5),
                    ..Backoff::new()
                },
                "jitter",
            ),
            (
                Backoff {
                    jitter: Jitter::Proportional(f64::NAN),
                    ..Backoff::new()
                },
                "jitter",
            ),
            (
                Backoff {
                    jitter: Jitter::Proportional(-0.1),
                    ..Backoff::new()
                },
                "jitter",
            ),
        ];
        for (b, field) in cases {
            assert_eq!(b.validate().unwrap_err().field(), field, "{b:?}");
        }
    }

    #[test]
    fn bad_configs_do_not_panic() {
        let mut rng = FastRng::seeded(9);
        for b in [
            Backoff {
                multiplier: f64::NAN,
                ..Backoff::new()
            },
            Backoff {
                multiplier: -3.0,
                ..Backoff::new()
            },
            Backoff {
                cap: Duration::ZERO,
                ..Backoff::new()
            },
            Backoff {
                jitter: Jitter::Proportional(f64::NAN),
                ..Backoff::new()
            },
            Backoff {
                base: Duration::MAX,
                cap: Duration::MAX,
                ..Backoff::new()
            },
        ] {
            for n in [0, 1, 2, 64, 1_000_000, u32::MAX] {
                let _ = b.delay(n, Some(Duration::MAX), &mut rng);
                let _ = b.range(n);
            }
        }
    }

    #[test]
    fn jitter_names_round_trip() {
        for j in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
            Jitter::Proportional(0.25),
        ] {
            assert_eq!(j.name().parse::<Jitter>().unwrap(), j);
        }
        assert_eq!(
            "proportional".parse::<Jitter>().unwrap(),
            Jitter::Proportional(0.2)
        );
        assert_eq!("sometimes".parse::<Jitter>().unwrap_err().field(), "jitter");
        assert!("proportional:2".parse::<Jitter>().is_err());
    }

    /// Regression (backon): jitter added after the cap let delays reach twice
    /// the cap. Every delay at every step of a capped schedule stays below it.
    #[test]
    fn jitter_is_applied_inside_the_cap() {
        let cap = Duration::from_secs(1);
        for j in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            let b = Backoff {
                cap,
                jitter: j,
                ..Backoff::new()
            };
            let mut rng = FastRng::seeded(5);
            for d in b.delays(&mut rng).take(10_000) {
                assert!(d <= cap, "{j}: {d:?}");
            }
        }
    }
}
