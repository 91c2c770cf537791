//! `stagger gameday`: a retry storm and its cure over loopback HTTP.
//!
//! Parses the flags into a [`stagger_gameday::gameday::Config`], runs each
//! strategy in turn, prints the table or the JSON document and writes the
//! report. The game-day itself (server, fleet, measurement) is
//! `stagger_gameday::gameday`.
//!
//! Exit codes: 0 the game-day ran (whatever it showed); 1 it could not run
//! (say the port could not be bound); 2 bad usage, naming the flag; 3 a
//! `--soak` whose memory or file descriptors grew after the warm-up; a
//! `--hosts` run ended by SIGINT, SIGTERM or SIGHUP 128 + the signal's
//! number, once its namespaces are removed.

mod hedging;
mod limit;
mod priority;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use stagger_gameday::fault::Fault;
use stagger_gameday::gameday::{self, exporter, soak, Config};
use stagger_sim::Strategy;

use crate::args::{
    duration, gameday_error, FormatArgs, ScheduleArgs, SeedArgs, UsageError, Verbosity,
};

/// Reproduce a retry storm over loopback HTTP (or against a real upstream
/// through the fault proxy, `--target`) and compare strategies.
///
/// Example: `stagger gameday --fault stall --strategy immediate,full+budget+breaker --duration 20s`
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  stagger gameday --fault stall --strategy immediate,full+budget+breaker --duration 20s
  stagger gameday --drill                      (400 thin pods, a 2 s stall)
  stagger gameday --drill --pods 10            (the same load from 10 busy pods)
  stagger gameday --drill --shed-retries --drop-expired
  stagger gameday --drill --target http://127.0.0.1:8080/work   (a real upstream behind the fault proxy; GETs)
  stagger gameday --drill --target http://127.0.0.1:8080/orders --method POST   (writes, with keys)
  stagger gameday --drill --hosts 4 --fault blackhole            (network namespaces; Linux, root)
  stagger gameday --cleanup                    (remove what a killed --hosts run left)
  stagger gameday --fault throttle --duration 20 --format json > result.json
  stagger gameday --strategy full --server-limit gradient --drop-expired --rate 100 --ramp-to 300

