//! The hedging game-day: a `slow` fault — attempts that stall at random —
//! against the library's [`RetryLayer`](stagger::tower::RetryLayer) with hedging set on real
//! sockets, next to what the simulator predicts for the same shape.
//!
//! A server on 127.0.0.1 answers each request after a service time drawn
//! like the simulator's hedging model: LogNormal with median
//! `latency_median` and shape `latency_sigma`, plus `stall` with probability
//! `stall_prob`. It serves every request at once (unlimited capacity, the
//! model's `--capacity inf`). For each strategy in turn, a client sends
//! `requests` GET requests at `rate` per second (Poisson arrivals) through a
//! `RetryLayer` hedging as built from the strategy (the one constructor the simulator
//! uses too), and measures each call's latency; the server counts the
//! attempts that reached it. Bounded: loopback only, at most
//! [`MAX_REQUESTS`] requests per strategy, every call under a 5 s timeout.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use stagger::random::{FastRng, RandomSource};
use stagger::tower::RetryService;
use stagger_sim::hedging::{HedgeStrategy, HedgingParams, HedgingRow};
use tokio::net::TcpListener;
use tower_service::Service;

use crate::{Error, ErrorKind};

/// Most requests one strategy's run may send.
pub const MAX_REQUESTS: u64 = 20_000;
/// Highest request rate accepted.
pub const MAX_RATE: f64 = 5_000.0;

/// What the hedging game-day measured for one strategy, beside the
/// simulator's prediction for the same parameters.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HedgingRun {
    /// Measured on real sockets (extra load counted by the server).
    pub measured: HedgingRow,
    /// The simulator's `--capacity inf` row for the same service times.
    pub predicted: HedgingRow,
    /// Calls that ended in an error (a timeout, a refused connection).
    pub errors: u64,
}

/// Runs every strategy, one after the other, and returns one row each.
/// `p` gives the service times (its `requests` is the simulator's; the
/// game-day sends `requests` at `rate`).
pub fn run(
    p: &HedgingParams,
    strategies: &[HedgeStrategy],
    requests: u64,
    rate: f64,
) -> Result<Vec<HedgingRun>, Error> {
    let usage = Error::usage;
    p.validate().map_err(|e| usage(e.to_string()))?;
    if requests == 0 || requests > MAX_REQUESTS {
        return Err(usage(format!(
            "--requests: must be 1 to {MAX_REQUESTS}, got {requests}"
        )));
    }
    if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
        return Err(usage(format!(
            "--rate: must be above 0 and at most {MAX_RATE}, got {rate}"
        )));
    }
    let mut sim = p.clone();
    sim.capacity = None;
    let predicted =
        stagger_sim::hedging::simulate(&sim, strategies, &stagger_sim::Options::default())
            .map_err(|e| usage(e.to_string()))?
            .strategies;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::with(ErrorKind::Run, "building the runtime", e))?;
    let mut out = Vec::new();
    for (s, predicted) in strategies.iter().zip(predicted) {
        let policy = s.policy(p).map_err(|e| usage(e.to_string()))?;
        let (mut measured, errors) = rt.block_on(one(p, policy, requests, rate))?;
        measured.strategy = s.to_string();
        out.push(HedgingRun {
            measured,
            predicted,
            errors,
        });
    }
    Ok(out)
}

