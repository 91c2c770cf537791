//! The one reader of the hints an HTTP answer carries.
//!
//! Servers say more than `Retry-After` today. The OpenAI and Anthropic APIs
//! send `retry-after-ms` and `x-should-retry`, Azure sends
//! `x-ms-retry-after-ms`, and Envoy marks a 503 it made itself while
//! shedding load with `x-envoy-overloaded` (Envoy's router filter
//! documentation). Every front-end reads them here, once, into the facts of
//! a [`Failure`]; what they do to the call is the engine's decision
//! ([`Policy::decide`](crate::Policy::decide)).
//!
//! Precedence for the wait, first usable one wins: `retry-after-ms`,
//! `x-ms-retry-after-ms`, `Retry-After` (RFC 9110 §10.2.3), then, on a gRPC
//! answer, `grpc-retry-pushback-ms` and (feature `grpc`) the
//! `google.rpc.RetryInfo` of `grpc-status-details-bin`. The millisecond
//! headers and `RetryInfo` become a [`Hint::RetryAfter`], so they get the
//! clamps a `Retry-After` gets:
//! `max_retry_after`, the deadline, and up to one backoff step of jitter on
//! top. A malformed value is skipped for the next header and counted as an
//! invalid hint ([`Failure::invalid_hint`]); it never fails the call. A
//! gRPC pushback that says "do not retry" wins over any wait.

use std::time::SystemTime;

