//! The reqwest hedging middleware against a server on 127.0.0.1 whose first
//! attempt of every call stalls.
//!
//! reqwest needs a real socket, but what is tested is timing (a hedge sent
//! 20 ms after a stalled attempt, the time left it carries), so each test
//! runs on tokio's paused clock: the hedge delay and the server's stall are
//! virtual and exact. Paused time jumps to the next timer whenever every
//! task waits, a socket included, so where the hedge must win the stalled
//! attempt never answers at all: no jump can let it finish first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::hedging::HedgePolicyConfig;
use stagger::http::Settings;
use stagger::http::{CallOptions, RetryInfo};
use stagger::reqwest::RetryMiddleware;
use stagger::{HedgeDelay, HedgePolicy, StopReason};
use tokio::time::Instant;

type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// How long the first attempt stalls.
#[derive(Clone, Copy)]
enum Stall {
    For(Duration),
    Forever,
}

/// Attempt 1 stalls, later attempts answer at once with their number.
async fn server(stall: Stall) -> (String, Seen) {
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
                match stall {
                    Stall::For(d) => tokio::time::sleep(d).await,
                    Stall::Forever => std::future::pending().await,
                }
            }
            attempt
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/"), seen)
}

/// The attempt numbers the server saw, in order of number (two attempts
/// sent 20 ms apart may reach it in either order).
fn attempts(seen: &Seen) -> Vec<String> {
    let mut v: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| h["x-retry-attempt"].to_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
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

#[tokio::test(start_paused = true)]
async fn a_stalled_get_is_hedged_and_the_hedge_wins() {
    // Attempt 1 never answers: the answer can only be the hedge's.
    let (url, seen) = server(Stall::Forever).await;
    let start = Instant::now();
    let resp = client(false).get(&url).send().await.unwrap();
    // The hedge went out at its delay, and nothing else was waited for.
    assert_eq!(start.elapsed(), Duration::from_millis(20));
    let info = *resp.extensions().get::<RetryInfo>().unwrap();
    assert_eq!((info.attempts, info.reason), (2, StopReason::Success));
    assert_eq!(resp.text().await.unwrap(), "2");
    assert_eq!(attempts(&seen), ["1", "2"]);
}

#[tokio::test(start_paused = true)]
async fn a_post_hedges_only_with_a_key_and_sends_the_same_key_every_time() {
    let (url, seen) = server(Stall::Forever).await;
    let resp = client(true).post(&url).body("x").send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "2");
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0]["idempotency-key"], seen[1]["idempotency-key"]);
    }
    // Without a key the POST waits for its one attempt: a stall a hundred
    // hedge delays long, in paused time.
    let stall = Duration::from_secs(2);
    let (url, seen) = server(Stall::For(stall)).await;
    let start = Instant::now();
    let resp = client(false).post(&url).body("x").send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "1");
    assert!(start.elapsed() >= stall, "{:?}", start.elapsed());
    assert_eq!(attempts(&seen), ["1"], "never hedged");
}

#[tokio::test(start_paused = true)]
async fn reqwest_hedge_sends_the_time_left() {
    let (url, seen) = server(Stall::Forever).await;
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
    let mut left: Vec<(String, u64)> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|h| {
            let n = h["x-retry-attempt"].to_str().unwrap().to_owned();
            let ms = h["x-request-timeout-ms"].to_str().unwrap().parse().unwrap();
            (n, ms)
        })
        .collect();
    left.sort();
    // The first attempt carries the whole 5 s, the hedge 5 s less its
    // 20 ms delay.
    assert_eq!(left, [("1".to_owned(), 5_000), ("2".to_owned(), 4_980)]);
}

#[tokio::test(start_paused = true)]
async fn two_stacked_middlewares_number_every_attempt_once() {
    // The hedging middleware first, a retrying one after it in the chain:
    // before, the inner one ran its own attempts inside each hedge.
    let (url, seen) = server(Stall::Forever).await;
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
    assert_eq!(attempts(&seen), ["1", "2"]);
}
