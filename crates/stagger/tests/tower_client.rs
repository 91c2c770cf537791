//! The tower client layer, driven under paused tokio time.
//!
//! Every test that waits or measures a wait runs in one process against
//! [`Scripted`], a tower service that answers from a script of faults and
//! records each request with tokio's clock: the layer's backoff sleeps and a
//! slow reply's sleep are virtual, so the tests assert the exact waits the
//! rules give and none sleeps for real.
//!
//! A few tests need a real transport for what they check — hyper's own
//! errors for a refused connection and a failed DNS lookup, and bodies over
//! the replay limit streamed through hyper to a server on 127.0.0.1. They
//! too run under paused time and assert on attempts and what the server
//! received, never on time. That is safe with sockets because no timer is
//! armed while their I/O is pending: the legacy hyper client and the axum
//! server are built without a hyper timer, these tests set no attempt
//! timeout and are not wrapped in `bounded` (whose timer would let the
//! paused clock jump ahead while a socket is still busy), so the layer's
//! backoff sleep between attempts is the only timer, armed when no attempt
//! is in flight.

use crate::common;

use stagger::Backoff;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use common::scripted::Scripted;
use common::{bounded, status, with_header, Fault, Server};
use http::{Method, Request, StatusCode};
use http_body::{Body, Frame};
use http_body_util::Full;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stagger::export::Stats;
use stagger::guardrails::{BreakerConfig, Guardrail, Ticket};
use stagger::http::{CallOptions, RetryInfo};
use stagger::tower::{ErrorKind, ReplayBody, RetryLayer, RetryService};
use stagger::{Class, Failure, Hint, NotRetried, Outcome, Policy, StopReason};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// A bound on each in-process test, in virtual time: a test that hangs
/// with no timer left fails at once instead of hanging.
const LIMIT: Duration = Duration::from_secs(20);

/// `fast_policy`'s first backoff step: a first retry waits `U(0, STEP)`,
/// a hinted one `hint + U(0, STEP)`.
const STEP: Duration = Duration::from_millis(20);

fn fast_policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff {
            base: STEP,
            cap: Duration::from_millis(100),
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

/// tokio's timer fires on whole milliseconds: under paused time a sleep of
/// `d` moves the clock by `d` rounded up to the next millisecond.
fn on_tick(d: Duration) -> Duration {
    Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64)
}

/// The layer over an in-process scripted server.
fn scripted(layer: RetryLayer, server: &Scripted) -> RetryService<Scripted> {
    layer.layer(server.clone())
}

type Hyper<B> = Client<HttpConnector, ReplayBody<B>>;

/// The layer over a real hyper client.
fn client<B>(layer: RetryLayer) -> RetryService<Hyper<B>>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    layer.layer(Client::builder(TokioExecutor::new()).build_http())
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).unwrap()
}

