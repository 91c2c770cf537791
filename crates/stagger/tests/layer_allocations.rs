//! Allocations per successful request through each stagger layer, beside
//! the tower peer a tower user would write in its place, counted with a
//! global allocator wrapper (deterministic: the same code allocates the
//! same number of times on any machine, whatever its load).
//!
//! The peers: tower's `Retry` with a policy that clones the request for a
//! second attempt and stamps its attempt number (what a tower user writes
//! to get stagger's headers and replay), and tower's `hedge` with a fixed
//! delay. Every side serves the same request shape (one header, an empty
//! body) from the same always-ready service on the same runtime.

use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use stagger::hedging::HedgePolicyConfig;
use stagger::tower::RetryLayer;
use stagger::{HedgeDelay, HedgePolicy, Policy};
use tower::retry::Retry;
use tower::{Layer, Service, ServiceExt};

mod counting;
mod peers;

use counting::{allocations, Counting};
use peers::{request, CloneAndBackoff, CloneGet, Ok200};

#[global_allocator]
static GLOBAL: Counting = Counting;

const REQUESTS: usize = 200;

/// Allocations per request of `REQUESTS` requests through `svc`,
/// on a current-thread runtime (the requests are built outside the count).
fn per_request<S>(rt: &tokio::runtime::Runtime, mut svc: S) -> f64
where
    S: Service<Request<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let requests: Vec<_> = (0..REQUESTS).map(|_| request()).collect();
    // Warm up thread-locals and the runtime outside the count.
    rt.block_on(async { svc.ready().await.unwrap().call(request()).await.unwrap() });
    let before = allocations();
    rt.block_on(async {
        for r in requests {
            let resp = svc.ready().await.unwrap().call(r).await.unwrap();
            drop(resp);
        }
    });
    (allocations() - before) as f64 / REQUESTS as f64
}

// One test function, so no other test thread allocates while we count.
#[test]
fn a_successful_request_allocates_no_more_than_its_tower_peer() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let plain = per_request(&rt, Ok200);
    let tower_retry = per_request(&rt, Retry::new(CloneAndBackoff { attempt: 0 }, Ok200));
    let retry = per_request(&rt, RetryLayer::new(Policy::default()).layer(Ok200));
    let fixed = || {
        HedgePolicy::new(HedgePolicyConfig {
            delay: HedgeDelay::Fixed(Duration::from_millis(20)),
            ..Default::default()
        })
        .unwrap()
    };
    let tower_hedge = per_request(
        &rt,
        tower::hedge::Hedge::new_with_mock_latencies(
            Ok200,
            CloneGet,
            10,
            0.95,
            Duration::from_secs(10),
            &[20; 20],
        ),
    );
    let hedge = per_request(&rt, RetryLayer::new(fixed()).layer(Ok200));
    println!(
        "allocations per successful request: plain {plain}, tower Retry (cloning) {tower_retry}, \
         stagger RetryLayer {retry}, tower hedge {tower_hedge}, stagger hedging {hedge}"
    );
    assert!(
        retry <= tower_retry,
        "RetryLayer {retry} > tower Retry with a cloning policy {tower_retry}"
    );
    assert!(
        hedge <= tower_hedge,
        "RetryLayer hedging {hedge} > tower hedge {tower_hedge}"
    );
}
