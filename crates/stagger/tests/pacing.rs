//! The adaptive limiter as a guardrail: every driver waits its pacing
//! before an attempt (first attempts included), a wait that would pass the
//! deadline stops the call as `throttled`, and the one fact reader tells it
//! every throttle. The blocking executor runs on a manual clock; the tower
//! layer under paused tokio time, so every wait is virtual and exact.

use std::cell::RefCell;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use stagger::guardrails::AdaptiveLimiter;
use stagger::time::ManualClock;
use stagger::tower::RetryLayer;
use stagger::{Backoff, Call, Jitter, Policy, RetryExt, StopReason};
use tower::{Layer, Service, ServiceExt};

const S: Duration = Duration::from_secs(1);

/// A limiter that has seen one throttle at the clock's start: it fills at
/// 0.5 tokens a second from an empty bucket, so the next token is 2 s away.
fn throttled_once(clock: &ManualClock) -> AdaptiveLimiter {
    let limiter = AdaptiveLimiter::new(stagger::time::Clock::now(clock));
    limiter.record(true, stagger::time::Clock::now(clock));
    limiter
}

fn paced(limiter: &AdaptiveLimiter, attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff {
            base: Duration::from_millis(10),
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .pacing(limiter.clone())
        .build()
        .unwrap()
}

#[test]
fn a_first_attempt_waits_for_its_token() {
    let clock = ManualClock::new();
    let limiter = throttled_once(&clock);
    let policy = paced(&limiter, 1);
    let slept = RefCell::new(vec![]);
    let value = (|| Ok::<_, &str>(7))
        .retry(&policy)
        .clock(clock.clone())
        .sleep(|d| {
            slept.borrow_mut().push(d);
            clock.advance(d)
        })
        .call()
        .unwrap();
    assert_eq!(value, 7);
    assert_eq!(*slept.borrow(), [2 * S]);
}

#[test]
fn a_wait_past_the_deadline_stops_the_call_as_throttled_before_any_attempt() {
    let clock = ManualClock::new();
    let limiter = throttled_once(&clock);
    let policy = paced(&limiter, 3);
    let ran = RefCell::new(0);
    let slept = RefCell::new(vec![]);
    let err = (|| {
        *ran.borrow_mut() += 1;
        Ok::<_, &str>(7)
    })
    .retry(&policy)
    .clock(clock.clone())
    .timeout(Duration::from_millis(500))
    .sleep(|d| {
        slept.borrow_mut().push(d);
        clock.advance(d)
    })
    .call()
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::Throttled);
    assert_eq!(err.attempts(), 0);
    assert_eq!(err.retry_in(), Some(2 * S));
    assert_eq!(*ran.borrow(), 0);
    assert!(slept.borrow().is_empty(), "{:?}", slept.borrow());
}

// A sleeper that returns at once (a test's, or one woken early) is taken
// at its word: the attempt goes after one wait, not after a spin of waits
// for an instant the clock never reaches.
#[test]
fn a_sleeper_that_returns_at_once_is_taken_at_its_word() {
    let clock = ManualClock::new();
    let limiter = throttled_once(&clock);
    let policy = paced(&limiter, 1);
    let slept = RefCell::new(vec![]);
    let value = (|| Ok::<_, &str>(7))
        .retry(&policy)
        .clock(clock.clone())
        .sleep(|d| {
            slept.borrow_mut().push(d);
            assert!(slept.borrow().len() < 10, "waits again and again");
        })
        .call()
        .unwrap();
    assert_eq!(value, 7);
    assert_eq!(*slept.borrow(), [2 * S]);
}

#[test]
fn the_manual_protocol_is_refused_with_the_wait() {
    let clock = ManualClock::new();
    let limiter = throttled_once(&clock);
    let policy = paced(&limiter, 3);
    let mut call = Call::new();
    let t0 = stagger::time::Clock::now(&clock);
    assert_eq!(
        policy.start_attempt(&mut call, t0),
        Err(StopReason::Throttled)
    );
    assert_eq!(call.retry_in(), Some(2 * S));
    let mut call = Call::new();
    assert!(policy.start_attempt(&mut call, t0 + 2 * S).is_ok());
}

/// Answers request N with `plan[N-1]` (the last once spent) after 1 ms.
#[derive(Clone)]
struct Upstream {
    plan: &'static [u16],
    seen: Arc<Mutex<Vec<tokio::time::Instant>>>,
}

impl<B> Service<Request<B>> for Upstream {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(tokio::time::Instant::now());
            seen.len()
        };
        let status = self.plan[(n - 1).min(self.plan.len() - 1)];
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let mut resp = Response::new(String::new());
            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
            Ok(resp)
        })
    }
}

fn get() -> Request<Full<Bytes>> {
    Request::get("http://example.invalid/")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn send<S>(client: &mut S) -> Response<String>
where
    S: Service<Request<Full<Bytes>>, Response = Response<String>, Error = stagger::tower::Error>,
{
    client.ready().await.unwrap().call(get()).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_tower_layer_paces_its_retry_after_a_429_and_the_next_call_too() {
    let limiter = AdaptiveLimiter::new(tokio::time::Instant::now().into_std());
    let upstream = Upstream {
        plan: &[429, 200],
        seen: Arc::default(),
    };
    let mut client = RetryLayer::new(paced(&limiter, 3)).layer(upstream.clone());
    let t0 = tokio::time::Instant::now();
    let resp = send(&mut client).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(limiter.snapshot().enabled, "the 429 was a throttle");
    let seen = upstream.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    // Not the 10 ms backoff: the token 2 s after the throttle.
    let gap = seen[1] - seen[0];
    assert!(gap >= Duration::from_millis(1990), "{gap:?}");
    // The next call's first attempt waits for its own token.
    let before = tokio::time::Instant::now();
    send(&mut client).await;
    let third = upstream.seen.lock().unwrap()[2];
    assert!(
        third - before >= Duration::from_millis(500),
        "{:?}",
        third - before
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn a_503_is_no_throttle_and_paces_nothing() {
    let limiter = AdaptiveLimiter::new(tokio::time::Instant::now().into_std());
    let upstream = Upstream {
        plan: &[503, 200],
        seen: Arc::default(),
    };
    let mut client = RetryLayer::new(paced(&limiter, 3)).layer(upstream.clone());
    let resp = send(&mut client).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(!limiter.snapshot().enabled);
    let seen = upstream.seen.lock().unwrap().clone();
    assert_eq!(
        seen[1] - seen[0],
        Duration::from_millis(11),
        "1 ms answer + 10 ms backoff"
    );
}

// A gRPC channel's limiter hears RESOURCE_EXHAUSTED as a throttle and
// paces the retry it allows (A6 lists 8 here), as the tower layer does a 429.
#[cfg(feature = "grpc")]
#[tokio::test(start_paused = true)]
async fn the_grpc_layer_paces_after_resource_exhausted() {
    use crate::grpc_scripted::{a6, call, request, Scripted, Step};
    let limiter = AdaptiveLimiter::new(tokio::time::Instant::now().into_std());
    let layer = stagger::tower::grpc::RetryLayer::builder()
        .default_policy(a6(3, &[8]))
        .pacing(limiter.clone())
        .build()
        .unwrap();
    let svc = Scripted::new([Step::TrailersOnly(8, &[])], Step::SlowOk(Duration::ZERO));
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(report.get().attempts, 2);
    assert!(limiter.snapshot().enabled);
    let gaps = svc.gaps_ms();
    assert!(gaps[0] >= 1990, "the token, not the backoff: {gaps:?}");
}
