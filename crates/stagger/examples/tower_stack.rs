//! A tower client stack: stagger's `RetryLayer` (with a shared retry budget
//! and circuit breaker) over hyper's client.
//!
//! Starts a dependency on 127.0.0.1 that fails every third request with 503,
//! sends 40 requests through two clones of the stack, and prints how many
//! attempts they took and why they stopped.
//!
//! Run: `cargo run -p stagger --example tower_stack --features tower`

use stagger::Backoff;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stagger::guardrails::budget::{RatioBudget, RatioBudgetConfig};
use stagger::http::RetryInfo;
use stagger::tower::RetryLayer;
use stagger::{Breaker, Policy};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = Arc::new(AtomicU32::new(0));
    let app = Router::new().route(
        "/",
        get(move || {
            let odd = n.fetch_add(1, Ordering::Relaxed) % 3 == 2;
            async move {
                if odd {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    // One policy per dependency: its budget and breaker are shared by every
    // clone of the stack.
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(20),
            ..Backoff::new()
        })
        .attempt_timeout(Duration::from_millis(500))
        .budget(RatioBudget::new(RatioBudgetConfig {
            ratio: 0.2,
            ..Default::default()
        })?)
        .breaker(Breaker::default())
        .build()?;
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(stagger::http::Settings {
            policy,
            idempotency_keys: true,
            ..Default::default()
        }))
        .service(Client::builder(TokioExecutor::new()).build_http());

    let (a, b) = (client.clone(), client);
    let mut outcomes: BTreeMap<String, u32> = BTreeMap::new();
    let mut attempts = 0;
    for i in 0..40 {
        let svc = if i % 2 == 0 { a.clone() } else { b.clone() };
        let req = Request::get(&url).body(Full::<Bytes>::default())?;
        // A response carries its RetryInfo; an error (no response at all,
        // such as a breaker refusing the call) carries the same.
        let info = match svc.oneshot(req).await {
            Ok(resp) => *resp
                .extensions()
                .get::<RetryInfo>()
                .expect("set by the layer"),
            Err(e) => e.info(),
        };
        attempts += info.attempts;
        *outcomes.entry(info.reason.to_string()).or_default() += 1;
    }
    println!(
        "40 requests, {attempts} attempts (amplification {:.2})",
        attempts as f64 / 40.0
    );
    for (reason, count) in outcomes {
        println!("  {reason}: {count}");
    }
    Ok(())
}
