//! A plain reqwest client with stagger's retries.
//!
//! Starts a flaky server on 127.0.0.1 (503, then 429 with `Retry-After: 1`,
//! then 200), calls it once through the middleware, and prints what each
//! attempt saw and how the call ended.
//!
//! Run: `cargo run -p stagger --example reqwest_client --features reqwest`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use axum::Router;
use reqwest_middleware::ClientBuilder;
use stagger::http::RetryInfo;
use stagger::reqwest::RetryMiddleware;
use stagger::Policy;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The flaky dependency.
    let calls = Arc::new(AtomicU32::new(0));
    let app = Router::new().route(
        "/price",
        get(move |headers: HeaderMap| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            async move {
                let attempt = headers
                    .get("x-retry-attempt")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("?")
                    .to_string();
                println!("server: attempt {attempt}");
                match n {
                    0 => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after", "")],
                        "busy",
                    )
                        .into_response_parts(),
                    1 => (
                        StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "1")],
                        "slow down",
                    )
                        .into_response_parts(),
                    _ => (StatusCode::OK, [("retry-after", "")], "42").into_response_parts(),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/price", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // The client: 4 attempts, 100 ms × 2, a 5 s deadline per call.
    let policy = Policy::builder().max_attempts(4).build()?;
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(stagger::http::Settings {
            policy,
            timeout: Some(Duration::from_secs(5)),
            on_attempt: Some(std::sync::Arc::new(|a: &stagger::http::AttemptLog| {
                println!(
                    "client: attempt {} -> {:?}, hint {:?}, next wait {:?}",
                    a.attempt, a.status, a.hint, a.delay
                )
            })),
            ..Default::default()
        }))
        .build();

    let resp = client.get(&url).send().await?;
    let info = *resp
        .extensions()
        .get::<RetryInfo>()
        .expect("set by the middleware");
    println!(
        "{} after {} attempts, {:?} waited: {}",
        info.reason,
        info.attempts,
        info.waited,
        resp.text().await?
    );
    Ok(())
}

/// Builds a response whose empty `Retry-After` is left out.
trait IntoParts {
    fn into_response_parts(self) -> axum::response::Response;
}

impl IntoParts for (StatusCode, [(&'static str, &'static str); 1], &'static str) {
    fn into_response_parts(self) -> axum::response::Response {
        use axum::response::IntoResponse;
        let (status, [(k, v)], body) = self;
        let mut resp = (status, body).into_response();
        if !v.is_empty() {
            resp.headers_mut()
                .insert(k, v.parse().expect("valid header"));
        }
        resp
    }
}
