//! Server hints: `Retry-After`, the millisecond waits (`retry-after-ms`,
//! `x-ms-retry-after-ms`), `x-should-retry`, gRPC retry pushback and (feature
//! `grpc`) `google.rpc.RetryInfo`.
//!
//! A hint is untrusted input. These parsers accept exactly what the
//! specifications allow and reject everything else, so a malformed value
//! falls back to the backoff (and is counted as an invalid hint) instead of
//! being guessed at. What a valid hint may do to a call — it can never extend
//! it past its deadline, beyond `max_retry_after`, or beyond max attempts —
//! is the decision engine's job ([`Policy::decide`](crate::Policy::decide)).
//!
//! The transports read every hint of a response at once
//! (`http::response_failure`, the gRPC layer's trailers reader); what a
//! caller handles is the result, a [`Hint`] on the [`Failure`](crate::Failure):
//!
//! ```
//! use stagger::hint::RetryAfter;
//! use std::time::{Duration, UNIX_EPOCH};
//!
//! // `Retry-After: Sun, 06 Nov 1994 08:49:37 GMT`, read 37 s before that.
//! let at = RetryAfter::At(UNIX_EPOCH + Duration::from_secs(784_111_777));
//! assert_eq!(at.wait(UNIX_EPOCH + Duration::from_secs(784_111_740)), Duration::from_secs(37));
//! // A date in the past asks for no wait at all.
//! assert_eq!(at.wait(UNIX_EPOCH + Duration::from_secs(784_111_800)), Duration::ZERO);
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

#[cfg(any(feature = "http", test, fuzzing))]
use crate::outcome::Hint;

/// The header parsers one by one, for the fuzz targets (`cargo fuzz` builds
/// with `--cfg fuzzing`); not part of the API, which reads them through the
/// transports' fact readers.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    use std::time::{Duration, SystemTime};

    use crate::outcome::hint::{InvalidHint, RetryAfter};
    use crate::Hint;

    pub fn format_timeout_ms(remaining: Duration) -> String {
        crate::outcome::deadline::format_timeout_ms(remaining)
    }
    pub fn parse_timeout_ms(value: &str) -> Option<Duration> {
        crate::outcome::deadline::parse_timeout_ms(value)
    }
    pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
        crate::outcome::deadline::parse_grpc_timeout(value)
    }
    pub fn parse_pushback(value: &str) -> Hint {
        crate::outcome::hint::parse_pushback(value)
    }
    pub fn parse_retry_after(value: &str) -> Result<RetryAfter, InvalidHint> {
        crate::outcome::hint::parse_retry_after(value)
    }
    pub fn retry_after_hint(value: &str, now: SystemTime) -> Hint {
        crate::outcome::hint::retry_after_hint(value, now)
    }
}

#[cfg(test)]
mod props;
#[cfg(feature = "grpc")]
mod status_details;
#[cfg(all(feature = "grpc", test))]
pub(crate) use status_details::encode_for_test;
#[cfg(feature = "grpc")]
pub(crate) use status_details::parse_status_details;

/// A parsed `Retry-After` value (RFC 9110 §10.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// `delay-seconds`. Values too large for a `Duration` saturate.
    Delay(Duration),
    /// An `HTTP-date`.
    At(SystemTime),
}

impl RetryAfter {
    /// The wait this value asks for, given the current wall-clock time. A
    /// date in the past means no wait.
    pub fn wait(&self, now: SystemTime) -> Duration {
        match *self {
            RetryAfter::Delay(d) => d,
            RetryAfter::At(t) => t.duration_since(now).unwrap_or(Duration::ZERO),
        }
    }
}

/// Why a hint was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidHint {
    header: &'static str,
    value: String,
    expected: &'static str,
}

impl InvalidHint {
    #[cfg(any(feature = "http", test, fuzzing))]
    fn new(header: &'static str, value: &str) -> Self {
        Self::expecting(header, value, "a non-negative integer or an HTTP-date")
    }

