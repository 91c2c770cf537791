//! A real tonic server on 127.0.0.1 for the gRPC tests: tonic-health's
//! `grpc.health.v1.Health` behind a scripted fault layer that records every
//! request, and answers the first ones from a script (trailers-only
//! failures, a failure after headers, a slow answer) before letting the
//! rest through. `/test.Echo/Collect` (a client-streaming method) is
//! answered by the fault layer itself: the number of request bytes it read.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use tonic::body::Body;
use tower::{Layer, Service};

/// How the server answers one request.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Let the health service answer.
    Pass,
    /// A trailers-only answer with this status and optional pushback.
    TrailersOnly(u32, Option<&'static str>),
    /// Headers, one message (for Watch), then this status in the trailers.
    AfterHeaders(u32),
    /// Wait, then let the health service answer.
    Slow(Duration),
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone, Default)]
pub struct Script {
    faults: Arc<Mutex<VecDeque<Fault>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Script {
    pub fn new(faults: impl IntoIterator<Item = Fault>) -> Self {
        Script {
            faults: Arc::new(Mutex::new(faults.into_iter().collect())),
            received: Arc::default(),
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

#[derive(Clone)]
struct FaultLayer(Script);

impl<S> Layer<S> for FaultLayer {
    type Service = FaultService<S>;
    fn layer(&self, inner: S) -> FaultService<S> {
        FaultService {
            inner,
            script: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct FaultService<S> {
    inner: S,
    script: Script,
}

fn grpc_response(
    frames: Vec<Frame<Bytes>>,
    head: &[(&'static str, HeaderValue)],
) -> Response<Body> {
    let stream = tokio_stream::iter(frames.into_iter().map(Ok::<_, Infallible>));
    let mut resp = Response::new(Body::new(StreamBody::new(stream)));
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    for (k, v) in head {
        resp.headers_mut().insert(*k, v.clone());
    }
    resp
}

/// A gRPC message frame: the 5-byte prefix and `payload`.
pub fn frame(payload: &[u8]) -> Bytes {
    let mut v = vec![0u8];
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    Bytes::from(v)
}

impl<S> Service<Request<Body>> for FaultService<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let mut inner = self.inner.clone();
        let script = self.script.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let path = parts.uri.path().to_owned();
            script.received.lock().unwrap().push(Received {
                path: path.clone(),
                headers: parts.headers.clone(),
                body: body.clone(),
            });
            let fault = script
                .faults
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Fault::Pass);
            match fault {
                Fault::TrailersOnly(code, pushback) => {
                    let mut head = vec![("grpc-status", HeaderValue::from(code))];
                    if let Some(p) = pushback {
                        head.push(("grpc-retry-pushback-ms", HeaderValue::from_static(p)));
                    }
                    return Ok(grpc_response(vec![], &head));
                }
                Fault::AfterHeaders(code) => {
                    let mut t = HeaderMap::new();
                    t.insert("grpc-status", HeaderValue::from(code));
                    // A HealthCheckResponse { status: SERVING }.
                    let msg = frame(&[0x08, 0x01]);
                    return Ok(grpc_response(
                        vec![Frame::data(msg), Frame::trailers(t)],
                        &[],
                    ));
                }
                Fault::Slow(d) => tokio::time::sleep(d).await,
                Fault::Pass => {}
            }
            if path == "/test.Echo/Collect" {
                // HealthCheckResponse { status: <bytes read> }.
                let n = body.len() as u8;
                let mut t = HeaderMap::new();
                t.insert("grpc-status", HeaderValue::from(0u32));
                let msg = frame(&[0x08, n]);
                return Ok(grpc_response(
                    vec![Frame::data(msg), Frame::trailers(t)],
                    &[],
                ));
            }
            let req = Request::from_parts(parts, Body::new(Full::new(body)));
            inner.call(req).await
        })
    }
}

/// Starts the health service (SERVING for "" and "shop", NOT_SERVING for
/// "down") behind `script`
/// on 127.0.0.1; returns its address.
pub async fn start(script: Script) -> SocketAddr {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("shop", tonic_health::ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("down", tonic_health::ServingStatus::NotServing)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(async move {
        // Keep the reporter alive with the server.
        let _reporter = reporter;
        tonic::transport::Server::builder()
            .layer(FaultLayer(script))
            .add_service(health)
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    addr
}
