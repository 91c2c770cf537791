//! The gRPC layer's A6 rules for one call, one test each, against a
//! scripted tower service under paused tokio time: every wait is virtual and
//! exact, and the script records what each attempt carried. The channel's
//! rules (throttling, transparent retries, proxies, method lookup) are in
//! `grpc_channel.rs`.

use crate::grpc_scripted;

use std::time::Duration;

use bytes::Bytes;
use grpc_scripted::{a6, call, request, unavailable, RespBody, Scripted, Step, PATH};
use http::{HeaderValue, Request};
use http_body_util::Full;
use stagger::grpc::{AttemptRecord, MethodPolicy};
use stagger::tower::grpc::{CallReport, RetryLayer};
use stagger::{NotRetried, StopReason};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::{Layer, Service, ServiceExt};

use http::Response;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use stagger::config::ServiceConfig;
use stagger::tower::ReplayBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::test(start_paused = true)]
async fn max_attempts_above_five_count_as_five() {
    let layer = RetryLayer::builder()
        .default_policy(a6(9, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new([], unavailable());
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(14));
    assert_eq!(svc.seen().len(), 5);
    let s = report.get();
    assert_eq!(
        (s.attempts, s.reason),
        (5, Some(StopReason::AttemptsExhausted))
    );
    // The same from a service config.
    let config = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],"retryPolicy":{"maxAttempts":7,
        "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
        "retryableStatusCodes":["UNAVAILABLE"]}}]}"#,
    )
    .unwrap();
    let layer = RetryLayer::from_service_config(&config).unwrap();
    let svc = Scripted::new([], unavailable());
    call(&layer, &svc, request(b"x")).await;
    assert_eq!(svc.seen().len(), 5);
}

/// The delays an `on_attempt` hook sees over `calls` calls of 3 attempts.
async fn delays(policy: MethodPolicy, calls: usize) -> Vec<(u32, Duration)> {
    let out: Arc<Mutex<Vec<(u32, Duration)>>> = Arc::default();
    let sink = out.clone();
    let layer = RetryLayer::builder()
        .default_policy(policy)
        .on_attempt(move |r: &AttemptRecord| {
            if let Some(d) = r.delay {
                sink.lock().unwrap().push((r.attempt, d));
            }
        })
        .build()
        .unwrap();
    for _ in 0..calls {
        let svc = Scripted::new([], unavailable());
        call(&layer, &svc, request(b"x")).await;
        // The waits the hook reports are the waits the server saw.
        let gaps = svc.gaps_ms();
        assert_eq!(gaps.len(), 2);
    }
    let v = out.lock().unwrap().clone();
    v
}

#[tokio::test(start_paused = true)]
async fn jitter_is_plus_minus_twenty_percent_by_default() {
    let d = delays(a6(3, &[14]), 200).await;
    assert_eq!(d.len(), 400);
    let (mut lo1, mut hi1) = (u128::MAX, 0);
    for (attempt, delay) in &d {
        let ms = delay.as_micros();
        let step = if *attempt == 1 { 100_000 } else { 200_000 };
        assert!(
            ms >= step * 8 / 10 && ms <= step * 12 / 10,
            "attempt {attempt}: {delay:?}"
        );
        if *attempt == 1 {
            lo1 = lo1.min(ms);
            hi1 = hi1.max(ms);
        }
    }
    // 200 draws from U(80, 120) ms reach both ends' last 5 ms (a miss has
    // probability 2 · 0.875^200 < 1e-11).
    assert!(lo1 < 85_000 && hi1 > 115_000, "{lo1}..{hi1}");
}

#[tokio::test(start_paused = true)]
async fn full_jitter_is_opt_in() {
    let policy = MethodPolicy::builder()
        .max_attempts(3)
        .initial_backoff(Duration::from_millis(100))
        .full_jitter()
        .build()
        .unwrap();
    let d = delays(policy, 100).await;
    let first: Vec<u128> = d
        .iter()
        .filter(|(a, _)| *a == 1)
        .map(|(_, d)| d.as_micros())
        .collect();
    assert!(first.iter().all(|us| *us < 100_000));
    // Below A6's floor of 80 ms, which ±20 % never draws (P(miss) = 0.8^100).
    assert!(first.iter().any(|us| *us < 80_000));
}

