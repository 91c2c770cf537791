//! Three services chained in one process, A → B → C with C failing: the
//! one-layer rule keeps C's load at most 4 attempts per request to A, where
//! four layers of four attempts each would send it 64.

use crate::common;

use stagger::Backoff;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use common::{bounded, status, Server};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::http::RetryInfo;
use stagger::reqwest::RetryMiddleware;
use stagger::tower::DeadlineLayer;
use stagger::NotRetried;
use stagger::{Policy, StopReason};

const LIMIT: Duration = Duration::from_secs(30);

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(4)
        .backoff(Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(4),
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

fn client(one_layer: bool) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(stagger::http::Settings {
            policy: policy(),
            one_layer,
            ..Default::default()
        }))
        .build()
}

/// A service that relays every request to `downstream` and answers with
/// what it got (502 when no answer).
async fn relay_service(downstream: String, one_layer: bool) -> String {
    #[derive(Clone)]
    struct Relay {
        client: ClientWithMiddleware,
        downstream: String,
    }
    async fn handle(State(r): State<Relay>) -> (StatusCode, String) {
        match r.client.get(&r.downstream).send().await {
            Ok(resp) => {
                let s = resp.status();
                (
                    StatusCode::from_u16(s.as_u16()).unwrap(),
                    resp.text().await.unwrap_or_default(),
                )
            }
            Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()),
        }
    }
    let app = Router::new()
        .route("/", get(handle))
        .with_state(Relay {
            client: client(one_layer),
            downstream,
        })
        .layer(DeadlineLayer::new().one_layer(one_layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

async fn chain(one_layer: bool) -> (usize, RetryInfo, Server) {
    let c = Server::start(vec![status(503); 100]).await;
    let b = relay_service(c.url("/"), one_layer).await;
    let a = relay_service(b, one_layer).await;
    let resp = client(one_layer)
        .get(&a)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    let info = *resp.extensions().get::<RetryInfo>().unwrap();
    (c.hits().len(), info, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_one_layer_rule_c_sees_at_most_4_attempts() {
    bounded(LIMIT, async {
        let (hits, info, c) = chain(true).await;
        assert!(hits <= 4, "C saw {hits} attempts");
        assert_eq!(hits, 4, "the layer next to C owns the retries");
        // The caller of A was told not to retry: it failed fast.
        assert_eq!(info.attempts, 1);
        assert_eq!(info.reason, StopReason::NotRetryable);
        assert_eq!(info.not_retried, Some(NotRetried::ServerSaidNo));
        // C saw B's attempts 1..4.
        let attempts: Vec<u32> = c.hits().iter().filter_map(|h| h.attempt()).collect();
        assert_eq!(attempts, [1, 2, 3, 4]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_it_c_sees_64() {
    bounded(LIMIT, async {
        let (hits, info, _) = chain(false).await;
        assert_eq!(hits, 64);
        assert_eq!(info.attempts, 4);
        assert_eq!(info.reason, StopReason::AttemptsExhausted);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_an_inbound_retry_makes_one_attempt_and_passes_the_error_up() {
    bounded(LIMIT, async {
        let c = Server::start(vec![status(503); 10]).await;
        let b = relay_service(c.url("/"), true).await;
        // A retry arriving at B (attempt 2) is not retried below B.
        let resp = reqwest::Client::new()
            .get(&b)
            .header("x-retry-attempt", "2")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers().get("x-no-retry").unwrap(), "1");
        assert_eq!(c.hits().len(), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_travels_down_the_chain() {
    bounded(LIMIT, async {
        let c = Server::start(vec![]).await;
        let b = relay_service(c.url("/"), true).await;
        let a = relay_service(b, true).await;
        let outer = ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new(stagger::http::Settings {
                policy: policy(),
                timeout: Some(Duration::from_millis(1500)),
                ..Default::default()
            }))
            .build();
        let resp = outer.get(&a).send().await.unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::OK);
        let t: u64 = c.hits()[0]
            .header("x-request-timeout-ms")
            .unwrap()
            .parse()
            .unwrap();
        assert!((1001..=1500).contains(&t), "C was given {t} ms");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_already_spent_upstream_is_not_worked_on() {
    bounded(LIMIT, async {
        let c = Server::start(vec![common::Fault::Slow(Duration::from_secs(5), 200)]).await;
        let b = relay_service(c.url("/"), true).await;
        let started = std::time::Instant::now();
        let resp = reqwest::Client::new()
            .get(&b)
            .header("x-request-timeout-ms", "300")
            .send()
            .await
            .unwrap();
        // B's call to C inherits the 300 ms and gives up with it (502 from
        // the handler), or the deadline layer answers 504 first.
        assert!(
            [502, 504].contains(&resp.status().as_u16()),
            "{}",
            resp.status()
        );
        assert!(started.elapsed() < Duration::from_millis(1500));
        assert_eq!(c.hits().len(), 1);
    })
    .await;
}
