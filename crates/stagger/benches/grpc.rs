//! The gRPC layer's overhead per successful unary call: over a real tonic
//! channel to a tonic-health server on 127.0.0.1 (bare channel, tower's
//! `Retry` with a no-op policy, stagger's layer), and in process over a
//! service that answers at once (the layer's own cost, without the
//! network's noise).
//!
//! Run: `cargo bench -p stagger --features grpc --bench grpc -- --warm-up-time 1 --measurement-time 3`

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::RetryLayer;
use tonic::body::Body;
use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::retry::{Policy as TowerPolicy, Retry};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// tower's `Retry` with a policy that never retries nor clones (a tonic
/// request cannot be cloned, so this is all it can do).
#[derive(Clone, Copy)]
struct NoRetry;

impl<Req, Res, E> TowerPolicy<Req, Res, E> for NoRetry {
    type Future = Ready<()>;
    fn retry(&mut self, _: &mut Req, _: &mut Result<Res, E>) -> Option<Self::Future> {
        None
    }
    fn clone_request(&mut self, _: &Req) -> Option<Req> {
        None
    }
}

fn layer() -> RetryLayer {
    RetryLayer::builder()
        .default_policy(MethodPolicy::builder().build().expect("valid policy"))
        .throttling(10.0, 0.1)
        .build()
        .expect("valid layer")
}

/// Answers a trailers-only OK at once.
#[derive(Clone, Copy)]
struct GrpcOk;

impl<B> Service<Request<B>> for GrpcOk {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Full<Bytes>>, Infallible>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<B>) -> Self::Future {
        let mut r = Response::new(Full::default());
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/grpc"));
        r.headers_mut()
            .insert("grpc-status", HeaderValue::from_static("0"));
        ready(Ok(r))
    }
}

fn request() -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .expect("valid request")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");

    let mut g = c.benchmark_group("grpc_inprocess_success");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    g.bench_function("plain service", |b| {
        b.to_async(&rt)
            .iter(|| async { GrpcOk.oneshot(request()).await })
    });
    let stagger = layer().layer(GrpcOk);
    g.bench_function("stagger grpc RetryLayer", |b| {
        b.to_async(&rt)
            .iter(|| async { stagger.clone().oneshot(request()).await })
    });
    g.finish();

    // A tonic-health server on 127.0.0.1.
    let addr = rt.block_on(async {
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(async move {
            let _reporter = reporter;
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(incoming)
                .await
        });
        addr
    });
    let channel = rt.block_on(async {
        Endpoint::from_shared(format!("http://{addr}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect")
    });

    let mut g = c.benchmark_group("grpc_loopback_success");
    g.warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    let bare = HealthClient::new(channel.clone());
    g.bench_function("bare tonic channel", |b| {
        b.to_async(&rt).iter(|| async {
            bare.clone()
                .check(HealthCheckRequest::default())
                .await
                .expect("ok")
        })
    });
    let retried = HealthClient::new(Retry::new(NoRetry, channel.clone()));
    g.bench_function("tower Retry, no-op policy", |b| {
        b.to_async(&rt).iter(|| async {
            retried
                .clone()
                .check(HealthCheckRequest::default())
                .await
                .expect("ok")
        })
    });
    let layered = HealthClient::new(
        ServiceBuilder::new()
            .layer(layer().body(Body::new as fn(_) -> Body))
            .service(channel),
    );
    g.bench_function("stagger grpc RetryLayer", |b| {
        b.to_async(&rt).iter(|| async {
            layered
                .clone()
                .check(HealthCheckRequest::default())
                .await
                .expect("ok")
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
