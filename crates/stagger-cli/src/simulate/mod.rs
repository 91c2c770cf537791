//! `stagger simulate`: retry storms in virtual time, on the library's own
//! policies.
//!
//! Parses the flags into [`stagger_sim::Params`] (each model has its own
//! defaults; a flag given overrides it), runs the simulation over the
//! available cores with a progress bar on a terminal, prints a table or the
//! JSON document, and writes the report directory.

pub(crate) mod hedging;
pub(crate) mod priority;
mod progress;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use stagger_sim::{
    ClientRange, Model, Options, Params, Server, Strategy, SuccessModel, DRILL_STRATEGIES,
};

use crate::args::{duration, Attempts, FormatArgs, ScheduleArgs, SeedArgs, UsageError, Verbosity};

/// Simulate a fleet of clients retrying against a dependency that stumbles,
/// with the library's own policies in virtual time, and report what their
/// retries did: attempts, amplification, success, peak load against
/// capacity, recovery. Without flags: the failover comparison of no retry,
/// immediate, exponential and full jitter, then full jitter with a budget
/// and with a budget and a breaker, with the report in ./stagger-report/.
///
/// Examples:
///   stagger simulate
///   stagger simulate --model contention --clients 1..100 --format json
///   stagger simulate --model metastable --server fifo,deadline-drop,adaptive
///   stagger simulate --model failover --outage-end 60s --strategy full,full+breaker
#[derive(Debug, clap::Args)]
#[command(
    mut_arg("attempts", |a| a.help(
        "Max attempts, the first included, or `unlimited` (failover 5, metastable 2, \
         layers 4 per layer, contention unlimited)")),
    mut_arg("base", |a| a.help("First backoff (default 100ms; contention 10ms)")),
    mut_arg("cap", |a| a.help("Largest backoff (default 10s; contention 2s)")),
    mut_arg("seed", |a| a.help("First seed: run i uses seed+i (default 1)")),
    after_help = "Without flags: the failover comparison of none, immediate, exponential and full \
jitter, full+budget and full+budget+breaker, with the report in ./stagger-report/. Under the \
table, each guardrail's settings and any rows that print the same numbers, with why.

Examples:
  stagger simulate
  stagger simulate --model contention --clients 1..100 --format json
  stagger simulate --model metastable --server fifo,deadline-drop,adaptive
  stagger simulate --model hedging --capacity 10 --utilisation 0.9 --cancel running
  stagger simulate --model priority        (critical vs sheddable at 2× capacity, 5 seeds)
  stagger simulate --model priority --load 0.5,1,2,3 --critical-share 0.3
  stagger simulate --outage-end 60s --strategy full,full+breaker
  stagger simulate --base 1s --capacity 20 --out report-headroom
  stagger simulate --drill                 (400 thin processes, a 2 s stall)
  stagger simulate --drill --clients 10    (the same load from 10 busy processes)
  stagger simulate --drill --server-sheds-retries