    #[cfg(any(feature = "http", test, fuzzing))]
    fn expecting(header: &'static str, value: &str, expected: &'static str) -> Self {
        // Keep error messages bounded whatever the server sent.
        let value: String = value.chars().take(64).collect();
        InvalidHint {
            header,
            value,
            expected,
        }
    }

    /// The header the value came from.
    pub fn header(&self) -> &'static str {
        self.header
    }
}

impl fmt::Display for InvalidHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} value {:?}: expected {}",
            self.header, self.value, self.expected
        )
    }
}

impl std::error::Error for InvalidHint {}

/// Parses a `Retry-After` field value: `delay-seconds` (one or more ASCII
/// digits, nothing else) or an HTTP-date in any of the three forms a
/// recipient must accept — IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
/// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
/// (`Sun Nov  6 08:49:37 1994`). Surrounding whitespace is allowed; signs,
/// fractions, units and anything else are rejected.
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn parse_retry_after(value: &str) -> Result<RetryAfter, InvalidHint> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    if v.is_empty() {
        return Err(InvalidHint::new("Retry-After", value));
    }
    if v.bytes().all(|b| b.is_ascii_digit()) {
        let d = digits_u64(v).map_or(Duration::MAX, Duration::from_secs);
        return Ok(RetryAfter::Delay(d));
    }
    // httpdate accepts exactly the three RFC 9110 forms; ASCII only, bounded length.
    if v.len() > 40 || !v.is_ascii() {
        return Err(InvalidHint::new("Retry-After", value));
    }
    httpdate::parse_http_date(v)
        .map(RetryAfter::At)
        .map_err(|_| InvalidHint::new("Retry-After", value))
}

/// The value of a string of ASCII digits, `None` if it overflows `u64`.
#[cfg(any(feature = "http", test, fuzzing))]
fn digits_u64(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |n, b| {
        n.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Parses `grpc-retry-pushback-ms`: a non-negative integer is a pushback of
/// that many milliseconds; a negative or unparseable value means the server
/// asks not to be retried (gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)).
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn parse_pushback(value: &str) -> Hint {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        Hint::Pushback(digits_u64(v).map_or(Duration::MAX, Duration::from_millis))
    } else {
        Hint::DoNotRetry
    }
}

/// Parses a wait in milliseconds, as `retry-after-ms` (the header the
/// OpenAI and Anthropic SDKs read) and Azure's `x-ms-retry-after-ms` carry
/// it: ASCII digits, optionally followed by `.` and more digits (the SDKs
/// read the value as a decimal number; digits past the nanosecond are
/// dropped). Surrounding whitespace is allowed; a sign, an exponent, a unit
/// or anything else is rejected. Values too large for a `Duration`
/// saturate.
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn parse_retry_after_ms(
    header: &'static str,
    value: &str,
) -> Result<Duration, InvalidHint> {
    let bad = || InvalidHint::expecting(header, value, "a non-negative number of milliseconds");
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    let (whole, frac) = match v.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (v, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || frac.is_some_and(|f| !digits(f)) {
        return Err(bad());
    }
    let Some(ms) = digits_u64(whole) else {
        return Ok(Duration::MAX);
    };
    // The first six digits of the fraction are nanoseconds.
    let sub_ns = frac.map_or(0, |f| {
        f.bytes()
            .chain(std::iter::repeat(b'0'))
            .take(6)
            .fold(0u64, |n, b| n * 10 + u64::from(b - b'0'))
    });
    Ok(Duration::from_millis(ms).saturating_add(Duration::from_nanos(sub_ns)))
}

/// Parses `x-should-retry`: `true` or `false` (any case, surrounding
/// whitespace allowed); anything else is malformed.
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn parse_should_retry(value: &str) -> Result<bool, InvalidHint> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    if v.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if v.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(InvalidHint::expecting(
            "x-should-retry",
            value,
            "`true` or `false`",
        ))
    }
}

