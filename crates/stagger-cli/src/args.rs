//! Flags shared by several subcommands, each defined once.

use std::time::Duration;

use clap::Args;
use stagger::{Backoff, Jitter, Policy};

/// Parses a duration as sleep(1) and timeout(1) take it (the library's
/// parser, shared with the lab's API).
///
/// clap puts the flag's name in front of the message. A negative value
/// reaches this parser (rather than being read as a flag) because `main`
/// lets every `D` option take values that start with `-`.
pub use stagger_sim::duration;

/// A duration where 0 means "no limit", as in curl's `--max-time 0` and
/// `timeout 0 CMD`.
pub fn limit(d: Option<Duration>) -> Option<Duration> {
    d.filter(|d| !d.is_zero())
}

/// Parses a jitter name: none, full, equal, decorrelated, proportional:F.
pub fn jitter(s: &str) -> Result<Jitter, String> {
    s.parse::<Jitter>().map_err(|e| e.problem().to_string())
}

/// An attempt limit: a whole number, or `unlimited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts(pub Option<u32>);

fn attempts(s: &str) -> Result<Attempts, String> {
    match s.trim() {
        "unlimited" => Ok(Attempts(None)),
        t if t.starts_with('-') => Err(format!(
            "`{t}` is negative; give a whole number of attempts, 1 or more (e.g. 5)"
        )),
        t => match t.parse::<u64>() {
            Ok(n) => u32::try_from(n)
                .map(|n| Attempts(Some(n)))
                .map_err(|_| format!("`{t}` is more than the most attempts, {}", u32::MAX)),
            Err(_) => Err(format!("`{t}` is not a whole number or `unlimited`")),
        },
    }
}

/// The retry schedule every subcommand that retries shares: attempt limit,
/// first backoff, cap. The flags are defined here once; each subcommand
/// sets its own defaults with `mut_arg` (`simulate` has none: each model
/// brings its own).
#[derive(Debug, Clone, Args)]
pub struct ScheduleArgs {
    /// Max attempts, the first included (e.g. `--attempts 5`).
    #[arg(long, value_parser = attempts, value_name = "N")]
    pub attempts: Option<Attempts>,
    /// The first backoff b_1 (e.g. `--base 250ms`; 0 retries at once).
    #[arg(long, value_parser = duration, value_name = "D")]
    pub base: Option<Duration>,
    /// Largest backoff (e.g. `--cap 30s`).
    #[arg(long, value_parser = duration, value_name = "D")]
    pub cap: Option<Duration>,
}

impl ScheduleArgs {
    /// The attempt limit as a number: `unlimited` (only `simulate` runs
    /// without a limit) and 0 are usage errors.
    pub fn limit(&self) -> anyhow::Result<u32> {
        match self.attempts {
            Some(Attempts(Some(0))) => Err(UsageError(
                "--attempts: must be at least 1 (the first attempt counts)".into(),
            )
            .into()),
            Some(Attempts(Some(n))) => Ok(n),
            Some(Attempts(None)) => Err(UsageError(
                "--attempts: `unlimited` is only for `stagger simulate`; give a number".into(),
            )
            .into()),
            None => Err(UsageError("--attempts: required".into()).into()),
        }
    }

    /// The first backoff (zero if the subcommand has no default and none
    /// was given).
    pub fn base(&self) -> Duration {
        self.base.unwrap_or_default()
    }

    /// The cap (zero if the subcommand has no default and none was given).
    pub fn cap(&self) -> Duration {
        self.cap.unwrap_or_default()
    }
}

/// The schedule with the library's defaults, plus the multiplier and the
/// jitter: the whole backoff of `schedule`, `run` and `http`.
#[derive(Debug, Clone, Args)]
#[command(
    mut_arg("attempts", |a| a.default_value("3")),
    mut_arg("base", |a| a.default_value("100ms")),
    mut_arg("cap", |a| a.default_value("10s"))
)]
pub struct PolicyArgs {
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    /// Growth factor between backoff steps (e.g. `--multiplier 1.5`; at least 1).
    #[arg(long, default_value_t = 2.0, value_name = "X")]
    pub multiplier: f64,
    /// How delays are drawn: none | full | equal | decorrelated | proportional:F
    /// (e.g. `--jitter proportional:0.2`).
    #[arg(long, default_value = "full", value_parser = jitter, value_name = "J")]
    pub jitter: Jitter,
}

