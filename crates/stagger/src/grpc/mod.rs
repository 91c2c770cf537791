//! The gRPC fact reader: gRPC's words on the wire ([`grpc_status`],
//! [`is_grpc`], the headers A6 names) and one method's policy as gRPC's
//! retry design ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md))
//! states it, [`MethodPolicy`] (with feature `grpc` or `serde`: it is also
//! what a service config's `retryPolicy` or `hedgingPolicy` reads as).
//!
//! The tower layer for tonic channels that applies it is a driver:
//! `stagger::tower::grpc::RetryLayer` (feature `grpc`).

#[cfg(feature = "grpc")]
mod facts;
#[cfg(any(feature = "grpc", feature = "serde"))]
pub(crate) mod method;
#[cfg(feature = "http")]
pub(crate) mod wire;

#[cfg(feature = "grpc")]
pub use facts::AttemptRecord;
#[cfg(feature = "grpc")]
pub(crate) use facts::{attempt_status, status_failure, AttemptHook};
#[cfg(any(feature = "grpc", feature = "serde"))]
pub use method::{MethodPolicy, MethodPolicyBuilder};
#[cfg(feature = "http")]
pub use wire::{grpc_status, is_grpc};
