//! `stagger gameday`: a retry storm and its cure on real sockets.
//!
//! A simulator can be argued with; a storm on real sockets cannot. For each
//! strategy in turn, this starts a fresh server on 127.0.0.1 with a finite
//! capacity ([`server`]), injects a scripted fault, drives it with a fleet
//! of clients using the library's reqwest middleware and guardrails
//! ([`fleet`]), and measures what arrives at the server per 100 ms and what
//! the clients got ([`measure`]). Everything is bounded: loopback only, at
//! most [`MAX_DURATION`] of traffic and [`MAX_REQUESTS`] requests per
//! strategy and [`MAX_TOTAL`] of traffic in all, every request under a
//! deadline, and each run's server and runtime torn down before the next
//! starts.
//!
//! Exit codes: 0 the game-day ran (whatever it showed); 1 it could not run
//! (say the port could not be bound); 2 bad usage, naming the flag.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::args::{duration, UsageError};

mod bins;
mod fleet;
mod measure;
mod report;
mod server;
mod strategy;

use bins::{Timeline, BIN};
use server::Fault;
use strategy::{GamedayStrategy, Schedule, Strategy};

/// Longest traffic period accepted.
pub const MAX_DURATION: Duration = Duration::from_secs(120);
/// Longest traffic period of a whole game-day, all strategies together.
pub const MAX_TOTAL: Duration = Duration::from_secs(600);
/// Most logical requests one strategy's run may make.
pub const MAX_REQUESTS: u64 = 100_000;

/// Reproduce a retry storm over loopback HTTP and compare strategies.
///
/// Example: `stagger gameday --fault stall --strategy immediate,full+budget+breaker --duration 20s`
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  stagger gameday --fault stall --strategy immediate,full+budget+breaker --duration 20s
  stagger gameday --drill                      (400 thin pods, a 2 s stall)
  stagger gameday --drill --pods 10            (the same load from 10 busy pods)
  stagger gameday --drill --shed-retries --drop-expired")]