/// Turns a `Retry-After` header value into a [`Hint`] for the decision
/// engine: the wait it asks for, or [`Hint::Invalid`] when it is malformed.
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn retry_after_hint(value: &str, now: SystemTime) -> Hint {
    match parse_retry_after(value) {
        Ok(r) => Hint::RetryAfter(r.wait(now)),
        Err(_) => Hint::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn example_parse_retry_after_ms() {
        use std::time::Duration;

        assert_eq!(
            parse_retry_after_ms("retry-after-ms", "1500"),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after_ms("retry-after-ms", "0.25"),
            Ok(Duration::from_micros(250))
        );
        assert!(parse_retry_after_ms("x-ms-retry-after-ms", "-5").is_err());
    }

    #[test]
    fn example_parse_should_retry() {
        assert_eq!(parse_should_retry("true"), Ok(true));
        assert_eq!(parse_should_retry(" FALSE "), Ok(false));
        assert!(parse_should_retry("1").is_err());
    }

    #[test]
    fn three_date_forms_parse_to_the_same_instant() {
        let want = RetryAfter::At(UNIX_EPOCH + Duration::from_secs(784_111_777));
        for v in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse_retry_after(v), Ok(want), "{v}");
        }
    }

    #[test]
    fn rejects_what_rfc_9110_does_not_allow() {
        for v in [
            "-5",
            "1.5",
            "soon",
            "",
            " ",
            "+5",
            "5s",
            "0x10",
            "1e3",
            "5 5",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "06 Nov 1994",
            "١٢",
        ] {
            assert!(parse_retry_after(v).is_err(), "{v:?} accepted");
        }
    }

    #[test]
    fn delay_seconds() {
        assert_eq!(
            parse_retry_after("0"),
            Ok(RetryAfter::Delay(Duration::ZERO))
        );
        assert_eq!(
            parse_retry_after(" 3600 "),
            Ok(RetryAfter::Delay(Duration::from_secs(3600)))
        );
        assert_eq!(
            parse_retry_after("99999999999999999999999999"),
            Ok(RetryAfter::Delay(Duration::MAX))
        );
    }

    #[test]
    fn date_waits_are_relative_to_now() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(
            retry_after_hint("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Hint::RetryAfter(Duration::from_secs(7))
        );
        let later = now + Duration::from_secs(100);
        assert_eq!(
            retry_after_hint("Sun, 06 Nov 1994 08:49:37 GMT", later),
            Hint::RetryAfter(Duration::ZERO)
        );
        assert_eq!(retry_after_hint("soon", now), Hint::Invalid);
    }

    #[test]
    fn millisecond_waits_accept_integers_and_decimals_only() {
        let p = |v| parse_retry_after_ms("retry-after-ms", v);
        assert_eq!(p("0"), Ok(Duration::ZERO));
        assert_eq!(p(" 250 "), Ok(Duration::from_millis(250)));
        assert_eq!(p("1.5"), Ok(Duration::from_micros(1500)));
        assert_eq!(p("2.0000019"), Ok(Duration::from_nanos(2_000_001)));
        assert_eq!(p("99999999999999999999999"), Ok(Duration::MAX));
        for v in [
            "", " ", "-1", "+1", "1e3", "1.", ".5", "5ms", "1.2.3", "0x10", "١٢",
        ] {
            let e = p(v).expect_err(v);
            assert_eq!(e.header(), "retry-after-ms");
            assert!(e.to_string().contains("milliseconds"), "{e}");
        }
    }

    #[test]
    fn should_retry_is_true_or_false() {
        assert_eq!(parse_should_retry("True"), Ok(true));
        assert_eq!(parse_should_retry("false"), Ok(false));
        for v in ["", "yes", "0", "true false"] {
            assert!(parse_should_retry(v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn pushback() {
        assert_eq!(
            parse_pushback("250"),
            Hint::Pushback(Duration::from_millis(250))
        );
        assert_eq!(parse_pushback("0"), Hint::Pushback(Duration::ZERO));
        assert_eq!(parse_pushback("-1"), Hint::DoNotRetry);
        assert_eq!(parse_pushback("abc"), Hint::DoNotRetry);
        assert_eq!(parse_pushback(""), Hint::DoNotRetry);
        assert_eq!(
            parse_pushback("99999999999999999999999"),
            Hint::Pushback(Duration::MAX)
        );
    }
}