/// One strategy: a fresh server, `requests` calls, the row.
async fn one(
    p: &HedgingParams,
    policy: stagger::HedgePolicy,
    requests: u64,
    rate: f64,
) -> Result<(HedgingRow, u64), Error> {
    let received = Arc::new(AtomicU64::new(0));
    let (listener, addr) = crate::gameday::loopback_listener().await?;
    let server = tokio::spawn(serve(listener, p.clone(), received.clone()));
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<stagger::tower::ReplayBody<String>>();
    let svc = RetryService::new(client, policy);
    let mut arrivals = FastRng::seeded(p.seed);
    let mut calls = tokio::task::JoinSet::new();
    let start = tokio::time::Instant::now();
    let mut at = Duration::ZERO;
    for _ in 0..requests {
        let gap = -(1.0 - arrivals.next_f64()).ln() / rate;
        at += Duration::from_secs_f64(gap);
        tokio::time::sleep_until(start + at).await;
        let mut svc = svc.clone();
        let uri = format!("http://{addr}/");
        calls.spawn(async move {
            let t0 = Instant::now();
            let req = http::Request::get(uri)
                .body(String::new())
                .expect("a valid request");
            let done = tokio::time::timeout(Duration::from_secs(5), async {
                std::future::poll_fn(|cx| svc.poll_ready(cx)).await.ok()?;
                let resp = svc.call(req).await.ok()?;
                resp.into_body().collect().await.ok()
            })
            .await;
            done.ok().flatten().map(|_| t0.elapsed())
        });
    }
    let mut latencies = Vec::with_capacity(requests as usize);
    let mut errors = 0;
    while let Some(r) = calls.join_next().await {
        match r.ok().flatten() {
            Some(l) => latencies.push(u64::try_from(l.as_nanos()).unwrap_or(u64::MAX)),
            None => errors += 1,
        }
    }
    server.abort();
    latencies.sort_unstable();
    let q = |x: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((x * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len()) - 1;
        stagger_sim::rounded(latencies[i] as f64 / 1e6, 3)
    };
    let extra = received.load(Relaxed) as f64 / requests as f64 - 1.0;
    Ok((
        HedgingRow {
            strategy: String::new(),
            p50_ms: q(0.5),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            extra_load: stagger_sim::rounded(extra, 3),
        },
        errors,
    ))
}

/// Serves every request after its drawn service time, counting arrivals.
async fn serve(listener: TcpListener, p: HedgingParams, received: Arc<AtomicU64>) {
    let seeds = Arc::new(AtomicU64::new(p.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (p, received, seeds) = (p.clone(), received.clone(), seeds.clone());
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(move |_req: hyper::Request<hyper::body::Incoming>| {
                    received.fetch_add(1, Relaxed);
                    let mut rng = FastRng::seeded(seeds.fetch_add(1, Relaxed));
                    let took = service_time(&p, &mut rng);
                    async move {
                        tokio::time::sleep(took).await;
                        Ok::<_, Infallible>(hyper::Response::new(String::from("ok")))
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// A service time as the simulator draws it (Box–Muller for the normal).
fn service_time(p: &HedgingParams, rng: &mut FastRng) -> Duration {
    let u1 = 1.0 - rng.next_f64();
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * rng.next_f64()).cos();
    let mut t = p.latency_median.as_secs_f64() * (p.latency_sigma * z).exp();
    if rng.next_f64() < p.stall_prob {
        t += p.stall.as_secs_f64();
    }
    Duration::from_secs_f64(t.min(60.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_cuts_the_tail_on_real_sockets() {
        let p = HedgingParams {
            requests: 20_000,
            // One stall in twenty: within the default hedge budget (10 %
            // extra load). At one in ten the budget cannot cover every
            // stall and the simulator's own p99 is a stall (204 ms), so a
            // 300-request run's p99 fell either side of the bound by timing.
            stall_prob: 0.05,
            ..HedgingParams::default()
        };
        let s = HedgeStrategy::parse_list("none,20ms").unwrap();
        let runs = run(&p, &s, 300, 300.0).unwrap();
        let [none, hedged] = &runs[..] else {
            unreachable!()
        };
        assert_eq!(none.errors + hedged.errors, 0);
        assert_eq!(none.measured.extra_load, 0.0);
        // One stall in twenty: none's p99 is a stall, the hedged one's is
        // not, as the simulator predicts for the same service times.
        assert!(none.measured.p99_ms > 200.0, "{none:?}");
        assert!(hedged.measured.p99_ms < 150.0, "{hedged:?}");
        assert!(hedged.predicted.p99_ms < 150.0, "{hedged:?}");
        assert!(
            hedged.measured.extra_load > 0.02 && hedged.measured.extra_load < 0.4,
            "{hedged:?}"
        );
    }
}
