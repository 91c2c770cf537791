//! The dependency under test: an HTTP server on 127.0.0.1 with a finite
//! capacity and scripted faults.
//!
//! Capacity is `workers ÷ service time`; service time is a tokio sleep, so
//! the server costs almost no CPU and its capacity does not depend on how
//! busy this machine is. Requests wait in a bounded FIFO queue (a fair
//! semaphore); when it is full the server answers 503 at once. Each
//! accepted request becomes a job of its own, so the server keeps doing the
//! work after the client has given up — the queue of dead work that keeps
//! a metastable failure going.
//!
//! Two of the library's server layers can be switched on: the `ShedLayer`
//! (`--shed-retries`) bounds what waits and turns retries away first,
//! reading the attempt header; the `DeadlineLayer` (`--drop-expired`) reads
//! `x-request-timeout-ms`, answers 504 once the caller's deadline has
//! passed, and the job of such a request is skipped unstarted when a worker
//! frees up, so the queue of dead work drains at once instead of being
//! served. A shed place is held from arrival until the caller hangs up (as
//! in any server whose handler future is dropped with the connection), so
//! `--shed-retries` alone still lets dead work pile up behind the workers;
//! with `--drop-expired` as well, that dead work is skipped.
//!
//! `--server-limit` puts the library's `ShedLayer` with a concurrency
//! [`Limiter`] in front instead (`static:N`, `aimd` or `gradient`): what is
//! over the limit is answered 503 with a `Retry-After` of 1 to 5 s, retries
//! first, and the limit follows the latency of the requests it admits.
//!
//! Writes are POSTs whose body names the order; the server applies the
//! order's side effect once per `Idempotency-Key` and counts orders applied
//! more than once (`duplicates`), which stays 0 as long as every attempt of
//! a call carries the same key. The ledger remembers a key for one to two
//! times [`Config::remember`] (longer than any attempt of a call can reach
//! the ledger), so its memory stays flat however long the server runs.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hyper_util::rt::TokioIo;
use stagger::http::{parse_attempt, Inbound, IDEMPOTENCY_KEY, REQUEST_TIMEOUT, RETRY_ATTEMPT};
use stagger::limit::{Algorithm, Limiter};
use stagger::tower::{DeadlineLayer, ShedLayer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch, Semaphore};
use tokio::task::JoinHandle;
use tower_service::Service;

use crate::bins::{Bins, Timeline};
use crate::fault::Fault;
use crate::listen::{accept_loop, Downtime};
use crate::reset::{ResetHandle, Resettable};

/// How the server is built and what happens to it, in time since the run
/// started.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Jobs served at once.
    pub workers: usize,
    /// Time one job takes.
    pub service: Duration,
    /// Jobs that may wait for a worker.
    pub queue: usize,
    /// The fault (`None`: none).
    pub fault: Option<Fault>,
    /// When the fault starts.
    pub fault_start: Duration,
    /// When it ends.
    pub fault_end: Duration,
    /// Retries are shed first (the library's `ShedLayer`).
    pub shed_retries: bool,
    /// Expired work is dropped (the library's `DeadlineLayer`, and jobs
    /// skipped unstarted once their caller's deadline has passed).
    pub drop_expired: bool,
    /// A concurrency limit in front (the library's `ShedLayer` with a
    /// `Limiter`); replaces `shed_retries`.
    pub limit: Option<Algorithm>,
    /// The least time the ledger remembers a key: longer than the last
    /// attempt of a call can take to be applied (its deadline, then the
    /// queue and a slow or stalled worker).
    pub remember: Duration,
    /// Seeds the limiter's jitter.
    pub seed: u64,
    /// The address it listens on (127.0.0.1, or its namespace's with
    /// `--hosts`).
    pub bind: std::net::IpAddr,
}

impl Config {
    /// Jobs per second the server completes when busy.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.as_secs_f64().max(1e-9)
    }
}

/// What the server saw, per 100 ms bin and in total.
#[derive(Debug)]
pub struct Stats {
    /// Attempts arriving with `x-retry-attempt: 1` (or none).
    pub first: Bins,
    /// Attempts arriving with `x-retry-attempt` ≥ 2.
    pub retries: Bins,
    /// Jobs finished.
    pub completed: Bins,
    /// Jobs finished after their attempt's timeout: work for nobody.
    pub abandoned: Bins,
    /// Requests answered 503 (queue full, dead) or 429 (throttle).
    pub rejected: Bins,
    /// Orders whose side effect was applied more than once.
    pub duplicates: AtomicU64,
    /// Jobs skipped unstarted because their caller's deadline had passed
    /// (`drop_expired`).
    pub skipped_expired: AtomicU64,
    /// Jobs whose key had already been applied (a deduplicated retry).
    pub deduplicated: AtomicU64,
}