fn post(url: &str, body: &'static str) -> Request<Full<Bytes>> {
    Request::post(url)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

fn info<B>(resp: &http::Response<B>) -> RetryInfo {
    *resp.extensions().get::<RetryInfo>().expect("RetryInfo")
}

async fn send<S, Req>(svc: &mut S, req: Req) -> Result<S::Response, S::Error>
where
    S: Service<Req>,
{
    svc.ready().await?.call(req).await
}

fn timeout_ms(hit: &common::Hit) -> u64 {
    hit.header("x-request-timeout-ms").unwrap().parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_503_then_200_is_retried_once_with_attempt_numbers() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
        let hits = server.hits();
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].attempt(), Some(1));
        assert_eq!(hits[1].attempt(), Some(2));
        // One full-jitter step, and the info says what was slept.
        assert!(i.waited < STEP, "{i:?}");
        assert_eq!(server.gaps()[0], on_tick(i.waited));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_seconds_is_waited_at_least() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![with_header(429, "retry-after", "1")]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        // h + U(0, b_1): at least the hint, less than one backoff step more.
        let waited = info(&resp).waited;
        assert!(waited >= Duration::from_secs(1), "{waited:?}");
        assert!(waited < Duration::from_secs(1) + STEP, "{waited:?}");
        assert_eq!(server.gaps()[0], on_tick(waited));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn retry_after_http_date_is_waited_until() {
    bounded(LIMIT, async {
        // The hint is read against the wall clock (a date is wall-clock
        // time); only the wait itself is virtual.
        let before = SystemTime::now();
        let at = before + Duration::from_secs(2);
        let date = httpdate::fmt_http_date(at);
        // The date has whole seconds: the hint ends at `at` rounded down.
        let until = httpdate::parse_http_date(&date).unwrap();
        let server = Scripted::new(vec![with_header(429, "retry-after", date)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        let after = SystemTime::now();
        assert_eq!(resp.status(), StatusCode::OK);
        // The wait is the time left until the date when the answer came,
        // between 1 and 2 s, plus less than one backoff step.
        let waited = info(&resp).waited;
        let least = until.duration_since(after).unwrap();
        let most = until.duration_since(before).unwrap() + STEP;
        assert!(least > Duration::from_millis(990), "{least:?}");
        assert!(most <= Duration::from_secs(2) + STEP, "{most:?}");
        assert!(waited >= least && waited < most, "{waited:?}");
        assert_eq!(server.gaps()[0], on_tick(waited));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_until_the_server_is_up() {
    bounded(LIMIT, async {
        let up_after = Duration::from_millis(150);
        let server = Scripted::new(vec![]).down_for(up_after);
        let policy = Policy::builder()
            .max_attempts(8)
            .backoff(Backoff {
                base: Duration::from_millis(50),
                cap: Duration::from_millis(200),
                jitter: stagger::Jitter::Equal,
                ..Backoff::new()
            })
            .build()
            .unwrap();
        let mut svc = scripted(RetryLayer::new(policy), &server);
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert!(i.attempts >= 2, "{i:?}");
        let hits = server.hits();
        assert_eq!(hits.len(), 1, "only the attempt after start-up arrives");
        assert_eq!(hits[0].attempt(), Some(i.attempts));
        // Every attempt before start-up was refused; the first after it
        // went through.
        let up = started + up_after;
        let refused = server.refusals();
        assert_eq!(refused.len() as u32, i.attempts - 1);
        assert!(refused.iter().all(|t| *t < up), "{refused:?}");
        let served = Instant::from_std(hits[0].at);
        assert!(served >= up);
        assert!(started.elapsed() >= up_after);
        assert_eq!(started.elapsed(), served - started);
        // Equal jitter: the n-th wait is in [b_n / 2, b_n).
        let arrivals: Vec<Instant> = refused.into_iter().chain([served]).collect();
        for (n, w) in arrivals.windows(2).enumerate() {
            let b = Duration::from_millis((50 << n).min(200));
            let gap = w[1] - w[0];
            assert!(gap >= b / 2 && gap <= b, "wait {n}: {gap:?}");
        }
        // What the info says was slept, each sleep on tokio's millisecond.
        let slept = served - started;
        let ticks = Duration::from_millis(u64::from(i.attempts - 1));
        assert!(slept >= i.waited && slept - i.waited < ticks, "{i:?}");
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_reply_is_cut_off_and_retried_when_idempotent() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![Fault::Slow(Duration::from_secs(2), 200)]);
        let policy = Policy::builder()
            .backoff(Backoff {
                base: Duration::from_millis(10),
                ..Backoff::new()
            })
            .attempt_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let mut svc = scripted(RetryLayer::new(policy), &server);
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!(i.attempts, 2);
        // Cut off at exactly the attempt timeout, then one step U(0, 10 ms);
        // the second attempt answers at once.
        assert!(i.waited < Duration::from_millis(10), "{i:?}");
        let gap = server.gaps()[0];
        assert_eq!(gap, Duration::from_millis(200) + on_tick(i.waited));
        assert_eq!(started.elapsed(), gap);
        // The attempt timeout travels as the remaining time.
        let hits = server.hits();
        assert_eq!(timeout_ms(&hits[0]), 200);
        assert_eq!(timeout_ms(&hits[1]), 200);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_post_is_not_retried_result_unknown() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![Fault::Slow(Duration::from_secs(2), 200)]);
        let policy = Policy::builder()
            .backoff(Backoff {
                base: Duration::from_millis(10),
                ..Backoff::new()
            })
            .attempt_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let mut svc = scripted(RetryLayer::new(policy), &server);
        let started = Instant::now();
        let err = send(&mut svc, post(&server.url("/"), "x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert_eq!(err.info().attempts, 1);
        assert_eq!(err.info().reason, StopReason::NotRetryable);
        assert_eq!(err.info().not_retried, Some(NotRetried::NotIdempotent));
        // Given up when the attempt timed out, not when the reply came.
        assert_eq!(started.elapsed(), Duration::from_millis(200));
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_400_is_never_retried() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(400), status(400)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(4)), &server);
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.waited, Duration::ZERO);
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_500_is_retried_only_when_asked() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(500), status(500)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(4)), &server);
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(info(&resp).attempts, 1);
        // Per request, through the extensions.
        let mut req = get(&server.url("/"));
        req.extensions_mut().insert(CallOptions {
            retry_500: Some(true),
            ..Default::default()
        });
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        assert_eq!(server.hits().len(), 3);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_post_without_a_key_is_not_retried() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, post(&server.url("/"), "charge"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::NotIdempotent));
        assert!(server.hits()[0].header("idempotency-key").is_none());
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_post_with_a_generated_key_sends_the_same_key_every_attempt() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503), status(502)]);
        let mut svc = scripted(
            RetryLayer::new(stagger::http::Settings {
                policy: fast_policy(3),
                idempotency_keys: true,
                ..Default::default()
            }),
            &server,
        );
        let resp = send(&mut svc, post(&server.url("/"), "charge"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 3);
        let keys: Vec<String> = server
            .hits()
            .iter()
            .map(|h| h.header("idempotency-key").unwrap())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert!(keys[0].starts_with('"') && keys[0].ends_with('"') && keys[0].len() == 38);
        // Every attempt got the whole body.
        assert!(server.hits().iter().all(|h| h.body == b"charge"));
        // The next call gets a new key.
        let _ = send(&mut svc, post(&server.url("/"), "again"))
            .await
            .unwrap();
        assert_ne!(server.hits()[3].header("idempotency-key").unwrap(), keys[0]);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_post_with_its_own_key_is_retried_with_that_key() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let mut req = post(&server.url("/"), "x");
        req.headers_mut()
            .insert("idempotency-key", "\"mine\"".parse().unwrap());
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(info(&resp).attempts, 2);
        let hits = server.hits();
        assert!(hits
            .iter()
            .all(|h| h.header("idempotency-key").as_deref() == Some("\"mine\"")));
    })
    .await;
}