Exit status: 0 simulated (and the report written); 1 the report could not be
written; 2 bad usage (the message names the flag)."
)]
pub struct Args {
    /// The drill: 400 client processes send 200 requests/s in all to a
    /// dependency with twice that capacity that stalls for 2 s at 10 s —
    /// the failover model in 500 ms ticks, 100 requests and capacity 200
    /// per tick, outage 10s–12s, burst 20, 20s, comparing
    /// none,immediate,full,full+budget+breaker. Other flags override it
    /// (e.g. `--drill --clients 10`). The same shape as `stagger gameday --drill`.
    #[arg(long)]
    drill: bool,
    /// Model: failover | contention | metastable | layers | hedging | priority (e.g. `--model contention`).
    #[arg(long, default_value = "failover", value_name = "M")]
    model: String,
    /// Strategies, comma-separated: none, immediate, exponential, full, equal,
    /// decorrelated or all, each optionally with +budget, +breaker, +throttle
    /// (e.g. `--strategy full,full+budget+breaker`). Default: the model's comparison.
    #[arg(long, value_name = "LIST")]
    strategy: Option<String>,
    /// Simulated time (failover 60s, metastable 120s, layers 10s; contention:
    /// the limit, 1h) (e.g. `--duration 30s`).
    #[arg(long, value_parser = duration, value_name = "D")]
    duration: Option<Duration>,
    /// Tick length of the failover model (default 250ms).
    #[arg(long, value_parser = duration, value_name = "D")]
    tick: Option<Duration>,
    /// New requests per tick, failover (default 8).
    #[arg(long, value_name = "N")]
    arrivals: Option<u32>,
    /// Arrivals per second: metastable (default 280), layers (default 100).
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Capacity: attempts per tick for failover (default 10), completions per
    /// second for metastable (default 300).
    #[arg(long, value_name = "C")]
    capacity: Option<f64>,
    /// Client timeout, metastable (default 1s).
    #[arg(long, value_parser = duration, value_name = "D")]
    timeout: Option<Duration>,
    /// Metastable: the server strategies to compare, one row each per
    /// strategy: fifo, deadline-drop (drops work whose caller gave up before
    /// starting it), adaptive (also a latency-gradient concurrency limit
    /// that sheds retries first), aimd, gradient, static:N (e.g. `--server
    /// fifo,deadline-drop,adaptive`; default fifo).
    #[arg(long, value_name = "LIST")]
    server: Option<String>,
    /// The older spelling of `--server deadline-drop`.
    #[arg(long, hide = true)]
    server_skips_expired: bool,
    /// Failover: an overloaded server sheds retries before first attempts,
    /// answering them at once with 503 and a Retry-After of 1 to 5 s (what
    /// the library's ShedLayer does).
    #[arg(long)]
    server_sheds_retries: bool,
    /// Outage start (failover 2s, metastable 10s).
    #[arg(long, value_parser = duration, value_name = "D")]
    outage_start: Option<Duration>,
    /// Outage end (failover 5s, metastable 20s); `--outage-end 60s` keeps the
    /// failover dependency down for the whole run.
    #[arg(long, value_parser = duration, value_name = "D")]
    outage_end: Option<Duration>,
    /// Extra requests failing in the first outage tick, failover (default 200).
    #[arg(long, value_name = "N")]
    burst: Option<u32>,
    /// Client processes, each with its own guardrails (default 10); for
    /// contention the racing clients, a number or a range (default 1..100).
    #[arg(long, value_name = "N|A..B")]
    clients: Option<String>,
    #[command(flatten)]
    schedule: ScheduleArgs,
    /// Failover success above capacity: square = (C/L)², linear = C/L (default square).
    #[arg(long, value_name = "S")]
    success_model: Option<String>,
    /// Layers in the call chain, layers model (default 3).
    #[arg(long, value_name = "N")]
    layers: Option<u32>,
    /// Dependency failure rates, layers model (default 0.01,0.1,0.5,1).
    #[arg(long, value_name = "LIST")]
    failure_rates: Option<String>,
    /// Runs averaged per row (default 200).
    #[arg(long, value_name = "N")]
    runs: Option<u32>,
    /// Explicit run seeds, comma-separated (replaces --seed and --runs) (e.g. `--seeds 1,2,3`).
    #[arg(long, value_name = "LIST")]
    seeds: Option<String>,
    #[command(flatten)]
    seed: SeedArgs,
    /// Worker threads (default: every core); never changes a result.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    #[command(flatten)]
    format: FormatArgs,
    #[command(flatten)]
    talk: Verbosity,
    /// Report directory (report.html, results.json, series.csv). Default
    /// ./stagger-report with the table format, none with json; `none` disables it.
    // Before the models' own flags: a heading they set holds for every
    // flag after them.
    #[arg(long, value_name = "DIR")]
    out: Option<String>,
    #[command(flatten)]
    hedging: crate::simulate::hedging::HedgingArgs,
    #[command(flatten)]
    priority: crate::simulate::priority::PriorityArgs,
}

