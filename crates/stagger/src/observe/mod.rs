//! What retries did, as the [`Event`](crate::Event)s every policy tells its
//! [`Observer`](crate::Observer) show it: the retry-ratio SLI and the
//! [`export`]s (metrics, tracing, OpenTelemetry).

pub mod export;
#[cfg(feature = "opentelemetry")]
pub(crate) mod otel;
pub(crate) mod sli;