/// A body of `left` bytes in 64 KiB chunks that does not say its length.
struct Chunks {
    left: usize,
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(64 * 1024);
        self.left -= n;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; n])))))
    }
}

// The two tests below stream bodies through hyper to a real server, to see
// the replay limit at work on a real transport (see the top of the file on
// why paused time is safe here).

#[tokio::test(start_paused = true)]
async fn a_2_mib_stream_is_sent_once_and_not_retried() {
    let server = Server::start(vec![status(503), status(503)]).await;
    let mut svc = client::<Chunks>(RetryLayer::new(fast_policy(3)));
    let req = Request::put(server.url("/"))
        .body(Chunks { left: 2 << 20 })
        .unwrap();
    let resp = send(&mut svc, req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    let i = info(&resp);
    assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
    assert_eq!(i.not_retried, Some(NotRetried::BodyStream));
    assert_eq!(server.hits().len(), 1);
    assert_eq!(server.hits()[0].body_len, 2 << 20);
}

#[tokio::test(start_paused = true)]
async fn a_2_mib_buffer_is_over_the_limit_and_a_small_one_replays() {
    let server = Server::start(vec![status(503), status(503)]).await;
    let mut svc = client(RetryLayer::new(fast_policy(3)));
    let big = Request::put(server.url("/"))
        .body(Full::new(Bytes::from(vec![b'y'; 2 << 20])))
        .unwrap();
    let resp = send(&mut svc, big).await.unwrap();
    let i = info(&resp);
    assert_eq!(i.attempts, 1);
    assert_eq!(
        i.not_retried,
        Some(NotRetried::BodyTooLarge { limit: 1 << 20 })
    );
    assert_eq!(server.hits()[0].body_len, 2 << 20);
    let small = Request::put(server.url("/"))
        .body(Full::new(Bytes::from(vec![b'z'; 1000])))
        .unwrap();
    let resp = send(&mut svc, small).await.unwrap();
    assert_eq!(info(&resp).attempts, 2);
    assert_eq!(server.hits().len(), 3);
    assert!(server.hits()[1..].iter().all(|h| h.body_len == 1000));
}

#[tokio::test(start_paused = true)]
async fn a_hint_past_the_deadline_stops_at_once() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![with_header(503, "retry-after", "30")]);
        let mut svc = scripted(
            RetryLayer::new(stagger::http::Settings {
                policy: fast_policy(3),
                timeout: Some(Duration::from_secs(2)),
                ..Default::default()
            }),
            &server,
        );
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        // No wait at all, not even part of one.
        assert_eq!(started.elapsed(), Duration::ZERO);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::Deadline));
        assert_eq!(i.waited, Duration::ZERO);
        // The whole deadline travels with the first attempt.
        assert_eq!(timeout_ms(&server.hits()[0]), 2000);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_hint_over_max_retry_after_stops_at_once() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![with_header(429, "retry-after", "120")]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::HintTooLong));
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn per_request_policy_and_shared_observer_across_clones() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503), status(503), status(503)]);
        let stats = Arc::new(Stats::new());
        let policy = Policy::builder()
            .backoff(Backoff {
                base: Duration::from_millis(5),
                ..Backoff::new()
            })
            .observer(stats.clone())
            .build()
            .unwrap();
        let mut a = scripted(RetryLayer::new(policy), &server);
        let mut b = a.clone();
        let mut req = get(&server.url("/"));
        req.extensions_mut().insert(CallOptions {
            policy: Some(fast_policy(1)),
            ..Default::default()
        });
        let resp = send(&mut a, req).await.unwrap();
        assert_eq!(info(&resp).reason, StopReason::AttemptsExhausted);
        // The overriding policy had no observer; the shared one sees b's call.
        let resp = send(&mut b, get(&server.url("/"))).await.unwrap();
        assert_eq!(info(&resp).attempts, 3);
        let resp = send(&mut a, get(&server.url("/"))).await.unwrap();
        assert_eq!(info(&resp).attempts, 1);
        let s = stats.snapshot();
        assert_eq!((s.logical_requests, s.attempts, s.retries), (2, 4, 2));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn methods_other_than_post_and_patch_are_retried() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503), status(504)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let req = Request::builder()
            .method(Method::DELETE)
            .uri(server.url("/x"))
            .body(Full::<Bytes>::default())
            .unwrap();
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(info(&resp).attempts, 3);
        assert!(server.hits().iter().all(|h| h.method == "DELETE"));
        // Two full-jitter waits: U(0, 20 ms), then U(0, 40 ms).
        let gaps = server.gaps();
        assert!(gaps[0] <= STEP && gaps[1] <= 2 * STEP, "{gaps:?}");
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_budget() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503); 20]);
        let bucket = stagger::guardrails::budget::TokenBucket::new(
            stagger::guardrails::budget::TokenBucketConfig {
                max_tokens: 4.0,
                token_ratio: 0.1,
            },
        )
        .unwrap();
        let policy = Policy::builder()
            .max_attempts(5)
            .backoff(Backoff {
                base: Duration::from_millis(5),
                ..Backoff::new()
            })
            .budget(bucket.clone())
            .build()
            .unwrap();
        let mut a = scripted(RetryLayer::new(policy), &server);
        let mut b = a.clone();
        let resp = send(&mut a, get(&server.url("/"))).await.unwrap();
        let first = info(&resp);
        assert_eq!(first.reason, StopReason::Budget, "{first:?}");
        // The clone finds the bucket already drained: no retry at all.
        let resp = send(&mut b, get(&server.url("/"))).await.unwrap();
        let second = info(&resp);
        assert_eq!((second.attempts, second.reason), (1, StopReason::Budget));
        assert_eq!(second.waited, Duration::ZERO);
        assert_eq!(server.hits().len() as u32, first.attempts + 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn clones_share_the_breaker() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(503); 20]);
        let breaker = stagger::Breaker::new(BreakerConfig {
            consecutive_failures: Some(3),
            open_for: Duration::from_secs(30),
            ..Default::default()
        })
        .unwrap();
        let policy = Policy::builder()
            .max_attempts(3)
            .backoff(Backoff {
                base: Duration::from_millis(5),
                ..Backoff::new()
            })
            .breaker(breaker.clone())
            .build()
            .unwrap();
        let mut a = scripted(RetryLayer::new(policy), &server);
        let mut b = a.clone();
        let resp = send(&mut a, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(breaker.state(), stagger::guardrails::BreakerState::Open);
        // The dependency is plainly down: the clone's call fails fast.
        let started = Instant::now();
        let err = send(&mut b, get(&server.url("/"))).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Refused);
        assert_eq!(err.info().reason, StopReason::BreakerOpen);
        assert_eq!(err.info().attempts, 0);
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(server.hits().len(), 3);
    })
    .await;
}

