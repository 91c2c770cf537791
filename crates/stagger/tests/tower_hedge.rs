//! The HTTP hedging layer: which requests hedge, what every attempt
//! carries, and how answers end the call (paused tokio time, in-process
//! services).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use stagger::hedging::HedgePolicyConfig;
use stagger::http::{CallOptions, Inbound, RetryInfo, Settings};
use stagger::tower::RetryLayer;
use stagger::{HedgeDelay, HedgePolicy, NotRetried, StopReason};
use tower::{Layer, Service, ServiceExt};

type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// An answer slow by this many milliseconds with a 503 also carries
/// `x-no-retry: 1` (a layer below gave up).
const NO_RETRY_MS: u64 = 7;

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
    let svc = tower::service_fn(
        move |req: Request<stagger::tower::ReplayBody<Full<Bytes>>>| {
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
                if status == 503 && ms == NO_RETRY_MS {
                    resp.headers_mut()
                        .insert("x-no-retry", http::HeaderValue::from_static("1"));
                }
                Ok(resp)
            }
        },
    );
    (svc, seen)
}

fn hedging(k: u32, ms: u64) -> HedgePolicy {
    HedgePolicy::new(HedgePolicyConfig {
        max_attempts: k,
        delay: HedgeDelay::Fixed(Duration::from_millis(ms)),
        max_extra_load: None,
        ..Default::default()
    })
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
        let mut client = RetryLayer::new(Settings {
            idempotency_keys: true,
            ..Settings::from(hedging(2, 20))
        })
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
        let mut client = RetryLayer::new(hedging(2, 20)).layer(svc);
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
        let mut client = RetryLayer::new(hedging(3, 1_000)).layer(svc);
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
        let policy = HedgePolicy::new(HedgePolicyConfig {
            delay: HedgeDelay::Fixed(Duration::from_millis(10)),
            max_extra_load: Some(0.05),
            ..Default::default()
        })
        .unwrap();
        // Every first attempt is slow, every hedge fast.
        let (svc, seen) = server(&[(50, 200)]);
        let mut client = RetryLayer::new(policy).layer(svc);
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

/// Sends one request through a ready client.
async fn send<S>(client: &mut S, req: Request<Full<Bytes>>) -> Response<String>
where
    S: Service<Request<Full<Bytes>>, Response = Response<String>>,
    S::Error: std::fmt::Debug,
{
    client.ready().await.unwrap().call(req).await.unwrap()
}

fn with<T: Clone + Send + Sync + 'static>(
    mut req: Request<Full<Bytes>>,
    ext: T,
) -> Request<Full<Bytes>> {
    req.extensions_mut().insert(ext);
    req
}

#[test]
fn hedging_honours_call_options() {
    rt().block_on(async {
        // Declared idempotent by its options, a POST without a key hedges,
        // and every attempt carries the time the options' deadline leaves.
        let (svc, seen) = server(&[(1_000, 200), (5, 200)]);
        let mut client = RetryLayer::new(hedging(2, 20)).layer(svc);
        let options = CallOptions {
            idempotent: Some(true),
            timeout: Some(Duration::from_secs(3)),
            ..Default::default()
        };
        let resp = send(&mut client, with(req(Method::POST), options)).await;
        assert_eq!(resp.body(), "2");
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        let left: Vec<u64> = seen
            .iter()
            .map(|h| h["x-request-timeout-ms"].to_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            left,
            vec![3_000, 2_980],
            "the deadline covers both attempts"
        );

        // A 500 is final by default and non-fatal when the options say so.
        let (svc, seen) = server(&[(5, 500), (5, 200)]);
        let mut client = RetryLayer::new(hedging(2, 1_000)).layer(svc);
        let resp = send(&mut client, req(Method::GET)).await;
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(seen.lock().unwrap().len(), 1);
        let (svc, seen) = server(&[(5, 500), (5, 200)]);
        let mut client = RetryLayer::new(hedging(2, 1_000)).layer(svc);
        let opt_in = CallOptions {
            retry_500: Some(true),
            ..Default::default()
        };
        let resp = send(&mut client, with(req(Method::GET), opt_in)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(seen.lock().unwrap().len(), 2);
    });
}

#[test]
fn hedging_keeps_the_one_layer_rule() {
    rt().block_on(async {
        // Serving an inbound retry, a slow call sends no hedge, and its
        // retryable failure is passed up and marks the inbound request.
        let (svc, seen) = server(&[(100, 503), (5, 200)]);
        let mut client = RetryLayer::new(hedging(2, 20)).layer(svc);
        let inbound = Inbound::new(2, None);
        let resp = send(&mut client, with(req(Method::GET), inbound.clone())).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(seen.lock().unwrap().len(), 1, "no hedge");
        let info = resp.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.not_retried, Some(NotRetried::ServingRetry));
        assert!(inbound.downstream_gave_up());

        // A first inbound attempt hedges as usual.
        let (svc, seen) = server(&[(100, 503), (5, 200)]);
        let mut client = RetryLayer::new(hedging(2, 20)).layer(svc);
        let inbound = Inbound::new(1, None);
        let resp = send(&mut client, with(req(Method::GET), inbound.clone())).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(seen.lock().unwrap().len(), 2);
        assert!(!inbound.downstream_gave_up());
    });
}

#[test]
fn a_hedge_reads_x_no_retry_as_gave_up_below() {
    rt().block_on(async {
        // A layer below gave up: no further attempt, the failure goes up,
        // and the inbound request this call serves is told.
        let (svc, seen) = server(&[(NO_RETRY_MS, 503), (5, 200)]);
        let mut client = RetryLayer::new(hedging(2, 1_000)).layer(svc);
        let inbound = Inbound::new(1, None);
        let resp = send(&mut client, with(req(Method::GET), inbound.clone())).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(seen.lock().unwrap().len(), 1);
        let info = resp.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.not_retried, Some(NotRetried::ServerSaidNo));
        assert!(inbound.downstream_gave_up(), "passed up as given up");

        // With the one-layer rule off, `x-no-retry` is not read.
        let (svc, seen) = server(&[(NO_RETRY_MS, 503), (5, 200)]);
        let policy = hedging(2, 1_000);
        let settings = Settings {
            one_layer: false,
            ..Settings::from(policy)
        };
        let mut client = RetryLayer::new(settings).layer(svc);
        let resp = send(&mut client, req(Method::GET)).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(seen.lock().unwrap().len(), 2);
    });
}
