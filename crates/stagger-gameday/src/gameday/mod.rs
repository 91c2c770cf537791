//! The game-day: a retry storm and its cure on real sockets.
//!
//! A simulator can be argued with; a storm on real sockets cannot. For each
//! strategy in turn, a run starts a fresh server on 127.0.0.1 with a finite
//! capacity, injects a scripted [`Fault`], drives it with a fleet of clients
//! using the library's reqwest middleware and guardrails (one set per pod,
//! built by [`Strategy::guardrails`]), and measures what arrives at the
//! server per 100 ms and what the clients got ([`crate::results::Row`]; recovery as
//! [`stagger_sim::recovery`] defines it). Everything is bounded: loopback
//! only, at most [`MAX_DURATION`] of traffic and [`MAX_REQUESTS`] requests
//! per strategy and [`MAX_TOTAL`] of traffic in all, every request under a
//! deadline, and each run's server and runtime torn down before the next
//! starts.
//!
//! The calling protocol: [`plan`] checks a [`Config`]; [`Plan::run_one`]
//! runs each of [`Plan::strategies`] (minutes of wall-clock time each);
//! [`Plan::results`] assembles the rows, which `stagger-report` renders.

use std::time::{Duration, Instant};

use stagger::limit::Algorithm;
use stagger_sim::{Schedule, Strategy};

use crate::{Error, ErrorKind};

pub mod exporter;
mod fleet;
pub mod hedging;
mod measure;
pub mod priority;

mod hosts;
mod netns;
mod server;
pub mod soak;
mod target;

use crate::bins::{Timeline, BIN};
use crate::fault::Fault;
use crate::results::{Params, Results, Row};
pub use fleet::Method;
pub use netns::{cleanup, Cleanup};

/// Longest traffic period accepted.
pub const MAX_DURATION: Duration = Duration::from_secs(120);
/// Longest traffic period of a whole game-day, all strategies together.
pub const MAX_TOTAL: Duration = Duration::from_secs(600);
/// Most logical requests one strategy's run may make.
pub const MAX_REQUESTS: u64 = 100_000;
/// Longest traffic period of a soak ([`Config::soak`]).
pub const MAX_SOAK_DURATION: Duration = Duration::from_secs(3600);
/// Most logical requests of a soak.
pub const MAX_SOAK_REQUESTS: u64 = 10_000_000;

/// What a game-day should do; [`plan`] checks it. Each field is the
/// command-line flag of the same name (`--service-time` is `service_time`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The fault injected (`None`: a baseline run without one); see
    /// [`fault`] for the names `--fault` takes.
    pub fault: Option<Fault>,
    /// Strategies to compare, run one after the other.
    pub strategies: Vec<Strategy>,
    /// How long each strategy's clients send new requests.
    pub duration: Duration,
    /// New requests per second over the whole fleet.
    pub rate: f64,
    /// Client tasks, each with its own policy.
    pub clients: usize,
    /// Pods the clients are spread over; each pod shares one connection
    /// pool and one set of guardrails.
    pub pods: usize,
    /// Server workers (capacity = workers ÷ service time).
    pub workers: usize,
    /// Time the server spends on one request.
    pub service_time: Duration,
    /// Requests that may wait for a worker.
    pub queue: usize,
    /// When the fault starts (`None`: after 10 s of steady traffic, earlier
    /// in a short run; 0 for `dead`).
    pub fault_at: Option<Duration>,
    /// Each request's deadline over all its attempts and waits.
    pub deadline: Duration,
    /// Timeout of one attempt.
    pub attempt_timeout: Duration,
    /// Max attempts per request, the first included.
    pub attempts: u32,
    /// First backoff.
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
    /// Seeds the pods' breakers, so their open periods replay.
    pub seed: u64,
    /// Also report every pod's events to the `metrics` facade (for an
    /// [`exporter::Exporter`] to serve).
    pub metrics: bool,
    /// The server sheds retries first (the library's `ShedLayer`).
    pub shed_retries: bool,
    /// The server drops expired work (the library's `DeadlineLayer`, and
    /// queued jobs whose caller's deadline passed are skipped unstarted).
    pub drop_expired: bool,
    /// `--server-limit`: a concurrency limit in front of the server (the
    /// library's `ShedLayer` with a `Limiter`: `static:N`, `aimd`,
    /// `gradient`); `None` for none. Replaces `shed_retries`.
    pub server_limit: Option<Algorithm>,
    /// `--ramp-to`: the fleet's rate grows linearly from `rate` at the start
    /// to this at the end of the traffic (an overload ramp); `None` keeps
    /// it steady.
    pub ramp_to: Option<f64>,
    /// Whether the POSTs carry an `Idempotency-Key` (`--no-keys` turns it
    /// off: the middleware then never repeats one whose outcome is unknown).
    pub keys: bool,
    /// `--method`: what every request is; `None` for the default, a GET
    /// (a read) with `--target` and a POST (an order) to the game-day's
    /// own server, which takes nothing else.
    pub method: Option<Method>,
    /// A soak ([`soak`]): one strategy, up to [`MAX_SOAK_DURATION`] and
    /// [`MAX_SOAK_REQUESTS`].
    pub soak: bool,
    /// `--target`: drive this real upstream (`http://HOST:PORT/PATH`, every
    /// request a POST to PATH) through an embedded fault proxy that injects
    /// the fault (see [`crate::proxy`]), instead of the game-day's own server.
    pub target: Option<String>,
    /// `--hosts N`: the server in one network namespace and the pods spread
    /// over N others, joined by a bridge, with kernel faults (nftables);
    /// Linux and root only.
    pub hosts: Option<usize>,
}