/// When each gRPC attempt came, and the `grpc-timeout` it carried.
type Seen = Arc<std::sync::Mutex<Vec<(Instant, Option<String>)>>>;

/// A gRPC-shaped service: trailers-only answers with `grpc-status`, and it
/// records when each attempt came (tokio's clock) and the `grpc-timeout` it
/// was sent.
fn grpc_service(
    statuses: Vec<&'static str>,
    seen: Seen,
) -> impl Service<
    Request<ReplayBody<Full<Bytes>>>,
    Response = http::Response<()>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<http::Response<()>, Infallible>> + Send,
> + Clone
       + Send
       + 'static {
    let statuses = Arc::new(std::sync::Mutex::new(statuses));
    tower::service_fn(move |req: Request<ReplayBody<Full<Bytes>>>| {
        let t = req
            .headers()
            .get("grpc-timeout")
            .map(|v| v.to_str().unwrap().to_string());
        let attempt: u32 = req.headers()["x-retry-attempt"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let previous = req
            .headers()
            .get("grpc-previous-rpc-attempts")
            .map(|v| v.to_str().unwrap().parse::<u32>().unwrap());
        assert_eq!(previous, (attempt > 1).then(|| attempt - 1));
        seen.lock().unwrap().push((Instant::now(), t));
        let code = {
            let mut s = statuses.lock().unwrap();
            if s.is_empty() {
                "0"
            } else {
                s.remove(0)
            }
        };
        async move {
            let mut resp = http::Response::new(());
            resp.headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            resp.headers_mut()
                .insert("grpc-status", code.parse().unwrap());
            Ok::<_, Infallible>(resp)
        }
    })
}