fn usage(e: stagger_sim::SimError) -> anyhow::Error {
    UsageError(e.to_string()).into()
}

/// `--model` names none of the models: the simulator's own, and hedging
/// (which runs on its own engine, so the simulator's list lacks it).
fn unknown_model(given: &str) -> anyhow::Error {
    let names: Vec<&str> = Model::ALL.iter().map(|m| m.as_str()).collect();
    bad(
        "model",
        format!(
            "unknown model `{given}` (expected {}, hedging or priority)",
            names.join(", ")
        ),
    )
}

fn bad(flag: &str, why: String) -> anyhow::Error {
    UsageError(format!("--{flag}: {why}")).into()
}

fn list<T: std::str::FromStr>(flag: &str, s: &str) -> anyhow::Result<Vec<T>> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse::<T>().map_err(|_| {
                let why = if t.starts_with('-') {
                    format!("`{t}` is negative; give numbers of 0 or more")
                } else {
                    format!("`{t}` is not a valid number")
                };
                bad(flag, why)
            })
        })
        .collect()
}

impl Args {
    /// The parameters the flags describe, validated.
    pub(crate) fn params(&self) -> anyhow::Result<(Params, Vec<Strategy>)> {
        let model: Model = self.model.parse().map_err(|_| unknown_model(&self.model))?;
        if self.drill && model != Model::Failover {
            return Err(bad(
                "drill",
                format!("is a failover scenario; drop --model {model}"),
            ));
        }
        let mut p = if self.drill {
            Params::drill()
        } else {
            Params::defaults(model)
        };
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = self.$field.clone() { p.$field = v; } )* };
        }
        set!(
            duration,
            tick,
            arrivals,
            rate,
            capacity,
            timeout,
            outage_start,
            outage_end
        );
        set!(burst, layers, runs);
        if let Some(v) = self.schedule.base {
            p.base = v;
        }
        if let Some(v) = self.schedule.cap {
            p.cap = v;
        }
        if let Some(v) = self.seed.seed {
            p.seed = v;
        }
        p.server_skips_expired = self.server_skips_expired;
        if let Some(s) = &self.server {
            if model != Model::Metastable {
                return Err(bad("server", "is for --model metastable".into()));
            }
            if self.server_skips_expired {
                return Err(bad(
                    "server",
                    "give it or --server-skips-expired (its older spelling), not both".into(),
                ));
            }
            p.servers = Server::parse_list(s).map_err(usage)?;
        }
        if self.server_sheds_retries && model != Model::Failover {
            return Err(bad(
                "server-sheds-retries",
                "is for --model failover (metastable has --server)".into(),
            ));
        }
        p.server_sheds_retries = self.server_sheds_retries;
        if let Some(c) = &self.clients {
            p.clients = c.parse::<ClientRange>().map_err(usage)?;
        }
        if let Some(Attempts(a)) = self.schedule.attempts {
            p.attempts = a;
        }
        if let Some(s) = &self.success_model {
            p.success_model = s.parse::<SuccessModel>().map_err(usage)?;
        }
        if let Some(f) = &self.failure_rates {
            p.failure_rates = list("failure-rates", f)?;
            if p.failure_rates.is_empty() {
                return Err(bad("failure-rates", "no rate given".into()));
            }
        }
        if let Some(s) = &self.seeds {
            let seeds: Vec<u64> = list("seeds", s)?;
            if seeds.is_empty() {
                return Err(bad("seeds", "no seed given".into()));
            }
            p.seeds = Some(seeds);
        }
        let strategies = match &self.strategy {
            Some(s) => Strategy::parse_list(s).map_err(usage)?,
            None if self.drill => Strategy::parse_list(DRILL_STRATEGIES).map_err(usage)?,
            None => Strategy::defaults(model),
        };
        p.validate().map_err(usage)?;
        Ok((p, strategies))
    }
}

