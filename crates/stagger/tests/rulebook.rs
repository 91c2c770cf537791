//! One rulebook: the engine decides from facts the front-ends report. Each
//! test is named for a behaviour that was wrong while the HTTP driver kept
//! its own copy of the rules; all of them run in one process under paused
//! tokio time, so every wait is exact and nothing sleeps for real.

use stagger::Backoff;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use stagger::exec::Attempt;
use stagger::export::Stats;
use stagger::guardrails::budget::{Budget, TokenBucket};
use stagger::http::{Inbound, RetryInfo};
use stagger::tower::{DeadlineLayer, ReplayBody, RetryLayer, ShedLayer};
use stagger::{
    Call, Decision, Event, Failure, Hint, Idempotency, NotRetried, Observer, Policy,
    RetryAttemptExt, RetryExt, StopReason,
};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Body = ReplayBody<Full<Bytes>>;

fn policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(40),
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

fn grpc_request() -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1/shop.Cart/Add")
        .header("content-type", "application/grpc")
        .body(Full::default())
        .unwrap()
}

/// A trailers-only gRPC answer with `grpc-status: code` and extra headers.
fn grpc_answer(code: &str, extra: &[(&'static str, &str)]) -> Response<()> {
    let mut resp = Response::new(());
    let h = resp.headers_mut();
    h.insert("content-type", "application/grpc".parse().unwrap());
    h.insert("grpc-status", code.parse().unwrap());
    for (k, v) in extra {
        h.insert(*k, v.parse().unwrap());
    }
    resp
}

/// A service answering from a script (then OK), recording when each request
/// arrived in virtual time.
#[derive(Clone)]
struct Scripted {
    script: Arc<Mutex<Vec<Response<()>>>>,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl Scripted {
    fn new(script: Vec<Response<()>>) -> Self {
        Scripted {
            script: Arc::new(Mutex::new(script)),
            arrivals: Arc::default(),
        }
    }

    fn arrivals(&self) -> Vec<Instant> {
        self.arrivals.lock().unwrap().clone()
    }
}

impl Service<Request<Body>> for Scripted {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<()>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        self.arrivals.lock().unwrap().push(Instant::now());
        let mut s = self.script.lock().unwrap();
        let resp = if s.is_empty() {
            grpc_answer("0", &[])
        } else {
            s.remove(0)
        };
        std::future::ready(Ok(resp))
    }
}

fn info<B>(resp: &Response<B>) -> RetryInfo {
    *resp.extensions().get::<RetryInfo>().expect("RetryInfo")
}

#[tokio::test(start_paused = true)]
async fn grpc_unavailable_is_retried_although_every_grpc_call_is_a_post() {
    let server = Scripted::new(vec![grpc_answer("14", &[]), grpc_answer("14", &[])]);
    let mut svc = RetryLayer::new(policy(3)).layer(server.clone());
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(grpc_request())
        .await
        .unwrap();
    assert_eq!(resp.headers()["grpc-status"], "0");
    assert_eq!(info(&resp).attempts, 3);
    assert_eq!(server.arrivals().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn codes_listed_by_an_imported_service_config_are_retried() {
    let json = r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],
        "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s",
        "backoffMultiplier":2,"retryableStatusCodes":["INTERNAL","DEADLINE_EXCEEDED"]}}]}"#;
    let config = stagger::config::ServiceConfig::from_json(json).unwrap();
    let settings = config.settings("shop.Cart", "Add").unwrap().unwrap();
    // No per-call idempotency override: the method's policy is the contract.
    let server = Scripted::new(vec![grpc_answer("13", &[]), grpc_answer("4", &[])]);
    let mut svc = RetryLayer::new(settings).layer(server.clone());
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(grpc_request())
        .await
        .unwrap();
    assert_eq!(resp.headers()["grpc-status"], "0");
    assert_eq!(info(&resp).attempts, 3);
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_with_pushback_750_waits_exactly_750ms() {
    let server = Scripted::new(vec![grpc_answer("8", &[("grpc-retry-pushback-ms", "750")])]);
    let mut svc = RetryLayer::new(policy(3)).layer(server.clone());
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(grpc_request())
        .await
        .unwrap();
    assert_eq!(resp.headers()["grpc-status"], "0");
    assert_eq!(info(&resp).attempts, 2);
    let at = server.arrivals();
    assert_eq!(at[1] - at[0], Duration::from_millis(750));
    // Without pushback RESOURCE_EXHAUSTED is not retried.
    let server = Scripted::new(vec![grpc_answer("8", &[])]);
    let mut svc = RetryLayer::new(policy(3)).layer(server.clone());
    let resp = svc
        .ready()
        .await
        .unwrap()
        .call(grpc_request())
        .await
        .unwrap();
    assert_eq!(info(&resp).attempts, 1);
    assert_eq!(info(&resp).reason, StopReason::NotRetryable);
}

