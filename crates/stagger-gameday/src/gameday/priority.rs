//! The priority game-day: a CPU-bound upstream on 127.0.0.1 asked for twice
//! what it can do, 20 % of the requests `x-criticality: critical` and the
//! rest `sheddable`, behind three servers in turn — the library's
//! [`ShedLayer`] shedding by priority, the same layer blind to priorities,
//! and tower-acc's `ConcurrencyLimitLayer` (AIMD) — so the three are
//! compared in one run, beside the simulator's `--model priority`.
//!
//! The upstream burns CPU: each request runs a busy loop of a fixed number
//! of iterations, calibrated once at the start to take
//! [`work`](PriorityParams::work), on [`cores`](PriorityParams::cores)
//! threads, first in, first out (the simulator's model). Its capacity is then
//! measured (closed loop, no layer), then its unloaded p99 (a quarter of
//! the capacity, no layer), then each server gets `load ×` capacity for
//! `duration`. Bounded: loopback only, at most [`MAX_REQUESTS`] requests
//! per server, every call under the caller's deadline, at most
//! [`MAX_IN_FLIGHT`] calls open at once.
//!
//! ```no_run
//! use std::time::Duration;
//! use stagger_gameday::gameday::priority::{self, PriorityParams};
//!
//! let p = PriorityParams { duration: Duration::from_secs(3), ..PriorityParams::default() };
//! let report = priority::run(&p)?; // about 15 s
//! // stagger_report::gameday::priority_table(&p, &report) draws the table.
//! assert!(report.servers[0].critical.success_pct > report.servers[1].critical.success_pct);
//! # Ok::<(), stagger_gameday::Error>(())
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use stagger::limit::Limiter;
use stagger::priority::{Ceilings, HEADER};
use stagger::random::{FastRng, RandomSource};
use stagger::tower::{ShedLayer, ShedStats};

use crate::{Error, ErrorKind};

pub mod cpu;
mod upstream;

use upstream::{calibrate, start, Bare, Cpu};

/// Most requests one server's run may send.
pub const MAX_REQUESTS: u64 = 50_000;
/// Most calls open at once; an arrival beyond it counts as failed.
pub const MAX_IN_FLIGHT: usize = 2_000;

/// The priority game-day's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityParams {
    /// How long each server is driven.
    pub duration: Duration,
    /// The arrival rate as a multiple of the measured capacity.
    pub load: f64,
    /// The share of requests that is `critical`.
    pub critical: f64,
    /// The CPU one request burns (the calibration's target).
    pub work: Duration,
    /// Threads burning the requests' CPU.
    pub cores: u32,
    /// The limit in flight of both `ShedLayer`s (and tower-acc's AIMD
    /// starting point); by priority, the levels below `critical` may fill
    /// two per core of it.
    pub limit: u32,
    /// How long each caller waits for its answer.
    pub deadline: Duration,
    /// The seed of arrivals and levels.
    pub seed: u64,
    /// With a duration: after the three servers, the `ShedLayer` by
    /// priority with a CPU trigger (threshold 80 %) fed by the upstream's
    /// threads is driven for that long, and its trace reported
    /// ([`cpu`]).
    pub cpu_trigger: Option<Duration>,
}

impl Default for PriorityParams {
    /// 4 s per server at 2× capacity, 20 % critical, 10 ms of CPU a
    /// request on 1 core, a limit of 8 in flight (the levels below
    /// `critical` at most 2 of them), a 1 s deadline.
    fn default() -> Self {
        PriorityParams {
            duration: Duration::from_secs(4),
            load: 2.0,
            critical: 0.2,
            work: Duration::from_millis(10),
            cores: 1,
            limit: 8,
            deadline: Duration::from_secs(1),
            seed: 1,
            cpu_trigger: None,
        }
    }
}

