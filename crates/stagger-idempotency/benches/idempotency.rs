//! What the layer costs a request, beside the same service without it, in one run.
//!
//! ```sh
//! cargo bench -p stagger-idempotency --all-features --bench idempotency
//! ```
//!
//! - `layer/*`: a keyed POST through an axum router in process: without the layer, with it on the
//!   memory store (a new key each time: one claim, one completion), and a replay (a key already
//!   answered: one claim that finds the answer).
//! - `store/*`: one claim and one completion against a real Redis and PostgreSQL on loopback (the
//!   benchmark starts them as the tests do; without them these are skipped).
//! - The memory one stored record takes is printed once (resident memory over 200,000 records, measured first).

use axum::body::Body;
use axum::http::Request;
use axum::routing::post;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::BodyExt;
use stagger_idempotency::{
    Config, Fingerprint, IdempotencyLayer, MemoryStore, Store, StoredResponse,
};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tower::ServiceExt;

#[path = "../tests/support/servers.rs"]
#[allow(dead_code)]
mod servers;

fn router() -> Router {
    Router::new().route(
        "/orders",
        post(|| async { "{\"id\":7,\"status\":\"created\"}" }),
    )
}

fn keyed(key: &str) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/orders")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from("{\"sku\":1,\"qty\":2}"))
        .unwrap()
}

async fn call(app: &Router, request: Request<Body>) -> usize {
    let response = app.clone().oneshot(request).await.unwrap();
    response
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .len()
}

fn layer(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let plain = router();
    let guarded = router().layer(IdempotencyLayer::new(
        MemoryStore::default(),
        Config::default(),
    ));
    let n = AtomicU64::new(0);
    let mut g = c.benchmark_group("layer");
    g.bench_function("without the layer", |b| {
        b.iter(|| rt.block_on(call(&plain, keyed("\"k\""))))
    });
    g.bench_function("keyed POST, memory store", |b| {
        b.iter(|| {
            let key = format!("\"k{}\"", n.fetch_add(1, Ordering::Relaxed));
            rt.block_on(call(&guarded, keyed(&key)))
        })
    });
    rt.block_on(call(&guarded, keyed("\"replayed\"")));
    g.bench_function("replay, memory store", |b| {
        b.iter(|| rt.block_on(call(&guarded, keyed("\"replayed\""))))
    });
    g.finish();
}

fn answer() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: "{\"id\":7,\"status\":\"created\"}".into(),
    }
}

fn round_trip<St: Store>(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: St) {
    let n = AtomicU64::new(0);
    let fp = Fingerprint::of("POST", "/orders", b"{}");
    c.bench_function(&format!("store/{name}: claim + complete"), |b| {
        b.iter(|| {
            rt.block_on(async {
                let key = format!("bench-{}", n.fetch_add(1, Ordering::Relaxed));
                let claim = store
                    .claim(&key, &fp, Duration::from_secs(30))
                    .await
                    .unwrap();
                let stagger_idempotency::Claim::Won(token) = claim else {
                    panic!("a fresh key is won")
                };
                black_box(
                    store
                        .complete(&key, token, &fp, &answer(), Duration::from_secs(60))
                        .await
                        .unwrap(),
                )
            })
        })
    });
}

fn stores(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    round_trip(c, &rt, "memory", MemoryStore::default());
    #[cfg(feature = "redis")]
    if let Some(url) = servers::redis_url() {
        let store = rt
            .block_on(stagger_idempotency::RedisStore::connect(&url))
            .unwrap();
        round_trip(c, &rt, "redis", store);
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = servers::postgres_url() {
        let store = rt
            .block_on(stagger_idempotency::PostgresStore::connect(&url))
            .unwrap();
        round_trip(c, &rt, "postgres", store);
    }
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn memory_per_record(_: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = MemoryStore::new(1 << 30);
    let fp = Fingerprint::of("POST", "/orders", b"{}");
    const N: u64 = 200_000;
    let before = resident_bytes();
    rt.block_on(async {
        for i in 0..N {
            // A scoped key as the layer makes it: 64 hex characters.
            let key = format!("{i:064x}");
            let stagger_idempotency::Claim::Won(token) = store
                .claim(&key, &fp, Duration::from_secs(30))
                .await
                .unwrap()
            else {
                panic!("a fresh key is won")
            };
            store
                .complete(&key, token, &fp, &answer(), Duration::from_secs(600))
                .await
                .unwrap();
        }
    });
    let after = resident_bytes();
    println!(
        "memory store: {:.0} bytes resident per stored record ({N} records of a {}-byte answer)",
        after.saturating_sub(before) as f64 / N as f64,
        answer().body.len()
    );
    black_box(store);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = memory_per_record, layer, stores
}
criterion_main!(benches);
