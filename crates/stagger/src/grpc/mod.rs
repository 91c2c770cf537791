//! gRPC retries as gRPC's retry design ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)) says, the way grpc-go and
//! grpc-java do: one method's policy, [`MethodPolicy`] (with feature
//! `grpc` or `serde`: it is also what a service config's `retryPolicy` or
//! `hedgingPolicy` reads as), and with feature `grpc` a tower layer for
//! tonic channels that applies it.
//!
//! tonic has no retries of its own and ignores a service config's
//! `retryPolicy`; `tower::retry` cannot clone a tonic request and never sees
//! a status that arrives in trailers. [`RetryLayer`] sits between a tonic
//! `Client` and its `Channel` and follows A6 (docs/behaviour.md §11):
//!
//! - **policy per method** from a service config
//!   ([`RetryLayer::from_service_config`]: exact name, then service, then the
//!   default entry) or set in code ([`MethodPolicy`]); `maxAttempts` capped
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
//!   ([`MethodPolicy::hedging`]) sends attempts `hedgingDelay` apart, side
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
//! let layer = stagger::grpc::RetryLayer::from_service_config(&config)?
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

#[cfg(feature = "grpc")]
mod body;
#[cfg(feature = "grpc")]
mod call;
#[cfg(feature = "grpc")]
mod facts;
#[cfg(feature = "grpc")]
mod layer;
#[cfg(any(feature = "grpc", feature = "serde"))]
mod method;
#[cfg(feature = "grpc")]
mod service;
#[cfg(feature = "grpc")]
mod shared;
#[cfg(feature = "http")]
pub(crate) mod wire;

#[cfg(feature = "grpc")]
pub use body::{CallReport, GrpcBody, Summary};
#[cfg(feature = "grpc")]
pub(crate) use facts::never_sent;
#[cfg(feature = "grpc")]
pub use facts::AttemptRecord;
#[cfg(feature = "grpc")]
pub(crate) use facts::{attempt_status, status_failure, AttemptHook};
#[cfg(feature = "grpc")]
pub use layer::{RetryLayer, RetryLayerBuilder};
#[cfg(any(feature = "grpc", feature = "serde"))]
pub use method::{MethodPolicy, MethodPolicyBuilder};
#[cfg(feature = "grpc")]
pub use service::RetryService;
#[cfg(feature = "http")]
pub use wire::{grpc_status, is_grpc};