Exit status: 0 the game-day ran (whatever it showed); 1 it could not run
(say a port could not be bound); 2 bad usage (the message names the flag);
3 a --soak whose memory or file descriptors grew after the warm-up. A
--hosts run stopped by SIGINT, SIGTERM or SIGHUP first removes its network
namespaces and says so, then exits 130, 143 or 129; --cleanup exits 1 if a
namespace could not be removed.")]
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
    /// The drill: 400 pods of one client each send 200 requests/s in all to
    /// 40 workers (capacity 400/s), which stall for 2 s at 10 s of a 20 s
    /// run — `--fault stall --pods 400 --clients 400 --rate 200 --workers 40
    /// --duration 20s --strategy none,immediate,full,full+budget+breaker`.
    /// Flags given as well override it (e.g. `--drill --pods 10`).
    #[arg(long)]
    pub drill: bool,
    /// The fault, named as `stagger proxy` names it: stall (every worker
    /// frozen 2 s) | failover (connections refused 3 s) | 503, or dead (503
    /// for the whole run) | 429, or throttle (429 with Retry-After for 5 s)
    /// | slow (service time ×10 for 5 s; slow:MS adds MS) | reset (each
    /// request read, then its connection reset with RST, for 3 s; every
    /// other one applied first) | none (default stall); with `--hosts`,
    /// kernel faults for 3 s: blackhole (packets to the server dropped:
    /// connect timeouts; in front of a `--target`, connections held
    /// unanswered) | reject (TCP reset) | partition (half the client hosts
    /// cut off).
    #[arg(long, value_parser = fault, value_name = "F")]
    pub fault: Option<String>,
    /// Strategies to compare, run one after the other: none, immediate,
    /// exponential, full, equal, decorrelated, each optionally with +budget,
    /// +breaker, +throttle (default `immediate,full,full+budget+breaker`).
    #[arg(long, value_name = "S,…")]
    pub strategy: Option<String>,
    /// How long each strategy's clients send new requests (at most 120s;
    /// default 30s).
    #[arg(long, value_parser = duration, value_name = "D")]
    pub duration: Option<Duration>,
    /// New requests per second over the whole fleet (default 100; e.g.
    /// `--rate 150`).
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Client tasks, each with its own policy (default 200; e.g. `--clients 400`).
    #[arg(long, value_name = "N")]
    pub clients: Option<usize>,
    /// Pods the clients are spread over; each pod shares one connection
    /// pool, budget and breaker (default 10).
    #[arg(long, value_name = "N")]
    pub pods: Option<usize>,
    /// Server workers (capacity = workers ÷ service time; default 20).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// The server sheds retries first: the library's ShedLayer (workers at
    /// once, `--queue` waiting, half the queue for retries, read from the
    /// attempt header) answers what does not fit with 503 and a Retry-After
    /// of 1 to 5 s.
    #[arg(long)]
    pub shed_retries: bool,
    /// The server drops expired work: the library's DeadlineLayer reads
    /// `x-request-timeout-ms`, answers 504 once it has passed, and a job
    /// whose caller's deadline passed while it queued is skipped unstarted.
    #[arg(long)]
    pub drop_expired: bool,
    #[command(flatten)]
    pub limit: crate::gameday::limit::LimitArgs,
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
    #[command(flatten)]
    pub talk: Verbosity,
    /// Send the POSTs without an Idempotency-Key: the middleware then
    /// never repeats one whose outcome is unknown (a reset, a timeout).
    #[arg(long)]
    pub no_keys: bool,
    /// What every request is: GET, a read (no body, no key; the default
    /// with --target) or POST, a write (one order per request, with an
    /// Idempotency-Key unless --no-keys; the game-day's own server takes
    /// only POST) (e.g. `--target http://127.0.0.1:8080/orders --method POST`).
    #[arg(long, value_name = "GET|POST")]
    pub method: Option<gameday::Method>,
    /// A soak: one strategy for up to 60 min, the process's resident memory
    /// and open file descriptors sampled from /proc/self; exits 3 if either
    /// grew after the warm-up (e.g. `--soak --fault none --duration 10m`).
    #[arg(long)]
    pub soak: bool,
    /// Drive a real upstream instead of the game-day's own server: the
    /// fleet sends `--method` (GET unless told POST) to this URL through an
    /// embedded fault proxy on 127.0.0.1 that injects the fault;
    /// `--workers` ÷ `--service-time` state its capacity (e.g. `--target
    /// http://127.0.0.1:8080/work`).
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Off loopback: the server in a network namespace of its own and the
    /// pods spread over N more, joined by a bridge the command creates and
    /// always removes; the kernel faults blackhole, reject and partition
    /// need it (Linux, root; e.g. `--hosts 4 --fault blackhole`).
    #[arg(long, value_name = "N")]
    pub hosts: Option<usize>,
    /// Remove what `--hosts` runs killed outright (SIGKILL) left behind:
    /// their network namespaces, named after the run's process, and the
    /// nftables rules inside them; namespaces of runs still going are kept
    /// (root; takes no other flag). A run stopped by Ctrl-C or SIGTERM
    /// removes its own.
    #[arg(long, exclusive = true)]
    pub cleanup: bool,
    /// Also write report.html (self-contained, inline SVG) and results.json here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Serve the fleet's metrics for Prometheus at http://ADDR/metrics while
    /// the game-day runs, one `pod` label value per simulated client process
    /// (a loopback address, e.g. `--metrics-addr 127.0.0.1:9464`).
    #[arg(long, value_parser = exporter::addr, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// With `--fault slow`: the hedging game-day instead — attempts stall
    /// 200 ms with probability 0.02 (service LogNormal, median 10 ms), and
    /// these hedging strategies are compared beside the simulator's
    /// prediction (`--rate`, default 500/s, for `--duration`, default 4s)
    /// (e.g. `--hedging none,20ms,p95,p95+budget`).
    #[arg(long, value_name = "S,…")]
    pub hedging: Option<String>,
    /// The priority game-day instead: a CPU-bound upstream (10 ms of busy
    /// loop a request, one core) at twice its measured capacity, 20 %
    /// `x-criticality: critical` and 80 % `sheddable`, behind ShedLayer
    /// with priorities, ShedLayer without, and tower-acc's AIMD limit in
    /// turn (`--duration` per server, default 4s; e.g. `--priority
    /// --duration 10s --format json`).
    #[arg(long, conflicts_with_all = ["hedging", "fault", "target", "hosts", "soak"])]
    pub priority: bool,
    /// With `--priority`: then the ShedLayer by priority with a CPU trigger
    /// (threshold 80 %) fed by the upstream's own threads, for D (2s to 5m;
    /// 12s lets it settle), and the trace of its CPU reading and shed rate
    /// (e.g. `--priority --cpu-trigger 12s`).
    #[arg(long, value_parser = duration, value_name = "D", requires = "priority")]
    pub cpu_trigger: Option<Duration>,
}

