//! Windows to draw a random duration from, for `stagger sleep` and
//! `stagger jitter`: `D` (anywhere in `[0, D)`), `A..B` (anywhere in
//! `[A, B)`) or `D` with a spread (`[D−S, D+S)`, S a duration or a share
//! of D), drawn uniformly; a key's hash as the seed keeps each host in its
//! own fixed slot.

use std::time::Duration;

use stagger::random::RandomSource;

use stagger_sim::duration;

/// How far around D a `--spread` reaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spread {
    /// A fraction of D (written as a percentage).
    Fraction(f64),
    /// A fixed duration.
    Fixed(Duration),
}

/// Reads a spread: `10%` (0 % to 100 %) or a duration (`5s`).
pub fn parse_spread(s: &str) -> Result<Spread, String> {
    let s = s.trim();
    match s.strip_suffix('%') {
        Some(p) => {
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a percentage; write e.g. 10%"))?;
            if p < 0.0 {
                return Err(format!(
                    "`{s}` is negative; a spread is 0% to 100% or a duration (e.g. 10%, 5s)"
                ));
            }
            if !(0.0..=100.0).contains(&p) {
                return Err(format!("{s} is outside 0% to 100%"));
            }
            Ok(Spread::Fraction(p / 100.0))
        }
        None => duration(s).map(Spread::Fixed),
    }
}

/// A half-open window `[lo, hi)` (a single point when equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The start, included.
    pub lo: Duration,
    /// The end, excluded (unless it equals the start).
    pub hi: Duration,
}

/// Reads a window: `D`, `A..B`, or `D` with `spread`; the message names
/// what is wrong.
pub fn window(spec: &str, spread: Option<Spread>) -> Result<Window, String> {
    let spec = spec.trim();
    if spec.starts_with('-') {
        return Err(format!(
            "window `{spec}` is negative: a wait is zero or more (e.g. `5s`, `0..5m`)"
        ));
    }
    let w = match spec.split_once("..") {
        Some((a, b)) => {
            if spread.is_some() {
                return Err(format!(
                    "--spread: give a single duration with it, not the range `{spec}`"
                ));
            }
            let lo = duration(a).map_err(|e| format!("window `{spec}`: {e}"))?;
            let hi = duration(b).map_err(|e| format!("window `{spec}`: {e}"))?;
            if hi < lo {
                return Err(format!("window `{spec}`: the end is before the start"));
            }
            Window { lo, hi }
        }
        None => {
            let d = duration(spec).map_err(|e| format!("window: {e}"))?;
            match spread {
                None => Window {
                    lo: Duration::ZERO,
                    hi: d,
                },
                Some(s) => {
                    let s = match s {
                        Spread::Fixed(s) => s,
                        Spread::Fraction(f) => {
                            Duration::try_from_secs_f64(d.as_secs_f64() * f).unwrap_or(d)
                        }
                    };
                    let lo = d.checked_sub(s).ok_or_else(|| {
                        format!(
                            "--spread: {s:?} is more than {d:?}; the duration would go below zero"
                        )
                    })?;
                    Window {
                        lo,
                        hi: d.saturating_add(s),
                    }
                }
            }
        }
    };
    Ok(w)
}

/// FNV-1a: a hash that is the same in every build and on every machine
/// (std's hasher is randomly keyed), so a `--key` keeps its slot.
pub fn key_seed(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A uniform draw from `[lo, hi)`.
pub fn draw(w: Window, rng: &mut impl RandomSource) -> Duration {
    stagger::scheduled::uniform(w.lo, w.hi, rng)
}

/// `d` in seconds with three decimals (`s`) or whole milliseconds (`ms`).
pub fn format_in(d: Duration, unit: &str) -> String {
    match unit {
        "ms" => d.as_millis().to_string(),
        _ => format!("{}.{:03}", d.as_secs(), d.subsec_millis()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger::random::FastRng;

    fn window(w: &str, spread: Option<&str>) -> Result<Window, String> {
        super::window(w, spread.map(|s| parse_spread(s).unwrap()))
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn windows() {
        assert_eq!(
            window("5m", None).unwrap(),
            Window {
                lo: S(0),
                hi: S(300)
            }
        );
        assert_eq!(
            window("30s..2m", None).unwrap(),
            Window {
                lo: S(30),
                hi: S(120)
            }
        );
        assert_eq!(
            window("30s", Some("10%")).unwrap(),
            Window {
                lo: S(27),
                hi: S(33)
            }
        );
        assert_eq!(
            window("30s", Some("5s")).unwrap(),
            Window {
                lo: S(25),
                hi: S(35)
            }
        );
        assert_eq!(window("0..0", None).unwrap(), Window { lo: S(0), hi: S(0) });
    }

    #[test]
    fn bad_windows_name_the_problem() {
        assert!(window("5m..1m", None)
            .unwrap_err()
            .contains("before the start"));
        assert!(window("soon", None).unwrap_err().contains("soon"));
        assert!(window("1s..x", None).unwrap_err().contains("1s..x"));
        assert!(window("1s", Some("2s")).unwrap_err().contains("--spread"));
        assert!(window("1s..2s", Some("1%"))
            .unwrap_err()
            .contains("--spread"));
        for bad in ["120%", "-1%", "x%", "ten"] {
            assert!(parse_spread(bad).is_err(), "{bad}");
        }
    }

    /// 20 000 draws from [27 s, 33 s): all inside, mean within 0.05 s of 30 s
    /// (the standard error is 6/√12/√20000 ≈ 0.012 s: about 4 sigma).
    #[test]
    fn draws_are_uniform_in_the_window() {
        let w = window("30s", Some("10%")).unwrap();
        let mut rng = FastRng::seeded(7);
        let n = 20_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let d = draw(w, &mut rng);
            assert!(d >= w.lo && d < w.hi, "{d:?}");
            sum += d.as_secs_f64();
        }
        let mean = sum / f64::from(n);
        assert!((mean - 30.0).abs() < 0.05, "mean {mean}");
    }

    #[test]
    fn same_key_same_draw() {
        let w = window("5m", None).unwrap();
        let by = |key: &str| draw(w, &mut FastRng::seeded(key_seed(key.as_bytes())));
        assert_eq!(by("web-1"), by("web-1"));
        assert_ne!(by("web-1"), by("web-2"));
    }

    #[test]
    fn huge_windows_do_not_panic() {
        let w = Window {
            lo: Duration::ZERO,
            hi: Duration::MAX,
        };
        let mut rng = FastRng::seeded(3);
        for _ in 0..1000 {
            let _ = draw(w, &mut rng);
        }
        assert_eq!(format_in(Duration::from_millis(31_482), "s"), "31.482");
        assert_eq!(format_in(Duration::from_millis(31_482), "ms"), "31482");
    }
}