#[tokio::test(start_paused = true)]
async fn only_listed_codes_are_retried() {
    let layer = RetryLayer::builder()
        .default_policy(a6(4, &[13]))
        .build()
        .unwrap();
    let svc = Scripted::new([Step::TrailersOnly(13, &[])], Step::TrailersOnly(0, &[]));
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!((status, report.get().attempts), (Some(0), 2));
    // UNAVAILABLE is not listed here: not retried.
    let svc = Scripted::new([], unavailable());
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(14));
    assert_eq!(report.get().reason, Some(StopReason::NotRetryable));
    assert_eq!(svc.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_listed_resource_exhausted_waits_the_pushback_it_carries() {
    // Listed, it is retried with or without pushback (a6_regressions.rs);
    // with one, the wait is exactly the pushback.
    let layer = RetryLayer::builder()
        .default_policy(a6(4, &[8]))
        .build()
        .unwrap();
    let svc = Scripted::new(
        [Step::TrailersOnly(8, &[("grpc-retry-pushback-ms", "30")])],
        Step::TrailersOnly(0, &[]),
    );
    assert_eq!(call(&layer, &svc, request(b"x")).await.0, Some(0));
    assert_eq!(svc.gaps_ms(), vec![30]);
}

#[tokio::test(start_paused = true)]
async fn headers_without_status_commit_the_call() {
    let layer = RetryLayer::builder()
        .default_policy(a6(4, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new([Step::Streamed(14)], Step::TrailersOnly(0, &[]));
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    // The status came in the trailers, after a message: not retried, but
    // seen and recorded.
    assert_eq!(status, Some(14));
    assert_eq!(svc.seen().len(), 1);
    let s = report.get();
    assert_eq!(s.status, Some(14));
    assert_eq!(s.reason, Some(StopReason::NotRetryable));
    assert_eq!(s.not_retried, Some(NotRetried::Committed));
}

#[tokio::test(start_paused = true)]
async fn trailers_only_failures_are_retried_and_the_body_replayed() {
    let layer = RetryLayer::builder()
        .default_policy(a6(4, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new([unavailable(), unavailable()], Step::Streamed(0));
    let (status, report) = call(&layer, &svc, request(b"\0\0\0\0\x03abc")).await;
    assert_eq!(status, Some(0));
    let seen = svc.seen();
    assert_eq!(seen.len(), 3);
    // `Full` is not Clone-required: the layer buffered and replayed it.
    assert!(seen.iter().all(|s| s.body.as_ref() == b"\0\0\0\0\x03abc"));
    assert_eq!(report.get().reason, Some(StopReason::Success));
}

/// A request body that is not `Clone` and does not say its length.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_replay_buffer_commits_the_call() {
    let layer = RetryLayer::builder()
        .default_policy(a6(4, &[14]))
        .max_replay_bytes(16)
        .build()
        .unwrap();
    let svc = Scripted::new([], unavailable());
    let (status, report) = call(&layer, &svc, request(&[7u8; 32])).await;
    assert_eq!(status, Some(14));
    assert_eq!(svc.seen().len(), 1);
    assert_eq!(svc.seen()[0].body.len(), 32, "sent once, whole");
    assert_eq!(
        report.get().not_retried,
        Some(NotRetried::BodyTooLarge { limit: 16 })
    );
    // A stream of unknown length is read as it is sent: one that fits is
    // replayed, one that outgrows the buffer commits the call.
    for (chunks, attempts, why) in [
        (vec![&b"ab"[..], b"cd"], 2, None),
        (
            vec![&[1u8; 10][..], &[2; 10], &[3; 10]],
            1,
            Some(NotRetried::BodyTooLarge { limit: 16 }),
        ),
    ] {
        let svc = Scripted::new([unavailable()], Step::TrailersOnly(0, &[]));
        let mut client = layer.layer(ChunkScripted(svc.clone()));
        let sent: Vec<u8> = chunks.concat();
        let body = Chunks(chunks.into_iter().map(Bytes::copy_from_slice).collect());
        let req = Request::post(PATH)
            .header("content-type", "application/grpc")
            .body(body)
            .unwrap();
        let resp = ServiceExt::<Request<Chunks>>::ready(&mut client)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap();
        let report = resp.extensions().get::<CallReport>().unwrap().get();
        assert_eq!(report.not_retried, why);
        let seen = svc.seen();
        assert_eq!(seen.len(), attempts);
        assert!(seen.iter().all(|s| s.body.as_ref() == sent.as_slice()));
    }
}

/// [`Scripted`] for any request body.
#[derive(Clone)]
struct ChunkScripted(Scripted);

impl<B: Body<Data = Bytes> + Send + 'static> Service<Request<ReplayBody<B>>> for ChunkScripted
where
    B::Error: std::fmt::Debug,
{
    type Response = Response<RespBody>;
    type Error = BoxError;
    type Future = <Scripted as Service<Request<ReplayBody<Full<Bytes>>>>>::Future;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<B>>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let mut inner = self.0.clone();
        Box::pin(async move {
            let bytes = body.collect().await.unwrap().to_bytes();
            let req = Request::from_parts(parts, ReplayBody::full(bytes));
            inner.call(req).await
        })
    }
}

#[tokio::test(start_paused = true)]
async fn pushback_waits_exactly_then_resets_the_backoff() {
    let layer = RetryLayer::builder()
        .default_policy(a6(5, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new(
        [
            unavailable(),
            unavailable(),
            Step::TrailersOnly(14, &[("grpc-retry-pushback-ms", "700")]),
            unavailable(),
        ],
        Step::TrailersOnly(0, &[]),
    );
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    let g = svc.gaps_ms();
    assert_eq!(g.len(), 4);
    assert!(
        (80..=120).contains(&g[0]) && (160..=240).contains(&g[1]),
        "{g:?}"
    );
    assert_eq!(g[2], 700, "exactly the pushback");
    assert!((80..=120).contains(&g[3]), "backoff restarted: {g:?}");
}

#[tokio::test(start_paused = true)]
async fn negative_or_garbage_pushback_stops() {
    for value in ["-1", "soon", "1.5"] {
        let layer = RetryLayer::builder()
            .default_policy(a6(5, &[14]))
            .build()
            .unwrap();
        let pairs: &'static [(&'static str, &'static str)] = match value {
            "-1" => &[("grpc-retry-pushback-ms", "-1")],
            "soon" => &[("grpc-retry-pushback-ms", "soon")],
            _ => &[("grpc-retry-pushback-ms", "1.5")],
        };
        let svc = Scripted::new([], Step::TrailersOnly(14, pairs));
        let (_, report) = call(&layer, &svc, request(b"x")).await;
        assert_eq!(svc.seen().len(), 1, "{value}");
        assert_eq!(
            report.get().not_retried,
            Some(NotRetried::ServerSaidNo),
            "{value}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retries_carry_previous_attempts_and_the_time_left() {
    let policy = MethodPolicy::builder()
        .max_attempts(3)
        .retryable_codes([14])
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let layer = RetryLayer::builder()
        .default_policy(policy)
        .build()
        .unwrap();
    let push = Step::TrailersOnly(14, &[("grpc-retry-pushback-ms", "500")]);
    let svc = Scripted::new([push.clone(), push], Step::TrailersOnly(0, &[]));
    call(&layer, &svc, request(b"x")).await;
    let seen = svc.seen();
    let header = |i: usize, name: &str| {
        seen[i]
            .headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(header(0, "grpc-previous-rpc-attempts"), None);
    assert_eq!(
        header(1, "grpc-previous-rpc-attempts").as_deref(),
        Some("1")
    );
    assert_eq!(
        header(2, "grpc-previous-rpc-attempts").as_deref(),
        Some("2")
    );
    assert_eq!(header(0, "grpc-timeout").as_deref(), Some("2000000u"));
    assert_eq!(header(1, "grpc-timeout").as_deref(), Some("1500000u"));
    assert_eq!(header(2, "grpc-timeout").as_deref(), Some("1000000u"));
    assert!(seen
        .iter()
        .all(|s| !s.headers.contains_key("x-retry-attempt")));
}

#[tokio::test(start_paused = true)]
async fn the_callers_grpc_timeout_is_the_deadline() {
    let layer = RetryLayer::builder()
        .default_policy(a6(5, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new([], Step::SlowOk(Duration::from_secs(5)));
    let mut req = request(b"x");
    req.headers_mut()
        .insert("grpc-timeout", HeaderValue::from_static("300m"));
    let (status, report) = call(&layer, &svc, req).await;
    assert_eq!(status, Some(4), "DEADLINE_EXCEEDED, written by the layer");
    assert_eq!(report.get().reason, Some(StopReason::Deadline));
    assert_eq!(svc.seen()[0].headers["grpc-timeout"], "300000u");
}
