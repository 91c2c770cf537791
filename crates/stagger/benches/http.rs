//! The tower client layer's overhead per successful request, next to a
//! plain tower service and to tower's own `Retry` in the same run: with a
//! no-op policy (the floor), and with the policy a tower user writes to get
//! what stagger does (the request cloned for a second attempt and stamped
//! with its attempt number, a jittered backoff on a 5xx).
//!
//! Run: `cargo bench -p stagger --features tower --bench http`

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use stagger::tower::RetryLayer;
use stagger::Policy;
use tower::retry::Retry;
use tower::{Layer, ServiceExt};

#[path = "../tests/peers/mod.rs"]
mod peers;

use peers::{request, CloneAndBackoff, NoRetry, Ok200};

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