/// A gRPC service that relays each call through its own retrying client to
/// `next` and answers with the status it got (a fresh answer: nothing of
/// the downstream's headers but the status is passed on, as a real server
/// would build its own response).
fn relay<S>(
    next: S,
) -> impl Service<Request<Body>, Response = Response<()>, Error = Infallible, Future = impl Send>
       + Clone
       + Send
       + 'static
where
    S: Service<Request<Body>, Response = Response<()>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let client = RetryLayer::new(policy(4)).layer(next);
    DeadlineLayer::new().layer(tower::service_fn(move |_req: Request<Body>| {
        let mut client = client.clone();
        async move {
            let code = match client.ready().await {
                Ok(c) => match c.call(grpc_request()).await {
                    Ok(resp) => resp.headers()["grpc-status"].to_str().unwrap().to_string(),
                    Err(_) => "14".to_string(),
                },
                Err(_) => "14".to_string(),
            };
            Ok::<_, Infallible>(grpc_answer(&code, &[]))
        }
    }))
}

#[tokio::test(start_paused = true)]
async fn three_chained_grpc_services_put_four_attempts_on_the_failing_one() {
    let hits = Arc::new(AtomicU32::new(0));
    let h = Arc::clone(&hits);
    let bottom = tower::service_fn(move |_req: Request<Body>| {
        h.fetch_add(1, SeqCst);
        async { Ok::<_, Infallible>(grpc_answer("14", &[])) }
    });
    // client → A → B → bottom, 4 attempts per layer.
    let b = relay(bottom);
    let a = relay(b);
    let mut client = RetryLayer::new(policy(4)).layer(a);
    let resp = client
        .ready()
        .await
        .unwrap()
        .call(grpc_request())
        .await
        .unwrap();
    assert_eq!(resp.headers()["grpc-status"], "14");
    assert_eq!(hits.load(SeqCst), 4, "attempts at the failing service");
    // A layer that gave up marked its gRPC failure with pushback -1, so every
    // layer above failed fast: 4 attempts at the bottom, not 7 (or 64).
    assert_eq!(resp.headers()["grpc-retry-pushback-ms"], "-1");
    assert_eq!(info(&resp).attempts, 1);
    assert_eq!(info(&resp).not_retried, Some(NotRetried::ServerSaidNo));
}

#[tokio::test(start_paused = true)]
async fn the_shed_layer_recognises_a_grpc_retry() {
    let (release, hold) = tokio::sync::watch::channel(false);
    let handler = tower::service_fn(move |_req: Request<()>| {
        let mut hold = hold.clone();
        async move {
            let _ = hold.wait_for(|v| *v).await;
            Ok::<_, Infallible>(grpc_answer("0", &[]))
        }
    });
    // One at a time, two first attempts may wait, retries may not wait.
    let shed = ShedLayer::builder(1, 2).retry_queue(0).build();
    let svc = shed.layer(handler);
    let busy = tokio::spawn(
        svc.clone().oneshot(
            Request::post("/")
                .header("content-type", "application/grpc")
                .body(())
                .unwrap(),
        ),
    );
    tokio::task::yield_now().await;
    let retry = Request::post("/")
        .header("content-type", "application/grpc")
        .header("grpc-previous-rpc-attempts", "1")
        .body(())
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(1), svc.clone().oneshot(retry))
        .await
        .expect("a gRPC retry is shed at once, not queued as a first attempt")
        .unwrap();
    assert_eq!(resp.headers()["grpc-status"], "14");
    let pushback: u64 = resp.headers()["grpc-retry-pushback-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(pushback > 0);
    assert_eq!(shed.stats().shed_retries, 1);
    release.send(true).unwrap();
    busy.await.unwrap().unwrap();
}

#[test]
fn time_slept_saturates_instead_of_wrapping() {
    let stats = Stats::new();
    let near_half = Duration::from_nanos(1 << 63);
    for attempt in 1..=2 {
        stats.on_event(&Event::RetryScheduled {
            attempt,
            delay: near_half,
            cause: stagger::Class::Transient,
            elapsed: Duration::ZERO,
        });
    }
    assert_eq!(stats.snapshot().slept, Duration::from_nanos(u64::MAX));
}

#[test]
fn a_request_timeout_with_leading_zeros_is_a_deadline() {
    let mut h = http::HeaderMap::new();
    h.insert("x-request-timeout-ms", "0000000000250".parse().unwrap());
    let now = std::time::Instant::now();
    let inbound = Inbound::from_headers(&h, now);
    assert_eq!(inbound.deadline(), Some(now + Duration::from_millis(250)));
}

#[test]
fn the_token_bucket_charges_a_pushback_that_says_do_not_retry() {
    let bucket = TokenBucket::default();
    let full = bucket.tokens_milli();
    let now = std::time::Instant::now();
    // INTERNAL is not retryable, but the server's "do not retry" still
    // counts as a failure for throttling (gRPC A6).
    bucket.on_failure(&Failure::permanent().with_hint(Hint::DoNotRetry), now);
    assert_eq!(bucket.tokens_milli(), full - 1000);
    // A plain permanent failure says nothing about the server's load.
    bucket.on_failure(&Failure::permanent(), now);
    assert_eq!(bucket.tokens_milli(), full - 1000);
}

