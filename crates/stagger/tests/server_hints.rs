//! The hints servers send today, through the tower client layer and at the
//! engine: `retry-after-ms` (the OpenAI and Anthropic APIs),
//! `x-ms-retry-after-ms` (Azure), `x-should-retry`, Envoy's
//! `x-envoy-overloaded` on a 503 it made itself, and `x-envoy-attempt-count`
//! read by the server layers as a retry marker.
//!
//! The client tests run under paused tokio time against a `service_fn` stub
//! that answers from a script, so every wait is virtual and exact.

use stagger::Backoff;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use stagger::export::Stats;
use stagger::guardrails::budget::{RatioBudget, RatioBudgetConfig};
use stagger::http::{Inbound, RetryInfo};
use stagger::limit::{Algorithm, Limiter};
use stagger::tower::{ReplayBody, RetryLayer, ShedLayer};
use stagger::{Call, Class, Decision, Failure, Hint, NotRetried, Policy, StopReason};
use tower::{Layer, Service, ServiceExt};

const MS: Duration = Duration::from_millis(1);
/// The first backoff step of `policy`: a hinted wait is `h + U(0, STEP)`.
const STEP: Duration = Duration::from_millis(20);

fn policy(attempts: u32) -> Policy {
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

/// One scripted answer: a status and its headers. Past the script's end
/// the stub answers 200.
type Answer = (u16, Vec<(&'static str, &'static str)>);

/// What the stub saw: how many requests came, and when (tokio's clock).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<tokio::time::Instant>>>);

impl Seen {
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn gap(&self) -> Duration {
        let t = self.0.lock().unwrap();
        t[1] - t[0]
    }
}

type Body = ReplayBody<Full<Bytes>>;

/// The retry layer over a stub answering `script` in order.
async fn call(
    layer: RetryLayer,
    script: Vec<Answer>,
    req: Request<Full<Bytes>>,
) -> (RetryInfo, Seen) {
    let seen = Seen::default();
    let log = seen.clone();
    let script = Arc::new(Mutex::new(script));
    let stub = tower::service_fn(move |_req: Request<Body>| {
        log.0.lock().unwrap().push(tokio::time::Instant::now());
        let next = {
            let mut s = script.lock().unwrap();
            (!s.is_empty()).then(|| s.remove(0))
        };
        async move {
            let mut resp = Response::new(());
            if let Some((status, headers)) = next {
                *resp.status_mut() = StatusCode::from_u16(status).unwrap();
                for (k, v) in headers {
                    resp.headers_mut().append(k, v.parse().unwrap());
                }
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let mut svc = layer.layer(stub);
    let resp = svc.ready().await.unwrap().call(req).await.unwrap();
    (*resp.extensions().get::<RetryInfo>().unwrap(), seen)
}

fn get() -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1/")
        .body(Full::default())
        .unwrap()
}

/// tokio's timer fires on whole milliseconds.
fn on_tick(d: Duration) -> Duration {
    Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64)
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_is_waited_at_least() {
    let script = vec![(429, vec![("retry-after-ms", "1500")])];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
    assert!(
        i.waited >= 1500 * MS && i.waited < 1500 * MS + STEP,
        "{i:?}"
    );
    assert_eq!(seen.gap(), on_tick(i.waited));
}

#[tokio::test(start_paused = true)]
async fn x_ms_retry_after_ms_is_waited_at_least() {
    let script = vec![(503, vec![("x-ms-retry-after-ms", "800")])];
    let (i, _) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
    assert!(i.waited >= 800 * MS && i.waited < 800 * MS + STEP, "{i:?}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_comes_before_azures_header_and_retry_after() {
    let script = vec![(
        503,
        vec![
            ("retry-after", "5"),
            ("x-ms-retry-after-ms", "2000"),
            ("retry-after-ms", "300"),
        ],
    )];
    let (i, _) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert!(i.waited >= 300 * MS && i.waited < 300 * MS + STEP, "{i:?}");
    let script = vec![(
        503,
        vec![("retry-after", "5"), ("x-ms-retry-after-ms", "2000")],
    )];
    let (i, _) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert!(
        i.waited >= 2000 * MS && i.waited < 2000 * MS + STEP,
        "{i:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_malformed_retry_after_ms_gives_way_to_retry_after_and_is_counted() {
    let stats = Arc::new(Stats::new());
    let p = Policy::builder()
        .backoff(Backoff {
            base: STEP,
            ..Backoff::new()
        })
        .observer(stats.clone())
        .build()
        .unwrap();
    let script = vec![(429, vec![("retry-after-ms", "soon"), ("retry-after", "1")])];
    let (i, _) = call(RetryLayer::new(p), script, get()).await;
    assert_eq!(i.attempts, 2);
    assert!(i.waited >= Duration::from_secs(1), "{i:?}");
    let s = stats.snapshot();
    assert_eq!((s.hints_invalid, s.hints_used), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn retry_after_ms_over_max_retry_after_stops_at_once() {
    let p = Policy::builder()
        .max_retry_after(Duration::from_secs(60))
        .build()
        .unwrap();
    let script = vec![(429, vec![("retry-after-ms", "120000")])];
    let (i, seen) = call(RetryLayer::new(p), script, get()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::HintTooLong));
    assert_eq!((seen.count(), i.waited), (1, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn x_ms_retry_after_ms_past_the_deadline_stops_at_once() {
    let layer = RetryLayer::new(stagger::http::Settings {
        policy: policy(3),
        timeout: Some(Duration::from_secs(2)),
        ..Default::default()
    });
    let script = vec![(503, vec![("x-ms-retry-after-ms", "5000")])];
    let (i, seen) = call(layer, script, get()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::Deadline));
    assert_eq!(seen.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_false_stops_a_503() {
    let script = vec![(503, vec![("x-should-retry", "false")])];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
    assert_eq!(i.not_retried, Some(NotRetried::ServerSaidNo));
    assert_eq!(seen.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_true_retries_a_409() {
    let script = vec![(409, vec![("x-should-retry", "true")])];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
    assert_eq!(seen.count(), 2);
    // Without the header a 409 is never retried.
    let (i, _) = call(RetryLayer::new(policy(3)), vec![(409, vec![])], get()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_true_does_not_lift_idempotency() {
    let post = Request::builder()
        .method(Method::POST)
        .uri("http://127.0.0.1/")
        .body(Full::new(Bytes::from_static(b"charge")))
        .unwrap();
    let script = vec![(409, vec![("x-should-retry", "true")])];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, post).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
    assert_eq!(i.not_retried, Some(NotRetried::NotIdempotent));
    assert_eq!(seen.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_true_does_not_lift_max_attempts() {
    let yes = || (409, vec![("x-should-retry", "true")]);
    let script = vec![yes(), yes(), yes(), yes()];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert_eq!((i.attempts, i.reason), (3, StopReason::AttemptsExhausted));
    assert_eq!(seen.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn x_should_retry_true_does_not_lift_the_budget() {
    let empty = RatioBudget::new(RatioBudgetConfig {
        ratio: 0.0,
        floor: 0,
        ..Default::default()
    })
    .unwrap();
    let p = Policy::builder().budget(empty).build().unwrap();
    let script = vec![(409, vec![("x-should-retry", "true")])];
    let (i, seen) = call(RetryLayer::new(p), script, get()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::Budget));
    assert_eq!(seen.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_503_from_an_overloaded_envoy_is_not_retried() {
    let script = vec![(
        503,
        vec![("x-envoy-overloaded", "true"), ("retry-after", "1")],
    )];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, get()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
    assert_eq!(i.not_retried, Some(NotRetried::Overloaded));
    assert_eq!(seen.count(), 1);
    // The same 503 from the service itself is retried.
    let (i, _) = call(RetryLayer::new(policy(3)), vec![(503, vec![])], get()).await;
    assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
}

// ---- the engine, without a front-end ----

#[test]
fn the_engine_retries_a_permanent_failure_only_when_the_server_says_so() {
    let p = policy(3);
    let now = Instant::now();
    let mut call = Call::seeded(1).idempotent(true);
    p.start_attempt(&mut call, now).unwrap();
    let mut yes = Failure::permanent();
    yes.should_retry = Some(true);
    assert!(matches!(
        p.decide(&mut call, yes, now),
        Decision::Retry { .. }
    ));
    // A "no" stops even a transient failure with a usable hint.
    let mut call = Call::seeded(1).idempotent(true);
    p.start_attempt(&mut call, now).unwrap();
    let mut no = Failure::transient().with_hint(Hint::RetryAfter(MS));
    no.should_retry = Some(false);
    assert_eq!(
        p.decide(&mut call, no, now),
        Decision::Stop(StopReason::NotRetryable)
    );
    assert_eq!(call.not_retried(), Some(NotRetried::ServerSaidNo));
    // A "yes" does not make an unknown result of an undeclared call safe
    // to repeat, nor a cancellation retryable.
    for mut f in [Failure::timeout(), Failure::new(Class::Cancelled)] {
        let mut call = Call::seeded(1);
        p.start_attempt(&mut call, now).unwrap();
        f.should_retry = Some(true);
        let d = p.decide(&mut call, f, now);
        assert!(matches!(d, Decision::Stop(_)), "{f:?}: {d:?}");
    }
}

#[test]
fn the_engine_never_retries_an_overloaded_proxys_answer() {
    let p = policy(3);
    let now = Instant::now();
    let mut call = Call::seeded(1).idempotent(true);
    p.start_attempt(&mut call, now).unwrap();
    let mut shed = Failure::transient();
    shed.overloaded = true;
    shed.should_retry = Some(true);
    assert_eq!(
        p.decide(&mut call, shed, now),
        Decision::Stop(StopReason::NotRetryable)
    );
    assert_eq!(call.not_retried(), Some(NotRetried::Overloaded));
}

#[test]
fn the_engine_counts_an_invalid_hint_that_another_replaced() {
    let stats = Arc::new(Stats::new());
    let p = Policy::builder().observer(stats.clone()).build().unwrap();
    let now = Instant::now();
    let mut call = Call::seeded(1);
    p.start_attempt(&mut call, now).unwrap();
    let mut f = Failure::transient().with_hint(Hint::RetryAfter(MS));
    f.invalid_hint = true;
    assert!(matches!(
        p.decide(&mut call, f, now),
        Decision::Retry { .. }
    ));
    let s = stats.snapshot();
    assert_eq!((s.hints_invalid, s.hints_used), (1, 1));
}

// ---- the server side: a mesh's retry marker ----

#[test]
fn an_envoy_attempt_count_above_one_is_an_inbound_retry() {
    let now = Instant::now();
    let mut h = http::HeaderMap::new();
    h.insert("x-envoy-attempt-count", "1".parse().unwrap());
    assert_eq!(Inbound::from_headers(&h, now).attempt(), 1);
    // Our own header says first attempt, the mesh retried it: a retry.
    h.insert("x-retry-attempt", "1".parse().unwrap());
    h.insert("x-envoy-attempt-count", "3".parse().unwrap());
    let inbound = Inbound::from_headers(&h, now);
    assert!(inbound.attempt() > 1);
    assert_eq!(inbound.attempt(), 3);
    h.insert("x-envoy-attempt-count", "many".parse().unwrap());
    assert_eq!(Inbound::from_headers(&h, now).attempt(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_shed_layer_sheds_a_mesh_retry_before_a_first_attempt() {
    let started = Arc::new(AtomicU32::new(0));
    let count = started.clone();
    let handler = tower::service_fn(move |_req: Request<()>| {
        count.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, Infallible>(Response::new(String::new()))
        }
    });
    // Limit 5, one place kept for first attempts.
    let limiter = Limiter::builder(Algorithm::Fixed(5))
        .reserve(0.2)
        .build()
        .unwrap();
    let svc = ShedLayer::limited(limiter.clone()).build().layer(handler);
    let mesh_retry = || {
        Request::get("/")
            .header("x-envoy-attempt-count", "2")
            .body(())
            .unwrap()
    };
    let mut running = Vec::new();
    for _ in 0..4 {
        running.push(tokio::spawn(svc.clone().oneshot(mesh_retry())));
    }
    tokio::time::sleep(MS).await;
    assert_eq!(limiter.in_flight(), 4);
    // The retries' share is full: a fifth mesh retry is shed…
    let r = svc.clone().oneshot(mesh_retry()).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    // …while a first attempt still gets the place kept for it.
    let first = Request::get("/")
        .header("x-envoy-attempt-count", "1")
        .body(())
        .unwrap();
    running.push(tokio::spawn(svc.clone().oneshot(first)));
    tokio::time::sleep(MS).await;
    assert_eq!(limiter.in_flight(), 5);
    assert_eq!(started.load(Ordering::SeqCst), 5);
    for r in running {
        assert_eq!(r.await.unwrap().unwrap().status(), StatusCode::OK);
    }
}

#[tokio::test(start_paused = true)]
async fn the_shed_layer_reports_each_request_it_turns_away_with_its_reason() {
    use stagger::export::ShedReason;
    use stagger::{Event, Observer};
    let seen: Arc<Mutex<Vec<ShedReason>>> = Arc::default();
    let sink = seen.clone();
    let observer: Arc<dyn Observer> = Arc::new(move |e: &Event| {
        if let Event::Shed { reason, .. } = e {
            sink.lock().unwrap().push(*reason);
        }
    });
    let handler = tower::service_fn(|_req: Request<()>| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<_, Infallible>(Response::new(String::new()))
    });
    // One at a time, no queue.
    let svc = ShedLayer::builder(1, 0)
        .observer(observer)
        .build()
        .layer(handler);
    let req = |headers: &[(&str, &str)]| {
        let mut b = Request::get("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    };
    let busy = tokio::spawn(svc.clone().oneshot(req(&[])));
    tokio::time::sleep(MS).await;
    for headers in [
        &[][..],
        &[("x-envoy-attempt-count", "2")][..],
        &[("x-request-timeout-ms", "0")][..],
    ] {
        let r = svc.clone().oneshot(req(headers)).await.unwrap();
        assert_ne!(r.status(), StatusCode::OK, "{headers:?}");
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ShedReason::FirstAttempt,
            ShedReason::Retry,
            ShedReason::Deadline
        ]
    );
    assert_eq!(busy.await.unwrap().unwrap().status(), StatusCode::OK);
}

/// `google.rpc.Status { code: 8, message: "busy", details: [RetryInfo {
/// retry_delay: 1.5 s }] }`, base64, as a Google API sends it in
/// `grpc-status-details-bin` (the library's unit tests check these are the
/// bytes prost encodes).
#[cfg(feature = "grpc")]
const RETRY_INFO_1500MS: &str =
    "CAgSBGJ1c3kaNgoodHlwZS5nb29nbGVhcGlzLmNvbS9nb29nbGUucnBjLlJldHJ5SW5mbxIKCggIARCAyrXuAQ==";

#[cfg(feature = "grpc")]
#[tokio::test(start_paused = true)]
async fn a_resource_exhausted_with_retry_info_is_retried_after_its_delay() {
    let grpc = || {
        Request::post("http://127.0.0.1/pkg.Svc/Call")
            .header("content-type", "application/grpc")
            .body(Full::default())
            .unwrap()
    };
    let exhausted = |details: &'static str| {
        let mut h = vec![("content-type", "application/grpc"), ("grpc-status", "8")];
        if !details.is_empty() {
            h.push(("grpc-status-details-bin", details));
        }
        (200, h)
    };
    let script = vec![exhausted(RETRY_INFO_1500MS)];
    let (i, seen) = call(RetryLayer::new(policy(3)), script, grpc()).await;
    assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
    assert!(
        i.waited >= 1500 * MS && i.waited < 1500 * MS + STEP,
        "{i:?}"
    );
    assert_eq!(seen.gap(), on_tick(i.waited));
    // Without the details, RESOURCE_EXHAUSTED has no hint: not retried.
    let (i, _) = call(RetryLayer::new(policy(3)), vec![exhausted("")], grpc()).await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
    // Past max_retry_after, the delay stops the call like any hint.
    let short = Policy::builder()
        .max_retry_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let (i, _) = call(
        RetryLayer::new(short),
        vec![exhausted(RETRY_INFO_1500MS)],
        grpc(),
    )
    .await;
    assert_eq!((i.attempts, i.reason), (1, StopReason::HintTooLong));
}
