//! An order service whose writes take effect once, however often a client retries.
//!
//! ```sh
//! cargo run -p stagger-idempotency --example idempotent_orders -- --work-ms 300
//! curl -s -X POST localhost:8080/api -H 'Idempotency-Key: "k1"' -d '{"sku":1}'   # runs
//! curl -s -X POST localhost:8080/api -H 'Idempotency-Key: "k1"' -d '{"sku":1}'   # replayed
//! curl -s localhost:8080/orders                                                  # {"count":1,...}
//! ```
//!
//! - `POST /api`, `PATCH /api`: record an order, then take `--work-ms` before answering 200 (so a
//!   client that gives up early has had its order made).
//! - `GET`, `PUT`, `DELETE /api`: answer 200; the layer lets them through.
//! - `GET /orders`: `{"count": N, "by_key": {KEY: n}}`, the orders the handler really executed.
//!
//! `--store` picks where keys live: `memory` (this process), `redis://HOST:PORT` or
//! `postgres://USER@HOST:PORT/DB` (shared by replicas; needs the `redis` or `postgres` feature).
//! `--no-idempotency` serves the same routes without the layer, to compare.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use stagger_idempotency::{Config, IdempotencyLayer, MemoryStore};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "An order service whose retried writes take effect once")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where idempotency keys live: memory, redis://HOST:PORT, or postgres://USER@HOST:PORT/DB.
    #[arg(long, default_value = "memory")]
    store: String,
    /// Milliseconds the order handler takes after recording the order.
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// Serve without the idempotency layer (every retry executes again).
    #[arg(long)]
    no_idempotency: bool,
}

#[derive(Default)]
struct Orders {
    by_key: BTreeMap<String, u64>,
    count: u64,
}

#[derive(Clone)]
struct App {
    orders: Arc<Mutex<Orders>>,
    work: Duration,
}

async fn create(State(app): State<App>, headers: HeaderMap) -> Response {
    let key = match stagger_idempotency::key(&headers) {
        Ok(Some(key)) => key,
        _ => "-".to_owned(),
    };
    let number = {
        let mut orders = app.orders.lock().expect("orders lock");
        orders.count += 1;
        *orders.by_key.entry(key.clone()).or_default() += 1;
        orders.count
    };
    tokio::time::sleep(app.work).await;
    Json(serde_json::json!({"success": true, "order": number, "key": key})).into_response()
}

async fn other() -> Response {
    Json(serde_json::json!({"success": true})).into_response()
}

async fn orders(State(app): State<App>) -> Response {
    let orders = app.orders.lock().expect("orders lock");
    Json(serde_json::json!({"count": orders.count, "by_key": orders.by_key})).into_response()
}

fn routes(app: App) -> Router {
    Router::new()
        .route(
            "/api",
            post(create)
                .patch(create)
                .get(other)
                .put(other)
                .delete(other),
        )
        .route("/orders", get(orders))
        .with_state(app)
}

async fn with_layer(router: Router, store: &str) -> Result<Router, String> {
    let config = Config::default();
    if store == "memory" {
        return Ok(router.layer(IdempotencyLayer::new(MemoryStore::default(), config)));
    }
    if store.starts_with("redis://") {
        #[cfg(feature = "redis")]
        {
            let store = stagger_idempotency::RedisStore::connect(store)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(router.layer(IdempotencyLayer::new(store, config)));
        }
        #[cfg(not(feature = "redis"))]
        return Err("--store redis://… needs the example built with --features redis".into());
    }
    if store.starts_with("postgres://") || store.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        {
            let store = stagger_idempotency::PostgresStore::connect(store)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(router.layer(IdempotencyLayer::new(store, config)));
        }
        #[cfg(not(feature = "postgres"))]
        return Err("--store postgres://… needs the example built with --features postgres".into());
    }
    Err(format!(
        "--store {store:?}: expected memory, redis://HOST:PORT or postgres://USER@HOST:PORT/DB"
    ))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let app = App {
        orders: Arc::default(),
        work: Duration::from_millis(args.work_ms),
    };
    let router = routes(app);
    let router = if args.no_idempotency {
        router
    } else {
        match with_layer(router, &args.store).await {
            Ok(router) => router,
            Err(e) => {
                eprintln!("idempotent_orders: {e}");
                return std::process::ExitCode::from(2);
            }
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("idempotent_orders: cannot listen on {}: {e}", args.listen);
            return std::process::ExitCode::from(2);
        }
    };
    let addr = listener.local_addr().expect("a bound address");
    let mode = if args.no_idempotency {
        "without idempotency".to_owned()
    } else {
        format!("store {}", args.store)
    };
    println!("idempotent_orders listening on http://{addr} ({mode})");
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        eprintln!("idempotent_orders: {e}");
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
