//! The clients: a fleet of tasks sending open-loop traffic at a steady rate
//! through the library's reqwest middleware.
//!
//! Clients are grouped into pods. A pod is one process of a real service:
//! one connection pool, one retry budget, one breaker and one throttle
//! shared by its clients (when the strategy has them). Each client has its
//! own [`Policy`](stagger::Policy) instance. Open loop: a client sends its
//! next request on schedule whether or not the previous one has finished,
//! as users do, so retries add load instead of slowing arrivals down.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::Extensions;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::export::Stats;
use stagger::http::RetryInfo;
use stagger::reqwest::RetryMiddleware;
use stagger::{Observer, StopReason};
use tokio::task::JoinSet;

use super::soak::Reservoir;
use crate::bins::{Bins, Timeline};
use stagger_sim::{Schedule, Strategy};

use crate::{Error, ErrorKind};

/// The HTTP method of the fleet's requests (`--method`).
///
/// A `POST` is a write: one short text order per logical request, with an
/// `Idempotency-Key` (unless `--no-keys`) that stays the same on every
/// attempt, so the upstream can tell a retry from a new order. A `GET` is a
/// read: no body and no key, as repeating it changes nothing
/// (RFC 9110, section 9.2.2: GET is idempotent, POST is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// A read: no body, no key.
    Get,
    /// A write: an order in the body and an `Idempotency-Key`.
    Post,
}

impl Method {
    /// `GET` or `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

impl std::str::FromStr for Method {
    type Err = String;

    /// `GET` or `POST`, in any case.
    fn from_str(s: &str) -> Result<Method, String> {
        match s.to_ascii_uppercase().as_str() {
            "GET" => Ok(Method::Get),
            "POST" => Ok(Method::Post),
            _ => Err(format!(
                "`{s}` is not a method the fleet sends (expected GET for a read or POST for a write)"
            )),
        }
    }
}

/// The fleet's shape and traffic.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Client tasks.
    pub clients: usize,
    /// Pods the clients are spread over (round-robin).
    pub pods: usize,
    /// New requests per second, over the whole fleet.
    pub rate: f64,
    /// How long new requests are sent.
    pub duration: Duration,
    /// Each request's deadline, over all its attempts and waits.
    pub deadline: Duration,
    /// The retry schedule.
    pub schedule: Schedule,
    /// The strategy.
    pub strategy: Strategy,
    /// Hard cap on logical requests.
    pub max_requests: u64,
    /// Seeds the pods' breakers.
    pub seed: u64,
    /// Also report to the `metrics` facade (`--metrics-addr`).
    pub metrics: bool,
    /// Whether each POST carries an `Idempotency-Key` (what makes it
    /// retryable after an unknown outcome).
    pub keys: bool,
    /// The method of every request.
    pub method: Method,
    /// The rate reached at the end of the traffic, growing linearly from
    /// `rate` (an overload ramp); `None`: steady.
    pub ramp_to: Option<f64>,
    /// The number of this fleet's first client in the whole fleet (0; a
    /// `--hosts` share starts after the shares before it), so every order
    /// name is unique across the fleets of one run.
    pub first_client: usize,
}

/// When a client that sent at `t` (since the start) sends next: one fleet
/// period of `clients` requests at the rate of that moment.
fn next_gap(cfg: &Config, t: Duration) -> Duration {
    let rate = match cfg.ramp_to {
        Some(to) => {
            let x = (t.as_secs_f64() / cfg.duration.as_secs_f64().max(1e-9)).min(1.0);
            cfg.rate + (to - cfg.rate) * x
        }
        None => cfg.rate,
    };
    Duration::from_secs_f64(cfg.clients as f64 / rate.max(1e-3))
}

/// What the clients saw.
#[derive(Debug)]
pub struct Outcome {
    /// Logical requests started, per bin.
    pub sent: Vec<u32>,
    /// Requests that succeeded, per bin of their end.
    pub successes: Vec<u32>,
    /// Logical requests made.
    pub requests: u64,
    /// Attempts the clients made, including those that never reached the
    /// server (refused connections).
    pub attempts: u64,
    /// Requests by stop reason (`error` when the middleware gave none).
    pub stops: BTreeMap<String, u64>,
    /// Latency of each request, ms: to its success, or to the moment it
    /// failed.
    pub latencies_ms: Vec<u32>,
    /// Retries refused by the pods' budgets.
    pub budget_refusals: u64,
    /// Times the pods' breakers opened.
    pub breaker_opens: u64,
    /// Requests still running when the run was cut off (none normally).
    pub cut_off: u64,
    /// First attempts the clients started, per bin of their start: what
    /// arrived at the far side by the clients' count (a blackhole's
    /// server never sees them).
    pub started_first: Vec<u32>,
    /// Retries the clients started, per bin of their start.
    pub started_retries: Vec<u32>,
}