fn grpc_request() -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1/shop.Cart/Add")
        .header("content-type", "application/grpc")
        .body(Full::default())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn grpc_codes_follow_the_service_config_and_the_deadline_travels_as_grpc_timeout() {
    bounded(LIMIT, async {
        let json = r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],"timeout":"2s",
            "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s",
            "backoffMultiplier":2,"retryableStatusCodes":["INTERNAL"]}}]}"#;
        let config = stagger::config::ServiceConfig::from_json(json).unwrap();
        let settings = config.settings("shop.Cart", "Add").unwrap().unwrap();
        let seen = Arc::default();
        let mut svc =
            RetryLayer::new(settings).layer(grpc_service(vec!["13", "13"], Arc::clone(&seen)));
        // gRPC calls are POSTs: declare this one idempotent.
        let mut req = grpc_request();
        req.extensions_mut().insert(CallOptions {
            idempotent: Some(true),
            ..Default::default()
        });
        let started = Instant::now();
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(resp.headers()["grpc-status"], "0");
        assert_eq!(info(&resp).attempts, 3);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3);
        for (n, (at, t)) in seen.iter().enumerate() {
            let t = t.as_deref().expect("grpc-timeout");
            assert!(t.ends_with('u') || t.ends_with('m'), "{t}");
            // Exactly what is left of the 2 s deadline when the attempt left.
            let left = grpc_timeout(t);
            assert_eq!(
                left,
                Duration::from_secs(2) - (*at - started),
                "attempt {n}"
            );
        }
        // gRPC's jitter, b_n · U(0.8, 1.2): 10 ms, then 20 ms.
        for (n, w) in seen.windows(2).enumerate() {
            let b = Duration::from_millis(10 << n);
            let gap = w[1].0 - w[0].0;
            assert!(gap >= b * 4 / 5 && gap <= b * 6 / 5, "wait {n}: {gap:?}");
        }
        // UNAVAILABLE is not in this config's list.
        let seen = Arc::default();
        let settings = config.settings("shop.Cart", "Add").unwrap().unwrap();
        let mut svc = RetryLayer::new(settings).layer(grpc_service(vec!["14"], seen));
        let mut req = grpc_request();
        req.extensions_mut().insert(CallOptions {
            idempotent: Some(true),
            ..Default::default()
        });
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(
            (info(&resp).attempts, info(&resp).reason),
            (1, StopReason::NotRetryable)
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn grpc_pushback_is_waited_exactly() {
    bounded(LIMIT, async {
        let seen = Arc::default();
        let pushback = tower::service_fn({
            let inner = grpc_service(vec![], Arc::clone(&seen));
            let first = Arc::new(std::sync::atomic::AtomicBool::new(true));
            move |req: Request<ReplayBody<Full<Bytes>>>| {
                let mut inner = inner.clone();
                let first = first.swap(false, std::sync::atomic::Ordering::SeqCst);
                async move {
                    let mut resp = inner.call(req).await?;
                    if first {
                        let h = resp.headers_mut();
                        h.insert("grpc-status", "8".parse().unwrap());
                        h.insert("grpc-retry-pushback-ms", "750".parse().unwrap());
                    }
                    Ok::<_, Infallible>(resp)
                }
            }
        });
        let mut svc = RetryLayer::new(fast_policy(3)).layer(pushback);
        let resp = send(&mut svc, grpc_request()).await.unwrap();
        assert_eq!(resp.headers()["grpc-status"], "0");
        let i = info(&resp);
        assert_eq!((i.attempts, i.waited), (2, Duration::from_millis(750)));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen[1].0 - seen[0].0, Duration::from_millis(750));
    })
    .await;
}

