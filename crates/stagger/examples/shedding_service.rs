//! An axum service that sheds load and calls a downstream through the
//! reqwest middleware, with the one-layer rule between them.
//!
//! `front` runs behind `ShedLayer` (2 at a time, 10 waiting, retries may
//! wait in 2 places) and `DeadlineLayer`; its handler calls `back` (slow, and
//! failing every third request) through `RetryMiddleware`, inheriting the
//! caller's deadline. A burst of 30 requests, a third of them marked as
//! retries, hits `front` at once; the program prints how many were served,
//! how many were shed (retries first), and exits.
//!
//! Run: `cargo run -p stagger --example shedding_service --features tower,reqwest`

use stagger::Backoff;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::reqwest::RetryMiddleware;
use stagger::tower::{DeadlineLayer, ShedLayer};
use stagger::Policy;

#[derive(Clone)]
struct Front {
    back: ClientWithMiddleware,
    back_url: String,
}

async fn front(State(s): State<Front>) -> (StatusCode, String) {
    // Runs inside the DeadlineLayer's scope: the call below inherits the
    // caller's deadline and does not retry while serving a retry.
    match s.back.get(&s.back_url).send().await {
        Ok(r) => {
            let status =
                StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            (status, r.text().await.unwrap_or_default())
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

async fn serve(app: Router) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = Arc::new(AtomicU32::new(0));
    let back_url = serve(Router::new().route(
        "/",
        get(move || {
            let i = n.fetch_add(1, Ordering::Relaxed);
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                if i % 3 == 2 {
                    (StatusCode::SERVICE_UNAVAILABLE, "busy")
                } else {
                    (StatusCode::OK, "hello from back")
                }
            }
        }),
    ))
    .await?;

    let back = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(
            Policy::builder()
                .max_attempts(3)
                .backoff(Backoff {
                    base: Duration::from_millis(20),
                    ..Backoff::new()
                })
                .build()?,
        ))
        .build();
    let shed = ShedLayer::builder(2, 10)
        .retry_queue(2)
        .retry_after(Duration::from_secs(1), Duration::from_secs(4))
        .build();
    let app = Router::new()
        .route("/", get(front))
        .with_state(Front { back, back_url })
        .layer(DeadlineLayer::new())
        .layer(shed.clone());
    let front_url = serve(app).await?;

    let http = reqwest::Client::new();
    let mut burst = Vec::new();
    for i in 0..30 {
        let req = http
            .get(&front_url)
            .header("x-request-timeout-ms", "2000")
            .header("x-retry-attempt", if i % 3 == 0 { "2" } else { "1" });
        burst.push(tokio::spawn(async move {
            req.send().await.map(|r| r.status().as_u16())
        }));
    }
    let mut by_status = std::collections::BTreeMap::new();
    for b in burst {
        let status = b.await?.map_err(|e| e.to_string())?;
        *by_status.entry(status).or_insert(0u32) += 1;
    }
    println!("front answered: {by_status:?}");
    let s = shed.stats();
    println!(
        "shed layer: {} admitted, {} first attempts shed, {} retries shed",
        s.admitted, s.shed_first, s.shed_retries
    );
    Ok(())
}
