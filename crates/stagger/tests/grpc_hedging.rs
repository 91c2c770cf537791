//! The gRPC layer's A6 `hedgingPolicy`, one rule per test, against a
//! scripted tower service under paused tokio time: every wait is virtual
//! and exact, and the script records when each attempt went out, what it
//! carried, and whether it got to answer or was cancelled.

use crate::grpc_scripted;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use grpc_scripted::{call, request, unavailable, Scripted, Step};
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty};
use stagger::config::ServiceConfig;
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::CallReport;
use stagger::tower::grpc::RetryLayer;
use stagger::tower::ReplayBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
use stagger::{NotRetried, StopReason};
use tower::{Layer, Service, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn hedging(max_attempts: u32, delay_ms: u64, non_fatal: &[u32]) -> RetryLayer {
    RetryLayer::builder()
        .default_policy(
            MethodPolicy::hedging(max_attempts, ms(delay_ms), non_fatal.iter().copied()).unwrap(),
        )
        .build()
        .unwrap()
}

fn previous(s: &grpc_scripted::Seen) -> Option<u32> {
    s.headers
        .get("grpc-previous-rpc-attempts")
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

#[tokio::test(start_paused = true)]
async fn hedges_go_out_delay_apart_with_the_body_and_attempt_count() {
    let layer = hedging(3, 50, &[14]);
    let svc = Scripted::new(
        [
            Step::SlowOk(ms(1000)),
            Step::SlowOk(ms(1000)),
            Step::SlowOk(ms(30)),
        ],
        unavailable(),
    );
    let t0 = tokio::time::Instant::now();
    let (status, report) = call(&layer, &svc, request(b"order-7")).await;
    assert_eq!(status, Some(0));
    assert_eq!(
        t0.elapsed(),
        ms(130),
        "the third attempt answers 30 ms after it left at 100 ms"
    );
    let seen = svc.seen();
    assert_eq!(seen.len(), 3);
    assert_eq!(svc.gaps_ms(), vec![50, 50]);
    assert_eq!(
        seen.iter().map(previous).collect::<Vec<_>>(),
        vec![None, Some(1), Some(2)]
    );
    assert!(
        seen.iter().all(|s| &s.body[..] == b"order-7"),
        "every hedge replays the body"
    );
    // The winner committed the call; the two slow attempts were cancelled.
    tokio::time::sleep(ms(2000)).await;
    assert_eq!(svc.answered(), 1);
    let s = report.get();
    assert_eq!((s.attempts, s.reason), (3, Some(StopReason::Success)));
}

#[tokio::test(start_paused = true)]
async fn a_zero_delay_sends_every_attempt_at_once_each_with_the_whole_body() {
    let layer = hedging(3, 0, &[]);
    let svc = Scripted::new(
        [
            Step::SlowOk(ms(40)),
            Step::SlowOk(ms(20)),
            Step::SlowOk(ms(60)),
        ],
        unavailable(),
    );
    let (status, _) = call(&layer, &svc, request(b"abc")).await;
    assert_eq!(status, Some(0));
    let seen = svc.seen();
    assert_eq!(svc.gaps_ms(), vec![0, 0]);
    assert!(seen.iter().all(|s| &s.body[..] == b"abc"), "{seen:?}");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(svc.answered(), 1, "the first answer cancels the rest");
}

#[tokio::test(start_paused = true)]
async fn a_non_fatal_status_sends_the_next_hedge_at_once() {
    let layer = hedging(3, 1000, &[14]);
    let svc = Scripted::new(
        [Step::Late(ms(10), 14, &[]), Step::SlowOk(ms(5))],
        unavailable(),
    );
    let t0 = tokio::time::Instant::now();
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(svc.gaps_ms(), vec![10], "not the 1 s hedging delay");
    assert_eq!(t0.elapsed(), ms(15));
    assert_eq!(report.get().attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn a_fatal_status_ends_the_call_and_cancels_the_others() {
    let layer = hedging(3, 50, &[14]);
    let svc = Scripted::new(
        [Step::SlowOk(ms(1000)), Step::Late(ms(10), 13, &[])],
        unavailable(),
    );
    let t0 = tokio::time::Instant::now();
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(13), "INTERNAL is not in nonFatalStatusCodes");
    assert_eq!(t0.elapsed(), ms(60));
    tokio::time::sleep(ms(2000)).await;
    assert_eq!(svc.seen().len(), 2, "no third hedge after the fatal status");
    assert_eq!(svc.answered(), 1, "attempt 1 was cancelled");
    assert_eq!(report.get().reason, Some(StopReason::NotRetryable));
}

#[tokio::test(start_paused = true)]
async fn every_attempt_failing_non_fatally_returns_the_last_status() {
    let layer = hedging(3, 50, &[14]);
    let svc = Scripted::new([], unavailable());
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(14));
    assert_eq!(svc.seen().len(), 3);
    assert_eq!(report.get().reason, Some(StopReason::AttemptsExhausted));
}

#[tokio::test(start_paused = true)]
async fn pushback_delays_the_next_hedge_then_the_delay_resumes() {
    let layer = hedging(3, 100, &[14]);
    let svc = Scripted::new(
        [
            Step::TrailersOnly(14, &[("grpc-retry-pushback-ms", "300")]),
            Step::SlowOk(ms(1000)),
            Step::SlowOk(ms(10)),
        ],
        unavailable(),
    );
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(svc.gaps_ms(), vec![300, 100]);
}

#[tokio::test(start_paused = true)]
async fn a_negative_pushback_stops_further_hedges_but_not_the_running_ones() {
    let layer = hedging(3, 100, &[14]);
    let svc = Scripted::new(
        [
            Step::SlowOk(ms(250)),
            Step::Late(ms(10), 14, &[("grpc-retry-pushback-ms", "-1")]),
        ],
        unavailable(),
    );
    let t0 = tokio::time::Instant::now();
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0), "attempt 1 still answers");
    assert_eq!(t0.elapsed(), ms(250));
    assert_eq!(svc.seen().len(), 2, "no hedge at 200 ms");
    assert_eq!(report.get().attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn throttling_at_half_the_tokens_sends_no_hedge() {
    let build = || {
        RetryLayer::builder()
            .default_policy(MethodPolicy::hedging(2, ms(50), [14]).unwrap())
            .throttling(10.0, 0.1)
            .build()
            .unwrap()
    };
    // A full bucket hedges a slow call.
    let layer = build();
    let svc = Scripted::new([Step::SlowOk(ms(200))], Step::SlowOk(ms(200)));
    call(&layer, &svc, request(b"x")).await;
    assert_eq!(svc.seen().len(), 2);
    // Failures drain the channel's bucket to half: no hedge any more.
    let layer = build();
    let failing = Scripted::new([], unavailable());
    for _ in 0..3 {
        call(&layer, &failing, request(b"x")).await;
    }
    let tokens = layer.throttling_bucket().unwrap().tokens_milli();
    assert!(tokens <= 5_000, "{tokens}");
    let svc = Scripted::new([Step::SlowOk(ms(200))], Step::SlowOk(ms(200)));
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(svc.seen().len(), 1, "throttled: the slow call waits alone");
}

#[tokio::test(start_paused = true)]
async fn a_body_past_the_replay_buffer_sends_no_hedge() {
    let layer = RetryLayer::builder()
        .default_policy(MethodPolicy::hedging(3, ms(50), [14]).unwrap())
        .max_replay_bytes(4)
        .build()
        .unwrap();
    // Attempt 1 fails non-fatally, which would send attempt 2 at once,
    // and no timed hedge goes out at 50 ms: the body cannot be sent again.
    let svc = Scripted::new([Step::Late(ms(300), 14, &[])], unavailable());
    let (status, report) = call(&layer, &svc, request(b"too long")).await;
    assert_eq!(status, Some(14));
    assert_eq!(svc.seen().len(), 1);
    let s = report.get();
    assert_eq!(s.not_retried, Some(NotRetried::BodyTooLarge { limit: 4 }));
    assert_eq!(s.reason, Some(StopReason::NotRetryable));
    // A small body hedges with the same layer.
    let svc = Scripted::new([Step::Late(ms(300), 14, &[])], unavailable());
    call(&layer, &svc, request(b"ok")).await;
    assert_eq!(svc.seen().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_service_config_hedging_policy_caps_max_attempts_at_five() {
    let config = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],"hedgingPolicy":{"maxAttempts":9,
        "hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}"#,
    )
    .unwrap();
    let h = &config.methods[0].policy;
    assert_eq!(
        (h.max_attempts(), h.hedging_delay(), h.retryable_codes()),
        (5, Some(ms(50)), Some(&[14][..]))
    );
    let layer = RetryLayer::from_service_config(&config).unwrap();
    let svc = Scripted::new([], Step::Late(ms(500), 14, &[]));
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(14));
    assert_eq!(svc.gaps_ms(), vec![50, 50, 50, 50]);
    assert_eq!(report.get().attempts, 5);
}

#[test]
fn a_method_with_both_policies_is_rejected() {
    let err = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s",
        "maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14]},
        "hedgingPolicy":{"maxAttempts":3}}]}"#,
    )
    .unwrap_err();
    assert_eq!(err.field(), "methodConfig");
    assert!(err.to_string().contains("hedgingPolicy"), "{err}");
    let err = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{}],"hedgingPolicy":{"maxAttempts":3,"nonFatalStatusCodes":["SOMETIMES"]}}]}"#,
    )
    .unwrap_err();
    assert_eq!(err.field(), "hedgingPolicy.nonFatalStatusCodes");
    let err = ServiceConfig::from_json(r#"{"methodConfig":[{"hedgingPolicy":{"maxAttempts":1}}]}"#)
        .unwrap_err();
    assert_eq!(err.field(), "hedgingPolicy.maxAttempts");
}

