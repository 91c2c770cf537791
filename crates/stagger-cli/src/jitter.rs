//! `stagger sleep` and `stagger jitter`: jitter for scheduled shell work.
//!
//! Every host's crontab says `0 3 * * *`, so every backup hits the storage
//! server at 03:00:00. `stagger sleep 0..5m && backup.sh` spreads them over
//! five minutes; `stagger jitter` prints such a duration for scripts that
//! do their own waiting (`sleep "$(stagger jitter 30s --spread 10%)"`).
//!
//! Both take one window: `D` (anywhere in `[0, D)`), `A..B` (anywhere in
//! `[A, B)`), or `D --spread S` (anywhere in `[D−S, D+S)`, S a duration or a
//! percentage of D). The draw is uniform, from a fresh random stream, a
//! `--seed`, or a `--key` (the same key always draws the same duration: each
//! host keeps its own fixed slot, so its runs stay evenly spaced).

use std::process::ExitCode;
use std::time::Duration;

use stagger::random::{FastRng, RandomSource};

use crate::args::{duration, SeedArgs, UsageError, Verbosity};

const SLEEP_EXAMPLES: &str = "\
Examples:
  stagger sleep 0..5m && backup.sh        # crontab: start within 5 minutes
  stagger sleep 10m --key \"$(hostname)\"   # the same offset on every run of a host
  stagger sleep 30 --spread 20%           # 24 to 36 seconds (bare numbers are seconds)
  stagger sleep 0..5m --key \"$(hostname)\" --print   # show this host's delay, do not sleep
Windows are half-open: `5m` is [0, 5m), `A..B` is [A, B), `D --spread S` is [D-S, D+S).

Exit status: 0 slept (or printed); 2 bad usage (the message names the flag).
Interrupted, it ends by the signal, as sleep(1) does.";

const JITTER_EXAMPLES: &str = "\
Examples:
  sleep \"$(stagger jitter 30s --spread 10%)\"   # 27 to 33 seconds
  stagger jitter 0..5m --unit ms               # e.g. 183412
  stagger jitter 1h --spread 5m --seed 7       # the same value every time
Windows are half-open: `5m` is [0, 5m), `A..B` is [A, B), `D --spread S` is [D-S, D+S).

Exit status: 0 printed; 2 bad usage (the message names the flag).";

/// How far around D a `--spread` reaches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spread {
    /// A fraction of D (written as a percentage).
    Fraction(f64),
    /// A fixed duration.
    Fixed(Duration),
}

fn parse_spread(s: &str) -> Result<Spread, String> {
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

/// The window a duration is drawn from, and how it is drawn.
#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("seed", |a| a
    .help("Draw from this seed: the same seed, the same duration (e.g. `--seed 42`)")))]
pub struct WindowArgs {
    /// `D` (anywhere in 0..D), `A..B` (anywhere in A..B), or `D` with `--spread`
    /// (e.g. `5m`, `30s..2m`).
    #[arg(value_name = "D|A..B")]
    window: String,
    /// Draw within D ± S instead, S a duration or a percentage of D
    /// (e.g. `--spread 10%`, `--spread 5s`).
    #[arg(long, value_parser = parse_spread, value_name = "S")]
    spread: Option<Spread>,
    #[command(flatten)]
    seed: SeedArgs,
    /// Draw from a hash of this text: the same key always gives the same duration,
    /// different keys different ones (e.g. `--key "$(hostname)"`).
    #[arg(long, value_name = "TEXT", conflicts_with = "seed")]
    key: Option<String>,
}

/// Sleep a uniformly random time in a window, then exit 0.
///
/// Example (crontab): `0 3 * * * stagger sleep 0..5m && backup.sh`
#[derive(Debug, clap::Args)]
#[command(after_help = SLEEP_EXAMPLES)]
pub struct SleepArgs {
    #[command(flatten)]
    window: WindowArgs,
    /// Print the drawn delay on stdout in seconds (e.g. 183.412) and exit
    /// at once instead of sleeping (e.g. `--print`).
    #[arg(long)]
    print: bool,
    /// `-v` says on stderr how long it sleeps; `-q` is accepted for
    /// symmetry (sleep says nothing else).
    #[command(flatten)]
    talk: Verbosity,
}

