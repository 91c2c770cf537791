//! `stagger simulate --model hedging`: the flags only that model reads, and
//! its run (table or JSON, and the report with a utilisation sweep).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use stagger_sim::hedging::{self, Cancel, HedgeStrategy, HedgingParams};
use stagger_sim::Options;

use crate::args::{duration, UsageError};

/// Flags of `--model hedging` (ignored by the other models).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Hedging model (--model hedging)")]
pub struct HedgingArgs {
    /// Median service time of an attempt (default 10ms).
    #[arg(long, value_parser = duration, value_name = "D")]
    latency_median: Option<Duration>,
    /// LogNormal shape σ of the service time (default 0.3).
    #[arg(long, value_name = "S")]
    latency_sigma: Option<f64>,
    /// Probability that an attempt stalls (default 0.02).
    #[arg(long, value_name = "P")]
    stall_prob: Option<f64>,
    /// Added to a stalled attempt's service time (default 200ms).
    #[arg(long, value_parser = duration, value_name = "D")]
    stall: Option<Duration>,
    /// Utilisation of the servers without hedges, with `--capacity N` (default 0.7).
    #[arg(long, value_name = "U")]
    utilisation: Option<f64>,
    /// When a call ends: `queued` (its queued attempts leave, running ones
    /// finish; the default) or `running` (running ones stop too).
    #[arg(long, value_name = "MODE")]
    cancel: Option<String>,
    /// Requests per strategy (default 200000).
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// Attempts per call, the first included (default 2).
    #[arg(long, value_name = "K")]
    hedge_attempts: Option<u32>,
}

/// What `stagger simulate` passes on: the hedging flags and the shared ones.
pub struct Run<'a> {
    pub hedging: &'a HedgingArgs,
    pub strategy: Option<&'a str>,
    pub capacity: Option<f64>,
    pub seed: Option<u64>,
    pub threads: usize,
    pub json: bool,
    pub out: Option<&'a str>,
}

fn bad(flag: &str, why: impl Into<String>) -> anyhow::Error {
    UsageError(format!("--{flag}: {}", why.into())).into()
}

fn usage(e: stagger_sim::SimError) -> anyhow::Error {
    UsageError(e.to_string()).into()
}

/// The parameters the flags describe, validated.
pub fn params(r: &Run<'_>) -> anyhow::Result<(HedgingParams, Vec<HedgeStrategy>)> {
    let a = r.hedging;
    let mut p = HedgingParams::default();
    if let Some(v) = a.latency_median {
        p.latency_median = v;
    }
    if let Some(v) = a.latency_sigma {
        p.latency_sigma = v;
    }
    if let Some(v) = a.stall_prob {
        p.stall_prob = v;
    }
    if let Some(v) = a.stall {
        p.stall = v;
    }
    if let Some(v) = a.utilisation {
        p.utilisation = v;
    }
    if let Some(v) = &a.cancel {
        p.cancel = v.parse::<Cancel>().map_err(usage)?;
    }
    if let Some(v) = a.requests {
        p.requests = v;
    }
    if let Some(v) = a.hedge_attempts {
        p.hedge_attempts = v;
    }
    if let Some(s) = r.seed {
        p.seed = s;
    }
    p.capacity = match r.capacity {
        None => None,
        Some(c) if c.is_infinite() && c > 0.0 => None,
        Some(c) if c >= 1.0 && c.fract() == 0.0 && c <= f64::from(hedging::MAX_SERVERS) => {
            Some(c as u32)
        }
        Some(c) => {
            return Err(bad(
                "capacity",
                format!(
                    "the hedging model takes `inf` or a whole number of servers (1 to {}), got {c}",
                    hedging::MAX_SERVERS
                ),
            ))
        }
    };
    p.validate().map_err(usage)?;
    let strategies =
        HedgeStrategy::parse_list(r.strategy.unwrap_or(HedgeStrategy::DEFAULTS)).map_err(usage)?;
    Ok((p, strategies))
}

/// Runs the model and renders the JSON document `--format json` prints
/// (without its final newline). `stagger lab`'s API answers with this same
/// function, so the page and the command cannot drift.
pub(crate) fn simulate(
    p: &HedgingParams,
    strategies: &[HedgeStrategy],
    opts: &Options<'_>,
) -> anyhow::Result<(hedging::HedgingResults, String)> {
    let results = hedging::simulate(p, strategies, opts).map_err(usage)?;
    let doc = serde_json::to_string(&results)?;
    Ok((results, doc))
}

/// Runs the model and prints its table or JSON; writes the report.
pub fn run(r: &Run<'_>) -> anyhow::Result<ExitCode> {
    let (p, strategies) = params(r)?;
    let out_dir: Option<PathBuf> = match r.out {
        Some("none") => None,
        Some(d) if d.trim().is_empty() => return Err(bad("out", "is empty")),
        Some(d) => Some(PathBuf::from(d)),
        None if r.json => None,
        None => Some(PathBuf::from("stagger-report")),
    };
    let opts = Options {
        threads: r.threads,
        progress: None,
    };
    let (results, doc) = simulate(&p, &strategies, &opts)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if r.json {
        writeln!(out, "{doc}")?;
    } else {
        stagger_report::simulate::hedging::print_table(&mut out, &p, &results)?;
    }
    out.flush()?;
    if let Some(dir) = &out_dir {
        // A quarter of the requests per point keeps the sweep to seconds.
        let points =
            hedging::sweep(&p, &strategies, (p.requests / 4).max(1_000), &opts).map_err(usage)?;
        stagger_report::simulate::hedging::write_report(dir, &p, &results, &points, &doc)?;
        if !r.json {
            eprintln!("report: {}", dir.join("report.html").display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