/// Runs the simulation and renders the JSON document `--format json`
/// prints (without its final newline). `stagger lab`'s API answers with
/// this same function, so the page and the command cannot drift.
pub(crate) fn simulate(
    p: &Params,
    strategies: &[Strategy],
    opts: &Options<'_>,
) -> anyhow::Result<(stagger_sim::Outcome, String)> {
    let outcome = stagger_sim::simulate_counted(p, strategies, opts).map_err(usage)?;
    let doc = serde_json::to_string(&outcome.results)?;
    Ok((outcome, doc))
}

impl Args {
    /// Whether these flags ask for the priority model, which reads
    /// [`Args::priority`] only.
    pub(crate) fn is_priority(&self) -> bool {
        self.model == "priority"
    }

    /// The priority model's view of these flags.
    pub(crate) fn priority(&self) -> crate::simulate::priority::Run<'_> {
        crate::simulate::priority::Run {
            priority: &self.priority,
            duration: self.duration,
            runs: self.runs,
            seed: self.seed.seed,
            json: self.format.json(),
        }
    }

    /// Whether these flags ask for the hedging model, which has its own
    /// parameters ([`Args::hedging`]) rather than [`Args::params`].
    pub(crate) fn is_hedging(&self) -> bool {
        self.model == "hedging"
    }

    /// The hedging model's view of these flags, on `threads` threads.
    pub(crate) fn hedging(&self, threads: usize) -> crate::simulate::hedging::Run<'_> {
        crate::simulate::hedging::Run {
            hedging: &self.hedging,
            strategy: self.strategy.as_deref(),
            capacity: self.capacity,
            seed: self.seed.seed,
            threads,
            json: self.format.json(),
            out: self.out.as_deref(),
        }
    }
}

/// Runs the subcommand.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    if a.is_priority() {
        return crate::simulate::priority::run(&a.priority());
    }
    if a.is_hedging() {
        let threads = a
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        return crate::simulate::hedging::run(&a.hedging(threads));
    }
    let (p, strategies) = a.params()?;
    let json = a.format.json();
    let out_dir: Option<PathBuf> = match a.out.as_deref() {
        Some("none") => None,
        Some(d) if d.trim().is_empty() => return Err(bad("out", "is empty".into())),
        Some(d) => Some(PathBuf::from(d)),
        None if json => None,
        None => Some(PathBuf::from("stagger-report")),
    };
    if let Some(dir) = &out_dir {
        stagger_report::simulate::writable(dir).map_err(anyhow::Error::msg)?;
    }
    let threads = match a.threads {
        Some(0) => return Err(bad("threads", "must be at least 1".into())),
        Some(n) => n.min(1024),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let items = stagger_sim::work_items(&p, &strategies);
    let bar = progress::Progress::new(items, !a.talk.quiet && std::io::stderr().is_terminal());
    let tick = || bar.tick();
    let opts = Options {
        threads,
        progress: Some(&tick),
    };
    let started = Instant::now();
    let (outcome, doc) = simulate(&p, &strategies, &opts)?;
    bar.finish();
    let elapsed = started.elapsed();
    let results = outcome.results;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json {
        writeln!(out, "{doc}")?;
    } else {
        stagger_report::simulate::print_table(&mut out, &p, &results)?;
    }
    out.flush()?;
    if let Some(dir) = &out_dir {
        stagger_report::simulate::write_report(dir, &p, &results, &doc)?;
    }
    if a.talk.verbose || (!json && !a.talk.quiet) {
        eprintln!(
            "{items} runs, {} simulated events in {:.2}s on {threads} thread{}{}",
            outcome.events,
            elapsed.as_secs_f64(),
            if threads == 1 { "" } else { "s" },
            out_dir.map_or_else(String::new, |d| format!(
                "; report: {}",
                d.join("report.html").display()
            ))
        );
    }
    Ok(ExitCode::SUCCESS)
}
