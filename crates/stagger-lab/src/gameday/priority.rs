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

use std::convert::Infallible;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use stagger::limit::Limiter;
use stagger::priority::{Ceilings, HEADER};
use stagger::random::{FastRng, RandomSource};
use stagger::tower::{ShedLayer, ShedStats};
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceExt};

use crate::{Error, ErrorKind};

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
    /// starting point).
    pub limit: u32,
    /// How long each caller waits for its answer.
    pub deadline: Duration,
    /// The seed of arrivals and levels.
    pub seed: u64,
}

impl Default for PriorityParams {
    /// 4 s per server at 2× capacity, 20 % critical, 10 ms of CPU a
    /// request on 2 cores, a limit of 8 in flight, a 1 s deadline: the
    /// simulator's default workload.
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
    /// Requests the layer itself counted as shed (whole run; 0 for
    /// tower-acc, which queues instead).
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::with(ErrorKind::Run, "building the runtime", e))?;
    let iterations = calibrate(p.work);
    let cpu = Cpu::start(iterations, p.cores);
    let out = rt.block_on(async {
        let capacity = capacity(&cpu, p).await?;
        let rate = capacity * p.load;
        let quarter = Drive {
            rate: capacity / 4.0,
            requests: ((capacity / 4.0) * p.duration.as_secs_f64())
                .ceil()
                .max(60.0) as u64,
            critical: 1.0,
            ..Drive::new(p, rate)
        };
        let idle = quarter.through(Bare, &cpu).await?;
        let unloaded = idle.critical.p99_ms.max(1e-3);
        let drive = Drive::new(p, rate);
        let mut servers = Vec::new();
        for server in SERVERS {
            let (run, layer_shed) = match server {
                "ShedLayer + priorities" => {
                    let shed = shed_layer(p, true)?;
                    let r = drive.through(shed.clone(), &cpu).await?;
                    (r, total(shed.stats()))
                }
                "ShedLayer (no priorities)" => {
                    let shed = shed_layer(p, false)?;
                    let r = drive.through(shed.clone(), &cpu).await?;
                    (r, total(shed.stats()))
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
                    (drive.through(layer, &cpu).await?, 0)
                }
            };
            servers.push(ServerRun {
                server,
                critical_p99_ratio: round(run.critical.p99_ms / unloaded, 100.0),
                critical: run.critical,
                sheddable: run.sheddable,
                layer_shed,
            });
        }
        Ok::<_, Error>(PriorityReport {
            iterations,
            capacity_rps: round(capacity, 10.0),
            rate_rps: round(rate, 10.0),
            unloaded_p99_ms: round(unloaded, 1000.0),
            requests: drive.requests,
            servers,
        })
    });
    drop(rt);
    cpu.stop();
    out
}

fn total(s: ShedStats) -> u64 {
    s.shed_first + s.shed_retries
}

fn round(x: f64, by: f64) -> f64 {
    (x * by).round() / by
}

/// A `ShedLayer` with a fixed limit, shedding by priority or not.
fn shed_layer(p: &PriorityParams, priorities: bool) -> Result<ShedLayer, Error> {
    let limiter = Limiter::builder(stagger::limit::Algorithm::Fixed(p.limit))
        .seed(p.seed)
        .build()
        .map_err(|e| Error::usage(format!("limit: {e}")))?;
    let mut b = ShedLayer::limited(limiter);
    if priorities {
        b = b.priorities(Ceilings::default());
    }
    Ok(b.build())
}

/// Busy-loop iterations that take about `work` on this machine, measured
/// once: the best of a few timed rounds (the least disturbed by others).
fn calibrate(work: Duration) -> u64 {
    const ROUND: u64 = 200_000;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        burn(ROUND);
        best = best.min(t0.elapsed().as_secs_f64() / ROUND as f64);
    }
    ((work.as_secs_f64() / best.max(1e-12)) as u64).max(1)
}

/// The CPU work: `n` rounds of a multiply-xorshift the optimiser cannot drop.
fn burn(n: u64) -> u64 {
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15_u64);
    for i in 0..n {
        x = (x ^ (x >> 29))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .wrapping_add(i);
    }
    std::hint::black_box(x)
}

/// The upstream's cores: threads running each request's busy loop in
/// arrival order.
#[derive(Clone)]
struct Cpu {
    jobs: mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
    threads: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>,
}

impl Cpu {
    fn start(iterations: u64, cores: u32) -> Cpu {
        let (jobs, rx) = mpsc::channel::<tokio::sync::oneshot::Sender<()>>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let threads = (0..cores.max(1))
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || loop {
                    let next = rx.lock().map(|r| r.recv());
                    let Ok(Ok(done)) = next else { return };
                    if done.is_closed() {
                        continue; // its caller has gone: nothing to do
                    }
                    burn(iterations);
                    let _ = done.send(());
                })
            })
            .collect();
        Cpu {
            jobs,
            threads: Arc::new(std::sync::Mutex::new(threads)),
        }
    }

    async fn work(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.jobs.send(tx).is_ok() {
            let _ = rx.await;
        }
    }

    /// Ends the threads once every clone is gone and the queue is drained.
    fn stop(self) {
        let threads = self.threads.lock().map(|mut t| std::mem::take(&mut *t));
        drop(self.jobs);
        for t in threads.unwrap_or_default() {
            let _ = t.join();
        }
    }
}