/// Checks `--fault` at once (the slow fault's delay waits for
/// `--service-time`).
fn fault(s: &str) -> Result<String, String> {
    gameday::fault(s, Duration::ZERO).map(|_| s.to_string())
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        // `--drill` fills in the drill's shape; flags given override it.
        let d = self.drill;
        let pick = |drill: usize, plain: usize| if d { drill } else { plain };
        let default_strategy = if d {
            stagger_sim::DRILL_STRATEGIES
        } else {
            "immediate,full,full+budget+breaker"
        };
        let strategy = self.strategy.as_deref().unwrap_or(default_strategy);
        let strategies = Strategy::parse_list(strategy)
            .map_err(|e| UsageError(format!("--strategy: {}", e.problem())))?;
        Ok(Config {
            fault: match &self.fault {
                Some(f) => gameday::fault(f, self.service_time).map_err(UsageError)?,
                None => Some(Fault::Stall),
            },
            strategies,
            duration: self
                .duration
                .unwrap_or(Duration::from_secs(pick(20, 30) as u64)),
            rate: self.rate.unwrap_or(if d { 200.0 } else { 100.0 }),
            clients: self.clients.unwrap_or(pick(400, 200)),
            pods: self.pods.unwrap_or(pick(400, 10)),
            workers: self.workers.unwrap_or(pick(40, 20)),
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
            shed_retries: self.shed_retries,
            drop_expired: self.drop_expired,
            server_limit: self.limit.algorithm()?,
            ramp_to: self.limit.ramp_to,
            keys: !self.no_keys,
            method: self.method,
            soak: self.soak,
            target: self.target.clone(),
            hosts: self.hosts,
        })
    }
}

