//! What retries did: the [`Event`](crate::Event)s every policy tells its
//! [`Observer`](crate::Observer), the in-process stats and the retry-ratio
//! SLI, and their [`export`]s (metrics, tracing, OpenTelemetry).

pub(crate) mod event;
pub mod export;
#[cfg(feature = "opentelemetry")]
pub(crate) mod otel;
pub(crate) mod sli;
