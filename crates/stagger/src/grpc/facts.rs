//! The gRPC fact reader: what an attempt's response head, trailers or
//! transport error say, as the engine's facts — the status (from headers or
//! trailers, read by one function), its class under the method's codes, the
//! server's pushback, and whether the attempt never left the client.

use http::{HeaderMap, StatusCode};
use std::sync::Arc;
use std::time::Duration;

use super::wire::{grpc_status, GRPC_PUSHBACK};
use crate::classify::{grpc_code_listed, grpc_code_of_http};
use crate::outcome::hint::parse_pushback;
use crate::outcome::{Failure, StopReason};

/// One attempt as reported to an
/// [`on_attempt`](crate::tower::grpc::RetryLayerBuilder::on_attempt) hook.
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
/// charged to throttling, as [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) says) and the server's pushback. Also
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
    let mut failure = Failure::new(class);
    failure.hint = hint;
    failure.throttled = code == 8;
    (failure, shown)
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
    fn resource_exhausted_is_a_throttle_whether_or_not_it_is_retried() {
        assert!(status_failure(8, &h(&[]), None).0.throttled);
        assert!(status_failure(8, &h(&[]), Some(&[8])).0.throttled);
        assert!(!status_failure(14, &h(&[]), Some(&[14])).0.throttled);
    }
}