/// A resolver that fails its first `failures` lookups with `message` (the
/// text std gives a getaddrinfo failure), then answers with `addr`.
#[derive(Clone)]
struct FlakyDns {
    failures: Arc<std::sync::atomic::AtomicU32>,
    message: &'static str,
    addr: std::net::SocketAddr,
}

impl FlakyDns {
    fn new(failures: u32, message: &'static str, addr: std::net::SocketAddr) -> Self {
        FlakyDns {
            failures: Arc::new(failures.into()),
            message,
            addr,
        }
    }
}

impl Service<Name> for FlakyDns {
    type Response = std::vec::IntoIter<std::net::SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, std::io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _name: Name) -> Self::Future {
        use std::sync::atomic::Ordering::SeqCst;
        let fail = self
            .failures
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        std::future::ready(if fail {
            Err(std::io::Error::other(self.message))
        } else {
            Ok(vec![self.addr].into_iter())
        })
    }
}

fn dns_client(
    dns: FlakyDns,
) -> RetryService<Client<HttpConnector<FlakyDns>, ReplayBody<Full<Bytes>>>> {
    let connector = HttpConnector::new_with_resolver(dns);
    RetryLayer::new(fast_policy(3)).layer(Client::builder(TokioExecutor::new()).build(connector))
}

const EAI_AGAIN: &str =
    "failed to lookup address information: Temporary failure in name resolution";

// The DNS tests need hyper's connector to ask a resolver, and a real server
// to reach once it answers (see the top of the file on paused time).