/// Print a uniformly random duration from a window, for scripts.
///
/// Example: `sleep "$(stagger jitter 30s --spread 10%)"` sleeps 27 to 33 s.
#[derive(Debug, clap::Args)]
#[command(after_help = JITTER_EXAMPLES)]
pub struct JitterArgs {
    #[command(flatten)]
    window: WindowArgs,
    /// Unit of the printed number: `s` (decimal seconds, e.g. 31.482) or `ms`
    /// (whole milliseconds) (e.g. `--unit ms`).
    #[arg(long, default_value = "s", value_parser = ["s", "ms"], value_name = "UNIT")]
    unit: String,
}

/// A half-open window `[lo, hi)` (a single point when equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    lo: Duration,
    hi: Duration,
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

impl WindowArgs {
    fn window(&self) -> anyhow::Result<Window> {
        let spec = self.window.trim();
        let w = match spec.split_once("..") {
            Some((a, b)) => {
                if self.spread.is_some() {
                    return Err(usage(format!(
                        "--spread: give a single duration with it, not the range `{spec}`"
                    )));
                }
                let lo = duration(a).map_err(|e| usage(format!("window `{spec}`: {e}")))?;
                let hi = duration(b).map_err(|e| usage(format!("window `{spec}`: {e}")))?;
                if hi < lo {
                    return Err(usage(format!(
                        "window `{spec}`: the end is before the start"
                    )));
                }
                Window { lo, hi }
            }
            None => {
                let d = duration(spec).map_err(|e| usage(format!("window: {e}")))?;
                match self.spread {
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
                            usage(format!(
                                "--spread: {s:?} is more than {d:?}; the duration would go below zero"
                            ))
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

    fn rng(&self) -> FastRng {
        match (&self.key, self.seed.seed) {
            (Some(k), _) => FastRng::seeded(fnv1a(k.as_bytes())),
            (None, Some(s)) => FastRng::seeded(s),
            (None, None) => FastRng::fresh(),
        }
    }

    fn draw(&self) -> anyhow::Result<Duration> {
        let w = self.window()?;
        Ok(draw(w, &mut self.rng()))
    }
}

/// FNV-1a: a hash that is the same in every build and on every machine
/// (std's hasher is randomly keyed), so a `--key` keeps its slot.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A uniform draw from `[lo, hi)`.
fn draw(w: Window, rng: &mut impl RandomSource) -> Duration {
    stagger::scheduled::uniform(w.lo, w.hi, rng)
}

pub fn sleep(a: &SleepArgs) -> anyhow::Result<ExitCode> {
    let d = a.window.draw()?;
    if a.print {
        println!("{}", format_in(d, "s"));
        return Ok(ExitCode::SUCCESS);
    }
    if a.talk.verbose {
        eprintln!("stagger: sleeping {}", crate::run::human(d));
    }
    std::thread::sleep(d);
    Ok(ExitCode::SUCCESS)
}

pub fn jitter(a: &JitterArgs) -> anyhow::Result<ExitCode> {
    let d = a.window.draw()?;
    println!("{}", format_in(d, &a.unit));
    Ok(ExitCode::SUCCESS)
}

fn format_in(d: Duration, unit: &str) -> String {
    match unit {
        "ms" => d.as_millis().to_string(),
        _ => format!("{}.{:03}", d.as_secs(), d.subsec_millis()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(window: &str, spread: Option<&str>) -> WindowArgs {
        WindowArgs {
            window: window.into(),
            spread: spread.map(|s| parse_spread(s).unwrap()),
            seed: SeedArgs { seed: Some(1) },
            key: None,
        }
    }

    fn window(w: &str, spread: Option<&str>) -> Result<Window, String> {
        args(w, spread).window().map_err(|e| e.to_string())
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
        let mut a = args("5m", None);
        a.key = Some("web-1".into());
        let mut b = a.clone();
        assert_eq!(a.draw().unwrap(), b.draw().unwrap());
        b.key = Some("web-2".into());
        assert_ne!(a.draw().unwrap(), b.draw().unwrap());
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
