//! A tonic client whose calls are retried as gRPC's A6 says, with the
//! policy from a service config: `cargo run -p stagger --features grpc,serde
//! --example grpc_client`.
//!
//! It starts a tonic-health server on 127.0.0.1, then calls
//! `grpc.health.v1.Health/Check` through the stagger layer and prints what
//! the layer reports.

use stagger::config::ServiceConfig;
use stagger::tower::grpc::{CallReport, RetryLayer};
use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::ServiceBuilder;

const SERVICE_CONFIG: &str = r#"{
  "methodConfig": [{
    "name": [{ "service": "grpc.health.v1.Health" }],
    "timeout": "2s",
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }],
  "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A server to talk to.
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health)
            .serve_with_incoming(incoming),
    );

    // The client: a tonic channel under the stagger layer. One layer is one
    // channel: its throttling bucket is shared by every method.
    let config = ServiceConfig::from_json(SERVICE_CONFIG)?;
    let layer = RetryLayer::from_service_config(&config)?.body(tonic::body::Body::new);
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = HealthClient::new(ServiceBuilder::new().layer(layer).service(channel));

    let resp = client.check(HealthCheckRequest::default()).await?;
    let report = resp.extensions().get::<CallReport>().map(CallReport::get);
    println!("status {:?}, {report:?}", resp.get_ref().status());
    drop(reporter);
    Ok(())
}
