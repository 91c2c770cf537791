//! The server layers on a real axum server: the deadline layer cuts work off
//! at the caller's deadline; the shed layer turns retries away before first
//! attempts and answers 503 with a jittered Retry-After.

mod common;

use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use common::bounded;
use stagger::tower::{DeadlineLayer, ShedLayer};

const LIMIT: Duration = Duration::from_secs(20);

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_millis(600)).await;
    "done"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_layer_answers_504_when_the_caller_has_given_up() {
    bounded(LIMIT, async {
        let url = serve(
            Router::new()
                .route("/", get(slow))
                .layer(DeadlineLayer::new()),
        )
        .await;
        let http = reqwest::Client::new();
        let started = Instant::now();
        let resp = http
            .get(&url)
            .header("x-request-timeout-ms", "100")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 504);
        assert!(started.elapsed() < Duration::from_millis(500));
        // gRPC's encoding is read for gRPC requests, and the answer is
        // gRPC's own: a trailers-only DEADLINE_EXCEEDED (a 504 would read as
        // UNAVAILABLE to a gRPC client, which retries it).
        let resp = http
            .get(&url)
            .header("content-type", "application/grpc")
            .header("grpc-timeout", "100m")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["grpc-status"], "4");
        // Without a deadline the work finishes.
        let resp = http.get(&url).send().await.unwrap();
        assert_eq!(resp.text().await.unwrap(), "done");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shed_layer_sheds_retries_before_first_attempts() {
    bounded(LIMIT, async {
        // One at a time, two may wait, retries may not wait at all.
        let shed = ShedLayer::builder(1, 2)
            .retry_queue(0)
            .retry_after(Duration::from_secs(1), Duration::from_secs(3))
            .build();
        let url = serve(Router::new().route("/", get(slow)).layer(shed.clone())).await;
        let http = reqwest::Client::new();
        let busy = tokio::spawn({
            let (http, url) = (http.clone(), url.clone());
            async move { http.get(&url).send().await.unwrap().status() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The worker is busy: a retry is shed at once with a Retry-After in range.
        let mut afters = Vec::new();
        for _ in 0..20 {
            let resp = http
                .get(&url)
                .header("x-retry-attempt", "2")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 503);
            let after: u64 = resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!((1..=3).contains(&after), "{after}");
            afters.push(after);
        }
        afters.sort_unstable();
        afters.dedup();
        assert!(afters.len() > 1, "Retry-After is jittered: {afters:?}");
        // A first attempt queues and is served.
        let first = http.get(&url).send().await.unwrap();
        assert_eq!(first.status(), 200);
        assert_eq!(busy.await.unwrap(), 200);
        let s = shed.stats();
        assert_eq!((s.admitted, s.shed_first, s.shed_retries), (2, 0, 20));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_queue_is_full_first_attempts_are_shed_too() {
    bounded(LIMIT, async {
        let shed = ShedLayer::new(1, 1);
        let url = serve(Router::new().route("/", get(slow)).layer(shed.clone())).await;
        let http = reqwest::Client::new();
        let mut waiting = Vec::new();
        for _ in 0..2 {
            let (http, url) = (http.clone(), url.clone());
            waiting.push(tokio::spawn(async move {
                http.get(&url).send().await.unwrap().status()
            }));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let resp = http.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 503);
        for w in waiting {
            assert_eq!(w.await.unwrap(), 200);
        }
        assert_eq!(shed.stats().shed_first, 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_of_a_shed_layer_share_its_limits_and_counters() {
    bounded(LIMIT, async {
        // One request at a time and none waiting, across two routers each
        // given a clone of the same layer.
        let shed = ShedLayer::builder(1, 0)
            .retry_after(Duration::from_secs(2), Duration::from_secs(2))
            .build();
        let twin = shed.clone();
        let a = serve(Router::new().route("/", get(slow)).layer(shed.clone())).await;
        let b = serve(Router::new().route("/", get(slow)).layer(twin.clone())).await;
        let http = reqwest::Client::new();
        let busy = tokio::spawn({
            let http = http.clone();
            async move { http.get(&a).send().await.unwrap().status() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The one place is taken through the other clone: shed at once.
        let resp = http.get(&b).send().await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "2");
        assert_eq!(busy.await.unwrap(), 200);
        let s = shed.stats();
        assert_eq!((s.admitted, s.shed_first, s.shed_retries), (1, 1, 0));
        assert_eq!(twin.stats(), s);
    })
    .await;
}