#[tokio::test(start_paused = true)]
async fn a_transparent_retry_in_a_hedged_call_does_not_raise_the_attempt_count() {
    let layer = hedging(2, 1000, &[14]);
    // Attempt 1 never leaves the client: it is retried at once, and the
    // retry goes out as the first attempt still.
    let svc = Scripted::new([Step::RefusedStream, Step::SlowOk(ms(5))], unavailable());
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    let seen = svc.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen.iter().map(previous).collect::<Vec<_>>(),
        vec![None, None]
    );
    let s = report.get();
    assert_eq!((s.attempts, s.transparent_retries), (2, 1));
}

/// A request body that yields its chunks at set offsets from its first
/// poll, as a client streaming a large upload does.
struct Paced {
    chunks: VecDeque<(Duration, &'static [u8])>,
    start: Option<tokio::time::Instant>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Paced {
    fn new(chunks: &[(u64, &'static [u8])]) -> Self {
        Paced {
            chunks: chunks.iter().map(|(at, c)| (ms(*at), *c)).collect(),
            start: None,
            timer: None,
        }
    }
}

impl Body for Paced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let start = *self.start.get_or_insert_with(tokio::time::Instant::now);
        let Some(&(at, chunk)) = self.chunks.front() else {
            return Poll::Ready(None);
        };
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(start + at)));
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.timer = None;
        self.chunks.pop_front();
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(chunk)))))
    }
}

