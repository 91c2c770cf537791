//! tower layers (feature `tower`): retries on the client side (HTTP here, and
//! gRPC as A6 says in [`grpc`], feature `grpc`), deadlines and
//! load shedding on the server side.
//!
//! tower's own `Retry` leaves the policy to you: no backoff, jitter cloned
//! between requests, a budget that truncates its ratio, and nothing for the
//! bodies it cannot clone. [`RetryLayer`] is a ready policy for any
//! `Service<http::Request<ReplayBody<B>>>` that applies every rule of [`crate::http`]
//! (the inner service takes the layer's [`ReplayBody`], the copy it can send
//! again; see there for a service that wants its own body type):
//!
//! - **what**: statuses, methods and transport errors are classified by
//!   [`crate::http`]; POST and PATCH are retried only with an
//!   `Idempotency-Key`, which the layer can add (the same one on every
//!   attempt) with [`idempotency_keys`](crate::http::Settings::idempotency_keys);
//! - **when**: the policy's jittered backoff, never sooner than
//!   `Retry-After` or gRPC pushback, never past the deadline or
//!   `max_retry_after`;
//! - **bodies**: a body of at most 1 MiB (configurable) is buffered and
//!   replayed; a larger one, or a stream of unknown length, is sent once and
//!   the call is not retried — [`RetryInfo::not_retried`] says why;
//! - **headers**: each attempt carries `x-retry-attempt: N` and the time it
//!   has left as `x-request-timeout-ms` (`grpc-timeout` for gRPC);
//! - **timeouts**: each attempt gets `min(attempt_timeout, remaining)`, on
//!   tokio's timer;
//! - **sharing**: clones share the policy, and with it any budget, breaker
//!   and observer;
//! - **per request**: a [`CallOptions`] in the request's extensions
//!   overrides the policy, deadline, idempotency or 500 handling;
//! - **reporting**: the final response carries a [`RetryInfo`] (attempts,
//!   stop reason, why not retried, time waited) in its extensions; an
//!   [`Error`] carries the same.
//!
//! Hedging is a setting of the same layer
//! ([`Settings::hedging`](crate::http::Settings::hedging)): an idempotent
//! request gets a second attempt while the first is slow, under a
//! [`HedgePolicy`](crate::HedgePolicy), and the first success wins. There is
//! one loop of attempts per call either way, so there is no second layer to
//! stack; a stagger layer called by a stagger layer above it (in that
//! layer's attempt, with no server layer between them) sends each request
//! once and leaves the attempts to that layer, so stacked layers never
//! multiply attempts. A [`DeadlineLayer`] or [`ShedLayer`] between them
//! starts a new hop: the layer below it retries by the one-layer rule.
//!
//! On the server side, [`DeadlineLayer`] makes the caller's deadline and
//! attempt number those of the work done for the request (so the client
//! layer, called while serving it, follows the one-layer rule), and
//! [`ShedLayer`] bounds concurrency and sheds retries before first attempts
//! (with [`priorities`](ShedBuilder::priorities), the lowest level first,
//! and with [`cpu`](ShedBuilder::cpu), when the CPU runs hot as well).
//!
//! ```
//! use stagger::Backoff;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use bytes::Bytes;
//! use stagger::http::RetryInfo;
//! use stagger::tower::RetryLayer;
//! use stagger::{Policy, StopReason};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tower::{Layer, Service, ServiceExt};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! # rt.block_on(async {
//! // A flaky service: 503 twice, then 200.
//! let seen = Arc::new(AtomicU32::new(0));
//! let counter = seen.clone();
//! let flaky = tower::service_fn(move |_req: Request<_>| {
//!     let n = counter.fetch_add(1, Ordering::SeqCst);
//!     async move {
//!         let status = if n < 2 { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::OK };
//!         let mut resp = Response::new(());
//!         *resp.status_mut() = status;
//!         Ok::<_, std::convert::Infallible>(resp)
//!     }
//! });
//! let policy = Policy::builder().backoff(Backoff { base: Duration::from_millis(1), ..Backoff::new() }).build().unwrap();
//! let mut client = RetryLayer::new(policy).layer(flaky);
//! let req = Request::get("http://example.invalid/").body(Full::<Bytes>::default()).unwrap();
//! let resp = client.ready().await.unwrap().call(req).await.unwrap();
//! assert_eq!(resp.status(), StatusCode::OK);
//! let info = resp.extensions().get::<RetryInfo>().unwrap();
//! assert_eq!((info.attempts, info.reason), (3, StopReason::Success));
//! # });
//! ```
//!
//! [`RetryInfo`]: crate::http::RetryInfo
//! [`RetryInfo::not_retried`]: crate::http::RetryInfo::not_retried
//! [`CallOptions`]: crate::http::CallOptions

mod body;
mod breaker_admin;
mod deadline;
mod error;
mod future;
#[cfg(feature = "grpc")]
pub mod grpc;
mod layer;
mod service;
mod shed;

#[cfg(feature = "grpc")]
pub(crate) use body::Replay;
pub use body::ReplayBody;
pub use breaker_admin::BreakerAdmin;
pub use deadline::{DeadlineLayer, DeadlineService};
pub(crate) use error::BoxError;
pub use error::{Error, ErrorKind};
pub use future::ResponseFuture;
#[cfg(feature = "grpc")]
pub(crate) use future::Sending;
pub(crate) use future::{as_new_hop, nested};
pub use layer::RetryLayer;
pub use service::RetryService;
pub use shed::{ShedBuilder, ShedFuture, ShedLayer, ShedService, ShedStats};
