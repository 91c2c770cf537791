//! A scripted tower service for the gRPC layer's rule tests: it answers
//! from a script of steps under paused tokio time and records what each
//! attempt carried.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::{CallReport, RetryLayer};
use stagger::tower::ReplayBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

pub type Frames = Vec<Result<Frame<Bytes>, Infallible>>;
pub type RespBody =
    StreamBody<tokio_stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// One scripted answer.
#[derive(Clone)]
pub enum Step {
    /// A trailers-only answer: `grpc-status` (and more) in the headers.
    TrailersOnly(u32, &'static [(&'static str, &'static str)]),
    /// Headers, one message, then trailers with this status.
    Streamed(u32),
    /// A plain HTTP answer without any gRPC status (a proxy's error).
    Http(u16),
    /// A transport error.
    Io(io::ErrorKind),
    /// An HTTP/2 REFUSED_STREAM.
    RefusedStream,
    /// A success after this long.
    SlowOk(Duration),
    /// A trailers-only answer (status and more) after this long.
    Late(Duration, u32, &'static [(&'static str, &'static str)]),
}

/// What one attempt carried.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone)]
pub struct Scripted {
    steps: Arc<Mutex<VecDeque<Step>>>,
    /// Played once the script is spent.
    last: Step,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Attempts whose answer was produced (not cancelled first).
    answered: Arc<Mutex<usize>>,
}

impl Scripted {
    /// Attempts that got to answer (a cancelled one never does).
    pub fn answered(&self) -> usize {
        *self.answered.lock().unwrap()
    }

    pub fn new(steps: impl IntoIterator<Item = Step>, last: Step) -> Self {
        Scripted {
            steps: Arc::new(Mutex::new(steps.into_iter().collect())),
            last,
            seen: Arc::default(),
            answered: Arc::default(),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn gaps_ms(&self) -> Vec<u128> {
        let s = self.seen();
        s.windows(2)
            .map(|w| (w[1].at - w[0].at).as_millis())
            .collect()
    }
}

pub fn grpc_head(status: StatusCode) -> http::response::Builder {
    Response::builder()
        .status(status)
        .header("content-type", "application/grpc")
}

pub fn trailers(code: u32) -> HeaderMap {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from(code));
    t
}

impl Service<Request<ReplayBody<Full<Bytes>>>> for Scripted {
    type Response = Response<RespBody>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReplayBody<Full<Bytes>>>) -> Self::Future {
        let step = self
            .steps
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(self.last.clone());
        let seen = self.seen.clone();
        let answered = self.answered.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            seen.lock().unwrap().push(Seen {
                at: Instant::now(),
                headers: parts.headers,
                body,
            });
            let step = match step {
                Step::Late(d, code, extra) => {
                    tokio::time::sleep(d).await;
                    Step::TrailersOnly(code, extra)
                }
                Step::SlowOk(d) => {
                    tokio::time::sleep(d).await;
                    Step::SlowOk(Duration::ZERO)
                }
                other => other,
            };
            *answered.lock().unwrap() += 1;
            let frames: Frames = match step {
                Step::TrailersOnly(code, extra) => {
                    let mut b = grpc_head(StatusCode::OK).header("grpc-status", code);
                    for (k, v) in extra {
                        b = b.header(*k, *v);
                    }
                    return Ok(b.body(StreamBody::new(tokio_stream::iter(vec![]))).unwrap());
                }
                Step::Streamed(code) => vec![
                    Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x01m"))),
                    Ok(Frame::trailers(trailers(code))),
                ],
                Step::Http(s) => {
                    let resp = Response::builder()
                        .status(s)
                        .body(StreamBody::new(tokio_stream::iter(vec![])))
                        .unwrap();
                    return Ok(resp);
                }
                Step::Io(kind) => return Err(io::Error::from(kind).into()),
                Step::RefusedStream => {
                    return Err(h2::Error::from(h2::Reason::REFUSED_STREAM).into())
                }
                Step::SlowOk(_) => vec![Ok(Frame::trailers(trailers(0)))],
                Step::Late(..) => unreachable!("played above"),
            };
            Ok(grpc_head(StatusCode::OK)
                .body(StreamBody::new(tokio_stream::iter(frames)))
                .unwrap())
        })
    }
}

pub const PATH: &str = "http://127.0.0.1/shop.Cart/Add";

pub fn request(body: &'static [u8]) -> Request<Full<Bytes>> {
    Request::post(PATH)
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::from_static(body)))
        .unwrap()
}

pub fn a6(max_attempts: u32, codes: &[u32]) -> MethodPolicy {
    MethodPolicy::builder()
        .max_attempts(max_attempts)
        .initial_backoff(Duration::from_millis(100))
        .max_backoff(Duration::from_secs(1))
        .retryable_codes(codes.iter().copied())
        .build()
        .unwrap()
}

/// Calls once through `layer` over `svc`; returns the response's head
/// status (`grpc-status` of a trailers-only answer, else the trailers'
/// after reading the body) and the report.
pub async fn call(
    layer: &RetryLayer,
    svc: &Scripted,
    req: Request<Full<Bytes>>,
) -> (Option<u32>, CallReport) {
    let mut client = layer.layer(svc.clone());
    let resp = client.ready().await.unwrap().call(req).await.unwrap();
    let report = resp.extensions().get::<CallReport>().cloned().unwrap();
    let head = resp
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().parse().unwrap());
    let collected = resp.into_body().collect().await.unwrap();
    let tail = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (head.or(tail), report)
}

pub fn unavailable() -> Step {
    Step::TrailersOnly(14, &[])
}
