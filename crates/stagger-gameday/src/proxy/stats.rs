//! `--metrics-addr`: the proxy's arrival histogram and counters while it
//! runs. `/stats` is the histogram as text written by
//! [`Config::text`](super::Config::text) (the JSON without one),
//! `/stats?format=json` the
//! [`Report`](super::Report) document, `/stats?format=svg` the chart drawn
//! by [`Config::chart`](super::Config::chart) (404 without one);
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
use super::Report;
use crate::{Error, ErrorKind};

/// Binds `addr` and serves the stats until the task is aborted.
pub(super) async fn start(
    addr: SocketAddr,
    s: Arc<Shared>,
    span_end: Instant,
    chart: Option<fn(&Report) -> String>,
    text: Option<fn(&Report) -> String>,
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
                    let json = || {
                        (
                            [(header::CONTENT_TYPE, "application/json")],
                            serde_json::to_string_pretty(&r).unwrap_or_default(),
                        )
                    };
                    match q.as_deref() {
                        Some("format=json") => json(),
                        Some("format=svg") => match chart {
                            Some(draw) => ([(header::CONTENT_TYPE, "image/svg+xml")], draw(&r)),
                            None => {
                                return (
                                    axum::http::StatusCode::NOT_FOUND,
                                    "no chart: this proxy was started without one\n",
                                )
                                    .into_response()
                            }
                        },
                        _ => match text {
                            Some(write) => (
                                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                                write(&r),
                            ),
                            None => json(),
                        },
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::super::{upstream, Config, Proxy, Report};

    /// The answer to `GET path` on the stats server at `addr`, whole.
    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        c.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    }

    async fn svg_answer(chart: Option<fn(&Report) -> String>) -> String {
        let local = "127.0.0.1:0".parse().unwrap();
        let mut cfg = Config::new(local, upstream("UPSTREAM", "http://127.0.0.1:1").unwrap());
        cfg.stats_addr = Some(local);
        cfg.chart = chart;
        let proxy = Proxy::start(cfg).await.unwrap();
        let answer = get(proxy.stats_addr.unwrap(), "/stats?format=svg").await;
        proxy.stop();
        answer
    }

    #[tokio::test]
    async fn the_live_chart_is_the_one_the_proxy_was_given_and_404_without_one() {
        fn drawn(r: &Report) -> String {
            format!("<svg>{} ms bins</svg>", r.bin_ms)
        }
        let given = svg_answer(Some(drawn)).await;
        assert!(given.starts_with("HTTP/1.1 200"), "{given}");
        assert!(given.contains("image/svg+xml"), "{given}");
        assert!(given.ends_with("<svg>100 ms bins</svg>"), "{given}");
        let none = svg_answer(None).await;
        assert!(none.starts_with("HTTP/1.1 404"), "{none}");
        assert!(none.contains("started without one"), "{none}");
    }
}