/// `stagger gameday --cleanup`: one line per namespace removed or kept.
fn cleanup() -> anyhow::Result<ExitCode> {
    let done = gameday::cleanup().map_err(gameday_error)?;
    for n in &done.removed {
        println!("removed {n} (its run is no longer running)");
    }
    for (n, pid) in &done.running {
        println!("kept {n}: its run, pid {pid}, is still going");
    }
    for f in &done.failed {
        eprintln!("stagger gameday: --cleanup: could not remove {f}");
    }
    match done.removed.len() {
        _ if !done.failed.is_empty() => return Ok(ExitCode::FAILURE),
        0 => println!("nothing to remove: no network namespace of a stopped --hosts run is left"),
        n => println!(
            "removed {n} network namespaces left by stopped --hosts runs, and the nftables \
             rules in them"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs each strategy of `plan` in turn, saying so unless `talk` is off;
/// the rows.
fn run_each(
    plan: &gameday::Plan,
    talk: bool,
) -> anyhow::Result<Vec<stagger_gameday::results::Row>> {
    let total = plan.strategies().len();
    let mut rows = Vec::with_capacity(total);
    for (i, s) in plan.strategies().iter().enumerate() {
        if talk {
            eprintln!(
                "stagger gameday: {} × {} ({}/{total}), {:.0}s of traffic…",
                plan.params().fault,
                s,
                i + 1,
                plan.params().duration_s
            );
        }
        let run = plan.run_one(*s).map_err(gameday_error)?;
        if run.cut_off > 0 {
            eprintln!(
                "stagger gameday: {} client tasks were still running at the hard stop",
                run.cut_off
            );
        }
        for n in &run.notes {
            eprintln!("stagger gameday: {s}: {n}");
        }
        rows.push(run.row);
    }
    Ok(rows)
}

/// The `--format json` document: the game-day's, with a soak's samples and
/// verdict.
fn json(
    results: &stagger_gameday::results::Results,
    verdict: Option<&soak::Verdict>,
) -> anyhow::Result<String> {
    Ok(match verdict {
        // A soak's JSON is the game-day's with the samples and the verdict.
        Some(v) => {
            let mut value = serde_json::to_value(results)?;
            value["soak"] = serde_json::to_value(v)?;
            serde_json::to_string_pretty(&value)?
        }
        None => serde_json::to_string_pretty(results)?,
    })
}

/// Runs `stagger gameday`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    if a.cleanup {
        return cleanup();
    }
    if a.priority {
        return crate::gameday::priority::run(
            a.duration,
            a.cpu_trigger,
            a.seed.get(),
            a.format.json(),
        );
    }
    if let Some(h) = &a.hedging {
        let slow = |f: &str| matches!(gameday::fault(f, Duration::ZERO), Ok(Some(Fault::Slow(_))));
        if a.fault.as_deref().is_some_and(|f| !slow(f)) {
            return Err(UsageError("--hedging: runs with --fault slow".into()).into());
        }
        return crate::gameday::hedging::run(&crate::gameday::hedging::Run {
            strategies: h,
            rate: a.rate,
            duration: a.duration,
            seed: a.seed.get(),
            json: a.format.json(),
        });
    }
    let plan = gameday::plan(&a.config()?).map_err(gameday_error)?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    // Up before the first request and down after the last strategy.
    let exporter = a
        .metrics_addr
        .map(exporter::Exporter::start)
        .transpose()
        .map_err(gameday_error)?;
    let talk = !a.talk.quiet;
    if let Some(e) = exporter.as_ref().filter(|_| talk) {
        eprintln!("stagger gameday: metrics at http://{}/metrics", e.addr);
    }
    let duration = Duration::from_secs_f64(plan.params().duration_s);
    let sampler = a
        .soak
        .then(|| soak::Sampler::start(soak::interval(duration)));
    let rows = run_each(&plan, talk)?;
    drop(exporter);
    let results = plan.results(rows);
    let verdict = match sampler {
        Some(s) => Some(
            soak::verdict(s.finish(), duration)
                .context("--soak: no sample of /proc/self after the warm-up")?,
        ),
        None => None,
    };
    let json = json(&results, verdict.as_ref())?;
    if a.format.json() {
        println!("{json}");
    } else {
        println!("{}", stagger_report::gameday::legend(&results.params));
        print!("{}", stagger_report::gameday::table(&results));
        println!("\n{}", stagger_report::gameday::KEY);
        if let Some(v) = &verdict {
            println!("\n{}", stagger_report::gameday::soak(v));
        }
    }
    if let Some(dir) = &a.out {
        stagger_report::gameday::write_report(dir, &results, &json)?;
        if talk {
            eprintln!(
                "stagger gameday: report in {}",
                dir.join("report.html").display()
            );
        }
    }
    if verdict.is_some_and(|v| !v.flat) {
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            a: Args,
        }
        let mut argv = vec!["gameday"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).unwrap().a
    }

    #[test]
    fn the_drill_is_the_documented_shape_and_flags_override_it() {
        let c = args(&["--drill"]).config().unwrap();
        assert_eq!((c.pods, c.clients, c.workers), (400, 400, 40));
        assert_eq!((c.rate, c.duration), (200.0, Duration::from_secs(20)));
        assert_eq!(c.fault, Some(Fault::Stall));
        let names: Vec<String> = c.strategies.iter().map(|s| s.to_string()).collect();
        assert_eq!(names.join(","), stagger_sim::DRILL_STRATEGIES);
        assert!(!c.shed_retries && !c.drop_expired);
        let plan = gameday::plan(&c).unwrap();
        assert_eq!(plan.params().capacity, 400.0);
        let c = args(&[
            "--drill",
            "--pods",
            "10",
            "--shed-retries",
            "--drop-expired",
        ])
        .config()
        .unwrap();
        assert_eq!((c.pods, c.clients), (10, 400));
        assert!(c.shed_retries && c.drop_expired);
        let plan = gameday::plan(&c).unwrap();
        assert!(plan.params().shed_retries && plan.params().drop_expired);
        // Without --drill, the ordinary defaults.
        let c = args(&[]).config().unwrap();
        assert_eq!((c.pods, c.clients, c.workers), (10, 200, 20));
    }
}