impl PolicyArgs {
    /// The schedule these flags describe, validated.
    pub fn backoff(&self) -> anyhow::Result<Backoff> {
        let b = Backoff {
            base: self.schedule.base(),
            multiplier: self.multiplier,
            cap: self.schedule.cap(),
            jitter: self.jitter,
        };
        b.validate().map_err(flag_error)?;
        self.schedule.limit()?;
        Ok(b)
    }

    /// A policy builder with these flags applied.
    pub fn policy(&self) -> anyhow::Result<stagger::PolicyBuilder> {
        Ok(Policy::builder()
            .backoff(self.backoff()?)
            .max_attempts(self.schedule.limit()?))
    }
}

/// `--seed`: where the random draws start. The same seed replays the same
/// output; each subcommand says what it seeds and sets its default.
#[derive(Debug, Clone, Args)]
pub struct SeedArgs {
    /// Seed of the random draws: the same seed, the same output (e.g. `--seed 7`).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

impl SeedArgs {
    /// The seed (1 when the subcommand has no default and none was given).
    pub fn get(&self) -> u64 {
        self.seed.unwrap_or(1)
    }
}

/// Output on stdout for people or for programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: a table, a body, lines (`table` is accepted too).
    #[value(alias = "table")]
    Text,
    /// One JSON document.
    Json,
}

/// `--format text|json`, the same on every subcommand that prints.
#[derive(Debug, Clone, Args)]
pub struct FormatArgs {
    /// Output on stdout: text | json (e.g. `--format json`).
    #[arg(long, value_enum, default_value_t = Format::Text, value_name = "F")]
    pub format: Format,
}

/// What `stagger audit` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    /// A table for people, at most 120 columns.
    Text,
    /// The report as JSON.
    Json,
    /// A SARIF 2.1.0 log: each finding at its file and line, every check as a rule.
    Sarif,
}

impl FormatArgs {
    /// Whether JSON was asked for.
    pub fn json(&self) -> bool {
        self.format == Format::Json
    }
}

/// `-v`/`-q`: how much stagger says on stderr, the same on every
/// subcommand that talks. Errors are printed whatever these say.
#[derive(Debug, Clone, Args)]
pub struct Verbosity {
    /// Say more on stderr: each attempt, wait and decision (e.g. `-v`).
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,
    /// Say nothing of stagger's own on stderr but errors (e.g. `-q` in a crontab).
    #[arg(short, long)]
    pub quiet: bool,
}

/// Makes negative values reach the parsers, so `--deadline -1s`,
/// `--attempts -3` and `--spread -10%` get a message naming the flag
/// instead of clap's "unexpected argument '-3' found": an option whose
/// value is a duration (`D`) or a spread (`S`) takes any value that starts
/// with `-`; every other option that takes a value takes a negative
/// number (`-3`, `-0.5`), so `-H -v` still reads `-v` as a flag.
pub fn negative_durations_reach_the_parser(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_args(|a| {
        let takes_value = a.get_action().takes_values();
        let hyphen = a
            .get_value_names()
            .is_some_and(|v| v.len() == 1 && (v[0] == "D" || v[0] == "S"));
        if a.is_positional() || !(takes_value || hyphen) {
            a
        } else if hyphen {
            a.allow_hyphen_values(true)
        } else {
            a.allow_negative_numbers(true)
        }
    });
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    names.into_iter().fold(cmd, |cmd, name| {
        cmd.mut_subcommand(name, negative_durations_reach_the_parser)
    })
}

/// Exits with clap's message for a bad value, naming the flag as the user
/// typed it (`-m`, `--deadline`) rather than its canonical name
/// (`--max-time`), so the message points at what is on the command line.
pub fn exit_naming_the_flag_typed(e: clap::Error, argv: &[std::ffi::OsString]) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if let (ErrorKind::UnknownArgument, Some(ContextValue::String(arg))) =
        (e.kind(), e.get(ContextKind::InvalidArg))
    {
        let name = arg.split('=').next().unwrap_or(arg);
        if let Some(tip) = habit(name) {
            let msg = e.render().to_string();
            let msg = match msg.find("\nFor more information") {
                Some(i) => format!("{}\n  tip: {tip}{}", &msg[..i], &msg[i..]),
                None => format!("{msg}  tip: {tip}\n"),
            };
            eprint!("{msg}");
            std::process::exit(e.exit_code());
        }
    }
    if let Some(msg) = negative_count(&e, argv) {
        eprint!("{msg}");
        std::process::exit(e.exit_code());
    }
    let renamed = match (
        e.kind(),
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) {
        (
            ErrorKind::ValueValidation | ErrorKind::InvalidValue,
            Some(ContextValue::String(arg)),
            Some(ContextValue::String(value)),
        ) => {
            let canonical = arg.split(' ').next().unwrap_or(arg);
            typed_flag(argv, value)
                .filter(|typed| typed != canonical)
                .map(|typed| {
                    e.render().to_string().replacen(
                        &format!("'{canonical}"),
                        &format!("'{typed}"),
                        1,
                    )
                })
        }
        _ => None,
    };
    match renamed {
        Some(msg) => {
            eprint!("{msg}");
            std::process::exit(e.exit_code())
        }
        None => e.exit(),
    }
}

