//! The gRPC driver: a tower layer for tonic channels that retries as gRPC's
//! retry design ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md))
//! says, the way grpc-go and grpc-java do, applying each method's
//! [`MethodPolicy`](crate::grpc::MethodPolicy), the rules the gRPC fact
//! reader ([`grpc`](crate::grpc)) holds.
//!
//! tonic has no retries of its own and ignores a service config's
//! `retryPolicy`; `tower::retry` cannot clone a tonic request and never sees
//! a status that arrives in trailers. [`RetryLayer`] sits between a tonic
//! `Client` and its `Channel` and follows A6 (docs/behaviour.md §11):
//!
//! - **policy per method** from a service config
//!   ([`RetryLayer::from_service_config`]: exact name, then service, then the
//!   default entry) or set in code ([`MethodPolicy`](crate::grpc::MethodPolicy)); `maxAttempts` capped
//!   at 5; delays `min(initial·mult^(n-1), max) · U(0.8, 1.2)`, full jitter
//!   on request; only `retryableStatusCodes` are retried;
//! - **commitment**: a trailers-only answer (its `grpc-status` in the
//!   headers) may be retried; once response headers arrive without a status,
//!   the call is committed and the response streams to the caller, its
//!   trailers' status still reported to the channel's throttling and to the
//!   [`CallReport`]; a request body over the replay buffer (1 MiB per call
//!   by default) commits the call too. Bodies are buffered and replayed,
//!   never required to be `Clone`;
//! - **server hints**: `grpc-retry-pushback-ms` waits exactly that long and
//!   restarts the backoff; a negative or malformed value stops the call;
//! - **headers**: `grpc-timeout` is the time left on every attempt and
//!   `grpc-previous-rpc-attempts` counts the earlier ones;
//! - **throttling**: one `retryThrottling` token bucket per layer (one
//!   channel), shared by all its methods;
//! - **transparent retries**: an attempt that never left the client (a
//!   refused connection, HTTP/2 REFUSED_STREAM) is retried with backoff
//!   within the deadline, up to 10 per call, outside `maxAttempts` and
//!   throttling;
//! - **hedging**: a method with A6's `hedgingPolicy`
//!   ([`MethodPolicy::hedging`](crate::grpc::MethodPolicy::hedging)) sends attempts `hedgingDelay` apart, side
//!   by side, driven by the [`HedgePolicy`](crate::HedgePolicy) engine: the
//!   first answer with headers or a fatal status wins, the rest are
//!   cancelled (docs/behaviour.md §12);
//! - **proxies**: a plain HTTP error without `grpc-status` is read as gRPC
//!   maps it (400 INTERNAL, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED,
//!   404 UNIMPLEMENTED, 429/502/503/504 UNAVAILABLE, else UNKNOWN).
//!
//! The layer only reports facts; the decision engine ([`Policy`](crate::Policy))
//! decides. With tonic (a dev-dependency here, your dependency there):
//!
//! ```no_run
//! # #[cfg(feature = "serde")]
//! # async fn demo(json: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let config = stagger::config::ServiceConfig::from_json(json)?;
//! let layer = stagger::tower::grpc::RetryLayer::from_service_config(&config)?
//!     .body(tonic::body::Body::new);
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
//! let stack = tower::ServiceBuilder::new().layer(layer).service(channel);
//! let mut client = tonic_health::pb::health_client::HealthClient::new(stack);
//! client.check(tonic_health::pb::HealthCheckRequest::default()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! The repository's `crates/stagger/examples/grpc_client.rs` is the same
//! as a complete program; `docs/grpc.md` shows it too.

mod body;
mod call;
mod layer;
mod service;
mod shared;

// What the driver reads with: the gRPC fact reader's words and rules.
use crate::grpc::AttemptRecord;
use crate::grpc::{attempt_status, grpc_status, method, status_failure, wire, AttemptHook};
use crate::http::never_sent;

pub use body::{CallReport, GrpcBody, Summary};
pub use layer::{RetryLayer, RetryLayerBuilder};
pub use service::RetryService;
