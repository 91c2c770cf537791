//! Interop with a gRPC implementation nobody here wrote: Python grpcio.
//!
//! (1) stagger's client layer over a tonic channel against a grpcio health
//! server scripted to fail (`interop/fault_server.py`); (2) a grpcio client
//! with an A6 retry service config (`interop/retry_client.py`) against
//! stagger's server layers, `ShedLayer` and `DeadlineLayer`, on a tonic
//! server. See `interop/mod.rs` for how the interpreter is found.

use crate::interop;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Frame;
use http_body_util::StreamBody;
use interop::{python, retry_client, FaultServer};
use stagger::grpc::MethodPolicy;
use stagger::http::Inbound;
use stagger::tower::grpc::{CallReport, RetryLayer};
use stagger::tower::{DeadlineLayer, ShedLayer};
use tonic::body::Body;
use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::{Service, ServiceBuilder};

fn bounded<F: Future>(f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(Duration::from_secs(30), f)
}

type Client = HealthClient<
    stagger::tower::grpc::RetryService<
        tonic::transport::Channel,
        fn(stagger::tower::ReplayBody<Body>) -> Body,
    >,
>;

async fn client(port: u16) -> Client {
    let layer = RetryLayer::builder()
        .default_policy(
            MethodPolicy::builder()
                .max_attempts(5)
                .initial_backoff(Duration::from_millis(10))
                .max_backoff(Duration::from_millis(50))
                .retryable_codes([14, 8])
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
        .body(Body::new as fn(stagger::tower::ReplayBody<Body>) -> Body);
    let channel = Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(ServiceBuilder::new().layer(layer).service(channel))
}

fn prev(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("prev="))
                .unwrap_or("?")
                .to_owned()
        })
        .collect()
}