impl Outcome {
    /// The outcome of two fleets that ran side by side on one timeline.
    pub fn merge(mut self, o: Outcome) -> Outcome {
        let add = |a: &mut Vec<u32>, b: Vec<u32>| {
            if a.len() < b.len() {
                a.resize(b.len(), 0);
            }
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        };
        add(&mut self.sent, o.sent);
        add(&mut self.successes, o.successes);
        add(&mut self.started_first, o.started_first);
        add(&mut self.started_retries, o.started_retries);
        self.requests += o.requests;
        self.attempts += o.attempts;
        for (k, v) in o.stops {
            *self.stops.entry(k).or_insert(0) += v;
        }
        self.latencies_ms.extend(o.latencies_ms);
        self.budget_refusals += o.budget_refusals;
        self.breaker_opens += o.breaker_opens;
        self.cut_off += o.cut_off;
        self
    }
}

/// Counts the attempts the pods start, first or retry, in the bin they
/// start in (an observer beside each pod's own).
struct Started {
    first: Bins,
    retries: Bins,
}

impl Observer for Started {
    fn on_event(&self, e: &stagger::Event) {
        if let stagger::Event::AttemptStarted { attempt } = *e {
            let bins = if attempt > 1 {
                &self.retries
            } else {
                &self.first
            };
            bins.add(Instant::now());
        }
    }
}

struct Counters {
    sent: Bins,
    successes: Bins,
    issued: AtomicU64,
    attempts: AtomicU64,
    stops: [AtomicU64; StopReason::ALL.len() + 1],
    latencies_ms: Mutex<Reservoir>,
}

impl Counters {
    fn stop(&self, reason: Option<StopReason>) {
        let i = reason
            .and_then(|r| StopReason::ALL.iter().position(|x| *x == r))
            .unwrap_or(StopReason::ALL.len());
        self.stops[i].fetch_add(1, Relaxed);
    }
}

/// One pod: a connection pool, counters and shared guardrails.
struct Pod {
    http: reqwest::Client,
    stats: Arc<Stats>,
    observer: Arc<dyn Observer>,
    guard: Option<Arc<stagger::guardrails::Guardrails>>,
}

/// Runs the fleet against `url` (every request a `cfg.method`) until its traffic period is over and every
/// request has ended (each is bounded by its deadline); must run inside a
/// tokio runtime. Requests still running `grace` after the traffic period
/// are cut off and counted.
pub async fn run(
    cfg: Config,
    url: &str,
    line: Timeline,
    grace: Duration,
) -> Result<Outcome, Error> {
    let counters = Arc::new(Counters {
        sent: line.series(),
        successes: line.series(),
        issued: AtomicU64::new(0),
        attempts: AtomicU64::new(0),
        stops: std::array::from_fn(|_| AtomicU64::new(0)),
        latencies_ms: Mutex::new(Reservoir::default()),
    });
    let started = Arc::new(Started {
        first: line.series(),
        retries: line.series(),
    });
    let pods = pods(&cfg, &started)?;
    let url: Arc<str> = url.into();
    let end = line.start + cfg.duration;
    let mut fleet = JoinSet::new();
    for i in 0..cfg.clients {
        let pod = &pods[i % cfg.pods];
        let policy =
            cfg.strategy
                .policy(&cfg.schedule, pod.guard.clone(), Some(pod.observer.clone()))?;
        let client = ClientBuilder::new(pod.http.clone())
            .with(RetryMiddleware::new(stagger::http::Settings {
                policy,
                idempotency_keys: cfg.keys && cfg.method == Method::Post,
                timeout: Some(cfg.deadline),
                ..Default::default()
            }))
            .build();
        // Phases spread evenly: the fleet as a whole sends every 1/rate s.
        let first = line.start + Duration::from_secs_f64(i as f64 / cfg.rate);
        let me = Client {
            name: format!("{}.{}", i % cfg.pods, cfg.first_client + i),
            client,
            url: url.clone(),
            counters: counters.clone(),
            max: cfg.max_requests,
        };
        fleet.spawn(me.run(first, line.start, cfg, end));
    }
    let cut = tokio::time::timeout(cfg.duration + grace, async {
        while fleet.join_next().await.is_some() {}
    })
    .await
    .is_err();
    let cut_off = if cut { fleet.len() as u64 } else { 0 };
    fleet.shutdown().await;
    let stops = stops(&counters);
    let snaps: Vec<_> = pods.iter().map(|p| p.stats.snapshot()).collect();
    let latencies_ms = std::mem::take(
        &mut *counters
            .latencies_ms
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    )
    .into_vec();
    Ok(Outcome {
        sent: counters.sent.snapshot(),
        successes: counters.successes.snapshot(),
        requests: counters.issued.load(Relaxed).min(cfg.max_requests),
        attempts: counters.attempts.load(Relaxed),
        stops,
        latencies_ms,
        budget_refusals: snaps.iter().map(|s| s.budget_refusals).sum(),
        breaker_opens: snaps.iter().map(|s| s.breaker_opens).sum(),
        cut_off,
        started_first: started.first.snapshot(),
        started_retries: started.retries.snapshot(),
    })
}

