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
//! (say the port could not be bound); 2 bad usage, naming the flag; 3 a
//! `--soak` whose memory or file descriptors grew after the warm-up
//! ([`soak`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::args::{duration, UsageError};

mod bins;
mod fleet;
mod measure;
mod report;
mod reset;
mod server;
mod soak;
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
/// Longest traffic period of a `--soak`.
pub const MAX_SOAK_DURATION: Duration = Duration::from_secs(3600);
/// Most logical requests of a `--soak`.
pub const MAX_SOAK_REQUESTS: u64 = 10_000_000;

/// Reproduce a retry storm over loopback HTTP and compare strategies.
///
/// Example: `stagger gameday --fault stall --strategy immediate,full+budget+breaker --duration 20s`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The fault: stall (every worker frozen 2 s) | failover (connections
    /// refused 3 s) | dead (503 for the whole run) | throttle (429 with
    /// Retry-After for 5 s) | slow (service time ×10 for 5 s) | reset
    /// (each request read, then its connection reset with RST, for 3 s;
    /// every other one applied first) | none.
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
    /// Max attempts per request, the first included (1 for `none`).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub attempts: u32,
    /// First backoff of the backoff strategies (`immediate` uses 0).
    #[arg(long, default_value = "100ms", value_parser = duration, value_name = "D")]
    pub base: Duration,
    /// Largest backoff.
    #[arg(long, default_value = "10s", value_parser = duration, value_name = "D")]
    pub cap: Duration,
    /// Send the POSTs without an Idempotency-Key: the middleware then
    /// never repeats one whose outcome is unknown (a reset, a timeout).
    #[arg(long)]
    pub no_keys: bool,
    /// A soak: one strategy for up to 60 min, the process's resident memory
    /// and open file descriptors sampled from /proc/self; exits 3 if either
    /// grew after the warm-up (e.g. `--soak --fault none --duration 10m`).
    #[arg(long)]
    pub soak: bool,
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
            format!(
                "unknown fault `{s}` (expected stall, failover, dead, throttle, slow, reset or none)"
            )
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

