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

mod window;

use std::process::ExitCode;
use std::time::Duration;

use stagger::random::FastRng;
use window::{draw, format_in, key_seed, parse_spread, window, Spread};

use crate::args::{SeedArgs, UsageError, Verbosity};

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

/// The window a duration is drawn from, and how it is drawn.
#[derive(Debug, Clone, clap::Args)]
#[command(mut_arg("seed", |a| a
    .help("Draw from this seed: the same seed, the same duration (e.g. `--seed 42`)")))]
pub struct WindowArgs {
    /// `D` (anywhere in 0..D), `A..B` (anywhere in A..B), or `D` with `--spread`
    /// (e.g. `5m`, `30s..2m`).
    #[arg(value_name = "D|A..B", allow_hyphen_values = true)]
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

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

impl WindowArgs {
    fn draw(&self) -> anyhow::Result<Duration> {
        let w = window(&self.window, self.spread).map_err(usage)?;
        let mut rng = match (&self.key, self.seed.seed) {
            (Some(k), _) => FastRng::seeded(key_seed(k.as_bytes())),
            (None, Some(s)) => FastRng::seeded(s),
            (None, None) => FastRng::fresh(),
        };
        Ok(draw(w, &mut rng))
    }
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
