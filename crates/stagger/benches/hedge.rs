//! Per-call overhead of the hedging front-ends on the success path (an
//! answer that comes at once, so no hedge is ever due), next to a plain
//! tower service and tower's own `hedge`, in one run.
//!
//! Run: `cargo bench -p stagger --features tower --bench hedge`

use std::convert::Infallible;
use std::future::ready;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http::Request;
use http_body_util::Full;
use stagger::hedging::HedgePolicyConfig;
use stagger::tower::RetryLayer;
use stagger::{HedgeDelay, HedgeExt, HedgePolicy};
use tower::hedge::Hedge;
use tower::{Layer, Service, ServiceExt};

#[path = "../tests/peers/mod.rs"]
mod peers;

use peers::{request, CloneGet, Ok200};

/// One request through `svc`, readied first.
async fn once<S: Service<Request<Full<Bytes>>>>(svc: &mut S) -> Result<S::Response, S::Error> {
    svc.ready().await?.call(request()).await
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let mut g = c.benchmark_group("hedge_success");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);

    // tower's Hedge is not Clone, so every variant keeps one service and
    // drives it with `ready` and `call` in a `block_on` per call.
    let mut plain = Ok200;
    g.bench_function("plain tower service", |b| {
        b.iter(|| rt.block_on(once(&mut plain)))
    });

    // p95 after 20 samples over 10 s windows: the same shape as ours.
    let mut tower_hedge = Hedge::new(Ok200, CloneGet, 20, 0.95, Duration::from_secs(10));
    g.bench_function("tower hedge, p95", |b| {
        b.iter(|| rt.block_on(once(&mut tower_hedge)))
    });

    let p95 = HedgePolicy::new(HedgePolicyConfig::default()).expect("valid policy"); // p95, 5 % budget
    let mut layer = RetryLayer::new(p95.clone()).layer(Ok200);
    g.bench_function("stagger RetryLayer hedging, p95 + 5 % budget", |b| {
        b.iter(|| rt.block_on(once(&mut layer)))
    });

    let fixed = HedgePolicy::new(HedgePolicyConfig {
        delay: HedgeDelay::Fixed(Duration::from_millis(20)),
        max_extra_load: None,
        ..Default::default()
    })
    .expect("valid policy");
    let mut fixed_layer = RetryLayer::new(fixed).layer(Ok200);
    g.bench_function("stagger RetryLayer hedging, fixed 20 ms", |b| {
        b.iter(|| rt.block_on(once(&mut fixed_layer)))
    });

    g.bench_function("stagger .hedge() executor, p95 + 5 % budget", |b| {
        b.iter(|| {
            rt.block_on(async {
                (|attempt: u32| ready(Ok::<u32, Infallible>(attempt)))
                    .hedge(&p95)
                    .idempotent(true)
                    .call()
                    .await
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