fn usage(msg: String) -> Error {
    Error::usage(msg)
}

/// The method of the fleet's requests: `--method`, or by default a GET
/// (a read, harmless to repeat) against a `--target` and a POST to the
/// game-day's own server.
fn method(a: &Config) -> Result<Method, Error> {
    let m = match (a.method, &a.target) {
        (Some(Method::Get), None) => {
            return Err(usage(
                "--method: the game-day's own server takes orders, by POST; GET is for \
                 a read endpoint of yours (--target URL)"
                    .into(),
            ))
        }
        (Some(m), _) => m,
        (None, Some(_)) => Method::Get,
        (None, None) => Method::Post,
    };
    if m == Method::Get && !a.keys {
        return Err(usage(
            "--no-keys: only POSTs carry an Idempotency-Key and these requests are GETs \
             (give --method POST for a write)"
                .into(),
        ));
    }
    Ok(m)
}

/// Reads `--fault`: a name of the one vocabulary ([`crate::fault::NAMES`])
/// or `none` (a baseline). `slow` alone makes each job take ten times
/// `service` (nine more); `slow:MS` adds MS.
pub fn fault(name: &str, service: Duration) -> Result<Option<Fault>, String> {
    match name.trim() {
        "none" => Ok(None),
        n => Fault::named(n, Some(service.saturating_mul(9)))
            .map(Some)
            .map_err(|e| format!("{e}; or none, for a run without a fault")),
    }
}

/// How long a game-day's fault lasts unless told otherwise (`None`: the
/// whole run, as a dead dependency's 503s do).
fn default_length(fault: Fault) -> Option<Duration> {
    let s = Duration::from_secs;
    match fault {
        Fault::Stall => Some(s(2)),
        Fault::Unavailable => None,
        Fault::Throttle | Fault::Slow(_) => Some(s(5)),
        _ => Some(s(3)),
    }
}

/// The name a fault is reported by (`none` for a baseline).
fn name(fault: Option<Fault>) -> &'static str {
    fault.map_or("none", |f| f.name())
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
fn ledger_memory(a: &Config) -> Duration {
    let rounds = (a.queue / a.workers.max(1) + 1) as u32;
    (a.deadline + a.service_time.saturating_mul(10).saturating_mul(rounds))
        .saturating_add(Duration::from_secs(3))
        .max(Duration::from_secs(10))
}

