//! The reqwest hedging middleware against a server on 127.0.0.1 whose first
//! attempt of every call stalls.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::hedging::HedgePolicyConfig;
use stagger::http::Settings;
use stagger::http::{CallOptions, RetryInfo};
use stagger::reqwest::RetryMiddleware;
use stagger::{HedgeDelay, HedgePolicy, StopReason};

type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// Attempt 1 stalls for 2 s, later attempts answer at once with their number.
async fn server() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(headers.clone());
            let attempt = headers
                .get("x-retry-attempt")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?")
                .to_owned();
            if attempt == "1" {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            attempt
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/"), seen)
}

fn client(keys: bool) -> ClientWithMiddleware {
    let policy = HedgePolicy::new(HedgePolicyConfig {
        delay: HedgeDelay::Fixed(Duration::from_millis(20)),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap();
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(Settings {
            idempotency_keys: keys,
            ..Settings::from(policy)
        }))
        .build()
}

#[tokio::test]
async fn a_stalled_get_is_hedged_and_the_hedge_wins() {
    let (url, seen) = server().await;
    let start = Instant::now();
    let resp = client(false).get(&url).send().await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let info = *resp.extensions().get::<RetryInfo>().unwrap();
    assert_eq!((info.attempts, info.reason), (2, StopReason::Success));
    assert_eq!(resp.text().await.unwrap(), "2");
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_post_hedges_only_with_a_key_and_sends_the_same_key_every_time() {
    let (url, seen) = server().await;
    let resp = client(true).post(&url).body("x").send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "2");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen[0]["idempotency-key"], seen[1]["idempotency-key"]);
    }
    seen.lock().unwrap().clear();
    let start = Instant::now();
    let resp = client(false).post(&url).body("x").send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "1");
    assert!(start.elapsed() >= Duration::from_secs(2));
    assert_eq!(seen.lock().unwrap().len(), 1, "never hedged");
}

#[tokio::test]
async fn reqwest_hedge_sends_the_time_left() {
    let (url, seen) = server().await;
    let resp = client(false)
        .get(&url)
        .with_extension(CallOptions {
            timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        })
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "2");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for h in seen.iter() {
        let left: u64 = h["x-request-timeout-ms"].to_str().unwrap().parse().unwrap();
        assert!((4_000..=5_000).contains(&left), "{left}");
    }
}

#[tokio::test]
async fn two_stacked_middlewares_number_every_attempt_once() {
    // The hedging middleware first, a retrying one after it in the chain:
    // before, the inner one ran its own attempts inside each hedge.
    let (url, seen) = server().await;
    let hedging = HedgePolicy::new(HedgePolicyConfig {
        delay: HedgeDelay::Fixed(Duration::from_millis(20)),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap();
    let retries = stagger::Policy::builder().max_attempts(3).build().unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(hedging))
        .with(RetryMiddleware::new(retries))
        .build();
    let resp = client.get(&url).send().await.unwrap();
    let info = *resp.extensions().get::<RetryInfo>().unwrap();
    assert_eq!((info.attempts, info.reason), (2, StopReason::Success));
    let attempts: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| h["x-retry-attempt"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2"]);
}