pub struct Args {
    /// The drill: 400 pods of one client each send 200 requests/s in all to
    /// 40 workers (capacity 400/s), which stall for 2 s at 10 s of a 20 s
    /// run — `--fault stall --pods 400 --clients 400 --rate 200 --workers 40
    /// --duration 20s --strategy none,immediate,full,full+budget+breaker`.
    /// Flags given as well override it (e.g. `--drill --pods 10`).
    #[arg(long)]
    pub drill: bool,
    /// The fault: stall (every worker frozen 2 s) | failover (connections
    /// refused 3 s) | dead (503 for the whole run) | throttle (429 with
    /// Retry-After for 5 s) | slow (service time ×10 for 5 s) | none
    /// (default stall).
    #[arg(long, value_parser = fault, value_name = "F")]
    pub fault: Option<Fault>,
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
    /// Max attempts per request, the first included (1 for `none`).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub attempts: u32,
    /// First backoff of the backoff strategies (`immediate` uses 0).
    #[arg(long, default_value = "100ms", value_parser = duration, value_name = "D")]
    pub base: Duration,
    /// Largest backoff.
    #[arg(long, default_value = "10s", value_parser = duration, value_name = "D")]
    pub cap: Duration,
    /// Output format: table | json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
    /// Also write report.html (self-contained, inline SVG) and results.json here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

fn fault(s: &str) -> Result<Fault, String> {
    Fault::ALL
        .into_iter()
        .find(|f| f.as_str() == s)
        .ok_or_else(|| {
            format!("unknown fault `{s}` (expected stall, failover, dead, throttle, slow or none)")
        })
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

/// Where a fault starts unless `--fault-at` says otherwise: after 10 s of
/// steady traffic, so the breakers' 10 s windows hold a normal history (a
/// service that has been up for a while), or earlier in a short run, leaving
/// at least 3 s after the fault to watch the recovery.
fn default_fault_at(duration: Duration, len: Duration) -> Duration {
    let room = duration.saturating_sub(len + Duration::from_secs(3));
    Duration::from_secs(10)
        .min(duration / 2)
        .min(room)
        .max(Duration::from_secs(1))
}

/// The shape flags, with `--drill` or the ordinary defaults filled in.
#[derive(Debug, Clone)]
struct Shape {
    fault: Fault,
    strategy: String,
    duration: Duration,
    rate: f64,
    clients: usize,
    pods: usize,
    workers: usize,
}

impl Shape {
    fn of(a: &Args) -> Shape {
        let d = a.drill;
        fn pick<T>(d: bool, drill: T, plain: T) -> T {
            if d {
                drill
            } else {
                plain
            }
        }
        Shape {
            fault: a.fault.unwrap_or(Fault::Stall),
            strategy: a.strategy.clone().unwrap_or_else(|| {
                pick(
                    d,
                    stagger_sim::DRILL_STRATEGIES,
                    "immediate,full,full+budget+breaker",
                )
                .to_owned()
            }),
            duration: a.duration.unwrap_or(Duration::from_secs(pick(d, 20, 30))),
            rate: a.rate.unwrap_or(pick(d, 200.0, 100.0)),
            clients: a.clients.unwrap_or(pick(d, 400, 200)),
            pods: a.pods.unwrap_or(pick(d, 400, 10)),
            workers: a.workers.unwrap_or(pick(d, 40, 20)),
        }
    }
}

/// The validated plan of a game-day.
#[derive(Debug, Clone)]
struct Plan {
    strategies: Vec<Strategy>,
    server: server::Config,
    fleet: fleet::Config,
    params: report::Params,
}

fn plan(a: &Args) -> anyhow::Result<Plan> {
    let sh = Shape::of(a);
    let strategies = strategy::parse_list(&sh.strategy)?;
    if sh.duration < Duration::from_secs(1) || sh.duration > MAX_DURATION {
        return Err(usage(format!(
            "--duration: must be between 1s and {}s",
            MAX_DURATION.as_secs()
        )));
    }
    if !sh.rate.is_finite() || sh.rate <= 0.0 || sh.rate > 2000.0 {
        return Err(usage("--rate: must be more than 0 and at most 2000".into()));
    }
    let total = sh.duration.as_secs_f64() * strategies.len() as f64;
    if total > MAX_TOTAL.as_secs_f64() {
        return Err(usage(format!(
            "--strategy: {} strategies × {}s of traffic is more than {}s in all; run fewer at a time",
            strategies.len(),
            sh.duration.as_secs_f64(),
            MAX_TOTAL.as_secs()
        )));
    }
    let requests = sh.rate * sh.duration.as_secs_f64();
    if requests > MAX_REQUESTS as f64 {
        return Err(usage(format!(
            "--rate: {requests:.0} requests in {}s is more than the cap of {MAX_REQUESTS}",
            sh.duration.as_secs_f64()
        )));
    }
    for (flag, n, max) in [
        ("clients", sh.clients, 5000),
        ("pods", sh.pods, sh.clients.max(1)),
        ("workers", sh.workers, 1000),
    ] {
        if n == 0 || n > max {
            return Err(usage(format!("--{flag}: must be between 1 and {max}")));
        }
    }
    if a.queue > 100_000 {
        return Err(usage("--queue: must be at most 100000".into()));
    }
    let ms = Duration::from_millis;
    for (flag, d, lo, hi) in [
        ("service-time", a.service_time, ms(1), ms(10_000)),
        ("deadline", a.deadline, ms(10), ms(30_000)),
        ("attempt-timeout", a.attempt_timeout, ms(1), ms(30_000)),
        ("cap", a.cap, ms(0), ms(60_000)),
    ] {
        if d < lo || d > hi {
            return Err(usage(format!(
                "--{flag}: must be between {lo:?} and {hi:?}"
            )));
        }
    }
    if a.attempts == 0 || a.attempts > 20 {
        return Err(usage("--attempts: must be between 1 and 20".into()));
    }
    if a.base > a.cap {
        return Err(usage("--base: must not exceed --cap".into()));
    }
    let (fault_start, fault_end) = match sh.fault.length() {
        // A baseline: judged healthy or not from the first second.
        _ if sh.fault == Fault::None => (Duration::ZERO, Some(Duration::ZERO)),
        None => (a.fault_at.unwrap_or(Duration::ZERO), None),
        Some(len) => {
            let at = a
                .fault_at
                .unwrap_or_else(|| default_fault_at(sh.duration, len));
            // Saturating: a huge --fault-at is refused just below, not a panic.
            (at, Some(at.saturating_add(len)))
        }
    };
    if fault_start >= sh.duration {
        return Err(usage(
            "--fault-at: must be before the end of --duration".into(),
        ));
    }
    if let Some(end) = fault_end.filter(|_| sh.fault != Fault::None) {
        let need = end.saturating_add(Duration::from_secs(3));
        if need > sh.duration {
            return Err(usage(format!(
                "--duration: the {} ends at {:.1}s; give at least 3s after it to see recovery \
                 (e.g. --duration {}s)",
                sh.fault.as_str(),
                end.as_secs_f64(),
                need.as_secs_f64().ceil()
            )));
        }
    }
    let schedule = Schedule {
        attempts: a.attempts,
        base: a.base,
        cap: a.cap,
        attempt_timeout: a.attempt_timeout,
    };
    let server = server::Config {
        workers: sh.workers,
        service: a.service_time,
        queue: a.queue,
        fault: sh.fault,
        fault_start,
        fault_end: fault_end.unwrap_or(MAX_DURATION * 2),
        shed_retries: a.shed_retries,
        drop_expired: a.drop_expired,
    };
    // Builds one policy per strategy now, so a bad combination is a usage
    // error before anything starts.
    for s in &strategies {
        let stats = std::sync::Arc::new(stagger::Stats::new());
        s.client_policy(&schedule, None, &stats)?;
    }
    let params = report::Params {
        fault: sh.fault.as_str(),
        duration_s: sh.duration.as_secs_f64(),
        rate: sh.rate,
        capacity: server.capacity(),
        clients: sh.clients,
        pods: sh.pods,
        workers: sh.workers,
        service_time_s: a.service_time.as_secs_f64(),
        queue: a.queue,
        timeout_s: a.attempt_timeout.as_secs_f64(),
        deadline_s: a.deadline.as_secs_f64(),
        attempts: a.attempts,
        base_s: a.base.as_secs_f64(),
        cap_s: a.cap.as_secs_f64(),
        outage_start_s: fault_start.as_secs_f64(),
        outage_end_s: fault_end.map(|e| e.as_secs_f64()),
        shed_retries: a.shed_retries,
        drop_expired: a.drop_expired,
    };
    let fleet = fleet::Config {
        clients: sh.clients,
        pods: sh.pods,
        rate: sh.rate,
        duration: sh.duration,
        deadline: a.deadline,
        schedule,
        strategy: strategies[0],
        max_requests: MAX_REQUESTS,
    };
    Ok(Plan {
        strategies,
        server,
        fleet,
        params,
    })
}

/// Runs `stagger gameday`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let plan = plan(a)?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    let mut rows = Vec::new();
    let total = plan.strategies.len();
    for (i, s) in plan.strategies.iter().enumerate() {
        eprintln!(
            "stagger gameday: {} × {} ({}/{total}), {:.0}s of traffic…",
            plan.params.fault,
            s,
            i + 1,
            plan.params.duration_s
        );
        let raw = run_one(&plan, *s)?;
        rows.push(measure::summarize(&raw));
    }
    let results = report::Results {
        model: "gameday",
        params: plan.params.clone(),
        strategies: rows,
    };
    let json = serde_json::to_string_pretty(&results)?;
    if a.format == "json" {
        println!("{json}");
    } else {
        println!("{}", report::legend(&results.params));
        print!("{}", report::table(&results));
        println!("\n{}", report::KEY);
    }
    if let Some(dir) = &a.out {
        std::fs::write(dir.join("report.html"), report::html(&results))
            .with_context(|| format!("writing {}", dir.join("report.html").display()))?;
        std::fs::write(dir.join("results.json"), json + "\n")
            .with_context(|| format!("writing {}", dir.join("results.json").display()))?;
        eprintln!(
            "stagger gameday: report in {}",
            dir.join("report.html").display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One strategy against a fresh server, in a runtime of its own that is
/// shut down (server, clients, leftover jobs) before this returns.
fn run_one(plan: &Plan, strategy: Strategy) -> anyhow::Result<measure::Raw> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    let fleet_cfg = fleet::Config {
        strategy,
        ..plan.fleet
    };
    let grace = plan.fleet.deadline + Duration::from_secs(2);
    let result = rt.block_on(async {
        // The timeline starts a moment from now, once the server listens.
        let start = Instant::now() + Duration::from_millis(200);
        let line = Timeline::new(start, plan.fleet.duration + grace);
        let srv = server::Server::start(plan.server, line)
            .await
            .context("cannot start the server on 127.0.0.1")?;
        let out = fleet::run(fleet_cfg, srv.addr, line, grace).await;
        let stats = srv.stats.clone();
        srv.stop();
        Ok::<_, anyhow::Error>((out?, stats))
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    let (out, st) = result?;
    if out.cut_off > 0 {
        eprintln!(
            "stagger gameday: {} client tasks were still running at the hard stop",
            out.cut_off
        );
    }
    let bins = |d: Duration| (d.as_millis() / BIN.as_millis()) as usize;
    let p = &plan.server;
    Ok(measure::Raw {
        strategy: strategy.to_string(),
        rate: plan.fleet.rate,
        capacity: p.capacity(),
        traffic_bins: bins(plan.fleet.duration),
        fault_end_bin: plan
            .params
            .outage_end_s
            .filter(|_| p.fault != Fault::Dead)
            .map(|_| bins(p.fault_end)),
        first: st.first.snapshot(),
        retries: st.retries.snapshot(),
        completed: st.completed.snapshot(),
        abandoned: st.abandoned.snapshot(),
        rejected: st.rejected.snapshot(),
        duplicates: st.duplicates.load(std::sync::atomic::Ordering::Relaxed),
        deduplicated: st.deduplicated.load(std::sync::atomic::Ordering::Relaxed),
        sent: out.sent,
        successes: out.successes,
        requests: out.requests,
        client_attempts: out.attempts,
        stops: out.stops,
        latencies_ms: out.latencies_ms,
        budget_refusals: out.budget_refusals,
        breaker_opens: out.breaker_opens,
    })
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
        let p = plan(&args(&["--drill"])).unwrap();
        assert_eq!(p.fleet.pods, 400);
        assert_eq!(p.fleet.clients, 400);
        assert_eq!(p.fleet.rate, 200.0);
        assert_eq!(p.fleet.duration, Duration::from_secs(20));
        assert_eq!(p.server.workers, 40);
        assert_eq!(p.server.fault, Fault::Stall);
        assert_eq!(p.server.capacity(), 400.0);
        let names: Vec<String> = p.strategies.iter().map(|s| s.to_string()).collect();
        assert_eq!(names.join(","), stagger_sim::DRILL_STRATEGIES);
        assert!(!p.server.shed_retries && !p.server.drop_expired);
        let p = plan(&args(&[
            "--drill",
            "--pods",
            "10",
            "--shed-retries",
            "--drop-expired",
        ]))
        .unwrap();
        assert_eq!((p.fleet.pods, p.fleet.clients), (10, 400));
        assert!(p.server.shed_retries && p.server.drop_expired);
        assert!(p.params.shed_retries && p.params.drop_expired);
        // Without --drill, the ordinary defaults.
        let p = plan(&args(&[])).unwrap();
        assert_eq!(
            (p.fleet.pods, p.fleet.clients, p.server.workers),
            (10, 200, 20)
        );
    }

    #[test]
    fn faults_start_after_a_full_breaker_window_when_there_is_room() {
        let s = Duration::from_secs;
        assert_eq!(default_fault_at(s(30), s(2)), s(10));
        assert_eq!(default_fault_at(s(20), s(2)), s(10));
        assert_eq!(default_fault_at(s(12), s(2)), s(6));
        assert_eq!(default_fault_at(s(8), s(2)), s(3));
        assert_eq!(default_fault_at(s(2), s(5)), s(1));
    }
}
