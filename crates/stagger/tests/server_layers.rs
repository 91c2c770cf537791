//! The server layers in an axum router: the deadline layer cuts work off
//! at the caller's deadline; the shed layer turns retries away before first
//! attempts and answers 503 with a jittered Retry-After.
//!
//! What these layers decide depends on time (a deadline, work that takes
//! 600 ms, a request sent while another is being served), so the router is
//! called in process under tokio's paused clock: every wait below is exact
//! and none depends on how busy the machine is. The layers read tokio's
//! clock, so they see the same virtual time. A socket would add nothing
//! the layers look at.

use crate::common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use axum::routing::get;
use axum::Router;
use common::bounded;
use http_body_util::BodyExt;
use stagger::tower::{DeadlineLayer, ShedLayer};
use tokio::time::Instant;
use tower::ServiceExt;

const LIMIT: Duration = Duration::from_secs(20);

/// How long the handler works.
const WORK: Duration = Duration::from_millis(600);

async fn slow() -> &'static str {
    tokio::time::sleep(WORK).await;
    "done"
}

/// A GET of `/` with these headers, answered by `app`.
async fn get_with(app: &Router, headers: &[(&str, &str)]) -> Response<Body> {
    let mut req = Request::get("/");
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    app.clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

/// The same, as a task of its own (a request in flight beside the test).
fn spawn_get(app: &Router, headers: &'static [(&'static str, &'static str)]) -> Call {
    let app = app.clone();
    tokio::spawn(async move { get_with(&app, headers).await.status().as_u16() })
}

type Call = tokio::task::JoinHandle<u16>;

async fn text(resp: Response<Body>) -> String {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_deadline_layer_answers_504_when_the_caller_has_given_up() {
    bounded(LIMIT, async {
        let app = Router::new()
            .route("/", get(slow))
            .layer(DeadlineLayer::new());
        let started = Instant::now();
        let resp = get_with(&app, &[("x-request-timeout-ms", "100")]).await;
        assert_eq!(resp.status(), 504);
        // At the caller's deadline, not when the work would have ended.
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        // gRPC's encoding is read for gRPC requests, and the answer is
        // gRPC's own: a trailers-only DEADLINE_EXCEEDED (a 504 would read as
        // UNAVAILABLE to a gRPC client, which retries it).
        let started = Instant::now();
        let resp = get_with(
            &app,
            &[
                ("content-type", "application/grpc"),
                ("grpc-timeout", "100m"),
            ],
        )
        .await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["grpc-status"], "4");
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        // Without a deadline the work finishes.
        let started = Instant::now();
        let resp = get_with(&app, &[]).await;
        assert_eq!(text(resp).await, "done");
        assert_eq!(started.elapsed(), WORK);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_shed_layer_sheds_retries_before_first_attempts() {
    bounded(LIMIT, async {
        // One at a time, two may wait, retries may not wait at all.
        let shed = ShedLayer::builder(1, 2)
            .retry_queue(0)
            .retry_after(Duration::from_secs(1), Duration::from_secs(3))
            .build();
        let app = Router::new().route("/", get(slow)).layer(shed.clone());
        let started = Instant::now();
        let busy = spawn_get(&app, &[]);
        // Paused time moves only once every task waits: the first request
        // is in the handler by now.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(shed.stats().admitted, 1);
        // The worker is busy: a retry is shed at once with a Retry-After in range.
        let mut afters = Vec::new();
        for _ in 0..20 {
            let resp = get_with(&app, &[("x-retry-attempt", "2")]).await;
            assert_eq!(resp.status(), 503);
            let after: u64 = resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=3).contains(&after), "{after}");
            afters.push(after);
        }
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(100),
            "shed without waiting"
        );
        afters.sort_unstable();
        afters.dedup();
        assert!(afters.len() > 1, "Retry-After is jittered: {afters:?}");
        // A first attempt queues behind the busy one and is served after it.
        let first = get_with(&app, &[]).await;
        assert_eq!(first.status(), 200);
        assert_eq!(started.elapsed(), WORK * 2, "it waited its turn");
        assert_eq!(busy.await.unwrap(), 200);
        let s = shed.stats();
        assert_eq!((s.admitted, s.shed_first, s.shed_retries), (2, 0, 20));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn when_the_queue_is_full_first_attempts_are_shed_too() {
    bounded(LIMIT, async {
        let shed = ShedLayer::new(1, 1);
        let app = Router::new().route("/", get(slow)).layer(shed.clone());
        // One served, one waiting (each in the layer before the next is
        // sent: paused time moves only once every task waits).
        let mut waiting = Vec::new();
        for _ in 0..2 {
            waiting.push(spawn_get(&app, &[]));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let resp = get_with(&app, &[]).await;
        assert_eq!(resp.status(), 503);
        for w in waiting {
            assert_eq!(w.await.unwrap(), 200);
        }
        let s = shed.stats();
        assert_eq!((s.admitted, s.shed_first), (2, 1));
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn clones_of_a_shed_layer_share_its_limits_and_counters() {
    bounded(LIMIT, async {
        // One request at a time and none waiting, across two routers each
        // given a clone of the same layer.
        let shed = ShedLayer::builder(1, 0)
            .retry_after(Duration::from_secs(2), Duration::from_secs(2))
            .build();
        let twin = shed.clone();
        let a = Router::new().route("/", get(slow)).layer(shed.clone());
        let b = Router::new().route("/", get(slow)).layer(twin.clone());
        let busy = spawn_get(&a, &[]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The one place is taken through the other clone: shed at once.
        let resp = get_with(&b, &[]).await;
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "2");
        assert_eq!(busy.await.unwrap(), 200);
        let s = shed.stats();
        assert_eq!((s.admitted, s.shed_first, s.shed_retries), (1, 1, 0));
        assert_eq!(twin.stats(), s);
    })
    .await;
}