use http::header::{HeaderName, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::grpc::wire::GRPC_PUSHBACK;
#[cfg(feature = "grpc")]
use crate::grpc::wire::GRPC_STATUS_DETAILS;
use crate::outcome::hint::{
    parse_pushback, parse_retry_after_ms, parse_should_retry, retry_after_hint,
};
use crate::outcome::{Failure, Hint};

/// `retry-after-ms`: the wait in milliseconds (the header the OpenAI and
/// Anthropic SDKs read before `Retry-After`).
pub(crate) const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
/// `x-ms-retry-after-ms`: Azure's wait in milliseconds.
pub(crate) const MS_RETRY_AFTER_MS: HeaderName = HeaderName::from_static("x-ms-retry-after-ms");
/// `x-should-retry: true|false`: the server's own verdict on retrying.
pub(crate) const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");
/// `x-envoy-overloaded`: Envoy answered on its own while shedding load
/// (upstream circuit breaking or maintenance mode).
pub(crate) const ENVOY_OVERLOADED: HeaderName = HeaderName::from_static("x-envoy-overloaded");
/// `x-amzn-errortype`: the error code of an AWS service's answer
/// (`ThrottlingException`, or `CODE:URL`), which tells a throttle from
/// another 400.
pub(crate) const AMZN_ERROR_TYPE: HeaderName = HeaderName::from_static("x-amzn-errortype");
/// `x-envoy-attempt-count`: the 1-based attempt number Envoy stamps on each
/// try it sends upstream; above 1 the request is a mesh's retry.
pub(crate) const ENVOY_ATTEMPT_COUNT: HeaderName = HeaderName::from_static("x-envoy-attempt-count");

/// Adds to `failure` every hint `headers` carry: the wait (by the
/// precedence in the module doc), the server's `x-should-retry` verdict,
/// whether a proxy shed the request (`x-envoy-overloaded` on a 503), and
/// whether any hint was malformed. `grpc` says the answer carries a
/// `grpc-status`, so its pushback is read too. `now` is the wall-clock time
/// an HTTP-date is measured from.
pub(crate) fn read(
    mut failure: Failure,
    status: StatusCode,
    headers: &HeaderMap,
    grpc: bool,
    now: SystemTime,
) -> Failure {
    let mut invalid = false;
    let mut wait = http_wait(headers, now, &mut invalid);
    if grpc {
        wait = grpc_wait(headers, wait, &mut invalid);
    }
    failure.hint = wait.or(invalid.then_some(Hint::Invalid));
    if let Some(v) = headers.get(SHOULD_RETRY) {
        match text(v).and_then(|s| parse_should_retry(s).ok()) {
            Some(yes) => failure.should_retry = Some(yes),
            None => invalid = true,
        }
    }
    failure.invalid_hint = invalid;
    failure.overloaded =
        status == StatusCode::SERVICE_UNAVAILABLE && headers.contains_key(ENVOY_OVERLOADED);
    failure
}

/// Whether an answer is the server throttling the request: HTTP 429 (when
/// no `grpc-status` says otherwise), gRPC `RESOURCE_EXHAUSTED` (8), or an
/// AWS error code the SDKs count as throttling in `x-amzn-errortype`.
pub(crate) fn throttled(status: StatusCode, grpc_code: Option<u32>, headers: &HeaderMap) -> bool {
    let aws = || {
        headers
            .get(AMZN_ERROR_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(':').next().unwrap_or("").trim())
            .is_some_and(crate::guardrails::adaptive::is_throttling_error_code)
    };
    match grpc_code {
        Some(code) => code == 8 || aws(),
        None => status == StatusCode::TOO_MANY_REQUESTS || aws(),
    }
}

/// The first usable HTTP wait: `retry-after-ms`, `x-ms-retry-after-ms`,
/// then `Retry-After`; each malformed one met on the way sets `invalid`.
fn http_wait(headers: &HeaderMap, now: SystemTime, invalid: &mut bool) -> Option<Hint> {
    for (header, name) in [
        (RETRY_AFTER_MS, "retry-after-ms"),
        (MS_RETRY_AFTER_MS, "x-ms-retry-after-ms"),
    ] {
        let Some(v) = headers.get(&header) else {
            continue;
        };
        match text(v).and_then(|s| parse_retry_after_ms(name, s).ok()) {
            Some(d) => return Some(Hint::RetryAfter(d)),
            None => *invalid = true,
        }
    }
    match headers
        .get(RETRY_AFTER)
        .map(|v| text(v).map(|s| retry_after_hint(s, now)))
    {
        None => None,
        Some(Some(Hint::Invalid) | None) => {
            *invalid = true;
            None
        }
        Some(hint) => hint,
    }
}

/// The gRPC hints after the HTTP `wait`: `grpc-retry-pushback-ms`, then
/// (feature `grpc`) `google.rpc.RetryInfo` in `grpc-status-details-bin`. A
/// pushback that is not a wait is a "do not retry" (gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)): it wins over
/// any wait another header asked for.
fn grpc_wait(headers: &HeaderMap, mut wait: Option<Hint>, invalid: &mut bool) -> Option<Hint> {
    match headers
        .get(GRPC_PUSHBACK)
        .map(|v| text(v).map(parse_pushback))
    {
        Some(Some(Hint::Pushback(d))) => {
            wait.get_or_insert(Hint::Pushback(d));
        }
        None => {}
        Some(_) => return Some(Hint::DoNotRetry),
    }
    #[cfg(feature = "grpc")]
    if wait.is_none() {
        if let Some(v) = headers.get(GRPC_STATUS_DETAILS) {
            match crate::outcome::hint::parse_status_details(v.as_bytes()) {
                Ok(Some(d)) => wait = Some(Hint::RetryAfter(d)),
                Ok(None) => {}
                Err(_) => *invalid = true,
            }
        }
    }
    #[cfg(not(feature = "grpc"))]
    let _ = invalid;
    wait
}

/// A header's value as text, `None` when it is not visible ASCII.
fn text(v: &HeaderValue) -> Option<&str> {
    v.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Class;
    use std::time::Duration;

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    fn read_http(status: u16, pairs: &[(&'static str, &'static str)]) -> Failure {
        let status = StatusCode::from_u16(status).unwrap();
        read(
            Failure::transient(),
            status,
            &h(pairs),
            false,
            SystemTime::now(),
        )
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_usable_wait_wins_in_order() {
        let all = [
            ("retry-after-ms", "1500"),
            ("x-ms-retry-after-ms", "2500"),
            ("retry-after", "3"),
        ];
        let f = read_http(429, &all);
        assert_eq!(f.hint, Some(Hint::RetryAfter(1500 * MS)));
        assert!(!f.invalid_hint);
        let f = read_http(429, &all[1..]);
        assert_eq!(f.hint, Some(Hint::RetryAfter(2500 * MS)));
        let f = read_http(429, &all[2..]);
        assert_eq!(f.hint, Some(Hint::RetryAfter(3000 * MS)));
    }

    #[test]
    fn a_malformed_wait_is_skipped_and_counted() {
        let f = read_http(
            503,
            &[("retry-after-ms", "soon"), ("x-ms-retry-after-ms", "40")],
        );
        assert_eq!(f.hint, Some(Hint::RetryAfter(40 * MS)));
        assert!(f.invalid_hint && f.has_invalid_hint());
        let f = read_http(503, &[("retry-after-ms", "-1"), ("retry-after", "x")]);
        assert_eq!(f.hint, Some(Hint::Invalid));
        assert!(f.invalid_hint);
        let f = read_http(503, &[]);
        assert_eq!((f.hint, f.invalid_hint), (None, false));
    }

    #[test]
    fn should_retry_is_read_and_a_bad_one_counted() {
        assert_eq!(
            read_http(409, &[("x-should-retry", "true")]).should_retry,
            Some(true)
        );
        assert_eq!(
            read_http(503, &[("x-should-retry", "false")]).should_retry,
            Some(false)
        );
        let f = read_http(503, &[("x-should-retry", "perhaps")]);
        assert_eq!((f.should_retry, f.invalid_hint), (None, true));
        // A bad verdict is not a bad wait: the hint itself stays absent.
        assert_eq!(f.hint, None);
    }

    #[test]
    fn only_a_503_is_an_envoy_overload() {
        assert!(read_http(503, &[("x-envoy-overloaded", "true")]).overloaded);
        assert!(!read_http(503, &[]).overloaded);
        assert!(!read_http(429, &[("x-envoy-overloaded", "true")]).overloaded);
    }

    #[test]
    fn a_throttle_is_told_by_429_resource_exhausted_or_an_aws_code() {
        let none = h(&[]);
        assert!(throttled(StatusCode::TOO_MANY_REQUESTS, None, &none));
        assert!(!throttled(StatusCode::SERVICE_UNAVAILABLE, None, &none));
        assert!(throttled(StatusCode::OK, Some(8), &none));
        assert!(!throttled(StatusCode::TOO_MANY_REQUESTS, Some(14), &none));
        let aws = h(&[(
            "x-amzn-errortype",
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.coral.availability/",
        )]);
        assert!(throttled(StatusCode::BAD_REQUEST, None, &aws));
        let other = h(&[("x-amzn-errortype", "ValidationException")]);
        assert!(!throttled(StatusCode::BAD_REQUEST, None, &other));
    }

    #[test]
    fn grpc_pushback_comes_after_the_http_waits_but_its_no_wins() {
        let now = SystemTime::now();
        let grpc = |pairs| {
            read(
                Failure::new(Class::OnlyWithHint),
                StatusCode::OK,
                &h(pairs),
                true,
                now,
            )
        };
        let f = grpc(&[("grpc-retry-pushback-ms", "250")]);
        assert_eq!(f.hint, Some(Hint::Pushback(250 * MS)));
        let f = grpc(&[("retry-after-ms", "10"), ("grpc-retry-pushback-ms", "250")]);
        assert_eq!(f.hint, Some(Hint::RetryAfter(10 * MS)));
        let f = grpc(&[("retry-after-ms", "10"), ("grpc-retry-pushback-ms", "-1")]);
        assert_eq!(f.hint, Some(Hint::DoNotRetry));
        #[cfg(feature = "grpc")]
        {
            let details = crate::outcome::hint::encode_for_test(8, Some((1, 0)), false);
            let mut m = h(&[]);
            m.insert(GRPC_STATUS_DETAILS, details.parse().unwrap());
            let f = read(
                Failure::new(Class::OnlyWithHint),
                StatusCode::OK,
                &m,
                true,
                now,
            );
            assert_eq!(f.hint, Some(Hint::RetryAfter(1000 * MS)));
            // After the pushback in precedence.
            m.insert("grpc-retry-pushback-ms", HeaderValue::from_static("5"));
            let f = read(
                Failure::new(Class::OnlyWithHint),
                StatusCode::OK,
                &m,
                true,
                now,
            );
            assert_eq!(f.hint, Some(Hint::Pushback(5 * MS)));
            let mut m = h(&[]);
            m.insert(GRPC_STATUS_DETAILS, HeaderValue::from_static("%%"));
            let f = read(
                Failure::new(Class::OnlyWithHint),
                StatusCode::OK,
                &m,
                true,
                now,
            );
            assert_eq!((f.hint, f.invalid_hint), (Some(Hint::Invalid), true));
        }
        // Without a gRPC status the pushback is not read.
        let f = read_http(503, &[("grpc-retry-pushback-ms", "-1")]);
        assert_eq!(f.hint, None);
    }
}