/// How long the server's ledger must remember a key to catch every
/// duplicate: a call's last attempt is sent before its deadline, then may
/// wait for the whole queue at ten times the service time (a slow fault)
/// and a 2 s stall. At least 10 s.
fn ledger_memory(a: &Args) -> Duration {
    let rounds = (a.queue / a.workers.max(1) + 1) as u32;
    (a.deadline + a.service_time.saturating_mul(10).saturating_mul(rounds))
        .saturating_add(Duration::from_secs(3))
        .max(Duration::from_secs(10))
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
    let strategies = strategy::parse_list(&a.strategy)?;
    let (max_duration, max_requests) = if a.soak {
        (MAX_SOAK_DURATION, MAX_SOAK_REQUESTS)
    } else {
        (MAX_DURATION, MAX_REQUESTS)
    };
    if a.duration < Duration::from_secs(1) || a.duration > max_duration {
        return Err(usage(format!(
            "--duration: must be between 1s and {}s",
            max_duration.as_secs()
        )));
    }
    if a.soak && strategies.len() != 1 {
        return Err(usage("--strategy: a soak runs one strategy".into()));
    }
    if !a.rate.is_finite() || a.rate <= 0.0 || a.rate > 2000.0 {
        return Err(usage("--rate: must be more than 0 and at most 2000".into()));
    }
    let total = a.duration.as_secs_f64() * strategies.len() as f64;
    if !a.soak && total > MAX_TOTAL.as_secs_f64() {
        return Err(usage(format!(
            "--strategy: {} strategies × {}s of traffic is more than {}s in all; run fewer at a time",
            strategies.len(),
            a.duration.as_secs_f64(),
            MAX_TOTAL.as_secs()
        )));
    }
    let requests = a.rate * a.duration.as_secs_f64();
    if requests > max_requests as f64 {
        return Err(usage(format!(
            "--rate: {requests:.0} requests in {}s is more than the cap of {max_requests}",
            a.duration.as_secs_f64()
        )));
    }
    for (flag, n, max) in [
        ("clients", a.clients, 5000),
        ("pods", a.pods, a.clients.max(1)),
        ("workers", a.workers, 1000),
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
    let (fault_start, fault_end) = match a.fault.length() {
        // A baseline: judged healthy or not from the first second.
        _ if a.fault == Fault::None => (Duration::ZERO, Some(Duration::ZERO)),
        None => (a.fault_at.unwrap_or(Duration::ZERO), None),
        Some(len) => {
            let at = a
                .fault_at
                .unwrap_or_else(|| default_fault_at(a.duration, len));
            // Saturating: a huge --fault-at is refused just below, not a panic.
            (at, Some(at.saturating_add(len)))
        }
    };
    if fault_start >= a.duration {
        return Err(usage(
            "--fault-at: must be before the end of --duration".into(),
        ));
    }
    if let Some(end) = fault_end.filter(|_| a.fault != Fault::None) {
        let need = end.saturating_add(Duration::from_secs(3));
        if need > a.duration {
            return Err(usage(format!(
                "--duration: the {} ends at {:.1}s; give at least 3s after it to see recovery \
                 (e.g. --duration {}s)",
                a.fault.as_str(),
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
        workers: a.workers,
        service: a.service_time,
        queue: a.queue,
        fault: a.fault,
        fault_start,
        fault_end: fault_end.unwrap_or(MAX_DURATION * 2),
        remember: ledger_memory(a),
    };
    // Builds one policy per strategy now, so a bad combination is a usage
    // error before anything starts.
    for s in &strategies {
        let stats = std::sync::Arc::new(stagger::Stats::new());
        s.client_policy(&schedule, None, &stats)?;
    }
    let params = report::Params {
        fault: a.fault.as_str(),
        duration_s: a.duration.as_secs_f64(),
        rate: a.rate,
        capacity: server.capacity(),
        clients: a.clients,
        pods: a.pods,
        workers: a.workers,
        service_time_s: a.service_time.as_secs_f64(),
        queue: a.queue,
        timeout_s: a.attempt_timeout.as_secs_f64(),
        deadline_s: a.deadline.as_secs_f64(),
        attempts: a.attempts,
        base_s: a.base.as_secs_f64(),
        cap_s: a.cap.as_secs_f64(),
        outage_start_s: fault_start.as_secs_f64(),
        outage_end_s: fault_end.map(|e| e.as_secs_f64()),
    };
    let fleet = fleet::Config {
        clients: a.clients,
        pods: a.pods,
        rate: a.rate,
        duration: a.duration,
        deadline: a.deadline,
        schedule,
        strategy: strategies[0],
        max_requests,
        keys: !a.no_keys,
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
    let sampler = a
        .soak
        .then(|| soak::Sampler::start(soak::interval(a.duration)));
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
    let verdict = match sampler {
        Some(s) => Some(
            soak::verdict(s.finish(), a.duration)
                .context("--soak: no sample of /proc/self after the warm-up")?,
        ),
        None => None,
    };
    let json = match &verdict {
        // A soak's JSON is the game-day's with the samples and the verdict.
        Some(v) => {
            let mut value = serde_json::to_value(&results)?;
            value["soak"] = serde_json::to_value(v)?;
            serde_json::to_string_pretty(&value)?
        }
        None => serde_json::to_string_pretty(&results)?,
    };
    if a.format == "json" {
        println!("{json}");
    } else {
        println!("{}", report::legend(&results.params));
        print!("{}", report::table(&results));
        println!("\n{}", report::KEY);
        if let Some(v) = &verdict {
            println!("\n{}", soak::text(v));
        }
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
    if verdict.is_some_and(|v| !v.flat) {
        return Ok(ExitCode::from(3));
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
