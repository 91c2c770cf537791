//! `stagger schedule`: what a backoff policy will actually sleep.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;
use stagger::random::FastRng;
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

/// One row of the schedule, as printed in JSON.
#[derive(Debug, Serialize)]
struct Row {
    retry: u32,
    backoff_ms: f64,
    min_ms: f64,
    max_ms: f64,
    samples_ms: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Schedule {
    retries: Vec<Row>,
}

const MAX_SAMPLES: usize = 10_000_000;
/// At most this many retries in one schedule's table; a longer schedule
/// shows its first ones and says so.
const MAX_ROWS: u32 = 10_000;

/// At most this many delays in one schedule (400 MB of samples).
const MAX_DRAWS: usize = 50_000_000;

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Builds the schedule: samples are whole chains (decorrelated jitter carries
/// the previous delay), each drawn from its own stream forked from `seed`.
fn schedule(backoff: &Backoff, retries: u32, samples: usize, seed: u64) -> Schedule {
    let mut root = FastRng::seeded(seed);
    let mut columns: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); retries as usize];
    for _ in 0..samples {
        let chain = backoff.delays(root.fork());
        for (col, d) in columns.iter_mut().zip(chain) {
            col.push(ms(d));
        }
    }
    let rows = columns
        .into_iter()
        .zip(1..)
        .map(|(samples_ms, n)| {
            let (lo, hi) = backoff.range(n);
            let (min_ms, max_ms) = if backoff.get_jitter() == Jitter::Decorrelated {
                if samples_ms.is_empty() {
                    (ms(lo), ms(hi))
                } else {
                    let min = samples_ms.iter().copied().fold(f64::INFINITY, f64::min);
                    let max = samples_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (min, max)
                }
            } else {
                (ms(lo), ms(hi))
            };
            Row {
                retry: n,
                backoff_ms: ms(backoff.backoff(n)),
                min_ms,
                max_ms,
                samples_ms,
            }
        })
        .collect();
    Schedule { retries: rows }
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
        b.get_base(),
        b.get_multiplier(),
        b.get_cap(),
        b.get_jitter(),
        attempts,
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
        writeln!(
            out,
            "{:>5}  {:>11.1}  {:>25}  {:>11}  {}{}",
            r.retry,
            r.backoff_ms,
            format!("[{:.1}, {:.1})", r.min_ms, r.max_ms),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_samples_obey_bounds() {
        let b = Backoff::new();
        let s = schedule(&b, 6, 2000, 3);
        assert_eq!(s.retries.len(), 6);
        for r in &s.retries {
            assert_eq!(r.min_ms, 0.0);
            assert_eq!(r.max_ms, r.backoff_ms);
            assert!(r.samples_ms.iter().all(|x| *x >= 0.0 && *x < r.backoff_ms));
        }
    }

    #[test]
    fn same_seed_same_samples() {
        let b = Backoff::new().jitter(Jitter::Decorrelated);
        let a = serde_json::to_string(&schedule(&b, 4, 50, 9)).unwrap();
        let c = serde_json::to_string(&schedule(&b, 4, 50, 9)).unwrap();
        let d = serde_json::to_string(&schedule(&b, 4, 50, 10)).unwrap();
        assert_eq!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn decorrelated_range_is_the_samples_range() {
        let b = Backoff::new().jitter(Jitter::Decorrelated);
        let s = schedule(&b, 3, 500, 1);
        for r in &s.retries {
            let lo = r.samples_ms.iter().copied().fold(f64::INFINITY, f64::min);
            assert_eq!(r.min_ms, lo);
        }
    }
}