/// No layer: the bare upstream.
#[derive(Clone, Copy)]
struct Bare;

impl<S> Layer<S> for Bare {
    type Service = S;
    fn layer(&self, inner: S) -> S {
        inner
    }
}

/// A server on 127.0.0.1 whose requests go through `layer` to the CPU;
/// what a layer's error or a shed says is answered 503.
async fn start<L>(layer: L, cpu: &Cpu) -> Result<(String, tokio::task::JoinHandle<()>), Error>
where
    L: Layer<Upstream> + Send + 'static,
    L::Service: Service<http::Request<Incoming>, Response = http::Response<String>>
        + Clone
        + Send
        + 'static,
    <L::Service as Service<http::Request<Incoming>>>::Future: Send,
    <L::Service as Service<http::Request<Incoming>>>::Error: Send,
{
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| Error::with(ErrorKind::Run, "binding 127.0.0.1", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::with(ErrorKind::Run, "reading the address", e))?;
    let svc = layer.layer(Upstream(cpu.clone()));
    let server = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let svc = svc.clone();
            conns.spawn(async move {
                let each = hyper::service::service_fn(move |req| {
                    let svc = svc.clone();
                    async move {
                        Ok::<_, Infallible>(match svc.oneshot(req).await {
                            Ok(r) => r,
                            Err(_) => unavailable(),
                        })
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), each)
                    .await;
            });
        }
    });
    Ok((format!("http://{addr}/"), server))
}

fn unavailable() -> http::Response<String> {
    let mut r = http::Response::new(String::new());
    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    r
}

/// The upstream as a service: burn, then 200.
#[derive(Clone)]
struct Upstream(Cpu);

impl Service<http::Request<Incoming>> for Upstream {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<Incoming>) -> Self::Future {
        let cpu = self.0.clone();
        Box::pin(async move {
            cpu.work().await;
            Ok(http::Response::new(String::from("ok")))
        })
    }
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

/// What one drive measured, by level.
struct Measured {
    critical: Level,
    sheddable: Level,
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

    /// Starts a server with `layer`, drives it, stops it.
    async fn through<L>(&self, layer: L, cpu: &Cpu) -> Result<Measured, Error>
    where
        L: Layer<Upstream> + Send + 'static,
        L::Service: Service<http::Request<Incoming>, Response = http::Response<String>>
            + Clone
            + Send
            + 'static,
        <L::Service as Service<http::Request<Incoming>>>::Future: Send,
        <L::Service as Service<http::Request<Incoming>>>::Error: Send,
    {
        let (uri, server) = start(layer, cpu).await?;
        let m = self.drive(&uri).await;
        server.abort();
        // Let the queue of work whose callers left drain before the next.
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(m)
    }

    async fn drive(&self, uri: &str) -> Measured {
        let client = client();
        let open = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let mut rng = FastRng::seeded(self.seed);
        let warm = self.requests / 5;
        let mut calls = tokio::task::JoinSet::new();
        let start = tokio::time::Instant::now();
        let mut at = Duration::ZERO;
        for i in 0..self.requests {
            at += Duration::from_secs_f64(-(1.0 - rng.next_f64()).ln() / self.rate);
            let critical = rng.next_f64() < self.critical;
            tokio::time::sleep_until(start + at).await;
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
            success_pct: round(100.0 * ok as f64 / sent.max(1) as f64, 10.0),
            p99_ms: round(p99.as_secs_f64() * 1e3, 10.0),
        }
    }
}

/// The table, ≤ 100 columns.
pub fn table(p: &PriorityParams, r: &PriorityReport) -> String {
    let mut s = format!(
        "priority game-day on 127.0.0.1: {:?} of CPU a request on {} cores ({} loop rounds), \
         capacity {}/s, {} requests at {}/s ({}×) per server, {:.0} % critical, \
         deadline {:?}, limit {}; unloaded p99 {} ms\n",
        p.work,
        p.cores,
        r.iterations,
        r.capacity_rps,
        r.requests,
        r.rate_rps,
        p.load,
        p.critical * 100.0,
        p.deadline,
        p.limit,
        r.unloaded_p99_ms
    );
    s.push_str(&format!(
        "{:<26} {:>7} {:>8} {:>6} {:>7} {:>6} {:>6} {:>6} {:>7}\n",
        "server", "crit ok", "crit p99", "×idle", "shd ok", "c 503", "s 503", "failed", "shed"
    ));
    for v in &r.servers {
        s.push_str(&format!(
            "{:<26} {:>6.1}% {:>6.1}ms {:>6.1} {:>6.1}% {:>6} {:>6} {:>6} {:>7}\n",
            v.server,
            v.critical.success_pct,
            v.critical.p99_ms,
            v.critical_p99_ratio,
            v.sheddable.success_pct,
            v.critical.shed,
            v.sheddable.shed,
            v.critical.failed + v.sheddable.failed,
            v.layer_shed,
        ));
    }
    s.push_str(
        "crit ok / shd ok: answered 200 in time (after a warm-up fifth); ×idle: critical p99 \
         over the unloaded p99;\nc 503 / s 503: shed answers by level; failed: no answer in \
         time; shed: the layer's own count\n",
    );
    s
}