#[test]
fn the_blocking_executor_hands_over_the_attempt_timeout_or_refuses_it() {
    let policy = Policy::builder()
        .attempt_timeout(Duration::from_millis(300))
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let mut seen = Vec::new();
    let report = (|a: &Attempt| {
        seen.push((a.number, a.timeout));
        if a.number < 2 {
            Err("busy")
        } else {
            Ok(())
        }
    })
    .retry_with_attempt(&policy)
    .sleep(|_| {})
    .report();
    assert_eq!(report.reason, StopReason::Success);
    let t = Some(Duration::from_millis(300));
    assert_eq!(seen, vec![(1, t), (2, t)]);
    // A closure that cannot see the timeout is refused, never run.
    let mut ran = false;
    let err = (|| {
        ran = true;
        Ok::<_, &str>(())
    })
    .retry(&policy)
    .call()
    .unwrap_err();
    assert_eq!(err.refused().map(|c| c.field()), Some("attempt_timeout"));
    assert_eq!(err.attempts(), 0);
    assert!(!ran);
    assert!(err.to_string().contains("attempt_timeout"), "{err}");
}

#[test]
fn a_request_that_was_never_sent_is_retried_whatever_its_idempotency() {
    let policy = policy(3);
    let now = std::time::Instant::now();
    let post = || Call::seeded(7).idempotency(Idempotency::NotIdempotent);
    // A 503 to a POST without a key: it reached the server, not repeated.
    let mut call = post();
    policy.start_attempt(&mut call, now).unwrap();
    assert_eq!(
        policy.decide(&mut call, Failure::transient(), now),
        Decision::Stop(StopReason::NotRetryable)
    );
    assert_eq!(call.not_retried(), Some(NotRetried::NotIdempotent));
    // A refused connection never left: the engine is told so and retries.
    let mut call = post();
    policy.start_attempt(&mut call, now).unwrap();
    let refused = Failure::transient().not_sent();
    assert!(matches!(
        policy.decide(&mut call, refused, now),
        Decision::Retry { .. }
    ));
    // Even a timeout (result unknown) may be retried when it was not sent.
    let mut call = post();
    policy.start_attempt(&mut call, now).unwrap();
    assert!(matches!(
        policy.decide(&mut call, Failure::timeout().not_sent(), now),
        Decision::Retry { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_post_is_retried_through_the_layer_after_a_refused_connection() {
    let calls = Arc::new(AtomicU32::new(0));
    let c = Arc::clone(&calls);
    let svc = tower::service_fn(move |_req: Request<Body>| {
        let n = c.fetch_add(1, SeqCst);
        async move {
            if n == 0 {
                Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
            } else {
                Ok(Response::new(()))
            }
        }
    });
    let mut svc = RetryLayer::new(policy(3)).layer(svc);
    let req = Request::post("http://127.0.0.1/orders")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    let resp = svc.ready().await.unwrap().call(req).await.unwrap();
    assert_eq!(info(&resp).attempts, 2);
    assert_eq!(calls.load(SeqCst), 2);
}

#[test]
fn when_the_deadline_ends_an_attempt_the_reason_is_deadline_whatever_the_class() {
    let policy = policy(3);
    let start = std::time::Instant::now();
    let deadline = start + Duration::from_millis(100);
    // A POST without a key whose attempt timed out at the deadline: the
    // deadline, not its idempotency, is why it stops.
    let mut call = Call::seeded(3)
        .idempotency(Idempotency::NotIdempotent)
        .deadline(deadline);
    policy.start_attempt(&mut call, start).unwrap();
    assert_eq!(
        policy.decide(&mut call, Failure::timeout(), deadline),
        Decision::Stop(StopReason::Deadline)
    );
}

#[tokio::test(start_paused = true)]
async fn work_whose_caller_has_no_time_left_is_dropped_unstarted() {
    let started = Arc::new(AtomicU32::new(0));
    let s = Arc::clone(&started);
    let handler = tower::service_fn(move |_req: Request<()>| {
        s.fetch_add(1, SeqCst);
        async { Ok::<_, Infallible>(Response::new(())) }
    });
    let svc = DeadlineLayer::new().layer(handler);
    let expired = Request::get("/")
        .header("x-request-timeout-ms", "0")
        .body(())
        .unwrap();
    let resp = svc.clone().oneshot(expired).await.unwrap();
    assert_eq!(resp.status(), 504);
    assert_eq!(started.load(SeqCst), 0, "the handler never ran");
    let live = Request::get("/")
        .header("x-request-timeout-ms", "100")
        .body(())
        .unwrap();
    assert_eq!(svc.oneshot(live).await.unwrap().status(), 200);
    assert_eq!(started.load(SeqCst), 1);
}
