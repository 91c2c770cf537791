//! The shed layer with a limiter, on tokio's paused clock: retries are shed
//! before first attempts with a jittered hint (HTTP and gRPC), work whose
//! caller has given up is dropped before it starts, and the limiter learns
//! late work as overload.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use stagger::limit::{Aimd, Algorithm, Limiter};
use stagger::tower::ShedLayer;
use tower::{Layer, ServiceExt};

type Svc = tower::util::BoxCloneService<Request<()>, Response<String>, Infallible>;

/// A handler that takes `work` and counts the requests it started.
fn handler(work: Duration, started: Arc<AtomicU32>) -> Svc {
    tower::util::BoxCloneService::new(tower::service_fn(move |_req: Request<()>| {
        started.fetch_add(1, Ordering::SeqCst);
        async move {
            tokio::time::sleep(work).await;
            Ok::<_, Infallible>(Response::new("done".to_string()))
        }
    }))
}

fn req(headers: &[(&str, &str)]) -> Request<()> {
    let mut b = Request::get("/");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_limited_layer_sheds_retries_first_and_says_when_to_come_back() {
    let started = Arc::new(AtomicU32::new(0));
    // Limit 5, one place kept for first attempts.
    let limiter = Limiter::builder(Algorithm::Fixed(5))
        .reserve(0.2)
        .build()
        .unwrap();
    let shed = ShedLayer::limited(limiter.clone())
        .retry_after(Duration::from_secs(1), Duration::from_secs(5))
        .build();
    let svc = shed.layer(handler(Duration::from_secs(10), started.clone()));
    // Four retries take the places retries may use.
    let mut running = Vec::new();
    for _ in 0..4 {
        let s = svc.clone();
        running.push(tokio::spawn(s.oneshot(req(&[("x-retry-attempt", "2")]))));
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(limiter.in_flight(), 4);
    // A fifth retry is shed at once, over HTTP and over gRPC, each with a
    // jittered hint.
    let mut afters = Vec::new();
    let mut pushbacks = Vec::new();
    for _ in 0..40 {
        let r = svc
            .clone()
            .oneshot(req(&[("x-retry-attempt", "3")]))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let secs: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=5).contains(&secs), "{secs}");
        afters.push(secs);
        let r = svc
            .clone()
            .oneshot(req(&[
                ("content-type", "application/grpc"),
                ("grpc-previous-rpc-attempts", "1"),
            ]))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "14");
        let ms: u64 = r.headers()["grpc-retry-pushback-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1000..=5000).contains(&ms), "{ms}");
        pushbacks.push(ms);
    }
    afters.sort_unstable();
    afters.dedup();
    pushbacks.sort_unstable();
    pushbacks.dedup();
    assert!(
        afters.len() > 1 && pushbacks.len() > 10,
        "jittered: {afters:?}"
    );
    // The reserved place goes to a first attempt; then first attempts are
    // shed too.
    let s = svc.clone();
    running.push(tokio::spawn(s.oneshot(req(&[]))));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(limiter.in_flight(), 5);
    let r = svc.clone().oneshot(req(&[])).await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    for r in running {
        assert_eq!(r.await.unwrap().unwrap().body(), "done");
    }
    let st = shed.stats();
    assert_eq!((st.admitted, st.shed_first, st.shed_retries), (5, 1, 80));
    assert_eq!(started.load(Ordering::SeqCst), 5);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn work_whose_caller_gave_up_is_dropped_before_it_starts() {
    // On arrival, with a limiter and with the queue.
    for shed in [
        ShedLayer::limited(Limiter::fixed(4)).build(),
        ShedLayer::builder(1, 4).build(),
    ] {
        let started = Arc::new(AtomicU32::new(0));
        let svc = shed.layer(handler(Duration::from_millis(300), started.clone()));
        let r = svc
            .clone()
            .oneshot(req(&[("x-request-timeout-ms", "0")]))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
        let r = svc
            .clone()
            .oneshot(req(&[
                ("content-type", "application/grpc"),
                ("grpc-timeout", "0m"),
            ]))
            .await
            .unwrap();
        assert_eq!(r.headers()["grpc-status"], "4");
        assert_eq!(started.load(Ordering::SeqCst), 0);
        assert_eq!(shed.stats().expired, 2);
    }
    // While queued: one place, the second caller gives up after 100 ms
    // while the first request runs for 300 ms.
    let started = Arc::new(AtomicU32::new(0));
    let shed = ShedLayer::builder(1, 4).build();
    let svc = shed.layer(handler(Duration::from_millis(300), started.clone()));
    let first = tokio::spawn(svc.clone().oneshot(req(&[])));
    tokio::time::sleep(Duration::from_millis(1)).await;
    let r = svc
        .clone()
        .oneshot(req(&[("x-request-timeout-ms", "100")]))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "the expired request never started"
    );
    assert_eq!((shed.stats().admitted, shed.stats().expired), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn the_limiter_learns_late_work_as_overload_and_a_hang_up_as_nothing() {
    let limiter = Limiter::builder(Aimd {
        initial: 10,
        backoff: 0.5,
        ..Aimd::new()
    })
    .build()
    .unwrap();
    let shed = ShedLayer::limited(limiter.clone()).build();
    let svc = shed.layer(handler(Duration::from_millis(200), Arc::default()));
    // The caller hangs up before its deadline: only the place comes back.
    let fut = svc
        .clone()
        .oneshot(req(&[("x-request-timeout-ms", "1000")]));
    let hung_up = tokio::time::timeout(Duration::from_millis(50), fut).await;
    assert!(hung_up.is_err());
    assert_eq!((limiter.in_flight(), limiter.limit()), (0, 10));
    // Answered after the caller's deadline: overload, the limit halves.
    let r = svc
        .clone()
        .oneshot(req(&[("x-request-timeout-ms", "100")]))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!((limiter.in_flight(), limiter.limit()), (0, 5));
    // In time: no cut (and with one of five in use, no growth either).
    svc.clone()
        .oneshot(req(&[("x-request-timeout-ms", "1000")]))
        .await
        .unwrap();
    assert_eq!(limiter.limit(), 5);
}