impl PriorityParams {
    fn validate(&self) -> Result<(), Error> {
        let usage = Error::usage;
        if self.duration < Duration::from_millis(500) || self.duration > Duration::from_secs(300) {
            return Err(usage(format!(
                "--duration: the priority game-day drives each server 500ms to 5m, got {:?}",
                self.duration
            )));
        }
        if !(self.load.is_finite() && self.load > 0.0 && self.load <= 10.0) {
            return Err(usage(format!(
                "load: must be above 0 and at most 10, got {}",
                self.load
            )));
        }
        if !(0.0..=1.0).contains(&self.critical) {
            return Err(usage(format!(
                "critical share: must be 0 to 1, got {}",
                self.critical
            )));
        }
        if self.work < Duration::from_micros(100) || self.work > Duration::from_millis(100) {
            return Err(usage(format!(
                "work: must be 100µs to 100ms, got {:?}",
                self.work
            )));
        }
        if self.cores == 0 || self.cores > 16 {
            return Err(usage(format!("cores: must be 1 to 16, got {}", self.cores)));
        }
        if let Some(d) = self.cpu_trigger {
            if d < Duration::from_secs(2) || d > Duration::from_secs(300) {
                return Err(usage(format!(
                    "--cpu-trigger: the CPU trigger's run lasts 2s to 5m, got {d:?}"
                )));
            }
        }
        if self.limit == 0 || self.limit > 1_000 || self.deadline.is_zero() {
            return Err(usage(
                "limit: must be 1 to 1000; deadline: above 0".to_string(),
            ));
        }
        Ok(())
    }
}

/// What became of one level's requests behind one server.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Level {
    /// Requests sent (after the first fifth, a warm-up not counted).
    pub sent: u64,
    /// Answered 200 within the deadline.
    pub ok: u64,
    /// Answered 503 (shed).
    pub shed: u64,
    /// No answer within the deadline, or another failure.
    pub failed: u64,
    /// The share answered 200, in %.
    pub success_pct: f64,
    /// The 99th percentile latency of the 200s, in ms.
    pub p99_ms: f64,
}

/// One server's run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerRun {
    /// Which server.
    pub server: &'static str,
    /// The `critical` requests.
    pub critical: Level,
    /// The `sheddable` requests.
    pub sheddable: Level,
    /// The critical p99 over the unloaded p99.
    pub critical_p99_ratio: f64,
    /// Requests the layer itself counted as shed, after the warm-up as the
    /// 503 counts are (0 for tower-acc, which queues instead).
    pub layer_shed: u64,
}

/// The whole game-day.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PriorityReport {
    /// Busy-loop iterations per request, from the calibration.
    pub iterations: u64,
    /// Requests per second the bare upstream served, closed loop.
    pub capacity_rps: f64,
    /// Arrivals per second offered to each server.
    pub rate_rps: f64,
    /// The p99 of the bare upstream at a quarter of its capacity, in ms.
    pub unloaded_p99_ms: f64,
    /// Requests sent to each server.
    pub requests: u64,
    /// One row per server, in the order run.
    pub servers: Vec<ServerRun>,
    /// The CPU trigger's run, when asked for
    /// ([`PriorityParams::cpu_trigger`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<cpu::CpuRun>,
}

/// The three servers, in the order they run.
pub const SERVERS: [&str; 3] = [
    "ShedLayer + priorities",
    "ShedLayer (no priorities)",
    "tower-acc AIMD",
];

/// Runs the game-day: calibration, capacity, unloaded p99, then each of
/// [`SERVERS`].
pub fn run(p: &PriorityParams) -> Result<PriorityReport, Error> {
    p.validate()?;
    if p.cpu_trigger.is_some() {
        cpu::readable()?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::with(ErrorKind::Run, "building the runtime", e))?;
    let iterations = calibrate(p.work);
    let cpu = Cpu::start(iterations, p.cores);
    let out = rt.block_on(async {
        let (capacity, unloaded) = baseline(&cpu, p).await?;
        let rate = capacity * p.load;
        let drive = Drive::new(p, rate);
        let mut servers = Vec::new();
        for server in SERVERS {
            let run = match server {
                "ShedLayer + priorities" => {
                    let shed = shed_layer(p, true, None)?;
                    let count = || total(shed.stats());
                    drive
                        .against(start(shed.clone(), &cpu).await?, &count)
                        .await
                }
                "ShedLayer (no priorities)" => {
                    let shed = shed_layer(p, false, None)?;
                    let count = || total(shed.stats());
                    drive
                        .against(start(shed.clone(), &cpu).await?, &count)
                        .await
                }
                _ => {
                    // Its defaults start at 20 (min 20, max 200); it starts
                    // where the ShedLayers stand and may go down to 1.
                    let aimd = tower_acc::Aimd::builder()
                        .min_limit(1)
                        .initial_limit(p.limit as usize)
                        .max_limit(p.limit as usize * 50)
                        .build();
                    let layer = tower_acc::ConcurrencyLimitLayer::new(aimd);
                    drive.against(start(layer, &cpu).await?, &|| 0).await
                }
            };
            servers.push(ServerRun {
                server,
                critical_p99_ratio: stagger_sim::rounded(run.critical.p99_ms / unloaded, 2),
                critical: run.critical,
                sheddable: run.sheddable,
                layer_shed: run.layer_shed,
            });
        }
        let cpu = match p.cpu_trigger {
            Some(d) => Some(cpu::run(p, iterations, d).await?),
            None => None,
        };
        Ok::<_, Error>(PriorityReport {
            iterations,
            capacity_rps: stagger_sim::rounded(capacity, 1),
            rate_rps: stagger_sim::rounded(rate, 1),
            unloaded_p99_ms: stagger_sim::rounded(unloaded, 3),
            requests: drive.requests,
            servers,
            cpu,
        })
    });
    drop(rt);
    cpu.stop();
    out
}