/// One HTTP client, stats, observer and guardrails per pod.
fn pods(cfg: &Config, started: &Arc<Started>) -> Result<Vec<Pod>, Error> {
    let mut pods = Vec::with_capacity(cfg.pods);
    for _ in 0..cfg.pods {
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            // Below the attempt timeout, so a dead host's dropped SYN ends
            // as a connect error ("never sent") rather than an attempt
            // timeout whose request may have left.
            .connect_timeout(
                (cfg.schedule
                    .attempt_timeout
                    .unwrap_or(Duration::from_secs(2))
                    / 2)
                .min(Duration::from_secs(1)),
            );
        // The targets are plain HTTP: with TLS compiled in, trust no roots
        // rather than load the system's for each of hundreds of pods (a
        // second each on a slow machine, before the first request).
        #[cfg(feature = "tls")]
        let http = http.tls_certs_only(std::iter::empty());
        let http = http
            .build()
            .map_err(|e| Error::with(ErrorKind::Run, "cannot build an HTTP client", e))?;
        let stats = Arc::new(Stats::new());
        let strategy = cfg.strategy.to_string();
        let observer: Arc<dyn Observer> = Arc::new(vec![
            super::exporter::pod_observer(&stats, cfg.metrics, pods.len(), &strategy),
            started.clone() as Arc<dyn Observer>,
        ]);
        let guard = cfg
            .strategy
            .guardrails(cfg.seed, pods.len() as u64, Some(observer.clone()))?
            .map(Arc::new);
        pods.push(Pod {
            http,
            stats,
            observer,
            guard,
        });
    }
    Ok(pods)
}

/// Requests by stop reason, the reasons no request ended with left out.
fn stops(counters: &Counters) -> BTreeMap<String, u64> {
    let mut stops = BTreeMap::new();
    for (i, n) in counters.stops.iter().enumerate() {
        let n = n.load(Relaxed);
        if n > 0 {
            let name = StopReason::ALL.get(i).map_or("error", |r| r.as_str());
            stops.insert(name.to_string(), n);
        }
    }
    stops
}

struct Client {
    name: String,
    client: ClientWithMiddleware,
    url: Arc<str>,
    counters: Arc<Counters>,
    max: u64,
}

impl Client {
    /// Sends a request every `period` from `first` until `end`, each as a
    /// task of its own, then waits for them all.
    async fn run(self, first: Instant, start: Instant, cfg: Config, end: Instant) {
        let mut calls = JoinSet::new();
        let mut next = first;
        let mut seq = 0u64;
        while next < end {
            tokio::time::sleep_until(next.into()).await;
            while calls.try_join_next().is_some() {}
            if self.counters.issued.fetch_add(1, Relaxed) >= self.max {
                break;
            }
            let order = format!("{}.{}", self.name, seq);
            seq += 1;
            calls.spawn(call(
                self.client.clone(),
                self.url.clone(),
                (cfg.method, order),
                self.counters.clone(),
            ));
            next += next_gap(&cfg, next.saturating_duration_since(start));
        }
        while calls.join_next().await.is_some() {}
    }
}

/// One logical request, retried by the middleware: a POST of one order,
/// or a GET.
async fn call(
    client: ClientWithMiddleware,
    url: Arc<str>,
    (method, order): (Method, String),
    c: Arc<Counters>,
) {
    let started = Instant::now();
    c.sent.add(started);
    let req = match method {
        Method::Post => client.post(&*url).body(order),
        Method::Get => client.get(&*url),
    };
    let req = match req.build() {
        Ok(r) => r,
        Err(_) => {
            c.stop(None);
            return;
        }
    };
    let mut ext = Extensions::new();
    let result = client.execute_with_extensions(req, &mut ext).await;
    let ended = Instant::now();
    let (ok, info) = match &result {
        Ok(resp) => (
            resp.status().is_success(),
            resp.extensions().get::<RetryInfo>().copied(),
        ),
        Err(_) => (false, ext.get::<RetryInfo>().copied()),
    };
    let tries = info.map_or(1, |i| i.attempts);
    c.attempts.fetch_add(u64::from(tries), Relaxed);
    // Every request's time to its answer, a failure's to the moment it
    // failed: counting successes alone gave the strategy that failed the
    // most the best tail.
    let ms = ended.duration_since(started).as_millis();
    c.latencies_ms
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .add(u32::try_from(ms).unwrap_or(u32::MAX));
    if ok {
        c.successes.add(ended);
        c.stop(Some(StopReason::Success));
    } else {
        // A failed call whose last answer was a success status cannot
        // happen; any other ending is counted by the middleware's reason.
        c.stop(info.map(|i| i.reason).filter(|r| *r != StopReason::Success));
    }
}
