//! The gRPC layer's channel-wide A6 rules against a scripted tower service
//! under paused tokio time: one throttling bucket per channel, transparent
//! retries, a proxy's HTTP errors, and finding a method's policy.

use crate::grpc_scripted;

use bytes::Bytes;
use grpc_scripted::{a6, call, request, unavailable, Scripted, Step};
use http::Request;
use http_body_util::Full;
use stagger::tower::grpc::RetryLayer;
use stagger::StopReason;
use std::io;
use tower::{Layer, Service, ServiceExt};

use stagger::config::ServiceConfig;
use stagger::guardrails::budget::Budget;
use stagger::Failure;

#[tokio::test(start_paused = true)]
async fn throttling_is_one_bucket_per_channel_across_methods() {
    // 4 tokens: a retry needs more than 2.
    let layer = RetryLayer::builder()
        .default_policy(a6(2, &[14]))
        .throttling(4.0, 0.1)
        .build()
        .unwrap();
    let bucket = layer.throttling_bucket().unwrap().clone();
    let svc = Scripted::new([], unavailable());
    let req = |m: &str| {
        Request::post(format!("http://127.0.0.1/shop.Cart/{m}"))
            .header("content-type", "application/grpc")
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap()
    };
    // Method A: 2 attempts, both failing: 4 → 2 tokens.
    let (_, r) = call(&layer, &svc, req("A")).await;
    assert_eq!(r.get().attempts, 2);
    assert_eq!(bucket.tokens_milli(), 2000);
    // Method B sees the same bucket: at half, no retry.
    let (_, r) = call(&layer, &svc, req("B")).await;
    assert_eq!(
        (r.get().attempts, r.get().reason),
        (1, Some(StopReason::Budget))
    );
    // Another layer is another channel with its own bucket.
    let other = RetryLayer::builder()
        .default_policy(a6(2, &[14]))
        .throttling(4.0, 0.1)
        .build()
        .unwrap();
    let (_, r) = call(&other, &svc, req("B")).await;
    assert_eq!(r.get().attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn a_status_in_trailers_reaches_the_throttling() {
    let layer = RetryLayer::builder()
        .default_policy(a6(2, &[14]))
        .throttling(10.0, 0.1)
        .build()
        .unwrap();
    let svc = Scripted::new([], Step::Streamed(14));
    call(&layer, &svc, request(b"x")).await;
    assert_eq!(layer.throttling_bucket().unwrap().tokens_milli(), 9000);
}

#[test]
fn a_service_config_gives_every_method_the_same_bucket() {
    let config = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,
        "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
        "retryableStatusCodes":["UNAVAILABLE"]}}],
        "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}"#,
    )
    .unwrap();
    let bucket = config.throttling_bucket().unwrap().clone();
    let now = std::time::Instant::now();
    let a = config.policy("a.A", "Get").unwrap().unwrap();
    let b = config.clone().policy("b.B", "Put").unwrap().unwrap();
    let (mut ca, mut cb) = (stagger::Call::seeded(1), stagger::Call::seeded(2));
    a.start_attempt(&mut ca, now).unwrap();
    b.start_attempt(&mut cb, now).unwrap();
    let _ = a.decide(&mut ca, Failure::transient(), now);
    let _ = b.decide(&mut cb, Failure::transient(), now);
    assert_eq!(
        bucket.tokens_milli(),
        8000,
        "both methods drew on one bucket"
    );
    assert!(bucket.try_withdraw(&Failure::transient(), now).is_some());
}

#[tokio::test(start_paused = true)]
async fn attempts_that_never_left_are_retried_transparently() {
    // No retry policy at all, and a bucket that allows no retry.
    let layer = RetryLayer::builder().throttling(2.0, 0.1).build().unwrap();
    let bucket = layer.throttling_bucket().unwrap().clone();
    let svc = Scripted::new(
        [
            Step::Io(io::ErrorKind::ConnectionRefused),
            Step::RefusedStream,
        ],
        Step::TrailersOnly(0, &[]),
    );
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    let s = report.get();
    assert_eq!((s.attempts, s.transparent_retries), (3, 2));
    assert_eq!(bucket.tokens_milli(), 2000, "not charged to throttling");
    // Bounded by 10 per call.
    let svc = Scripted::new([], Step::Io(io::ErrorKind::ConnectionRefused));
    let mut client = layer.layer(svc.clone());
    let err = client
        .ready()
        .await
        .unwrap()
        .call(request(b"x"))
        .await
        .unwrap_err();
    assert_eq!(svc.seen().len(), 11);
    assert_eq!(err.info().attempts, 11);
    // A reset after the request left is not transparent.
    let svc = Scripted::new([], Step::Io(io::ErrorKind::ConnectionReset));
    let mut client = layer.layer(svc.clone());
    client
        .ready()
        .await
        .unwrap()
        .call(request(b"x"))
        .await
        .unwrap_err();
    assert_eq!(svc.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn transparent_retries_do_not_use_up_max_attempts() {
    let layer = RetryLayer::builder()
        .default_policy(a6(2, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new(
        [
            Step::Io(io::ErrorKind::ConnectionRefused),
            unavailable(),
            Step::Io(io::ErrorKind::ConnectionRefused),
        ],
        Step::TrailersOnly(0, &[]),
    );
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(report.get().attempts, 4);
}

#[tokio::test(start_paused = true)]
async fn a_proxys_http_errors_map_to_grpc_statuses() {
    let layer = RetryLayer::builder()
        .default_policy(a6(3, &[14]))
        .build()
        .unwrap();
    // 503 and 429 are UNAVAILABLE: retried.
    let svc = Scripted::new(
        [Step::Http(503), Step::Http(429)],
        Step::TrailersOnly(0, &[]),
    );
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!((status, svc.seen().len()), (Some(0), 3));
    // 404 is UNIMPLEMENTED, 400 INTERNAL, 500 UNKNOWN: not listed, not retried.
    for (http, code) in [(404, 12), (400, 13), (500, 2), (401, 16), (403, 7)] {
        let svc = Scripted::new([], Step::Http(http));
        let (_, report) = call(&layer, &svc, request(b"x")).await;
        assert_eq!(svc.seen().len(), 1, "{http}");
        assert_eq!(report.get().status, Some(code), "{http}");
    }
    // Listed, INTERNAL is retried, so a 400 is too.
    let layer = RetryLayer::builder()
        .default_policy(a6(2, &[13]))
        .build()
        .unwrap();
    let svc = Scripted::new([], Step::Http(400));
    call(&layer, &svc, request(b"x")).await;
    assert_eq!(svc.seen().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn methods_find_their_policy_by_name_then_service_then_default() {
    let config = ServiceConfig::from_json(
        r#"{"methodConfig":[
          {"name":[{"service":"shop.Cart","method":"Add"}],"retryPolicy":{"maxAttempts":2,
            "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14]}},
          {"name":[{"service":"shop.Cart"}],"retryPolicy":{"maxAttempts":3,
            "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14]}},
          {"name":[{}],"retryPolicy":{"maxAttempts":4,
            "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14]}}]}"#,
    )
    .unwrap();
    let layer = RetryLayer::from_service_config(&config).unwrap();
    for (path, attempts) in [
        ("shop.Cart/Add", 2),
        ("shop.Cart/Get", 3),
        ("shop.Till/Pay", 4),
    ] {
        let svc = Scripted::new([], unavailable());
        let req = Request::post(format!("http://127.0.0.1/{path}"))
            .header("content-type", "application/grpc")
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap();
        call(&layer, &svc, req).await;
        assert_eq!(svc.seen().len(), attempts, "{path}");
    }
}
