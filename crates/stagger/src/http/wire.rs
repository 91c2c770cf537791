//! The headers a retried HTTP request carries and an inbound one is read
//! by: the attempt number, the key that makes a write repeatable, the
//! remaining time, the priority and the one-layer rule's `x-no-retry`.

use std::time::Duration;

use http::header::HeaderName;
use http::{HeaderMap, HeaderValue};

use super::hints::ENVOY_ATTEMPT_COUNT;

/// `x-retry-attempt: N`: the 1-based number of the attempt a request is.
pub const RETRY_ATTEMPT: HeaderName = HeaderName::from_static("x-retry-attempt");
/// `Idempotency-Key`: makes a POST or PATCH safe to repeat.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `x-request-timeout-ms`: the caller's remaining time, in whole milliseconds.
pub const REQUEST_TIMEOUT: HeaderName =
    HeaderName::from_static(crate::outcome::deadline::REQUEST_TIMEOUT_HEADER);
/// `x-criticality`: the request's [`Priority`](crate::priority::Priority),
/// also its gRPC metadata key (docs/behaviour.md §16).
pub(crate) const PRIORITY: HeaderName = HeaderName::from_static(crate::priority::HEADER);
/// `x-no-retry: 1` on a failure response: a layer below already retried this
/// failure (or was told not to), so the caller should fail fast and pass it
/// up instead of multiplying the attempts (the one-layer rule).
pub(crate) const NO_RETRY: HeaderName = HeaderName::from_static("x-no-retry");

/// Parses `x-retry-attempt` (or any 1-based attempt count): 1 to 9 ASCII
/// digits, at least 1; else `None`.
///
/// ```
/// use http::HeaderValue;
/// use stagger::http::parse_attempt;
/// assert_eq!(parse_attempt(&HeaderValue::from_static("2")), Some(2));
/// assert_eq!(parse_attempt(&HeaderValue::from_static("0")), None);
/// assert_eq!(parse_attempt(&HeaderValue::from_static("two")), None);
/// ```
pub fn parse_attempt(value: &HeaderValue) -> Option<u32> {
    let v = value.to_str().ok()?.trim_matches(|c| c == ' ' || c == '\t');
    if v.is_empty() || v.len() > 9 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().filter(|n| *n >= 1)
}

/// The attempt number a request says it is (1-based): the highest of
/// `x-retry-attempt`, Envoy's `x-envoy-attempt-count` and gRPC's
/// `grpc-previous-rpc-attempts` plus one, else 1. Server layers read it to
/// tell retries from first attempts, whichever protocol the caller speaks
/// and whichever hop retried: a first attempt of ours that a mesh proxy
/// retried is a retry all the same.
pub(crate) fn inbound_attempt(headers: &HeaderMap) -> u32 {
    let ours = headers.get(RETRY_ATTEMPT).and_then(parse_attempt);
    let envoy = headers.get(ENVOY_ATTEMPT_COUNT).and_then(parse_attempt);
    let grpc = crate::grpc::wire::attempt_of_previous(headers);
    [ours, envoy, grpc].into_iter().flatten().max().unwrap_or(1)
}

/// The remaining-time header a request should carry: `grpc-timeout` for
/// gRPC, `x-request-timeout-ms` otherwise.
pub(crate) fn timeout_header(grpc: bool, remaining: Duration) -> (HeaderName, HeaderValue) {
    if grpc {
        crate::grpc::wire::timeout(remaining)
    } else {
        let ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        (REQUEST_TIMEOUT, HeaderValue::from(ms))
    }
}

/// Attempt `body`'s request: the original request's head with this body.
#[cfg(feature = "tower")]
pub(crate) fn rebuild<B>(parts: &http::request::Parts, body: B) -> http::Request<B> {
    let mut req = http::Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    *req.extensions_mut() = parts.extensions.clone();
    req
}
