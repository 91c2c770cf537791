//! gRPC's words on the wire, as every front-end and reader says them: the
//! headers (`grpc-status`, `grpc-timeout`, `grpc-retry-pushback-ms`,
//! `grpc-previous-rpc-attempts`, `grpc-status-details-bin`) and how an
//! answer is told to be gRPC. The HTTP reader calls these when it meets a
//! `grpc-status`; nothing else in the crate spells them.

use std::time::Duration;

use http::header::{HeaderName, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};

/// `grpc-timeout`: the caller's remaining time, gRPC's encoding.
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// `grpc-status`: a gRPC call's status code.
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-retry-pushback-ms`: a gRPC server's retry hint.
pub(crate) const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
/// `grpc-previous-rpc-attempts`: gRPC's count of attempts before this one.
pub(crate) const GRPC_PREVIOUS_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
/// Whether a request or response is gRPC (`content-type: application/grpc…`).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// The `grpc-status` a header map carries, if any: the one reading of that
/// header for every front-end (and for tools that count gRPC answers). A
/// value that is not a decimal number reads as UNKNOWN (2), as grpc-java
/// reads it.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use stagger::grpc::grpc_status;
///
/// let mut h = HeaderMap::new();
/// assert_eq!(grpc_status(&h), None);
/// h.insert("grpc-status", HeaderValue::from_static("14"));
/// assert_eq!(grpc_status(&h), Some(14));
/// h.insert("grpc-status", HeaderValue::from_static("fourteen"));
/// assert_eq!(grpc_status(&h), Some(2));
/// ```
pub fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    let v = headers.get(GRPC_STATUS)?;
    Some(
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(2),
    )
}

/// Whether a response is a failed gRPC call whose status travels in its
/// headers (a trailers-only answer): a `grpc-status` other than 0.
#[cfg(feature = "tower")]
pub(crate) fn is_grpc_failure(headers: &HeaderMap) -> bool {
    grpc_status(headers).is_some_and(|c| c != 0)
}

/// `grpc-status-details-bin`: a gRPC server's `google.rpc.Status`, whose
/// details may hold a `google.rpc.RetryInfo` (read with feature `grpc`).
#[cfg(feature = "grpc")]
pub(crate) const GRPC_STATUS_DETAILS: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");

/// The attempt number `grpc-previous-rpc-attempts` says a request is
/// (1-based: the count of earlier attempts plus one; a count of 0 is
/// valid), if it says one.
pub(crate) fn attempt_of_previous(headers: &HeaderMap) -> Option<u32> {
    let v = headers.get(GRPC_PREVIOUS_ATTEMPTS)?.to_str().ok()?.trim();
    if v.is_empty() || v.len() > 9 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<u32>().ok().map(|n| n.saturating_add(1))
}

/// Marks attempt `number` (1-based) with `grpc-previous-rpc-attempts`, the
/// count of attempts before it; the first attempt carries none.
pub(crate) fn mark_attempt(headers: &mut HeaderMap, number: u32) {
    if number > 1 {
        headers.insert(GRPC_PREVIOUS_ATTEMPTS, number_value(number - 1));
    }
}

/// A count or an attempt number as a header value (without allocating
/// for 0 to 9): `grpc-previous-rpc-attempts` here, `x-retry-attempt` in
/// the HTTP front-ends.
pub(crate) fn number_value(n: u32) -> HeaderValue {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match SMALL.get(n as usize) {
        Some(s) => HeaderValue::from_static(s),
        None => HeaderValue::from(n),
    }
}

/// `grpc-timeout` for the caller's `remaining` time.
pub(crate) fn timeout(remaining: Duration) -> (HeaderName, HeaderValue) {
    let v = crate::outcome::deadline::format_grpc_timeout(remaining);
    (
        GRPC_TIMEOUT,
        HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static("0n")),
    )
}