/// A checked game-day, ready to run strategy by strategy.
#[derive(Debug, Clone)]
pub struct Plan {
    strategies: Vec<Strategy>,
    target: Option<target::Target>,
    hosts: Option<hosts::Hosts>,
    server: server::Config,
    fleet: fleet::Config,
    params: Params,
}

/// One strategy's run.
#[derive(Debug, Clone)]
pub struct Run {
    /// What it measured.
    pub row: Row,
    /// Client tasks still running at the hard stop (0 normally).
    pub cut_off: u64,
    /// Lines worth telling the user about this run, each one sentence
    /// (say, that the upstream answered 405 to every request).
    pub notes: Vec<String>,
}

/// Checks `a` and plans the game-day; a bad setting is an
/// [`ErrorKind::Usage`] error naming its flag.
pub fn plan(a: &Config) -> Result<Plan, Error> {
    let strategies = a.strategies.clone();
    let max_requests = check_load(a)?;
    check_sizes(a)?;
    let (fault_start, fault_end) = fault_window(a)?;
    let method = method(a)?;
    let target = a
        .target
        .as_deref()
        .map(|url| target::Target::check(url, a))
        .transpose()?;
    let hosts = a.hosts.map(|n| hosts::Hosts::check(n, a)).transpose()?;
    let kernel = matches!(a.fault, Some(f) if f.kernel_only() || f == Fault::Blackhole);
    if hosts.is_none() && kernel && a.target.is_none() {
        return Err(usage(format!(
            "--fault: {} is a kernel fault between hosts; give --hosts N (Linux, root)",
            name(a.fault)
        )));
    }
    let schedule = Schedule {
        attempts: Some(a.attempts),
        base: a.base,
        cap: a.cap,
        attempt_timeout: Some(a.attempt_timeout),
        measure_latency: true,
    };
    let server = server::Config {
        workers: a.workers,
        service: a.service_time,
        queue: a.queue,
        fault: a.fault,
        fault_start,
        fault_end: fault_end.unwrap_or(MAX_DURATION * 2),
        shed_retries: a.shed_retries,
        drop_expired: a.drop_expired,
        remember: ledger_memory(a),
        limit: a.server_limit,
        seed: a.seed,
        bind: std::net::Ipv4Addr::LOCALHOST.into(),
    };
    // Builds one policy per strategy now, so a bad combination is a usage
    // error before anything starts.
    for s in &strategies {
        s.check(&schedule)?;
    }
    let params = params(a, &server, (fault_start, fault_end), method);
    let fleet = fleet::Config {
        clients: a.clients,
        pods: a.pods,
        rate: a.rate,
        duration: a.duration,
        deadline: a.deadline,
        schedule,
        strategy: strategies[0],
        max_requests,
        seed: a.seed,
        metrics: a.metrics,
        keys: a.keys,
        method,
        ramp_to: a.ramp_to,
        first_client: 0,
    };
    Ok(Plan {
        strategies,
        target,
        hosts,
        server,
        fleet,
        params,
    })
}