/// What each attempt's server read: its attempt count and the whole body,
/// recorded only once the body ended.
type Bodies = Arc<Mutex<Vec<(Option<u32>, Vec<u8>)>>>;

/// A server that reads the whole request, then answers: the first attempt
/// after 5 ms with OK, every later one at once with INTERNAL (a fatal
/// status that would end the call).
fn reader(
    bodies: Bodies,
) -> impl Service<
    Request<ReplayBody<Paced>>,
    Response = Response<Empty<Bytes>>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    tower::service_fn(move |req: Request<ReplayBody<Paced>>| {
        let bodies = bodies.clone();
        async move {
            let previous = req
                .headers()
                .get("grpc-previous-rpc-attempts")
                .map(|v| v.to_str().unwrap().parse().unwrap());
            let body = req.into_body().collect().await.unwrap().to_bytes();
            bodies.lock().unwrap().push((previous, body.to_vec()));
            let status = if previous.is_none() {
                tokio::time::sleep(ms(5)).await;
                "0"
            } else {
                "13"
            };
            Ok::<_, BoxError>(
                Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", status)
                    .body(Empty::new())
                    .unwrap(),
            )
        }
    })
}

#[tokio::test(start_paused = true)]
async fn replay_overflow_keeps_the_leading_hedge_and_cancels_the_rest() {
    let layer = RetryLayer::builder()
        .default_policy(MethodPolicy::hedging(3, ms(15), [14]).unwrap())
        .max_replay_bytes(6)
        .build()
        .unwrap();
    let bodies: Bodies = Arc::default();
    let mut client = layer.layer(reader(bodies.clone()));
    // Attempt 1 reads the first chunk; the hedge at 15 ms replays it and
    // waits with attempt 1 for more. The chunk at 20 ms outgrows the buffer:
    // attempt 1 leads and goes on alone; the hedge, four bytes into the
    // body, must not reach its server as a complete request.
    let body = Paced::new(&[(0, b"aaaa"), (20, b"bbbb"), (40, b"cccc")]);
    let req = Request::post(grpc_scripted::PATH)
        .header("content-type", "application/grpc")
        .body(body)
        .unwrap();
    let resp = client.ready().await.unwrap().call(req).await.unwrap();
    let status = resp.headers().get("grpc-status").unwrap().to_str().unwrap();
    assert_eq!(status, "0", "the leader's answer, not the hedge's INTERNAL");
    let report = resp.extensions().get::<CallReport>().cloned().unwrap();
    tokio::time::sleep(ms(1000)).await;
    assert_eq!(
        *bodies.lock().unwrap(),
        vec![(None, b"aaaabbbbcccc".to_vec())],
        "only the leader's server got a request, and all of it"
    );
    let s = report.get();
    assert_eq!(s.attempts, 2, "no hedge after the overflow");
    assert_eq!(s.reason, Some(StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn a_transparent_retry_uses_up_no_hedge_and_many_of_them_never_hang_the_call() {
    // Attempt 1 never leaves; its transparent retry goes out as the first
    // attempt, and the one hedge maxAttempts 2 allows still follows it.
    let layer = hedging(2, 50, &[14]);
    let svc = Scripted::new(
        [
            Step::RefusedStream,
            Step::SlowOk(ms(1000)),
            Step::SlowOk(ms(10)),
        ],
        unavailable(),
    );
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    let seen = svc.seen();
    assert_eq!(
        seen.iter().map(previous).collect::<Vec<_>>(),
        vec![None, None, Some(1)]
    );
    assert_eq!(report.get().attempts, 3);
    // Seven attempts that never leave: ids past maxAttempts (and past 5)
    // still run to an answer.
    let svc = Scripted::new(
        std::iter::repeat_n(Step::RefusedStream, 7).chain([Step::SlowOk(ms(5))]),
        unavailable(),
    );
    let answered = tokio::time::timeout(ms(60_000), call(&layer, &svc, request(b"x"))).await;
    let (status, report) = answered.expect("the call ends");
    assert_eq!(status, Some(0));
    assert_eq!(svc.seen().len(), 8);
    let s = report.get();
    assert_eq!((s.attempts, s.transparent_retries), (8, 7));
}