/// clap's message for a negative value given to a whole-number option
/// (`--retry -1`: "invalid digit found in string"), said as what the flag
/// takes. `None` for every other error.
fn negative_count(e: &clap::Error, argv: &[std::ffi::OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) else {
        return None;
    };
    // A whole-number option refuses `-3` in one of two ways: the integer
    // parser finds a digit it does not expect (usize, u64), or clap's
    // ranged parser says it is not in 0..=MAX (u8 to u32).
    let unsigned = std::error::Error::source(e).is_some_and(|s| {
        s.downcast_ref::<std::num::ParseIntError>()
            .is_some_and(|p| *p.kind() == std::num::IntErrorKind::InvalidDigit)
            || s.to_string()
                .starts_with(&format!("{value} is not in 0..="))
    });
    if e.kind() != ErrorKind::ValueValidation || !value.starts_with('-') || !unsigned {
        return None;
    }
    let canonical = arg.split(' ').next().unwrap_or(arg);
    let flag = typed_flag(argv, value).unwrap_or_else(|| canonical.to_string());
    Some(format!(
        "error: {flag}: `{value}` is negative; {flag} takes a whole number, 0 or more \
         (e.g. {flag} 3)\n\nFor more information, try '--help'.\n"
    ))
}

/// What stagger calls a flag that curl or timeout(1) users reach for
/// where its meaning differs from any of ours (the same meaning is an
/// alias instead).
fn habit(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "--timeout" => {
            "a limit on one attempt is --attempt-timeout D; on the whole run, --deadline D"
        }
        "--retry-max-time" => {
            "-m/--max-time D (also --deadline) bounds the whole call, waits included"
        }
        "--retry-delay" => {
            "--base D is the first wait; later ones grow by --multiplier up to --cap"
        }
        "--retry-connrefused" => "refused connections are always retried",
        "--retry-all-errors" => "stagger retries what is safe to retry; --retry-500 adds HTTP 500",
        "--data-raw" | "--data-ascii" => {
            "-d sends text as typed; --data-binary sends a file byte for byte"
        }
        "--user" => "send credentials with -H 'Authorization: …'",
        "--compressed" => "responses are passed on as the server sends them",
        _ => return None,
    })
}

/// The flag that carried `value` on the command line: `-m 5`, `-m5`,
/// `--deadline 5` or `--deadline=5`.
fn typed_flag(argv: &[std::ffi::OsString], value: &str) -> Option<String> {
    let args: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    for (i, a) in args.iter().enumerate().skip(1) {
        if a == "--" {
            break;
        }
        if let Some((flag, v)) = a.split_once('=') {
            if flag.starts_with("--") && v == value {
                return Some(flag.to_string());
            }
        }
        if a == value && args[i - 1].starts_with('-') && args[i - 1].len() > 1 {
            return Some(args[i - 1].clone());
        }
        if a.len() > 2 && a.starts_with('-') && !a.starts_with("--") && a[2..] == *value {
            return Some(a[..2].to_string());
        }
    }
    None
}

/// A bad flag value: the binary exits 2 with this message.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Turns a library config error into a usage error naming the flag.
pub fn flag_error(e: stagger::ConfigError) -> anyhow::Error {
    let flag = e.field().replace('_', "-");
    UsageError(format!("--{flag}: {}", e.problem())).into()
}

/// Turns a game-day error into a usage error (exit 2) or a failure (exit 1).
pub fn gameday_error(e: stagger_gameday::Error) -> anyhow::Error {
    match e.kind() {
        stagger_gameday::ErrorKind::Usage => UsageError(e.to_string()).into(),
        _ => e.into(),
    }
}
