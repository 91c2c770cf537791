//! A scriptable HTTP server on 127.0.0.1 for the HTTP front-ends' tests:
//! each request takes the next fault from a script (a plain 200 when the
//! script is empty), and the server records what it saw and when (on
//! tokio's clock, so gaps are virtual under paused time).
//! [`scripted::Scripted`] is the same server in process, for tests that
//! assert on waits under paused time.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::Router;
use http_body_util::BodyExt;

pub mod scripted;

/// What the server does with one request.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and headers.
    Status(u16, Vec<(&'static str, String)>),
    /// Wait, then answer with this status.
    Slow(Duration, u16),
}

pub fn status(code: u16) -> Fault {
    Fault::Status(code, Vec::new())
}

pub fn with_header(code: u16, name: &'static str, value: impl Into<String>) -> Fault {
    Fault::Status(code, vec![(name, value.into())])
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Hit {
    pub at: Instant,
    pub method: String,
    pub headers: HeaderMap,
    pub body_len: usize,
    pub body: Vec<u8>,
}

impl Hit {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    pub fn attempt(&self) -> Option<u32> {
        self.header("x-retry-attempt").and_then(|v| v.parse().ok())
    }
}

#[derive(Clone, Default)]
pub struct State {
    script: Arc<Mutex<VecDeque<Fault>>>,
    hits: Arc<Mutex<Vec<Hit>>>,
}

pub struct Server {
    pub addr: SocketAddr,
    state: State,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Starts a server on 127.0.0.1 (port 0) answering with `script`.
    pub async fn start(script: Vec<Fault>) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, script)
    }

    /// Starts on a given listener.
    pub fn serve(listener: tokio::net::TcpListener, script: Vec<Fault>) -> Server {
        let addr = listener.local_addr().unwrap();
        let state = State {
            script: Arc::new(Mutex::new(script.into())),
            hits: Arc::default(),
        };
        let s = state.clone();
        let app = Router::new().fallback(move |req: Request| handle(s.clone(), req));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Server { addr, state, task }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().unwrap().clone()
    }

    /// Gaps between consecutive requests, measured at the server.
    pub fn gaps(&self) -> Vec<Duration> {
        let h = self.hits();
        h.windows(2).map(|w| w[1].at - w[0].at).collect()
    }
}

async fn handle(state: State, req: Request) -> Response<Body> {
    // tokio's clock, so a test under paused time measures virtual gaps.
    let at = tokio::time::Instant::now().into_std();
    let method = req.method().to_string();
    let headers = req.headers().clone();
    let fault = state.script.lock().unwrap().pop_front();
    let body = req.into_body().collect().await.map(|c| c.to_bytes());
    let body = body.map(|b| b.to_vec()).unwrap_or_default();
    state.hits.lock().unwrap().push(Hit {
        at,
        method,
        headers,
        body_len: body.len(),
        body,
    });
    let (code, extra) = match fault {
        None => (200, Vec::new()),
        Some(Fault::Status(c, h)) => (c, h),
        Some(Fault::Slow(d, c)) => {
            tokio::time::sleep(d).await;
            (c, Vec::new())
        }
    };
    let mut resp = Response::new(Body::from(format!("status {code}")));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap();
    for (k, v) in extra {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

/// A port nothing listens on (bound, then released).
pub async fn free_port() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Runs a test body with a hard time limit.
pub async fn bounded<F: std::future::Future>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .expect("test exceeded its time bound")
}