#[tokio::test]
async fn grpcio_trailers_only_unavailable_is_retried() {
    let Some(py) = python() else { return };
    bounded(async {
        let server = FaultServer::start(&py, "unavailable,unavailable");
        let resp = client(server.port)
            .await
            .check(HealthCheckRequest::default())
            .await
            .unwrap();
        assert_eq!(resp.get_ref().status, 1);
        let report = resp.extensions().get::<CallReport>().unwrap().get();
        assert_eq!(report.attempts, 3);
        assert_eq!(prev(&server.requests(3)), ["-", "1", "2"]);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn grpcio_failure_after_headers_is_committed() {
    let Some(py) = python() else { return };
    bounded(async {
        let server = FaultServer::start(&py, "after_headers");
        let err = client(server.port)
            .await
            .check(HealthCheckRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert_eq!(server.requests(1).len(), 1);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn grpcio_pushback_is_waited_exactly() {
    let Some(py) = python() else { return };
    bounded(async {
        let server = FaultServer::start(&py, "pushback:300");
        let started = Instant::now();
        client(server.port)
            .await
            .check(HealthCheckRequest::default())
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(server.requests(2).len(), 2);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn grpcio_listed_resource_exhausted_is_retried_with_or_without_pushback() {
    // The client lists RESOURCE_EXHAUSTED, so A6 retries it either way.
    let Some(py) = python() else { return };
    bounded(async {
        for steps in ["exhausted", "exhausted:20"] {
            let server = FaultServer::start(&py, steps);
            client(server.port)
                .await
                .check(HealthCheckRequest::default())
                .await
                .unwrap();
            assert_eq!(server.requests(2).len(), 2, "{steps}");
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn grpcio_slow_handler_meets_the_deadline() {
    let Some(py) = python() else { return };
    bounded(async {
        let server = FaultServer::start(&py, "slow:3000");
        let mut req = tonic::Request::new(HealthCheckRequest::default());
        req.set_timeout(Duration::from_millis(300));
        let err = client(server.port).await.check(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
        // The server saw the remaining time, not more.
        let lines = server.requests(1);
        let left: u64 = lines[0]
            .split_whitespace()
            .find_map(|w| w.strip_prefix("left_ms="))
            .and_then(|v| v.parse().ok())
            .unwrap();
        assert!(left <= 300, "{lines:?}");
    })
    .await
    .unwrap();
}

/// How the handler answers.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// SERVING.
    Serving,
    /// Trailers-only UNAVAILABLE.
    Unavailable,
    /// Trailers-only UNAVAILABLE, as a handler whose own client layer
    /// retried and gave up (it marks its `Inbound`).
    GaveUp,
}

/// A handler for the stagger server: records the attempt number its
/// `Inbound` says, waits `delay`, and answers as `mode` says.
#[derive(Clone)]
struct Handler {
    seen: Arc<Mutex<Vec<u32>>>,
    mode: Mode,
    delay: Duration,
}

impl tonic::server::NamedService for Handler {
    const NAME: &'static str = "grpc.health.v1.Health";
}

impl Service<Request<Body>> for Handler {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        let me = self.clone();
        Box::pin(async move {
            let inbound = Inbound::current();
            me.seen
                .lock()
                .unwrap()
                .push(inbound.as_ref().map_or(0, Inbound::attempt));
            tokio::time::sleep(me.delay).await;
            let mut resp = Response::new(Body::default());
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/grpc"));
            if me.mode != Mode::Serving {
                if let (Some(i), Mode::GaveUp) = (&inbound, me.mode) {
                    i.mark_gave_up();
                }
                resp.headers_mut()
                    .insert("grpc-status", HeaderValue::from_static("14"));
                return Ok(resp);
            }
            // HealthCheckResponse { status: SERVING }, then OK.
            let mut t = HeaderMap::new();
            t.insert("grpc-status", HeaderValue::from_static("0"));
            let frames = vec![
                Ok::<_, Infallible>(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1]))),
                Ok(Frame::trailers(t)),
            ];
            *resp.body_mut() = Body::new(StreamBody::new(tokio_stream::iter(frames)));
            Ok(resp)
        })
    }
}

async fn serve(handler: Handler, shed: ShedLayer) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .layer(shed)
            .layer(DeadlineLayer::new())
            .add_service(handler)
            .serve_with_incoming(incoming),
    );
    port
}

#[tokio::test(flavor = "multi_thread")]
async fn grpcio_retries_are_recognised_and_shed_first() {
    let Some(py) = python() else { return };
    bounded(async {
        let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
        let handler = Handler {
            seen: seen.clone(),
            mode: Mode::Serving,
            delay: Duration::from_millis(400),
        };
        // One request at a time, no queue for retries, and the shortest
        // pushback (1 ms) so grpcio comes straight back.
        let shed = ShedLayer::builder(1, 4)
            .retry_queue(0)
            .retry_after(Duration::ZERO, Duration::ZERO)
            .build();
        let port = serve(handler, shed.clone()).await;
        let py2 = py.clone();
        let codes = tokio::task::spawn_blocking(move || retry_client(&py2, port, 6))
            .await
            .unwrap();
        assert_eq!(codes.len(), 6);
        let stats = shed.stats();
        // First attempts waited in the queue; the retries grpcio sent
        // (marked grpc-previous-rpc-attempts) were the ones turned away.
        // 6 calls, 1 running and 4 queued: the sixth first attempt is shed,
        // and every retry grpcio sends after it (grpc-previous-rpc-attempts
        // ≥ 1) is shed as a retry, none given a queue place.
        assert_eq!(stats.shed_first, 1, "{stats:?} {codes:?}");
        assert_eq!(stats.shed_retries, 4, "{stats:?} {codes:?}");
        assert_eq!(stats.admitted, 5, "{stats:?}");
        assert_eq!(
            codes.iter().filter(|c| *c == "UNAVAILABLE").count(),
            1,
            "{codes:?}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gave_up_layers_pushback_stops_grpcio_retries() {
    let Some(py) = python() else { return };
    bounded(async {
        for (mode, attempts) in [
            (Mode::Unavailable, vec![1, 2, 3, 4, 5]),
            (Mode::GaveUp, vec![1]),
        ] {
            let gave_up = mode == Mode::GaveUp;
            let seen: Arc<Mutex<Vec<u32>>> = Arc::default();
            let handler = Handler {
                seen: seen.clone(),
                mode,
                delay: Duration::ZERO,
            };
            let port = serve(handler, ShedLayer::new(64, 64)).await;
            let py2 = py.clone();
            let codes = tokio::task::spawn_blocking(move || retry_client(&py2, port, 1))
                .await
                .unwrap();
            assert_eq!(codes, ["UNAVAILABLE"]);
            // DeadlineLayer read grpcio's grpc-previous-rpc-attempts: the
            // handler saw attempts 1..5 without the mark, and only 1 with it.
            assert_eq!(*seen.lock().unwrap(), attempts, "gave_up: {gave_up}");
        }
    })
    .await
    .unwrap();
}