/// The bare upstream's capacity (requests a second) and its critical p99
/// at a quarter of it (ms).
async fn baseline(cpu: &Cpu, p: &PriorityParams) -> Result<(f64, f64), Error> {
    let capacity = capacity(cpu, p).await?;
    let requests = ((capacity / 4.0) * p.duration.as_secs_f64())
        .ceil()
        .max(60.0) as u64;
    Ok((capacity, unloaded(cpu, p, capacity / 4.0, requests).await?))
}

/// The bare upstream's critical p99 (ms) for `requests` arriving at `rate`.
async fn unloaded(cpu: &Cpu, p: &PriorityParams, rate: f64, requests: u64) -> Result<f64, Error> {
    let quarter = Drive {
        rate,
        requests,
        critical: 1.0,
        ..Drive::new(p, rate)
    };
    let idle = quarter.against(start(Bare, cpu).await?, &|| 0).await;
    Ok(idle.critical.p99_ms.max(1e-3))
}

fn total(s: ShedStats) -> u64 {
    s.shed_first + s.shed_retries
}

/// The game-day's ceilings, matched to the upstream's parallelism:
/// `critical` may fill the whole limit, the levels below two requests per
/// core — one running, one ready for when it ends, all a core can use
/// without a queue. With a limit of 8 on one core that is 2 `sheddable`
/// requests of the 8 (25 %), so a critical request arriving finds at most
/// those two ahead of it besides other critical ones, where the default
/// ceilings (60 %: 5 of 8) let it wait behind 50 ms of sheddable work.
fn ceilings(p: &PriorityParams) -> Result<Ceilings, Error> {
    let below = (2.0 * f64::from(p.cores) / f64::from(p.limit)).min(1.0);
    Ceilings::new(&[1.0, 1.0, below]).map_err(|e| Error::usage(format!("ceilings: {e}")))
}

/// A `ShedLayer` with a fixed limit, shedding by priority or not, and
/// with a CPU trigger beside the limit or not.
fn shed_layer(
    p: &PriorityParams,
    priorities: bool,
    cpu: Option<stagger::limit::CpuTrigger>,
) -> Result<ShedLayer, Error> {
    let limiter = Limiter::builder(stagger::limit::Algorithm::Fixed(p.limit))
        .seed(p.seed)
        .build()
        .map_err(|e| Error::usage(format!("limit: {e}")))?;
    let mut b = ShedLayer::limited(limiter);
    if priorities {
        b = b.priorities(ceilings(p)?);
    }
    if let Some(trigger) = cpu {
        b = b.cpu(trigger);
    }
    Ok(b.build())
}

type Client =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, String>;

fn client() -> Client {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<String>()
}

/// One call's end.
enum Outcome {
    Ok(Duration),
    Shed,
    Failed,
}

async fn call(client: &Client, uri: &str, level: &'static str, deadline: Duration) -> Outcome {
    let t0 = Instant::now();
    let Ok(req) = http::Request::get(uri)
        .header(HEADER, level)
        .body(String::new())
    else {
        return Outcome::Failed;
    };
    let done = tokio::time::timeout(deadline, async {
        let resp = client.request(req).await.ok()?;
        let status = resp.status();
        resp.into_body().collect().await.ok()?;
        Some(status)
    })
    .await;
    match done {
        Ok(Some(s)) if s.is_success() => Outcome::Ok(t0.elapsed()),
        Ok(Some(s)) if s == http::StatusCode::SERVICE_UNAVAILABLE => Outcome::Shed,
        _ => Outcome::Failed,
    }
}

