//! The gRPC layer between a real tonic client and a real tonic server on
//! 127.0.0.1: unary retries, streaming calls retried only until committed,
//! request bodies (tonic's, which are not `Clone`) replayed, and what a
//! tonic caller sees.

use crate::grpc_support;

use std::time::Duration;

use grpc_support::{start, Fault, Script};
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::{CallReport, RetryLayer};
use stagger::{NotRetried, StopReason};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tower::ServiceBuilder;

fn layer(max_replay: usize) -> RetryLayer {
    RetryLayer::builder()
        .default_policy(
            MethodPolicy::builder()
                .max_attempts(4)
                .initial_backoff(Duration::from_millis(5))
                .max_backoff(Duration::from_millis(20))
                .retryable_codes([14])
                .build()
                .unwrap(),
        )
        .max_replay_bytes(max_replay)
        .build()
        .unwrap()
}

async fn channel(script: &Script) -> Channel {
    let addr = start(script.clone()).await;
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn bounded<F: std::future::Future>(f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(Duration::from_secs(20), f)
}

#[tokio::test]
async fn a_unary_call_is_retried_and_its_body_replayed() {
    bounded(async {
        let script = Script::new([Fault::TrailersOnly(14, None), Fault::TrailersOnly(14, None)]);
        let svc = ServiceBuilder::new()
            .layer(layer(1 << 20).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let mut client = HealthClient::new(svc);
        let resp = client
            .check(HealthCheckRequest {
                service: "shop".into(),
            })
            .await
            .unwrap();
        assert_eq!(resp.get_ref().status, 1, "SERVING");
        let report = resp.extensions().get::<CallReport>().unwrap().get();
        assert_eq!(
            (report.attempts, report.reason),
            (3, Some(StopReason::Success))
        );
        let got = script.received();
        assert_eq!(got.len(), 3);
        assert!(got
            .iter()
            .all(|r| r.body == got[0].body && !r.body.is_empty()));
        let prev: Vec<_> = got
            .iter()
            .map(|r| {
                r.headers
                    .get("grpc-previous-rpc-attempts")
                    .map(|v| v.to_str().unwrap().to_owned())
            })
            .collect();
        assert_eq!(prev, [None, Some("1".into()), Some("2".into())]);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_tonic_caller_sees_the_status_of_the_last_attempt() {
    bounded(async {
        let script = Script::new([Fault::TrailersOnly(14, Some("-1"))]);
        let svc = ServiceBuilder::new()
            .layer(layer(1 << 20).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let mut client = HealthClient::new(svc);
        let err = client
            .check(HealthCheckRequest::default())
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert_eq!(script.received().len(), 1, "pushback -1: no retry");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_deadline_the_caller_sets_ends_the_call_with_deadline_exceeded() {
    bounded(async {
        let script = Script::new([Fault::Slow(Duration::from_secs(3))]);
        let svc = ServiceBuilder::new()
            .layer(layer(1 << 20).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let mut client = HealthClient::new(svc);
        let mut req = tonic::Request::new(HealthCheckRequest::default());
        req.set_timeout(Duration::from_millis(200));
        let err = client.check(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded);
        let sent = &script.received()[0].headers["grpc-timeout"];
        assert!(sent.to_str().unwrap().ends_with('u') || sent.to_str().unwrap().ends_with('m'));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_stream_is_retried_until_its_headers_arrive() {
    bounded(async {
        // Trailers-only: nothing was streamed yet, so it is retried.
        let script = Script::new([Fault::TrailersOnly(14, None)]);
        let svc = ServiceBuilder::new()
            .layer(layer(1 << 20).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let mut client = HealthClient::new(svc);
        let resp = client
            .watch(HealthCheckRequest {
                service: "shop".into(),
            })
            .await
            .unwrap();
        let mut stream = resp.into_inner();
        let first = stream.message().await.unwrap().unwrap();
        assert_eq!(first.status, 1);
        assert_eq!(script.received().len(), 2);

        // Headers then a message then UNAVAILABLE: committed, not retried;
        // the caller gets the message and then the status.
        let script = Script::new([Fault::AfterHeaders(14)]);
        let svc = ServiceBuilder::new()
            .layer(layer(1 << 20).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let mut client = HealthClient::new(svc);
        let resp = client.watch(HealthCheckRequest::default()).await.unwrap();
        let report = resp.extensions().get::<CallReport>().unwrap().clone();
        let mut stream = resp.into_inner();
        assert_eq!(stream.message().await.unwrap().unwrap().status, 1);
        let err = stream.message().await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        assert_eq!(script.received().len(), 1);
        let s = report.get();
        assert_eq!(s.status, Some(14), "the trailers' status is recorded");
        assert_eq!(s.not_retried, Some(NotRetried::Committed));
    })
    .await
    .unwrap();
}

/// A client-streaming call of `n` messages of `size` bytes.
async fn collect(
    svc: impl tonic::client::GrpcService<
            tonic::body::Body,
            ResponseBody = stagger::tower::grpc::GrpcBody<tonic::body::Body>,
            Error = stagger::tower::Error,
        > + Send,
    n: usize,
    size: usize,
) -> Result<tonic::Response<HealthCheckResponse>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(svc);
    grpc.ready().await.unwrap();
    let messages = (0..n).map(move |_| HealthCheckRequest {
        service: "x".repeat(size),
    });
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Collect");
    grpc.client_streaming(
        tonic::Request::new(tokio_stream::iter(messages)),
        path,
        codec,
    )
    .await
}

#[tokio::test]
async fn a_client_stream_is_replayed_within_the_buffer_and_committed_beyond_it() {
    bounded(async {
        // 3 messages of 12 bytes on the wire each (a 5-byte prefix, a
        // 7-byte message): well under 1 KiB, replayed whole.
        let script = Script::new([Fault::TrailersOnly(14, None)]);
        let svc = ServiceBuilder::new()
            .layer(layer(1024).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let resp = collect(svc, 3, 5).await.unwrap();
        let got = script.received();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].body, got[1].body);
        assert_eq!(resp.get_ref().status as usize, got[1].body.len());

        // 4 messages of 400 bytes outgrow a 1 KiB buffer: sent once.
        let script = Script::new([Fault::TrailersOnly(14, None)]);
        let svc = ServiceBuilder::new()
            .layer(layer(1024).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let err = collect(svc, 4, 400).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        let got = script.received();
        assert_eq!(got.len(), 1);
        assert!(got[0].body.len() > 1600);
    })
    .await
    .unwrap();
}

/// A failed call's report existed only in the `on_attempt` hook: tonic
/// turns the failed response into a `Status`, and the response's
/// extensions go with it. A `CallReport` the caller puts in the request is
/// the one the layer fills.
#[tokio::test]
async fn a_failed_call_reports_its_attempts_to_the_caller() {
    bounded(async {
        let script = Script::new([
            Fault::TrailersOnly(14, None),
            Fault::TrailersOnly(14, None),
            Fault::TrailersOnly(14, None),
            Fault::TrailersOnly(14, None),
        ]);
        let svc = ServiceBuilder::new()
            .layer(layer(1 << 20).body(tonic::body::Body::new))
            .service(channel(&script).await);
        let mut client = HealthClient::new(svc);
        let report = CallReport::default();
        let mut req = tonic::Request::new(HealthCheckRequest::default());
        req.extensions_mut().insert(report.clone());
        let err = client.check(req).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unavailable);
        let s = report.get();
        assert_eq!(
            (s.attempts, s.reason, s.status),
            (4, Some(StopReason::AttemptsExhausted), Some(14))
        );
        assert_eq!(script.received().len(), 4);
    })
    .await
    .unwrap();
}
