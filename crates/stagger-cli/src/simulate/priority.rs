//! `stagger simulate --model priority`: a CPU-bound server above its
//! capacity, a share of the requests critical and the rest sheddable,
//! under each way of shedding, over several seeds (the library's Limiter,
//! Ceilings and CpuTrigger in virtual time; SIMULATOR.md §8). With
//! `--load 0.5,1,2,3` the comparison is repeated at each load, which is
//! what the lab's Priorities scene draws.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use stagger_sim::priority::{self, Report, Shedding, Workload};

use crate::args::UsageError;

/// Flags of `--model priority` (ignored by the other models).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Priority model (--model priority)")]
pub struct PriorityArgs {
    /// Arrivals as multiples of the server's capacity, comma-separated; one
    /// comparison per load (default 2) (e.g. `--load 0.5,1,2,3`).
    #[arg(long, value_name = "LIST")]
    load: Option<String>,
    /// The share of requests that is critical, the rest sheddable (default 0.2).
    #[arg(long, value_name = "F")]
    critical_share: Option<f64>,
}

/// What `stagger simulate` passes on: the priority flags and the shared
/// ones (`--duration`, `--runs`, `--seed`).
pub struct Run<'a> {
    pub priority: &'a PriorityArgs,
    pub duration: Option<Duration>,
    pub runs: Option<u32>,
    pub seed: Option<u64>,
    pub json: bool,
}

/// Most loads in one comparison.
pub const MAX_LOADS: usize = 20;
/// Most seeds per load.
pub const MAX_RUNS: u32 = 20;

fn bad(flag: &str, why: impl Into<String>) -> anyhow::Error {
    UsageError(format!("--{flag}: {}", why.into())).into()
}

/// The workload (at the first load), the loads and the random seeds the flags
/// describe, validated.
pub fn params(r: &Run<'_>) -> anyhow::Result<(Workload, Vec<f64>, Vec<u64>)> {
    let mut w = Workload::default();
    let loads = match r.priority.load.as_deref() {
        None => vec![w.load],
        Some(s) => s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| match t.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 && v <= 10.0 => Ok(v),
                _ => Err(bad(
                    "load",
                    format!("`{t}` is not a multiple of the capacity above 0 and at most 10"),
                )),
            })
            .collect::<anyhow::Result<Vec<f64>>>()?,
    };
    if loads.is_empty() || loads.len() > MAX_LOADS {
        return Err(bad("load", format!("give 1 to {MAX_LOADS} loads")));
    }
    if let Some(c) = r.priority.critical_share {
        if !(0.0..=1.0).contains(&c) {
            return Err(bad(
                "critical-share",
                format!("{c} is not a share from 0 to 1"),
            ));
        }
        w.critical = c;
    }
    if let Some(d) = r.duration {
        if d < Duration::from_secs(1) || d > Duration::from_secs(300) {
            return Err(bad("duration", "the priority model simulates 1s to 300s"));
        }
        w.seconds = d.as_secs_f64();
    }
    let runs = r.runs.unwrap_or(5);
    if runs == 0 || runs > MAX_RUNS {
        return Err(bad(
            "runs",
            format!("the priority model takes 1 to {MAX_RUNS} seeds per load"),
        ));
    }
    let first = r.seed.unwrap_or(1);
    let seeds = (0..u64::from(runs))
        .map(|i| first.wrapping_add(i))
        .collect();
    w.load = loads[0];
    Ok((w, loads, seeds))
}

/// The mean of `f` over `reports`.
fn mean(reports: &[Report], f: impl Fn(&Report) -> f64) -> f64 {
    reports.iter().map(f).sum::<f64>() / reports.len().max(1) as f64
}

/// The JSON document: one row per load and way of shedding, each figure
/// as `[lowest, highest]` over its seeds, and the two successes' means
/// (what the lab draws).
pub fn simulate(w: &Workload, loads: &[f64], seeds: &[u64]) -> String {
    let mut rows = Vec::new();
    for &load in loads {
        let at = Workload { load, ..*w };
        for (s, r) in priority::compare(&at, seeds) {
            let both = |f: &dyn Fn(&Report) -> f64| {
                let (lo, hi) = priority::range(&r, f);
                serde_json::json!([lo, hi])
            };
            rows.push(serde_json::json!({
                "server": s.name(),
                "load": load,
                "critical_served": both(&|x| x.critical.success()),
                "critical_p99_ms": both(&|x| x.critical.p99().as_secs_f64() * 1e3),
                "sheddable_served": both(&|x| x.sheddable.success()),
                "busy": both(&|x| x.utilisation),
                "critical_mean": mean(&r, |x| x.critical.success()),
                "sheddable_mean": mean(&r, |x| x.sheddable.success()),
            }));
        }
    }
    let capacity = f64::from(w.cores) / w.cpu.as_secs_f64();
    serde_json::json!({
        "model": "priority",
        "seeds": seeds,
        "params": {
            "loads": loads,
            "critical_share": w.critical,
            "duration_s": w.seconds,
            "cores": w.cores,
            "capacity_rps": capacity,
            "deadline_s": w.deadline.as_secs_f64(),
        },
        "rows": rows,
    })
    .to_string()
}

/// The comparison at one load, run and drawn (by the report crate, as the
/// other models' tables are).
pub fn table(w: &Workload, seeds: &[u64]) -> String {
    let rows = priority::compare(w, seeds);
    let unloaded: Vec<Report> = seeds
        .iter()
        .map(|&s| priority::run(&Workload { load: 0.3, ..*w }, Shedding::Queue, s))
        .collect();
    stagger_report::simulate::priority::table(w, seeds, &rows, &unloaded)
}

/// Runs the comparison and prints its table (one per load, each headed by
/// its load), or with `json` the document of [`simulate`].
pub fn run(r: &Run<'_>) -> anyhow::Result<ExitCode> {
    let (w, loads, seeds) = params(r)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if r.json {
        writeln!(out, "{}", simulate(&w, &loads, &seeds))?;
    } else {
        for (i, &load) in loads.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            write!(out, "{}", table(&Workload { load, ..w }, &seeds))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