/// Checks the strategies, the traffic's length and rate against the caps;
/// the cap on requests that applies.
fn check_load(a: &Config) -> Result<u64, Error> {
    let strategies = &a.strategies;
    if strategies.is_empty() {
        return Err(usage("--strategy: no strategy given".into()));
    }
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
    if let Some(r) = a.ramp_to {
        if !r.is_finite() || r <= 0.0 || r > 2000.0 {
            return Err(usage(
                "--ramp-to: must be more than 0 and at most 2000".into(),
            ));
        }
    }
    if a.server_limit.is_some() && a.shed_retries {
        return Err(usage(
            "--server-limit: replaces --shed-retries (both put a ShedLayer in front); give one"
                .into(),
        ));
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
    // A ramp's mean rate is the mean of its ends.
    let mean_rate = (a.rate + a.ramp_to.unwrap_or(a.rate)) / 2.0;
    let requests = mean_rate * a.duration.as_secs_f64();
    if requests > max_requests as f64 {
        return Err(usage(format!(
            "--rate: {requests:.0} requests in {}s is more than the cap of {max_requests}",
            a.duration.as_secs_f64()
        )));
    }
    Ok(max_requests)
}

/// Checks the fleet's and the server's sizes and times.
fn check_sizes(a: &Config) -> Result<(), Error> {
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
    Ok(())
}

/// When the fault starts and ends (`None`: it never ends), checked against
/// `--duration`.
fn fault_window(a: &Config) -> Result<(Duration, Option<Duration>), Error> {
    let (fault_start, fault_end) = match a.fault.map(default_length) {
        // A baseline: judged healthy or not from the first second.
        None => (Duration::ZERO, Some(Duration::ZERO)),
        Some(None) => (a.fault_at.unwrap_or(Duration::ZERO), None),
        Some(Some(len)) => {
            let at = a
                .fault_at
                .unwrap_or_else(|| default_fault_at(a.duration, len));
            // Saturating: a huge --fault-at is refused just below, not a panic.
            (at, Some(at.saturating_add(len)))
        }
    };
    // Only a --fault-at the user gave is named here; a default start that
    // does not fit is a --duration too short, reported just below.
    if fault_start >= a.duration && a.fault_at.is_some() {
        return Err(usage(
            "--fault-at: must be before the end of --duration".into(),
        ));
    }
    if let Some(end) = fault_end.filter(|_| a.fault.is_some()) {
        let need = end.saturating_add(Duration::from_secs(3));
        if need > a.duration {
            return Err(usage(format!(
                "--duration: the {} ends at {:.1}s; give at least 3s after it to see recovery \
                 (e.g. --duration {}s)",
                name(a.fault),
                end.as_secs_f64(),
                need.as_secs_f64().ceil()
            )));
        }
    }
    Ok((fault_start, fault_end))
}

/// The parameters as the report prints them.
fn params(
    a: &Config,
    server: &server::Config,
    (fault_start, fault_end): (Duration, Option<Duration>),
    method: Method,
) -> Params {
    Params {
        fault: name(a.fault),
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
        seed: a.seed,
        shed_retries: a.shed_retries,
        drop_expired: a.drop_expired,
        server_limit: a.server_limit.map(|l| l.to_string()),
        ramp_to: a.ramp_to,
        target: a.target.clone(),
        method: method.as_str(),
        hosts: a.hosts,
    }
}

impl Plan {
    /// The strategies, in the order they run.
    pub fn strategies(&self) -> &[Strategy] {
        &self.strategies
    }

    /// The parameters, as reported.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The whole result from the rows of [`Plan::run_one`], in order.
    pub fn results(&self, rows: Vec<Row>) -> Results {
        Results {
            model: "gameday",
            params: self.params.clone(),
            strategies: rows,
        }
    }

    /// One strategy against a fresh server, in a runtime of its own that is
    /// shut down (server, clients, leftover jobs) before this returns.
    ///
    /// Everything is bounded: loopback only, at most [`MAX_DURATION`] of
    /// traffic and [`MAX_REQUESTS`] requests, every request under a deadline.
    pub fn run_one(&self, strategy: Strategy) -> Result<Run, Error> {
        let plan = self;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::with(ErrorKind::Run, "cannot start the tokio runtime", e))?;
        let fleet_cfg = fleet::Config {
            strategy,
            ..plan.fleet
        };
        let grace = plan.fleet.deadline + Duration::from_secs(2);
        if let Some(h) = &plan.hosts {
            drop(rt);
            let (out, seen) = h.run(plan, fleet_cfg, grace)?;
            return Ok(plan.finish(strategy, out, seen));
        }
        let result = rt.block_on(async {
            if let Some(t) = &plan.target {
                return t.run(plan, fleet_cfg, grace).await;
            }
            // The timeline starts a moment from now, once the server listens.
            let start = Instant::now() + Duration::from_millis(200);
            let line = Timeline::new(start, plan.fleet.duration + grace);
            let srv = server::Server::start(plan.server, line)
                .await
                .map_err(|e| {
                    Error::with(ErrorKind::Run, "cannot start the server on 127.0.0.1", e)
                })?;
            let url = format!("http://{}/work", srv.addr);
            let out = fleet::run(fleet_cfg, &url, line, grace).await;
            let st = srv.stats.clone();
            let shed = srv.shed.as_ref().map(|l| {
                let s = l.stats();
                s.shed_first + s.shed_retries
            });
            srv.stop();
            let relaxed = std::sync::atomic::Ordering::Relaxed;
            let seen = Arrived {
                first: st.first.snapshot(),
                retries: st.retries.snapshot(),
                completed: st.completed.snapshot(),
                abandoned: st.abandoned.snapshot(),
                rejected: st.rejected.snapshot(),
                duplicates: st.duplicates.load(relaxed),
                deduplicated: st.deduplicated.load(relaxed),
                shed,
                notes: Vec::new(),
            };
            Ok::<_, Error>((out?, seen))
        });
        rt.shutdown_timeout(Duration::from_secs(1));
        let (out, seen) = result?;
        Ok(plan.finish(strategy, out, seen))
    }

    /// One run's row from what the clients and the far side saw.
    fn finish(&self, strategy: Strategy, out: fleet::Outcome, seen: Arrived) -> Run {
        let plan = self;
        let bins = |d: Duration| (d.as_millis() / BIN.as_millis()) as usize;
        let p = &plan.server;
        let fault_end = plan.params.outage_end_s.map(|_| p.fault_end);
        let (mut first, mut retries, mut notes) = (seen.first, seen.retries, seen.notes);
        if p.fault == Some(Fault::Blackhole) && plan.hosts.is_some() {
            // The kernel drops what is sent to the server during the fault,
            // and delivers some of it late, after its client gave up: the
            // server's count is short in the fault and long after it. The
            // clients' count of the attempts they started is the arrivals.
            let (f, r) = measure::arrivals_from_clients(
                (&mut first, &mut retries),
                (&out.started_first, &out.started_retries),
                0..out.started_first.len(),
            );
            notes.push(format!(
                "blackhole {:.1}–{:.1} s: the server sees nothing of what is sent then (and some of \
                 it late, after its client gave up), so the arrivals are the attempts the clients \
                 started: {f} first attempts and {r} retries",
                p.fault_start.as_secs_f64(),
                p.fault_end.as_secs_f64(),
            ));
        }
        let raw = measure::Raw {
            strategy: strategy.to_string(),
            capacity: p.capacity(),
            traffic_bins: bins(plan.fleet.duration),
            fault_end_bin: fault_end.map(bins),
            fault_end,
            first,
            retries,
            completed: seen.completed,
            abandoned: seen.abandoned,
            rejected: seen.rejected,
            duplicates: seen.duplicates,
            deduplicated: seen.deduplicated,
            sent: out.sent,
            successes: out.successes,
            requests: out.requests,
            client_attempts: out.attempts,
            stops: out.stops,
            latencies_ms: out.latencies_ms,
            budget_refusals: out.budget_refusals,
            breaker_opens: out.breaker_opens,
            shed: seen.shed,
        };
        Run {
            row: measure::summarize(&raw),
            cut_off: out.cut_off,
            notes,
        }
    }
}

/// What the far side of a run saw, per 100 ms bin and in total: the
/// game-day's own server, or the fault proxy in front of a target.
#[derive(Debug, Default)]
struct Arrived {
    first: Vec<u32>,
    retries: Vec<u32>,
    completed: Vec<u32>,
    abandoned: Vec<u32>,
    rejected: Vec<u32>,
    duplicates: u64,
    deduplicated: u64,
    shed: Option<u64>,
    /// Lines worth telling the user about this run (say, an upstream
    /// that answered 405 to everything).
    notes: Vec<String>,
}

/// A listener on a free port of 127.0.0.1 and its address, for a game-day's
/// in-process upstream.
pub(crate) async fn loopback_listener(
) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), Error> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| Error::with(ErrorKind::Run, "binding 127.0.0.1", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::with(ErrorKind::Run, "reading the address", e))?;
    Ok((listener, addr))
}

#[cfg(test)]
mod tests;
