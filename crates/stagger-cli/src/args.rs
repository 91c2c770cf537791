//! Flags shared by several subcommands, each defined once.

use std::time::Duration;

use clap::Args;
use stagger::{Backoff, Jitter, Policy};

/// Parses a duration with units: `250ms`, `5s`, `1m30s`, `0`.
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. 250ms, 5s, 1m"))
}

/// Parses a jitter name: none, full, equal, decorrelated, proportional:F.
pub fn jitter(s: &str) -> Result<Jitter, String> {
    s.parse::<Jitter>().map_err(|e| e.problem().to_string())
}

/// The backoff schedule and attempt limit (SPEC §1 defaults).
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Max attempts, the first included (e.g. `--attempts 5`).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub attempts: u32,
    /// The first backoff b_1 (e.g. `--base 250ms`; 0 retries at once).
    #[arg(long, default_value = "100ms", value_parser = duration, value_name = "D")]
    pub base: Duration,
    /// Growth factor between backoff steps (e.g. `--multiplier 1.5`; at least 1).
    #[arg(long, default_value_t = 2.0, value_name = "X")]
    pub multiplier: f64,
    /// Largest backoff (e.g. `--cap 30s`).
    #[arg(long, default_value = "10s", value_parser = duration, value_name = "D")]
    pub cap: Duration,
    /// How delays are drawn: none | full | equal | decorrelated | proportional:F
    /// (e.g. `--jitter proportional:0.2`).
    #[arg(long, default_value = "full", value_parser = jitter, value_name = "J")]
    pub jitter: Jitter,
}

impl PolicyArgs {
    /// The schedule these flags describe, validated.
    pub fn backoff(&self) -> anyhow::Result<Backoff> {
        let b = Backoff::new()
            .base(self.base)
            .multiplier(self.multiplier)
            .cap(self.cap)
            .jitter(self.jitter);
        b.validate().map_err(flag_error)?;
        if self.attempts == 0 {
            anyhow::bail!(UsageError(
                "--attempts: must be at least 1 (the first attempt counts)".into()
            ));
        }
        Ok(b)
    }

    /// A policy builder with these flags applied.
    #[allow(dead_code)] // used by `run` and `http`, merged separately
    pub fn policy(&self) -> anyhow::Result<stagger::PolicyBuilder> {
        Ok(Policy::builder()
            .backoff(self.backoff()?)
            .max_attempts(self.attempts))
    }
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

/// Turns a lab error into a usage error (exit 2) or a failure (exit 1).
pub fn lab_error(e: stagger_lab::Error) -> anyhow::Error {
    match e.kind() {
        stagger_lab::ErrorKind::Usage => UsageError(e.to_string()).into(),
        _ => e.into(),
    }
}
