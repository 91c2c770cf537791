//! `--metrics-addr`: the proxy's arrival histogram and counters while it
//! runs. `/stats` is the histogram as text, `/stats?format=json` the
//! [`Report`](super::Report) document, `/stats?format=svg` the chart;
//! `/metrics` the counters in the Prometheus text format.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::RawQuery;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::task::JoinHandle;

use super::forward::Shared;
use crate::{Error, ErrorKind};

/// Binds `addr` and serves the stats until the task is aborted.
pub(super) async fn start(
    addr: SocketAddr,
    s: Arc<Shared>,
    span_end: Instant,
) -> Result<(SocketAddr, JoinHandle<()>), Error> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        Error::with(
            ErrorKind::Run,
            format!("--metrics-addr: cannot listen on {addr}"),
            e,
        )
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let report = move |s: &Shared| s.rec.report(&s.faults, Instant::now().min(span_end));
    let (s1, s2) = (s.clone(), s);
    let app = axum::Router::new()
        .route(
            "/stats",
            get(move |RawQuery(q): RawQuery| {
                let r = report(&s1);
                async move {
                    match q.as_deref() {
                        Some("format=json") => (
                            [(header::CONTENT_TYPE, "application/json")],
                            serde_json::to_string_pretty(&r).unwrap_or_default(),
                        ),
                        Some("format=svg") => ([(header::CONTENT_TYPE, "image/svg+xml")], r.svg()),
                        _ => (
                            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                            r.text(),
                        ),
                    }
                    .into_response()
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let r = report(&s2);
                async move {
                    (
                        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                        r.prometheus(),
                    )
                }
            }),
        );
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("stagger proxy: the stats server stopped: {e}");
        }
    });
    Ok((bound, task))
}
