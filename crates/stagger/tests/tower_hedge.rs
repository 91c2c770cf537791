//! The HTTP hedging layer: which requests hedge, what every attempt
//! carries, and how answers end the call (paused tokio time, in-process
//! services).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use stagger::http::RetryInfo;
use stagger::tower::HedgeLayer;
use stagger::{HedgeDelay, HedgePolicy, StopReason};
use tower::{Layer, Service, ServiceExt};

type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// A service whose attempt N answers `plan[N-1]` after `ms` milliseconds,
/// recording every request's headers.
fn server(
    plan: &'static [(u64, u16)],
) -> (
    impl Service<
            Request<stagger::tower::ReplayBody<Full<Bytes>>>,
            Response = Response<String>,
            Error = std::convert::Infallible,
            Future = impl Send,
        > + Clone
        + Send
        + 'static,
    Seen,
) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let svc = tower::service_fn(move |req: Request<_>| {
        let n = {
            let mut log = log.lock().unwrap();
            log.push(req.headers().clone());
            log.len()
        };
        async move {
            let (ms, status) = plan[(n - 1).min(plan.len() - 1)];
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let mut resp = Response::new(n.to_string());
            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
            Ok(resp)
        }
    });
    (svc, seen)
}

fn hedging(k: u32, ms: u64) -> HedgePolicy {
    HedgePolicy::builder()
        .max_attempts(k)
        .delay(HedgeDelay::Fixed(Duration::from_millis(ms)))
        .unbudgeted()
        .build()
        .unwrap()
}

fn req(method: Method) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri("http://example.invalid/")
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[test]
fn a_slow_get_is_hedged_and_every_attempt_carries_its_number_and_the_same_key() {
    rt().block_on(async {
        let (svc, seen) = server(&[(1_000, 200), (5, 200)]);
        let mut client = HedgeLayer::new(hedging(2, 20))
            .idempotency_keys(true)
            .layer(svc);
        let start = tokio::time::Instant::now();
        let resp = client
            .ready()
            .await
            .unwrap()
            .call(req(Method::POST))
            .await
            .unwrap();
        assert_eq!(resp.body(), "2");
        assert_eq!(start.elapsed(), Duration::from_millis(25));
        let info = resp.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts, info.reason), (2, StopReason::Success));
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0]["x-retry-attempt"], "1");
        assert_eq!(seen[1]["x-retry-attempt"], "2");
        assert_eq!(seen[0]["idempotency-key"], seen[1]["idempotency-key"]);
    });
}

#[test]
fn a_post_without_a_key_is_never_hedged() {
    rt().block_on(async {
        let (svc, seen) = server(&[(1_000, 200), (5, 200)]);
        let mut client = HedgeLayer::new(hedging(2, 20)).layer(svc);
        let resp = client
            .ready()
            .await
            .unwrap()
            .call(req(Method::POST))
            .await
            .unwrap();
        assert_eq!(resp.body(), "1");
        assert_eq!(seen.lock().unwrap().len(), 1);
    });
}

#[test]
fn a_503_sends_the_next_attempt_at_once_and_a_404_ends_the_call() {
    rt().block_on(async {
        let (svc, seen) = server(&[(5, 503), (5, 404), (5, 200)]);
        let mut client = HedgeLayer::new(hedging(3, 1_000)).layer(svc);
        let start = tokio::time::Instant::now();
        let resp = client
            .ready()
            .await
            .unwrap()
            .call(req(Method::GET))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(10),
            "no hedge delay waited"
        );
        let info = resp.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts, info.reason), (2, StopReason::NotRetryable));
        assert_eq!(seen.lock().unwrap().len(), 2);
    });
}

#[test]
fn the_budget_limits_hedges_across_calls() {
    rt().block_on(async {
        let policy = HedgePolicy::builder()
            .delay(HedgeDelay::Fixed(Duration::from_millis(10)))
            .max_extra_load(0.05)
            .build()
            .unwrap();
        // Every first attempt is slow, every hedge fast.
        let (svc, seen) = server(&[(50, 200)]);
        let mut client = HedgeLayer::new(policy).layer(svc);
        for _ in 0..100 {
            let _ = client
                .ready()
                .await
                .unwrap()
                .call(req(Method::GET))
                .await
                .unwrap();
        }
        // 100 requests, 5 % plus one per window.
        assert_eq!(seen.lock().unwrap().len(), 106);
    });
}
