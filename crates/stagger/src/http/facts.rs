//! How an HTTP (or trailers-only gRPC) answer bears on retrying: the one
//! reader of a response's status and hint headers.

use std::time::SystemTime;

use http::{HeaderMap, StatusCode};

use super::{hints, NO_RETRY};
use crate::classify;
use crate::grpc::grpc_status;
use crate::outcome::Failure;

/// Reads how a response bears on retrying: `None` when it is not a failure
/// (1xx–3xx, or `grpc-status: 0`), else the failure with any hint the server
/// gave.
///
/// - A `grpc-status` header (a trailers-only gRPC answer) is classified by
///   gRPC's rules; otherwise the status is classified by
///   docs/behaviour.md §2 (`retry_500` opts 500 in).
/// - The wait is the first usable one of `retry-after-ms`,
///   `x-ms-retry-after-ms`, `Retry-After` (relative to `now` for a date)
///   and, on a gRPC answer, `grpc-retry-pushback-ms`; a malformed one is
///   skipped and counted ([`Failure::invalid_hint`]; [`Hint::Invalid`](crate::Hint::Invalid) when
///   no usable wait came instead).
/// - `x-should-retry` becomes [`Failure::should_retry`], and a 503 with
///   `x-envoy-overloaded` is [`Failure::overloaded`].
/// - `x-no-retry` on a failure states that a layer below already retried
///   it and gave up ([`Failure::gave_up_below`]): the one-layer rule.
///
/// The answer is read alone, as if its request carried no
/// `Idempotency-Key`: a 409 is permanent here. The retry layers, which see
/// the request too, read a 409 answering a keyed request as "the same key
/// is still in flight", retried after the server's wait (docs/behaviour.md
/// §2).
pub fn response_failure(
    status: StatusCode,
    headers: &HeaderMap,
    retry_500: bool,
    now: SystemTime,
) -> Option<Failure> {
    let failure = raw_response_failure(status, headers, retry_500, false, now)?;
    Some(no_retry(failure, headers))
}

/// The one reading of [`NO_RETRY`]: a failure answered with it is one a
/// layer below already retried and gave up on.
#[inline]
pub(crate) fn no_retry(mut failure: Failure, headers: &HeaderMap) -> Failure {
    failure.gave_up_below |= headers.contains_key(NO_RETRY);
    failure
}

/// [`response_failure`] without the [`NO_RETRY`] rule: the class and the
/// hint exactly as the status and hint headers say. The front-ends apply
/// `NO_RETRY` themselves, and only while the one-layer rule is on, so that
/// turning the rule off leaves a `Retry-After` in force. `keyed` says the
/// request carried an `Idempotency-Key` (see [`classify::http_failure`]).
pub(crate) fn raw_response_failure(
    status: StatusCode,
    headers: &HeaderMap,
    retry_500: bool,
    keyed: bool,
    now: SystemTime,
) -> Option<Failure> {
    let code = grpc_status(headers);
    let class = match code {
        Some(0) => return None,
        Some(c) => classify::grpc_code(c),
        None => classify::http_failure(status.as_u16(), retry_500, keyed)?,
    };
    let mut failure = hints::read(Failure::new(class), status, headers, code.is_some(), now);
    failure.throttled = hints::throttled(status, code, headers);
    Some(failure)
}
