//! `stagger schedule`: what a backoff policy will actually sleep.

mod sample;

use std::io::Write;
use std::process::ExitCode;

use sample::{schedule, top_included, Schedule, MAX_DRAWS, MAX_ROWS, MAX_SAMPLES};
use stagger::{Backoff, Jitter};

use crate::args::{FormatArgs, PolicyArgs, SeedArgs, UsageError};

/// Print the schedule of a policy: per retry n, the capped backoff b_n, the
/// range its jitter draws from, and sampled delays.
///
/// Example: `stagger schedule --jitter decorrelated --attempts 6 --samples 5`
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  stagger schedule                                  (the defaults: 3 attempts, full jitter)
  stagger schedule --attempts 6 --base 1 --cap 30   (bare numbers are seconds)
  stagger schedule --jitter decorrelated --samples 20 --seed 7
  stagger schedule --jitter equal --format json | jq '.retries[].max_ms'

Exit status: 0 printed; 2 bad usage (the message names the flag).")]
#[command(mut_arg("seed", |a| a
    .default_value("1")
    .help("Seed for the samples; the same seed prints the same samples (e.g. `--seed 7`)")))]
pub struct Args {
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    seed: SeedArgs,
    /// Sample delays per retry (each sample is one call's whole chain of delays).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) samples: usize,
    #[command(flatten)]
    format: FormatArgs,
}

/// The schedule the flags describe, validated, with the backoff and the
/// attempt limit it came from.
fn build(a: &Args) -> anyhow::Result<(Backoff, u32, Schedule)> {
    let backoff = a.policy.backoff()?;
    if a.samples > MAX_SAMPLES {
        anyhow::bail!(UsageError(format!(
            "--samples: {} is more than the limit of {MAX_SAMPLES}",
            a.samples
        )));
    }
    let attempts = a.policy.schedule.limit()?;
    let retries = attempts.saturating_sub(1).min(MAX_ROWS);
    if (retries as usize).saturating_mul(a.samples) > MAX_DRAWS {
        anyhow::bail!(UsageError(format!(
            "--samples: {} samples × {retries} retries is more than {MAX_DRAWS} delays; lower --samples or --attempts",
            a.samples
        )));
    }
    let s = schedule(&backoff, retries, a.samples, a.seed.get());
    Ok((backoff, attempts, s))
}

/// The JSON document `--format json` prints (without its final newline);
/// `stagger lab`'s API answers with it.
pub(crate) fn json(a: &Args) -> anyhow::Result<String> {
    let (_, _, s) = build(a)?;
    Ok(serde_json::to_string(&s)?)
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let (backoff, attempts, s) = build(a)?;
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    if a.format.json() {
        serde_json::to_writer(&mut out, &s)?;
        writeln!(out)?;
    } else {
        print_table(&mut out, &backoff, attempts, &s)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn print_table(
    out: &mut impl Write,
    b: &Backoff,
    attempts: u32,
    s: &Schedule,
) -> std::io::Result<()> {
    let shown = s.retries.len();
    // More retries than the table holds: say it stops short.
    let retries = if u64::from(attempts.saturating_sub(1)) > shown as u64 {
        format!(
            "{} retries; the first {shown} shown",
            attempts.saturating_sub(1)
        )
    } else {
        format!("{shown} retries")
    };
    writeln!(
        out,
        "base {:?}, ×{}, cap {:?}, jitter {}, {} attempts ({retries})",
        b.base, b.multiplier, b.cap, b.jitter, attempts,
    )?;
    writeln!(
        out,
        "{:>5}  {:>11}  {:>25}  {:>11}  samples (ms)",
        "retry", "b_n (ms)", "delay range (ms)", "mean (ms)"
    )?;
    for r in &s.retries {
        // Without samples there is no mean to show (`--samples 0`).
        let mean = if r.samples_ms.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.1}",
                r.samples_ms.iter().sum::<f64>() / r.samples_ms.len() as f64
            )
        };
        let shown: Vec<String> = r
            .samples_ms
            .iter()
            .take(6)
            .map(|x| format!("{x:.1}"))
            .collect();
        let more = if r.samples_ms.len() > 6 { " …" } else { "" };
        // Decorrelated jitter draws from the previous delay, not from b_n.
        let b_n = if b.jitter == Jitter::Decorrelated {
            "-".to_string()
        } else {
            format!("{:.1}", r.backoff_ms)
        };
        let close = if top_included(b, r.retry) { ']' } else { ')' };
        writeln!(
            out,
            "{:>5}  {:>11}  {:>25}  {:>11}  {}{}",
            r.retry,
            b_n,
            format!("[{:.1}, {:.1}{close}", r.min_ms, r.max_ms),
            mean,
            shown.join(" "),
            more
        )?;
    }
    if s.retries.is_empty() {
        writeln!(out, "(one attempt: no retries)")?;
    }
    Ok(())
}
