//! One attempt loop per call, whatever stacks it: regressions of the
//! layers a user could stack (a retry layer over a hedging one multiplied
//! attempts and restarted `x-retry-attempt`), and of the hedgers' reports
//! (hooks never called, waits never counted, the one-layer mark never set).
//! Every test runs under paused tokio time: each wait is virtual and exact.

use crate::grpc_scripted;

use stagger::Backoff;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use grpc_scripted::{request, Scripted, Step};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::Full;
use stagger::grpc::MethodPolicy;
use stagger::hedging::HedgePolicyConfig;
use stagger::hedging::HedgeStep;
use stagger::http::{Inbound, RetryInfo};
use stagger::tower::grpc::CallReport;
use stagger::tower::{Error, RetryLayer};
use stagger::{Call, Class, HedgeDelay, HedgePolicy, Idempotency, Policy, StopReason};
use tower::{Layer, Service, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One scripted answer: after this many ms, this status, these headers.
type Answer = (u64, u16, &'static [(&'static str, &'static str)]);

/// Answers attempt N with `plan[N-1]` (the last entry once the plan is
/// spent) after its delay, for requests of any body type, and records every
/// request's headers.
#[derive(Clone)]
struct Upstream {
    plan: &'static [Answer],
    seen: Arc<Mutex<Vec<HeaderMap>>>,
}

impl Upstream {
    fn new(plan: &'static [Answer]) -> Self {
        Upstream {
            plan,
            seen: Arc::default(),
        }
    }

    fn attempts(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|h| {
                h.get("x-retry-attempt")
                    .map_or("-".into(), |v| v.to_str().unwrap().to_owned())
            })
            .collect()
    }

    fn count(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

impl<B> Service<Request<B>> for Upstream {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<String>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(req.headers().clone());
            seen.len()
        };
        let (delay, status, headers) = self.plan[(n - 1).min(self.plan.len() - 1)];
        Box::pin(async move {
            tokio::time::sleep(ms(delay)).await;
            let mut resp = Response::new(n.to_string());
            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
            for (k, v) in headers {
                resp.headers_mut().insert(*k, v.parse().unwrap());
            }
            Ok(resp)
        })
    }
}

fn get() -> Request<Full<Bytes>> {
    Request::builder()
        .method(Method::GET)
        .uri("http://example.invalid/")
        .body(Full::new(Bytes::from_static(b"payload")))
        .unwrap()
}

fn retries(n: u32) -> Policy {
    Policy::builder()
        .max_attempts(n)
        .backoff(Backoff {
            base: ms(10),
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

fn hedging(k: u32, delay: u64) -> HedgePolicy {
    HedgePolicy::new(HedgePolicyConfig {
        max_attempts: k,
        delay: HedgeDelay::Fixed(ms(delay)),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap()
}

async fn send<S>(client: &mut S, req: Request<Full<Bytes>>) -> Result<Response<String>, Error>
where
    S: Service<Request<Full<Bytes>>, Response = Response<String>, Error = Error>,
{
    client.ready().await?.call(req).await
}

const DOWN: &[Answer] = &[(1, 503, &[])];

#[tokio::test(start_paused = true)]
async fn two_stacked_retry_layers_send_three_requests_for_a_policy_of_three() {
    let upstream = Upstream::new(DOWN);
    let inner = RetryLayer::new(retries(3)).layer(upstream.clone());
    let mut client = RetryLayer::new(retries(3)).layer(inner);
    let resp = send(&mut client, get()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(upstream.count(), 3, "3 × 3 before: 9 requests");
    assert_eq!(upstream.attempts(), ["1", "2", "3"]);
    let info = resp.extensions().get::<RetryInfo>().unwrap();
    assert_eq!(
        (info.attempts, info.reason),
        (3, StopReason::AttemptsExhausted)
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_layer_over_a_hedging_layer_numbers_every_attempt_once() {
    // The stack the issue measured: a policy of 3 over a hedging layer sent
    // 6 requests numbered 1,2,1,2,1,2.
    let upstream = Upstream::new(DOWN);
    let inner = RetryLayer::new(hedging(2, 20)).layer(upstream.clone());
    let mut client = RetryLayer::new(retries(3)).layer(inner);
    send(&mut client, get()).await.unwrap();
    assert_eq!(upstream.attempts(), ["1", "2", "3"]);

    // And the other order.
    let upstream = Upstream::new(DOWN);
    let inner = RetryLayer::new(retries(3)).layer(upstream.clone());
    let mut client = RetryLayer::new(hedging(2, 20)).layer(inner);
    send(&mut client, get()).await.unwrap();
    assert_eq!(upstream.attempts(), ["1", "2"]);
}

#[tokio::test(start_paused = true)]
async fn a_hedged_success_reports_every_request_that_went_out() {
    // Attempt 1 stalls; the hedge sent 20 ms later wins at once.
    const PLAN: &[Answer] = &[(1_000, 200, &[]), (1, 200, &[])];
    let upstream = Upstream::new(PLAN);
    let inner = RetryLayer::new(retries(3)).layer(upstream.clone());
    let mut client = RetryLayer::new(hedging(2, 20)).layer(inner);
    let resp = send(&mut client, get()).await.unwrap();
    assert_eq!(resp.body(), "2");
    assert_eq!(upstream.count(), 2);
    let info = resp.extensions().get::<RetryInfo>().unwrap();
    assert_eq!((info.attempts, info.reason), (2, StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn a_hedgers_report_counts_the_retry_after_it_waited() {
    const PLAN: &[Answer] = &[(1, 503, &[("retry-after", "2")]), (1, 200, &[])];
    let upstream = Upstream::new(PLAN);
    let mut client = RetryLayer::new(hedging(2, 1_000)).layer(upstream.clone());
    let resp = send(&mut client, get()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let info = resp.extensions().get::<RetryInfo>().unwrap();
    assert!(
        info.waited >= Duration::from_secs(2),
        "waited {:?}, the server asked for 2 s",
        info.waited
    );
}

#[test]
fn a_call_that_can_never_hedge_waits_its_backoff() {
    let retry = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: ms(100),
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let hedging = HedgePolicy::new(HedgePolicyConfig {
        max_attempts: 3,
        delay: HedgeDelay::Fixed(ms(10)),
        policy: Some(retry),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap();
    let t0 = Instant::now();
    for call in [
        Call::seeded(3).idempotency(Idempotency::Unspecified),
        Call::seeded(3).idempotent(true).serving_retry(false),
    ] {
        let hedgeable = hedging.can_hedge(&call);
        let mut h = hedging.call(call);
        assert!(matches!(
            hedging.poll(&mut h, t0),
            HedgeStep::Send { attempt: 1, .. }
        ));
        hedging.report(&mut h, 1, Class::Transient, t0);
        match hedging.poll(&mut h, t0) {
            HedgeStep::Send { attempt: 2, .. } => {
                assert!(hedgeable, "a call that cannot hedge went again at once")
            }
            HedgeStep::WaitUntil(at) => {
                assert!(!hedgeable, "a hedged call waits for no backoff");
                assert!(at > t0, "the backoff is a real wait");
                assert_eq!(h.waited(), at - t0);
            }
            other => panic!("unexpected step {other:?}"),
        }
    }
}

fn grpc_hedging(k: u32) -> stagger::tower::grpc::RetryLayerBuilder {
    stagger::tower::grpc::RetryLayer::builder()
        .default_policy(MethodPolicy::hedging(k, ms(50), [14]).unwrap())
}

async fn grpc_call(layer: &stagger::tower::grpc::RetryLayer, svc: &Scripted) -> CallReport {
    grpc_scripted::call(layer, svc, request(b"x")).await.1
}

#[tokio::test(start_paused = true)]
async fn a_hedged_grpc_call_calls_on_attempt_after_every_attempt() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let layer = grpc_hedging(3)
        .on_attempt(move |r| log.lock().unwrap().push((r.attempt, r.status, r.stop)))
        .build()
        .unwrap();
    let svc = Scripted::new(
        [Step::Late(ms(10), 14, &[]), Step::Late(ms(10), 14, &[])],
        Step::TrailersOnly(14, &[]),
    );
    let report = grpc_call(&layer, &svc).await;
    assert_eq!(report.get().attempts, 3);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "one record per attempt: {seen:?}");
    assert!(seen.iter().all(|(_, status, _)| *status == Some(14)));
    assert_eq!(
        seen.last().unwrap().2,
        Some(StopReason::AttemptsExhausted),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedged_grpc_call_that_gives_up_marks_the_inbound_request() {
    let layer = grpc_hedging(2).build().unwrap();
    let svc = Scripted::new([], Step::TrailersOnly(14, &[]));
    let inbound = Inbound::new(1, None);
    let report = inbound.clone().scope(grpc_call(&layer, &svc)).await;
    assert_eq!(report.get().attempts, 2);
    assert!(
        inbound.downstream_gave_up(),
        "a hedged call that exhausted its attempts must tell the layers above"
    );
}
