//! The fault proxy streams: an upload reaches the upstream while the client
//! is still sending it, and an HTTP/2 answer's trailers (gRPC's status)
//! come through; a request in the protocol the upstream does not speak is
//! named for it. The upstreams here are small hyper servers, because the
//! test must see each frame as it arrives.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use stagger_gameday::proxy::{self, Config, Proxy};
use tokio::sync::mpsc;

/// A body fed through a channel: the test decides when each chunk leaves.
struct Chan(mpsc::Receiver<Bytes>);

impl Body for Chan {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

/// A body of fixed frames, trailers included.
struct Frames(VecDeque<Frame<Bytes>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(Ok))
    }
}

async fn start_proxy(upstream: SocketAddr) -> Proxy {
    let cfg = Config::new(
        "127.0.0.1:0".parse().unwrap(),
        proxy::upstream("UPSTREAM", &format!("http://{upstream}")).unwrap(),
    );
    Proxy::start(cfg).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_reaches_the_upstream_before_the_client_has_finished_sending() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let (first_tx, mut first_rx) = mpsc::channel::<usize>(1);
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let first_tx = first_tx.clone();
            async move {
                let mut body = req.into_body();
                let mut total = 0usize;
                while let Some(f) = body.frame().await {
                    if let Ok(d) = f.unwrap().into_data() {
                        if total == 0 {
                            let _ = first_tx.send(d.len()).await;
                        }
                        total += d.len();
                    }
                }
                Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from(
                    total.to_string(),
                ))))
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(s), svc)
            .await;
    });
    let p = start_proxy(up).await;
    let (tx, rx) = mpsc::channel(4);
    let client: Client<_, Chan> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::post(format!("http://{}/upload", p.addr))
        .body(Chan(rx))
        .unwrap();
    let call = tokio::spawn(client.request(req));
    let chunk = Bytes::from(vec![7u8; 64 * 1024]);
    tx.send(chunk.clone()).await.unwrap();
    // The rest of the body is not sent until the upstream has the first
    // part: a proxy that collects the body first would wait forever here.
    let got = tokio::time::timeout(Duration::from_secs(5), first_rx.recv())
        .await
        .expect("the first chunk reached the upstream while the upload was still open");
    assert!(got.is_some_and(|n| n > 0));
    for _ in 0..15 {
        tx.send(chunk.clone()).await.unwrap();
    }
    drop(tx);
    let resp = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, (16 * 64 * 1024).to_string());
    p.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_trailers_pass_through_h2c_and_a_grpc_retry_is_counted() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    let (seen_tx, mut seen_rx) = mpsc::channel::<HeaderMap>(4);
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
            let seen_tx = seen_tx.clone();
            async move {
                let _ = seen_tx.send(req.headers().clone()).await;
                let _ = req.into_body().collect().await;
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                trailers.insert("grpc-message", "ok".parse().unwrap());
                let frames = Frames(VecDeque::from([
                    Frame::data(Bytes::from_static(b"\0\0\0\0\x02hi")),
                    Frame::trailers(trailers),
                ]));
                let mut r = Response::new(frames);
                r.headers_mut()
                    .insert("content-type", "application/grpc".parse().unwrap());
                Ok::<_, Infallible>(r)
            }
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(s), svc)
            .await;
    });
    let p = start_proxy(up).await;
    let client: Client<_, http_body_util::Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    for previous in ["0", "1"] {
        let req = Request::post(format!("http://{}/grpc.health.v1.Health/Check", p.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-previous-rpc-attempts", previous)
            .body(http_body_util::Full::new(Bytes::from_static(b"\0\0\0\0\0")))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let all = resp.into_body().collect().await.unwrap();
        let trailers = all.trailers().cloned().expect("trailers came through");
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(trailers["grpc-message"], "ok");
        assert_eq!(&all.to_bytes()[..], b"\0\0\0\0\x02hi");
        let seen = seen_rx.recv().await.unwrap();
        assert_eq!(seen["te"], "trailers", "gRPC's te: trailers is forwarded");
    }
    let r = p.report();
    p.stop();
    assert_eq!((r.first_attempts, r.retries), (1, 1));
    assert_eq!(r.retries_by.grpc_previous_rpc_attempts, 1);
}

/// The mirror of an HTTP/1.1 request to an h2c-only upstream: hyper's
/// client tells an h2c request refused by an HTTP/1.1-only server in
/// several ways, and the proxy must name the mismatch in each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_request_to_an_http1_only_upstream_is_named_for_it() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // HTTP/1.1 only, on every connection (the proxy's questions too).
        while let Ok((s, _)) = listener.accept().await {
            let svc = hyper::service::service_fn(|_req: Request<Incoming>| async {
                Ok::<_, Infallible>(Response::new(http_body_util::Full::new(
                    Bytes::from_static(b"hello"),
                )))
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc),
            );
        }
    });
    let p = start_proxy(up).await;
    let client: Client<_, http_body_util::Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    let req = Request::get(format!("http://{}/", p.addr))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    let r = p.report();
    p.stop();
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("no fault was injected"), "{body}");
    assert!(body.contains("the upstream speaks HTTP/1.1 only"), "{body}");
    assert_eq!(r.upstream_errors, 1);
    let why = r.first_upstream_error.unwrap_or_default();
    assert!(why.contains("the upstream speaks HTTP/1.1 only"), "{why}");
}