#[tokio::test(start_paused = true)]
async fn a_temporary_dns_failure_is_retried() {
    let server = Server::start(vec![]).await;
    let mut svc = dns_client(FlakyDns::new(1, EAI_AGAIN, server.addr));
    // A name, not an address, so the connector asks the resolver.
    let url = format!("http://stagger.test:{}/", server.addr.port());
    let resp = send(&mut svc, get(&url)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(info(&resp).attempts, 2);
    let hits = server.hits();
    assert_eq!(hits.len(), 1, "the failed lookup sent nothing");
    assert_eq!(hits[0].attempt(), Some(2));
    // The request never left, so even a POST without a key is repeated
    // (on a new client: the first one would reuse its connection).
    let mut svc = dns_client(FlakyDns::new(1, EAI_AGAIN, server.addr));
    let resp = send(&mut svc, post(&url, "x")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(info(&resp).attempts, 2);
    let hits = server.hits();
    assert_eq!((hits.len(), hits[1].method.as_str()), (2, "POST"));
    assert_eq!(hits[1].attempt(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_name_that_does_not_exist_is_not_retried() {
    let server = Server::start(vec![]).await;
    let dns = FlakyDns::new(
        1,
        "failed to lookup address information: Name or service not known",
        server.addr,
    );
    let mut svc = dns_client(dns);
    let url = format!("http://stagger.test:{}/", server.addr.port());
    let err = send(&mut svc, get(&url)).await.unwrap_err();
    assert_eq!(
        (err.info().attempts, err.info().reason),
        (1, StopReason::NotRetryable)
    );
    assert!(server.hits().is_empty());
}

/// What hyper reports for a port nothing listens on is read as a request
/// that never left: retried, even a POST without a key. (The in-process
/// test above checks the waits; this one checks hyper's error.)
#[tokio::test(start_paused = true)]
async fn a_connection_refused_through_hyper_is_retried_even_for_a_post() {
    let probe = common::free_port().await;
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let mut svc = client(RetryLayer::new(fast_policy(3)));
    let err = send(&mut svc, post(&format!("http://{addr}/"), "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Service);
    assert_eq!(
        (err.info().attempts, err.info().reason),
        (3, StopReason::AttemptsExhausted)
    );
    assert_eq!(err.info().not_retried, None);
}

#[tokio::test(start_paused = true)]
async fn with_the_one_layer_rule_off_x_no_retry_keeps_the_retry_after() {
    bounded(LIMIT, async {
        let answer = Fault::Status(
            429,
            vec![("retry-after", "1".into()), ("x-no-retry", "1".into())],
        );
        let server = Scripted::new(vec![answer.clone()]);
        let mut svc = scripted(
            RetryLayer::new(stagger::http::Settings {
                policy: fast_policy(3),
                one_layer: false,
                ..Default::default()
            }),
            &server,
        );
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!(i.attempts, 2);
        assert!(i.waited >= Duration::from_secs(1), "{i:?}");
        assert!(i.waited < Duration::from_secs(1) + STEP, "{i:?}");
        assert_eq!(server.gaps()[0], on_tick(i.waited));
        // With the rule on, the same answer is passed up at once.
        let server = Scripted::new(vec![answer]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::ServerSaidNo));
        assert_eq!(started.elapsed(), Duration::ZERO);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_malformed_retry_after_is_counted_as_an_invalid_hint() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![with_header(503, "retry-after", "soon")]);
        let stats = Arc::new(Stats::new());
        let policy = Policy::builder()
            .backoff(Backoff {
                base: Duration::from_millis(5),
                ..Backoff::new()
            })
            .observer(stats.clone())
            .build()
            .unwrap();
        let mut svc = scripted(RetryLayer::new(policy), &server);
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!(i.attempts, 2);
        let s = stats.snapshot();
        assert_eq!((s.hints_invalid, s.hints_used, s.retries), (1, 0, 1));
        // Plain backoff, U(0, 5 ms), as if there were no hint.
        assert!(i.waited < Duration::from_millis(5), "{i:?}");
        assert_eq!(server.gaps()[0], on_tick(i.waited));
    })
    .await;
}

/// A guardrail that writes down every failure the engine is told about.
#[derive(Default)]
struct Witness(std::sync::Mutex<Vec<Failure>>);

impl Guardrail for Witness {
    fn record(
        &self,
        _attempt: u32,
        _ticket: &mut Ticket,
        outcome: &Outcome,
        _latency: Option<Duration>,
        _now: std::time::Instant,
    ) {
        if let Outcome::Failure(f) = outcome {
            self.0.lock().unwrap().push(*f);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_invalid_hint_reaches_the_engine_when_the_front_end_holds_back() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![
            with_header(503, "retry-after", "soon"),
            Fault::Status(
                503,
                vec![("retry-after", "soon".into()), ("x-no-retry", "1".into())],
            ),
        ]);
        let witness = Arc::new(Witness::default());
        let policy = Policy::builder()
            .backoff(Backoff {
                base: Duration::from_millis(5),
                ..Backoff::new()
            })
            .guardrail(witness.clone())
            .build()
            .unwrap();
        let mut svc = scripted(RetryLayer::new(policy), &server);
        // Not retried: a POST without a key.
        let resp = send(&mut svc, post(&server.url("/"), "x")).await.unwrap();
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::NotIdempotent));
        // Not retried: the server said so.
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::ServerSaidNo));
        let seen = witness.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        for f in seen {
            // The engine sees the hint as it was, so it can count it, and a
            // failure a breaker or budget still counts against the server.
            assert_eq!(f.hint, Some(Hint::Invalid), "{f:?}");
            assert_ne!(f.class, Class::Permanent, "{f:?}");
        }
        // The second failure came marked "do not retry" from below.
        assert_eq!(server.hits().len(), 2);
    })
    .await;
}

