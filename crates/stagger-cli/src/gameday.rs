//! `stagger gameday`: a retry storm and its cure over loopback HTTP.
//!
//! Parses the flags into a [`stagger_lab::gameday::Config`], runs each
//! strategy in turn, prints the table or the JSON document and writes the
//! report. The game-day itself (server, fleet, measurement) is
//! `stagger_lab::gameday`.
//!
//! Exit codes: 0 the game-day ran (whatever it showed); 1 it could not run
//! (say the port could not be bound); 2 bad usage, naming the flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use stagger_lab::gameday::{self, exporter, Config, Fault};
use stagger_sim::Strategy;

use crate::args::{duration, lab_error, FormatArgs, ScheduleArgs, SeedArgs, UsageError};

/// Reproduce a retry storm over loopback HTTP and compare strategies.
///
/// Example: `stagger gameday --fault stall --strategy immediate,full+budget+breaker --duration 20s`
#[derive(Debug, clap::Args)]
#[command(
    mut_arg("attempts", |a| a
        .default_value("5")
        .help("Max attempts per request, the first included (1 for `none`)")),
    mut_arg("base", |a| a
        .default_value("100ms")
        .help("First backoff of the backoff strategies (`immediate` uses 0)")),
    mut_arg("cap", |a| a.default_value("10s")),
    mut_arg("seed", |a| a
        .default_value("1")
        .help("Seeds the pods' breakers, so their open periods replay (e.g. `--seed 7`)"))
)]
pub struct Args {
    /// The fault: stall (every worker frozen 2 s) | failover (connections
    /// refused 3 s) | dead (503 for the whole run) | throttle (429 with
    /// Retry-After for 5 s) | slow (service time ×10 for 5 s) | none.
    #[arg(long, default_value = "stall", value_parser = fault, value_name = "F")]
    pub fault: Fault,
    /// Strategies to compare, run one after the other: none, immediate,
    /// exponential, full, equal, decorrelated, each optionally with +budget,
    /// +breaker, +throttle (e.g. `--strategy immediate,full+budget+breaker`).
    #[arg(
        long,
        default_value = "immediate,full,full+budget+breaker",
        value_name = "S,…"
    )]
    pub strategy: String,
    /// How long each strategy's clients send new requests (at most 120s).
    #[arg(long, default_value = "30s", value_parser = duration, value_name = "D")]
    pub duration: Duration,
    /// New requests per second over the whole fleet (e.g. `--rate 150`).
    #[arg(long, default_value_t = 100.0, value_name = "R")]
    pub rate: f64,
    /// Client tasks, each with its own policy (e.g. `--clients 400`).
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub clients: usize,
    /// Pods the clients are spread over; each pod shares one connection
    /// pool, budget and breaker.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub pods: usize,
    /// Server workers (capacity = workers ÷ service time).
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub workers: usize,
    /// Time the server spends on one request (a sleep, not CPU).
    #[arg(long, default_value = "100ms", value_parser = duration, value_name = "D")]
    pub service_time: Duration,
    /// Requests that may wait for a worker; beyond that the server answers 503.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub queue: usize,
    /// When the fault starts (default: after 10s of steady traffic, earlier
    /// in a short run; 0 for dead).
    #[arg(long, value_parser = duration, value_name = "D")]
    pub fault_at: Option<Duration>,
    /// Each request's deadline over all its attempts and waits.
    #[arg(long, default_value = "2s", value_parser = duration, value_name = "D")]
    pub deadline: Duration,
    /// Timeout of one attempt.
    #[arg(long, default_value = "500ms", value_parser = duration, value_name = "D")]
    pub attempt_timeout: Duration,
    #[command(flatten)]
    pub schedule: ScheduleArgs,
    #[command(flatten)]
    pub seed: SeedArgs,
    #[command(flatten)]
    pub format: FormatArgs,
    /// Also write report.html (self-contained, inline SVG) and results.json here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Serve the fleet's metrics for Prometheus at http://ADDR/metrics while
    /// the game-day runs, one `pod` label value per simulated client process
    /// (a loopback address, e.g. `--metrics-addr 127.0.0.1:9464`).
    #[arg(long, value_parser = exporter::addr, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

fn fault(s: &str) -> Result<Fault, String> {
    Fault::ALL
        .into_iter()
        .find(|f| f.as_str() == s)
        .ok_or_else(|| {
            format!("unknown fault `{s}` (expected stall, failover, dead, throttle, slow or none)")
        })
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        let strategies = Strategy::parse_list(&self.strategy)
            .map_err(|e| UsageError(format!("--strategy: {}", e.problem())))?;
        Ok(Config {
            fault: self.fault,
            strategies,
            duration: self.duration,
            rate: self.rate,
            clients: self.clients,
            pods: self.pods,
            workers: self.workers,
            service_time: self.service_time,
            queue: self.queue,
            fault_at: self.fault_at,
            deadline: self.deadline,
            attempt_timeout: self.attempt_timeout,
            attempts: self.schedule.limit()?,
            base: self.schedule.base(),
            cap: self.schedule.cap(),
            seed: self.seed.get(),
            metrics: self.metrics_addr.is_some(),
        })
    }
}

/// Runs `stagger gameday`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let plan = gameday::plan(&a.config()?).map_err(lab_error)?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    // Up before the first request and down after the last strategy.
    let exporter = a
        .metrics_addr
        .map(exporter::Exporter::start)
        .transpose()
        .map_err(lab_error)?;
    if let Some(e) = &exporter {
        eprintln!("stagger gameday: metrics at http://{}/metrics", e.addr);
    }
    let total = plan.strategies().len();
    let mut rows = Vec::with_capacity(total);
    for (i, s) in plan.strategies().iter().enumerate() {
        eprintln!(
            "stagger gameday: {} × {} ({}/{total}), {:.0}s of traffic…",
            plan.params().fault,
            s,
            i + 1,
            plan.params().duration_s
        );
        let run = plan.run_one(*s).map_err(lab_error)?;
        if run.cut_off > 0 {
            eprintln!(
                "stagger gameday: {} client tasks were still running at the hard stop",
                run.cut_off
            );
        }
        rows.push(run.row);
    }
    drop(exporter);
    let results = plan.results(rows);
    let json = serde_json::to_string_pretty(&results)?;
    if a.format.json() {
        println!("{json}");
    } else {
        println!("{}", gameday::legend(&results.params));
        print!("{}", gameday::table(&results));
        println!("\n{}", gameday::KEY);
    }
    if let Some(dir) = &a.out {
        gameday::write_report(dir, &results, &json).map_err(lab_error)?;
        eprintln!(
            "stagger gameday: report in {}",
            dir.join("report.html").display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