impl Stats {
    /// Empty counters, binned on `line`.
    fn new(line: &Timeline) -> Stats {
        Stats {
            first: line.series(),
            retries: line.series(),
            completed: line.series(),
            abandoned: line.series(),
            rejected: line.series(),
            duplicates: AtomicU64::new(0),
            skipped_expired: AtomicU64::new(0),
            deduplicated: AtomicU64::new(0),
        }
    }
}

/// Applied keys and orders, in two generations: the current one and the
/// one before; the older is forgotten every `memory`, so an entry is
/// remembered for one to two times `memory`.
#[derive(Debug)]
struct Ledger {
    keys: [HashSet<Box<str>>; 2],
    orders: [HashMap<Box<str>, u32>; 2],
    turned: Instant,
    memory: Duration,
}

impl Ledger {
    fn new(now: Instant, memory: Duration) -> Self {
        Ledger {
            keys: Default::default(),
            orders: Default::default(),
            turned: now,
            memory,
        }
    }

    /// Forgets the older generation once the current one is old enough.
    fn turn(&mut self, now: Instant) {
        if now.saturating_duration_since(self.turned) >= self.memory {
            self.keys.swap(0, 1);
            self.orders.swap(0, 1);
            self.keys[0] = HashSet::new();
            self.orders[0] = HashMap::new();
            self.turned = now;
        }
    }

    /// Records `key`; false if it was already applied.
    fn first_use(&mut self, key: &str) -> bool {
        if self.keys.iter().any(|g| g.contains(key)) {
            return false;
        }
        self.keys[0].insert(key.into());
        true
    }

    /// Counts one application of `order`; returns how many there were.
    fn apply(&mut self, order: &str) -> u32 {
        let before = self.orders[1].remove(order).unwrap_or(0);
        let n = self.orders[0].entry(order.into()).or_insert(before);
        *n += 1;
        *n
    }
}

struct Shared {
    cfg: Config,
    start: Instant,
    stats: Arc<Stats>,
    workers: Semaphore,
    depth: AtomicUsize,
    ledger: Mutex<Ledger>,
    /// Requests seen during a reset fault (every other one is applied).
    resets: AtomicU64,
}

impl Shared {
    fn at(&self, d: Duration) -> Instant {
        self.start + d
    }

    fn faulty(&self, fault: Fault, now: Instant) -> bool {
        self.cfg.fault == Some(fault)
            && now >= self.at(self.cfg.fault_start)
            && now < self.at(self.cfg.fault_end)
    }

    /// Sleeps through a stall in progress (a frozen worker finishes nothing).
    async fn wait_out_stall(&self) {
        if self.faulty(Fault::Stall, Instant::now()) {
            tokio::time::sleep_until(self.at(self.cfg.fault_end).into()).await;
        }
    }

    fn apply(&self, key: Option<&str>, order: &str) {
        let mut l = self.ledger.lock().unwrap_or_else(|e| e.into_inner());
        l.turn(Instant::now());
        if let Some(k) = key {
            if !l.first_use(k) {
                self.stats.deduplicated.fetch_add(1, Relaxed);
                return;
            }
        }
        if l.apply(order) == 2 {
            self.stats.duplicates.fetch_add(1, Relaxed);
        }
    }
}

/// A running server; [`Server::stop`] (or dropping the runtime) ends it.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// What it saw.
    pub stats: Arc<Stats>,
    /// The shedding layer, if any (its counters).
    pub shed: Option<ShedLayer>,
    accept: JoinHandle<()>,
    kill: watch::Sender<u64>,
}

impl Server {
    /// Binds 127.0.0.1 on a free port and starts serving; must run inside a
    /// tokio runtime.
    pub async fn start(cfg: Config, line: Timeline) -> io::Result<Server> {
        let listener = TcpListener::bind((cfg.bind, 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Stats::new(&line));
        let shared = Arc::new(Shared {
            cfg,
            start: line.start,
            stats: stats.clone(),
            workers: Semaphore::new(cfg.workers),
            depth: AtomicUsize::new(0),
            ledger: Mutex::new(Ledger::new(line.start, cfg.remember)),
            resets: AtomicU64::new(0),
        });
        let mut router = Router::new()
            .route("/work", post(work))
            .with_state(shared.clone());
        if cfg.drop_expired {
            router = router.layer(DeadlineLayer::new());
        }
        // Outermost: a shed request costs no more than reading its headers.
        let shed = match cfg.limit {
            Some(algorithm) => {
                let limiter = Limiter::builder(algorithm)
                    .seed(cfg.seed)
                    .build()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
                Some(ShedLayer::limited(limiter).build())
            }
            None if cfg.shed_retries => Some(ShedLayer::builder(cfg.workers, cfg.queue).build()),
            None => None,
        };
        if let Some(layer) = &shed {
            router = router.layer(layer.clone());
        }
        let (kill, _) = watch::channel(0u64);
        let downtime = Downtime::new(
            (cfg.fault == Some(Fault::Failover))
                .then(|| (shared.at(cfg.fault_start), Some(shared.at(cfg.fault_end)))),
        );
        let accept = tokio::spawn(accept_loop(
            listener,
            addr,
            downtime,
            kill.clone(),
            "gameday",
            || {},
            move |stream, kill| {
                tokio::spawn(connection(stream, router.clone(), kill));
            },
        ));
        Ok(Server {
            addr,
            stats,
            shed,
            accept,
            kill,
        })
    }

    /// Stops accepting and drops every open connection. Jobs still queued
    /// end with the runtime.
    pub fn stop(self) {
        self.accept.abort();
        self.kill.send_modify(|g| *g += 1);
    }
}

/// Serves one connection until it closes or the server drops it. A
/// handler may ask for the connection to be reset ([`Resettable`]).
async fn connection(stream: tokio::net::TcpStream, router: Router, mut kill: watch::Receiver<u64>) {
    let stream = Resettable::new(stream);
    let handle = stream.handle();
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(handle.clone());
        let mut r = router.clone();
        async move { r.call(req).await }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = kill.changed() => {}
    }
}

