//! The lab's HTTP server: embedded assets, the three API routes, the
//! `Host` check against DNS rebinding, and a limit on simulations running
//! at once.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::Semaphore;

use super::decide;
use super::query::BadParam;

/// An embedded file: its path, content type and bytes.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

/// Every file the page needs, compiled in (uPlot is vendored with its
/// licence, served at `/LICENSE-uPlot.txt`).
const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("assets/index.html"),
    },
    Asset {
        path: "/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/app.js"),
    },
    Asset {
        path: "/priority.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/priority.js"),
    },
    Asset {
        path: "/scenes.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/scenes.js"),
    },
    Asset {
        path: "/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/app.css"),
    },
    Asset {
        path: "/uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("assets/uPlot.iife.min.js"),
    },
    Asset {
        path: "/uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("assets/uPlot.min.css"),
    },
    Asset {
        path: "/LICENSE-uPlot.txt",
        content_type: "text/plain; charset=utf-8",
        body: include_bytes!("assets/LICENSE-uPlot.txt"),
    },
];

/// The two endpoints that read a query as a subcommand's flags, each
/// answering with the JSON document that subcommand's `--format json`
/// prints (ending in a newline) or the parameter it refuses. Each runs on
/// a blocking thread, under the server's limit on simulations running at
/// once.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints {
    /// `GET /api/simulate`: the flags of `stagger simulate`.
    pub simulate: fn(&str) -> Result<String, BadParam>,
    /// `GET /api/schedule`: the flags of `stagger schedule`.
    pub schedule: fn(&str) -> Result<String, BadParam>,
}

/// Shared by the handlers.
#[derive(Clone)]
struct Lab {
    /// The flag-reading endpoints.
    endpoints: Endpoints,
    /// The authorities a request's `Host` may name.
    hosts: Arc<Vec<String>>,
    /// One permit per simulation running.
    running: Arc<Semaphore>,
}

/// Serves the lab on `listener` (bound to `addr`) until the process ends.
/// Only requests whose `Host` names `addr` or `localhost` are answered.
pub async fn serve(
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    endpoints: Endpoints,
) -> std::io::Result<()> {
    axum::serve(listener, router(addr, endpoints)).await
}

fn router(addr: SocketAddr, endpoints: Endpoints) -> Router {
    let port = addr.port();
    let mut hosts = vec![
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        super::display_addr(addr),
    ];
    if port == 80 {
        hosts.extend(["localhost".into(), "127.0.0.1".into()]);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let lab = Lab {
        endpoints,
        hosts: Arc::new(hosts),
        running: Arc::new(Semaphore::new(cores.clamp(1, 8))),
    };
    let mut r = Router::new()
        .route("/api/simulate", get(api_simulate))
        .route("/api/schedule", get(api_schedule))
        .route("/api/decide", get(api_decide));
    for a in ASSETS {
        r = r.route(
            a.path,
            get(move || async move {
                (
                    [
                        (header::CONTENT_TYPE, a.content_type),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    a.body,
                )
            }),
        );
    }
    r.fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .layer(middleware::from_fn_with_state(lab.clone(), check_host))
        .with_state(lab)
}

/// Refuses a request whose `Host` is not this server's address or
/// `localhost`: a page on another site that rebinds its name to 127.0.0.1
/// must not reach the lab.
async fn check_host(State(lab): State<Lab>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    match host {
        Some(h) if lab.hosts.contains(&h) => next.run(req).await,
        _ => (
            StatusCode::FORBIDDEN,
            "forbidden: the Host header must name this server's address or localhost\n",
        )
            .into_response(),
    }
}

fn json(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn bad(e: BadParam) -> Response {
    let body = serde_json::json!({ "error": e.message, "parameter": e.parameter });
    json(StatusCode::BAD_REQUEST, body.to_string() + "\n")
}

/// How long a request waits for a permit before the answer is 503.
const QUEUE_WAIT: std::time::Duration = std::time::Duration::from_millis(1500);

/// Runs `f` on a blocking thread under a permit: 503 when every permit
/// stays taken for [`QUEUE_WAIT`], 500 if it panicked (the server keeps
/// serving).
async fn limited(lab: &Lab, q: String, f: fn(&str) -> Result<String, BadParam>) -> Response {
    // A short queue absorbs a page's burst of requests; past it, the server
    // is busy.
    let permit = tokio::time::timeout(QUEUE_WAIT, lab.running.clone().acquire_owned()).await;
    let Ok(Ok(permit)) = permit else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "busy: too many simulations running; try again in a second\n",
        )
            .into_response();
    };
    let answer = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        f(&q)
    })
    .await;
    match answer {
        Ok(Ok(body)) => json(StatusCode::OK, body),
        Ok(Err(e)) => bad(e),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal error\n").into_response(),
    }
}

async fn api_simulate(State(lab): State<Lab>, RawQuery(q): RawQuery) -> Response {
    limited(&lab, q.unwrap_or_default(), lab.endpoints.simulate).await
}

async fn api_schedule(State(lab): State<Lab>, RawQuery(q): RawQuery) -> Response {
    limited(&lab, q.unwrap_or_default(), lab.endpoints.schedule).await
}

async fn api_decide(State(lab): State<Lab>, RawQuery(q): RawQuery) -> Response {
    limited(&lab, q.unwrap_or_default(), decide::decide).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(permits: usize) -> Lab {
        Lab {
            endpoints: Endpoints {
                simulate: decide::decide,
                schedule: decide::decide,
            },
            hosts: Arc::new(vec![]),
            running: Arc::new(Semaphore::new(permits)),
        }
    }

    #[tokio::test]
    async fn a_full_server_answers_503_and_frees_its_permits() {
        let r = limited(&lab(0), String::new(), decide::decide).await;
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        let l = lab(1);
        let r = limited(&l, "status=503".into(), decide::decide).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(l.running.available_permits(), 1, "the permit came back");
    }

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_not_a_dead_server() {
        fn boom(_: &str) -> Result<String, BadParam> {
            panic!("boom")
        }
        let l = lab(1);
        let r = limited(&l, String::new(), boom).await;
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(l.running.available_permits(), 1);
    }
}
