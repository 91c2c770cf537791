//! gRPC retries (feature `grpc`): a tower layer for tonic channels that
//! retries as gRPC's retry design (A6) says, the way grpc-go and grpc-java
//! do.
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
//! as a complete program; `README.md` shows it too.

use http::{HeaderMap, StatusCode};
use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use crate::classify::{grpc_code_listed, grpc_code_of_http};
use crate::hint::parse_pushback;
use crate::http::{grpc_status, GRPC_PUSHBACK};
use crate::outcome::{Failure, StopReason};

mod body;
mod call;
mod hedged;
mod layer;
mod method;
mod service;
mod shared;

pub use body::{CallReport, GrpcBody, Summary};
pub use layer::{RetryLayer, RetryLayerBuilder, MAX_TRANSPARENT_RETRIES};
pub use method::{MethodPolicy, MethodPolicyBuilder, MAX_ATTEMPTS};
pub use service::RetryService;
pub use shared::{MakeBody, Unchanged};

/// One attempt as reported to an
/// [`on_attempt`](RetryLayerBuilder::on_attempt) hook.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The attempt (1-based, transparent retries included).
    pub attempt: u32,
    /// Its gRPC status, when it got an answer (a proxy's HTTP error mapped).
    pub status: Option<u32>,
    /// Its transport error or timeout, when it got no answer.
    pub error: Option<String>,
    /// `grpc-retry-pushback-ms` as sent, when it is an integer.
    pub pushback_ms: Option<i64>,
    /// Whether the next attempt is a transparent retry (this one never left).
    pub transparent: bool,
    /// The wait before the next attempt; `None` when the call stops here.
    pub delay: Option<Duration>,
    /// Why the call stopped, when it stops here.
    pub stop: Option<StopReason>,
}

/// A hook shown every attempt.
pub(crate) type AttemptHook = Arc<dyn Fn(&AttemptRecord) + Send + Sync>;

/// The status of an attempt from its response head, when the head decides
/// it: a trailers-only answer's `grpc-status`, or a proxy's non-200 HTTP
/// status mapped to gRPC's code. `None` for a 200 without a status: the
/// messages and the status follow in the body.
pub(crate) fn attempt_status(status: StatusCode, headers: &HeaderMap) -> Option<u32> {
    grpc_status(headers)
        .or_else(|| (status != StatusCode::OK).then(|| grpc_code_of_http(status.as_u16())))
}

/// A failed status as the engine's facts: its class under the method's
/// `retryableStatusCodes` (or a hedging policy's `nonFatalStatusCodes`; a
/// method without a policy lists none, so nothing it returns is retried or
/// charged to throttling, as A6 says) and the server's pushback. Also
/// returns the pushback as sent, for reports.
pub(crate) fn status_failure(
    code: u32,
    headers: &HeaderMap,
    listed: Option<&[u32]>,
) -> (Failure, Option<i64>) {
    let class = grpc_code_listed(code, listed.unwrap_or(&[]));
    let raw = headers
        .get(GRPC_PUSHBACK)
        .map(|v| v.to_str().unwrap_or("?"));
    // A pushback speaks to a retry policy; a method without one has none
    // to hold back, nor a token to pay for it.
    let hint = raw.filter(|_| listed.is_some()).map(parse_pushback);
    let shown = raw.and_then(|s| s.trim().parse::<i64>().ok());
    (Failure::new(class).with_hint_opt(hint), shown)
}

/// Whether a transport error certainly happened before the request reached
/// the server: what [`http::never_sent`](crate::http::never_sent) knows (a
/// refused connection, a temporary DNS failure), or an HTTP/2 stream the
/// server refused before processing it (REFUSED_STREAM, which is also how a
/// GOAWAY reports the streams it did not process).
pub fn never_sent(error: &(dyn StdError + 'static)) -> bool {
    if crate::http::never_sent(error) {
        return true;
    }
    let mut cur: Option<&(dyn StdError + 'static)> = Some(error);
    for _ in 0..=32 {
        let Some(e) = cur else { break };
        // h2 spells REFUSED_STREAM this way in its errors.
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("refused stream") || text.contains("refused_stream") {
            return true;
        }
        cur = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Class, Hint};
    use http::HeaderValue;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn the_head_decides_trailers_only_and_proxy_answers() {
        assert_eq!(
            attempt_status(StatusCode::OK, &h(&[("grpc-status", "14")])),
            Some(14)
        );
        assert_eq!(attempt_status(StatusCode::OK, &h(&[])), None);
        assert_eq!(attempt_status(StatusCode::BAD_GATEWAY, &h(&[])), Some(14));
        assert_eq!(attempt_status(StatusCode::UNAUTHORIZED, &h(&[])), Some(16));
        assert_eq!(
            attempt_status(StatusCode::OK, &h(&[("grpc-status", "x")])),
            Some(2)
        );
    }

    #[test]
    fn pushback_is_a_hint_and_garbage_says_stop() {
        let (f, shown) = status_failure(14, &h(&[("grpc-retry-pushback-ms", "250")]), Some(&[14]));
        assert_eq!(f.hint, Some(Hint::Pushback(Duration::from_millis(250))));
        assert_eq!(shown, Some(250));
        let (f, shown) = status_failure(14, &h(&[("grpc-retry-pushback-ms", "-1")]), Some(&[14]));
        assert_eq!((f.hint, shown), (Some(Hint::DoNotRetry), Some(-1)));
        let (f, _) = status_failure(14, &h(&[("grpc-retry-pushback-ms", "soon")]), Some(&[14]));
        assert_eq!(f.hint, Some(Hint::DoNotRetry));
        assert_eq!(
            status_failure(13, &h(&[]), Some(&[14])).0.class,
            Class::Permanent
        );
        assert_eq!(
            status_failure(13, &h(&[]), Some(&[13])).0.class,
            Class::Transient
        );
    }

    #[test]
    fn a_refused_stream_never_left() {
        let e = h2::Error::from(h2::Reason::REFUSED_STREAM);
        assert!(never_sent(&e), "{e}");
        let e = h2::Error::from(h2::Reason::INTERNAL_ERROR);
        assert!(!never_sent(&e), "{e}");
    }
}