/// The bare upstream's capacity: closed loop, 16 callers per core for
/// about a second (at least 20 requests' worth of work).
async fn capacity(cpu: &Cpu, p: &PriorityParams) -> Result<f64, Error> {
    let (uri, server) = start(Bare, cpu).await?;
    let client = client();
    let window = Duration::from_secs(1).max(p.work * 20);
    // A short warm-up opens the connections.
    for _ in 0..4 {
        call(&client, &uri, "critical", p.deadline).await;
    }
    let t0 = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..16 * p.cores {
        let (client, uri, deadline) = (client.clone(), uri.clone(), p.deadline.max(window));
        callers.spawn(async move {
            let mut n = 0u64;
            while t0.elapsed() < window {
                if let Outcome::Ok(_) = call(&client, &uri, "critical", deadline).await {
                    n += 1;
                }
            }
            n
        });
    }
    let mut done = 0;
    while let Some(n) = callers.join_next().await {
        done += n.unwrap_or(0);
    }
    let took = t0.elapsed().as_secs_f64();
    server.abort();
    if done == 0 {
        return Err(Error::usage(
            "the upstream served nothing while measuring its capacity",
        ));
    }
    Ok(done as f64 / took)
}

/// An open-loop drive: Poisson arrivals at `rate`, `requests` of them.
#[derive(Clone, Copy)]
struct Drive {
    rate: f64,
    requests: u64,
    critical: f64,
    deadline: Duration,
    seed: u64,
}

/// What one drive measured, by level, and what the layer counted as shed
/// over the same requests.
struct Measured {
    critical: Level,
    sheddable: Level,
    layer_shed: u64,
}

impl Drive {
    fn new(p: &PriorityParams, rate: f64) -> Drive {
        let requests = (rate * p.duration.as_secs_f64()).round() as u64;
        Drive {
            rate,
            requests: requests.clamp(1, MAX_REQUESTS),
            critical: p.critical,
            deadline: p.deadline,
            seed: p.seed,
        }
    }

    /// Drives a started server, then stops it. `shed` reads the layer's
    /// own count of shed requests.
    async fn against(
        &self,
        server: (String, tokio::task::JoinHandle<()>),
        shed: &dyn Fn() -> u64,
    ) -> Measured {
        let (uri, server) = server;
        let m = self.drive(&uri, shed).await;
        server.abort();
        // Let the queue of work whose callers left drain before the next.
        tokio::time::sleep(Duration::from_millis(100)).await;
        m
    }

    async fn drive(&self, uri: &str, layer_shed: &dyn Fn() -> u64) -> Measured {
        let client = client();
        let open = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let mut rng = FastRng::seeded(self.seed);
        let warm = self.requests / 5;
        let mut calls = tokio::task::JoinSet::new();
        let start = tokio::time::Instant::now();
        let mut at = Duration::ZERO;
        // The layer's count when the first counted request goes out: its
        // sheds during the warm-up are not the table's.
        let mut shed_in_warm_up = 0;
        for i in 0..self.requests {
            at += Duration::from_secs_f64(-(1.0 - rng.next_f64()).ln() / self.rate);
            let critical = rng.next_f64() < self.critical;
            tokio::time::sleep_until(start + at).await;
            if i == warm {
                shed_in_warm_up = layer_shed();
            }
            let permit = open.clone().try_acquire_owned().ok();
            let (client, uri, deadline) = (client.clone(), uri.to_owned(), self.deadline);
            calls.spawn(async move {
                let level = if critical { "critical" } else { "sheddable" };
                let outcome = match permit {
                    Some(_p) => call(&client, &uri, level, deadline).await,
                    None => Outcome::Failed,
                };
                (i >= warm, critical, outcome)
            });
        }
        let (mut crit, mut shed) = (Tally::default(), Tally::default());
        while let Some(r) = calls.join_next().await {
            let Ok((counted, critical, outcome)) = r else {
                continue;
            };
            if counted {
                if critical { &mut crit } else { &mut shed }.add(outcome);
            }
        }
        Measured {
            critical: crit.level(),
            sheddable: shed.level(),
            layer_shed: layer_shed().saturating_sub(shed_in_warm_up),
        }
    }
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    shed: u64,
    failed: u64,
}

impl Tally {
    fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Ok(l) => self.latencies.push(l),
            Outcome::Shed => self.shed += 1,
            Outcome::Failed => self.failed += 1,
        }
    }

    fn level(mut self) -> Level {
        self.latencies.sort_unstable();
        let ok = self.latencies.len() as u64;
        let sent = ok + self.shed + self.failed;
        let p99 = match self.latencies.len() {
            0 => Duration::ZERO,
            n => self.latencies[((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1],
        };
        Level {
            sent,
            ok,
            shed: self.shed,
            failed: self.failed,
            success_pct: stagger_sim::rounded(100.0 * ok as f64 / sent.max(1) as f64, 1),
            p99_ms: stagger_sim::rounded(p99.as_secs_f64() * 1e3, 1),
        }
    }
}

#[cfg(test)]
mod tests;
