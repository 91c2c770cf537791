//! Property tests: whatever a server puts in `Retry-After` or
//! `grpc-retry-pushback-ms`, the client never waits past its deadline nor
//! longer than `max_retry_after` (plus one backoff step of spread), and
//! never exceeds max attempts.

use stagger::Backoff;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use stagger::http::{response_failure, AttemptLog, RetryInfo};
use stagger::tower::RetryLayer;
use stagger::{Call, Decision, Policy};
use tower::{Layer, Service, ServiceExt};

const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);
const CAP: Duration = Duration::from_millis(400);
const DEADLINE: Duration = Duration::from_secs(30);
const ATTEMPTS: u32 = 5;

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(ATTEMPTS)
        .backoff(Backoff {
            base: Duration::from_millis(50),
            cap: CAP,
            ..Backoff::new()
        })
        .max_retry_after(MAX_RETRY_AFTER)
        .build()
        .unwrap()
}

/// Header values a server might send: delay-seconds of every size, dates
/// near and far in all three forms, signs, fractions and noise.
fn value() -> impl Strategy<Value = String> {
    let now = SystemTime::now();
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..120).prop_map(|n| n.to_string()),
        (-86_400i64..86_400).prop_map(move |s| {
            let t = if s >= 0 {
                now + Duration::from_secs(s as u64)
            } else {
                now - Duration::from_secs((-s) as u64)
            };
            httpdate::fmt_http_date(t)
        }),
        (0u64..4_000_000_000)
            .prop_map(|s| httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_secs(s))),
        (-1000i64..100_000).prop_map(|n| n.to_string()),
        "[ -~]{0,40}",
        "[0-9]{1,30}(\\.[0-9]{1,3})?",
    ]
}

fn headers(kind: u8, v: &str) -> Option<(StatusCode, HeaderMap)> {
    let value = HeaderValue::from_str(v).ok()?;
    let mut h = HeaderMap::new();
    let status = match kind % 3 {
        0 => {
            h.insert("retry-after", value);
            StatusCode::TOO_MANY_REQUESTS
        }
        1 => {
            h.insert("retry-after", value);
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => {
            h.insert("content-type", HeaderValue::from_static("application/grpc"));
            h.insert("grpc-status", HeaderValue::from_static("8"));
            h.insert("grpc-retry-pushback-ms", value);
            StatusCode::OK
        }
    };
    Some((status, h))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The path the layers take — headers, then `response_failure`, then
    /// `Policy::decide` — on a clock that really moves by every wait.
    #[test]
    fn no_header_value_waits_past_the_deadline_or_the_cap(kind: u8, v in value(), work_ms in 0u64..200) {
        let Some((status, h)) = headers(kind, &v) else { return Ok(()) };
        let policy = policy();
        let start = Instant::now();
        let deadline = start + DEADLINE;
        let mut call = Call::seeded(kind as u64).idempotent(true).deadline(deadline);
        let mut now = start;
        let mut wall = SystemTime::now();
        let mut attempts = 0;
        loop {
            policy.start_attempt(&mut call, now).unwrap();
            attempts += 1;
            now += Duration::from_millis(work_ms);
            wall += Duration::from_millis(work_ms);
            let failure = response_failure(status, &h, false, wall).unwrap();
            match policy.decide(&mut call, failure, now) {
                Decision::Retry { after } => {
                    prop_assert!(after <= MAX_RETRY_AFTER + CAP, "{v:?} waits {after:?}");
                    prop_assert!(now + after < deadline, "{v:?} sleeps past the deadline");
                    now += after;
                    wall += after;
                }
                Decision::Stop(_) => break,
            }
        }
        prop_assert!(attempts <= ATTEMPTS);
        prop_assert!(now <= deadline + Duration::from_millis(work_ms));
    }
}

/// The same through the tower layer, with tokio's clock paused so the waits
/// cost nothing: each wait the layer schedules is bounded.
#[test]
fn the_layer_bounds_every_wait_whatever_the_header() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    runner
        .run(&(any::<u8>(), value()), |(kind, v)| {
            let Some((status, h)) = headers(kind, &v) else {
                return Ok(());
            };
            let logs: Arc<Mutex<Vec<AttemptLog>>> = Arc::default();
            let sink = logs.clone();
            let layer = RetryLayer::new(stagger::http::Settings {
                policy: policy(),
                timeout: Some(DEADLINE),
                on_attempt: Some(std::sync::Arc::new(move |l| {
                    sink.lock().unwrap().push(l.clone())
                })),
                ..Default::default()
            });
            let svc = tower::service_fn(move |_req: Request<_>| {
                let mut resp = Response::new(());
                *resp.status_mut() = status;
                *resp.headers_mut() = h.clone();
                async move { Ok::<_, Infallible>(resp) }
            });
            let mut svc = layer.layer(svc);
            let info = rt.block_on(async {
                let req = Request::get("http://127.0.0.1/")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                let resp = svc.ready().await.unwrap().call(req).await.unwrap();
                *resp.extensions().get::<RetryInfo>().unwrap()
            });
            prop_assert!(info.attempts <= ATTEMPTS);
            prop_assert!(info.waited < DEADLINE, "{v:?}: waited {:?}", info.waited);
            for l in logs.lock().unwrap().iter() {
                if let Some(d) = l.delay {
                    prop_assert!(d <= MAX_RETRY_AFTER + CAP, "{v:?} waits {d:?}");
                }
                if let Some(h) = l.hint {
                    if l.delay.is_some() {
                        prop_assert!(h <= MAX_RETRY_AFTER);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}