/// `POST /work`: one write.
async fn work(
    State(s): State<Arc<Shared>>,
    inbound: Option<Extension<Inbound>>,
    reset: Option<Extension<ResetHandle>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = Instant::now();
    let attempt = headers
        .get(RETRY_ATTEMPT)
        .and_then(parse_attempt)
        .unwrap_or(1);
    if attempt > 1 {
        s.stats.retries.add(now);
    } else {
        s.stats.first.add(now);
    }
    if let (true, Some(Extension(reset))) = (s.faulty(Fault::Reset, now), reset) {
        s.stats.rejected.add(now);
        // Every other request is applied before the reset: its answer is
        // lost, and the client cannot tell it from one never applied.
        if s.resets.fetch_add(1, Relaxed) % 2 == 0 {
            let key = headers.get(IDEMPOTENCY_KEY).and_then(|v| v.to_str().ok());
            s.apply(key, &String::from_utf8_lossy(&body));
        }
        reset.reset();
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if s.faulty(Fault::Unavailable, now) {
        s.stats.rejected.add(now);
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    if s.faulty(Fault::Throttle, now) {
        s.stats.rejected.add(now);
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
        )
            .into_response();
    }
    let room = s.cfg.workers + s.cfg.queue;
    if s.depth.fetch_add(1, Relaxed) >= room {
        s.depth.fetch_sub(1, Relaxed);
        s.stats.rejected.add(now);
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let waits = headers
        .get(REQUEST_TIMEOUT)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis);
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let order = String::from_utf8_lossy(&body).into_owned();
    // Set by the DeadlineLayer (`drop_expired`) from the same header.
    let expires = inbound.and_then(|Extension(i)| i.deadline());
    let (tx, rx) = oneshot::channel();
    // The job runs on its own: dropping this handler (the client hung up)
    // does not cancel the work.
    tokio::spawn(job(s, now, waits, expires, key, order, tx));
    match rx.await {
        Ok(()) => (StatusCode::OK, "applied").into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn job(
    s: Arc<Shared>,
    arrived: Instant,
    waits: Option<Duration>,
    expires: Option<Instant>,
    key: Option<String>,
    order: String,
    done: oneshot::Sender<()>,
) {
    // The semaphore is fair: jobs get a worker in arrival order.
    let Ok(permit) = s.workers.acquire().await else {
        return;
    };
    s.wait_out_stall().await;
    if expires.is_some_and(|d| Instant::now() >= d) {
        // Nobody waits for this answer any more: skip it unstarted.
        drop(permit);
        s.depth.fetch_sub(1, Relaxed);
        s.stats.skipped_expired.fetch_add(1, Relaxed);
        return;
    }
    let mut service = s.cfg.service;
    if let Some(Fault::Slow(longer)) = s.cfg.fault {
        if s.faulty(Fault::Slow(longer), Instant::now()) {
            service += longer;
        }
    }
    tokio::time::sleep(service).await;
    s.wait_out_stall().await;
    s.apply(key.as_deref(), &order);
    drop(permit);
    s.depth.fetch_sub(1, Relaxed);
    let end = Instant::now();
    s.stats.completed.add(end);
    if waits.is_some_and(|w| end > arrived + w) {
        s.stats.abandoned.add(end);
    }
    let _ = done.send(());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(fault: Option<Fault>) -> Shared {
        let start = Instant::now();
        let line = Timeline::new(start, Duration::from_secs(1));
        Shared {
            cfg: Config {
                workers: 1,
                service: Duration::from_millis(10),
                queue: 1,
                fault,
                fault_start: Duration::from_secs(1),
                fault_end: Duration::from_secs(2),
                shed_retries: false,
                drop_expired: false,
                remember: Duration::from_secs(60),
                limit: None,
                seed: 1,
                bind: std::net::Ipv4Addr::LOCALHOST.into(),
            },
            start,
            stats: Arc::new(Stats::new(&line)),
            workers: Semaphore::new(1),
            depth: AtomicUsize::new(0),
            ledger: Mutex::new(Ledger::new(start, Duration::from_secs(60))),
            resets: AtomicU64::new(0),
        }
    }

    #[test]
    fn one_key_applies_once_and_a_second_key_is_a_duplicate() {
        let s = shared(None);
        s.apply(Some("k1"), "order-1");
        s.apply(Some("k1"), "order-1");
        assert_eq!(s.stats.duplicates.load(Relaxed), 0);
        assert_eq!(s.stats.deduplicated.load(Relaxed), 1);
        // The same order under a new key: the side effect happens twice.
        s.apply(Some("k2"), "order-1");
        assert_eq!(s.stats.duplicates.load(Relaxed), 1);
        // Without a key nothing can be deduplicated.
        s.apply(None, "order-2");
        s.apply(None, "order-2");
        assert_eq!(s.stats.duplicates.load(Relaxed), 2);
    }

    #[test]
    fn the_ledger_forgets_after_one_to_two_generations() {
        let t0 = Instant::now();
        const LEDGER_MEMORY: Duration = Duration::from_secs(60);
        let mut l = Ledger::new(t0, LEDGER_MEMORY);
        assert!(l.first_use("k"));
        assert_eq!(l.apply("o"), 1);
        l.turn(t0 + LEDGER_MEMORY);
        // One generation on: still remembered, and counted on.
        assert!(!l.first_use("k"));
        assert_eq!(l.apply("o"), 2);
        l.turn(t0 + LEDGER_MEMORY * 2);
        l.turn(t0 + LEDGER_MEMORY * 3);
        assert!(l.first_use("k"));
        assert_eq!(l.apply("o"), 1);
        assert!(l.keys[1].is_empty() || l.keys[0].is_empty());
    }

    #[test]
    fn a_job_whose_caller_gave_up_is_skipped_unstarted() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s = Arc::new(shared(None));
        s.depth.fetch_add(1, Relaxed);
        let (tx, rx) = oneshot::channel();
        let past = Instant::now();
        rt.block_on(job(s.clone(), past, None, Some(past), None, "o".into(), tx));
        assert!(rt.block_on(rx).is_err(), "no answer: nobody waits for it");
        assert_eq!(s.stats.skipped_expired.load(Relaxed), 1);
        assert_eq!(s.depth.load(Relaxed), 0);
        assert!(
            s.ledger
                .lock()
                .unwrap()
                .orders
                .iter()
                .all(HashMap::is_empty),
            "never applied"
        );
    }

    /// With `shed_retries` the library's ShedLayer answers a retry that does
    /// not fit with 503 and a Retry-After, while the one worker is busy.
    #[test]
    fn the_shed_layer_turns_a_waiting_retry_away_with_retry_after() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let line = Timeline::new(Instant::now(), Duration::from_secs(10));
            let cfg = Config {
                workers: 1,
                service: Duration::from_millis(500),
                queue: 1,
                fault: None,
                fault_start: Duration::ZERO,
                fault_end: Duration::ZERO,
                shed_retries: true,
                drop_expired: true,
                remember: Duration::from_secs(60),
                limit: None,
                seed: 1,
                bind: std::net::Ipv4Addr::LOCALHOST.into(),
            };
            let srv = Server::start(cfg, line).await.unwrap();
            let url = format!("http://{}/work", srv.addr);
            let http = reqwest::Client::new();
            let first = tokio::spawn(http.post(&url).body("a").send());
            tokio::time::sleep(Duration::from_millis(100)).await;
            // One place waits, none of it for retries (half of a queue of 1).
            let retry = http
                .post(&url)
                .header("x-retry-attempt", "2")
                .body("b")
                .send()
                .await
                .unwrap();
            assert_eq!(retry.status(), 503);
            assert!(retry.headers().contains_key("retry-after"));
            let first = first.await.unwrap().unwrap();
            assert_eq!(first.status(), 200);
            srv.stop();
        });
    }

    #[test]
    fn faults_hold_only_in_their_window() {
        let s = shared(Some(Fault::Unavailable));
        assert!(!s.faulty(Fault::Unavailable, s.start));
        assert!(s.faulty(Fault::Unavailable, s.start + Duration::from_millis(1500)));
        assert!(!s.faulty(Fault::Stall, s.start + Duration::from_millis(1500)));
        assert!(!s.faulty(Fault::Unavailable, s.start + Duration::from_secs(2)));
    }
}
