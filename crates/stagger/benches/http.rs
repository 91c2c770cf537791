//! The tower client layer's overhead per successful request, next to a
//! plain tower service and to tower's own `Retry` in the same run: with a
//! no-op policy (the floor), and with the policy a tower user writes to get
//! what stagger does (the request cloned for a second attempt and stamped
//! with its attempt number, a jittered backoff on a 5xx).
//!
//! Run: `cargo bench -p stagger --features tower --bench http`

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use http_body_util::Full;
use stagger::tower::RetryLayer;
use stagger::Policy;
use tower::retry::{Policy as TowerPolicy, Retry};
use tower::{Layer, Service, ServiceExt};

/// The plain service every variant wraps: answers 200 at once.
#[derive(Clone, Copy)]
struct Ok200;

impl<B> Service<Request<B>> for Ok200 {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Ready<Result<Response<()>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        ready(Ok(Response::new(())))
    }
}

/// tower's `Retry` with a policy that never retries nor clones.
#[derive(Clone, Copy)]
struct NoRetry;

impl<Req, Res, E> TowerPolicy<Req, Res, E> for NoRetry {
    type Future = Ready<()>;

    fn retry(&mut self, _req: &mut Req, _result: &mut Result<Res, E>) -> Option<Self::Future> {
        None
    }

    fn clone_request(&mut self, _req: &Req) -> Option<Req> {
        None
    }
}

/// tower's `Retry` with the policy a tower user writes: it clones the
/// request before each attempt (head and body, as `clone_request` must),
/// stamps `x-retry-attempt` on the copy, and backs off 100 ms × 2^n with
/// full jitter on a 5xx, up to 3 attempts.
#[derive(Clone, Copy)]
struct CloneAndBackoff {
    attempt: u32,
}

impl<Res, E> TowerPolicy<Request<Full<Bytes>>, Response<Res>, E> for CloneAndBackoff {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Request<Full<Bytes>>,
        result: &mut Result<Response<Res>, E>,
    ) -> Option<Self::Future> {
        let failed = result
            .as_ref()
            .map_or(true, |r| r.status().is_server_error());
        if !failed || self.attempt >= 3 {
            return None;
        }
        self.attempt += 1;
        let cap = 100u64 << self.attempt;
        let jitter = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() as u64))
            % cap;
        Some(tokio::time::sleep(Duration::from_millis(jitter)))
    }

    fn clone_request(&mut self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        let mut copy = Request::new(req.body().clone());
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        copy.headers_mut()
            .insert("x-retry-attempt", http::HeaderValue::from(self.attempt + 1));
        Some(copy)
    }
}

fn request() -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1/item?id=7")
        .header("accept", "application/json")
        .body(Full::default())
        .expect("valid request")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("http_client_success");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(60);

    g.bench_function("plain tower service", |b| {
        b.to_async(&rt)
            .iter(|| async { Ok200.oneshot(request()).await })
    });

    let tower_retry = Retry::new(NoRetry, Ok200);
    g.bench_function("tower Retry, no-op policy", |b| {
        b.to_async(&rt)
            .iter(|| async { tower_retry.clone().oneshot(request()).await })
    });

    let tower_cloning = Retry::new(CloneAndBackoff { attempt: 0 }, Ok200);
    g.bench_function("tower Retry, cloning policy", |b| {
        b.to_async(&rt)
            .iter(|| async { tower_cloning.clone().oneshot(request()).await })
    });

    let stagger = RetryLayer::new(Policy::default()).layer(Ok200);
    g.bench_function("stagger RetryLayer, default policy", |b| {
        b.to_async(&rt)
            .iter(|| async { stagger.clone().oneshot(request()).await })
    });

    let timed = RetryLayer::new(
        Policy::builder()
            .attempt_timeout(Duration::from_secs(1))
            .build()
            .expect("valid policy"),
    )
    .layer(Ok200);
    g.bench_function("stagger RetryLayer, 1 s attempt timeout", |b| {
        b.to_async(&rt)
            .iter(|| async { timed.clone().oneshot(request()).await })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