/// A `grpc-timeout` value as gRPC's HTTP/2 protocol spells it: at most 8
/// digits and one unit (`H`, `M`, `S`, `m`, `u`, `n`).
fn grpc_timeout(t: &str) -> Duration {
    let (n, unit) = t.split_at(t.len() - 1);
    assert!(n.len() <= 8 && n.bytes().all(|b| b.is_ascii_digit()), "{t}");
    let n: u64 = n.parse().unwrap();
    match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => panic!("unit of {t}"),
    }
}

/// A POST carrying its own `Idempotency-Key`.
fn keyed_post(url: &str, key: &'static str) -> Request<Full<Bytes>> {
    let mut req = post(url, "order");
    req.headers_mut()
        .insert("idempotency-key", http::HeaderValue::from_static(key));
    req
}

#[tokio::test(start_paused = true)]
async fn a_keyed_409_with_retry_after_is_retried_after_the_hint() {
    bounded(LIMIT, async {
        // The server's "a request with this key is still in flight", then
        // the stored answer of the first request, replayed.
        let server = Scripted::new(vec![
            with_header(409, "retry-after", "1"),
            with_header(200, "idempotent-replayed", "true"),
        ]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, keyed_post(&server.url("/api"), "\"k-1\""))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
        // The hint's clamp: h + U(0, b_1), never sooner than asked.
        assert!(i.waited >= Duration::from_secs(1), "{i:?}");
        assert!(i.waited < Duration::from_secs(1) + STEP, "{i:?}");
        assert!(i.replayed, "{i:?}");
        let hits = server.hits();
        assert_eq!(
            hits[1].header("idempotency-key").as_deref(),
            Some("\"k-1\"")
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_409_with_retry_after_is_retried_when_the_layer_adds_the_key() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![with_header(409, "retry-after", "1")]);
        let layer = RetryLayer::new(stagger::http::Settings {
            idempotency_keys: true,
            ..fast_policy(3).into()
        });
        let mut svc = scripted(layer, &server);
        let resp = send(&mut svc, post(&server.url("/api"), "order"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!((i.attempts, i.replayed), (2, false));
        let keys: Vec<_> = server
            .hits()
            .iter()
            .map(|h| h.header("idempotency-key").unwrap())
            .collect();
        assert_eq!(keys[0], keys[1]);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_unkeyed_409_with_retry_after_is_not_retried() {
    bounded(LIMIT, async {
        // A PUT may be repeated, but without a key its 409 is a plain
        // conflict: no wait makes it clear.
        let server = Scripted::new(vec![with_header(409, "retry-after", "1")]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let req = Request::put(server.url("/api"))
            .body(Full::<Bytes>::default())
            .unwrap();
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::CONFLICT);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_keyed_409_without_a_hint_is_not_retried() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![status(409)]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, keyed_post(&server.url("/api"), "k-2"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CONFLICT);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_keyed_409_whose_hint_is_over_max_retry_after_stops_at_once() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![with_header(409, "retry-after", "120")]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        let resp = send(&mut svc, keyed_post(&server.url("/api"), "k-3"))
            .await
            .unwrap();
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::HintTooLong));
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_answer_without_the_replay_mark_is_not_reported_as_a_replay() {
    bounded(LIMIT, async {
        let server = Scripted::new(vec![
            with_header(200, "idempotent-replayed", "false"),
            status(200),
        ]);
        let mut svc = scripted(RetryLayer::new(fast_policy(3)), &server);
        for _ in 0..2 {
            let resp = send(&mut svc, keyed_post(&server.url("/api"), "k-4"))
                .await
                .unwrap();
            assert!(!info(&resp).replayed);
        }
    })
    .await;
}
