//! HTTP rules (feature `http`): which responses and errors are worth
//! retrying, which requests may be repeated, and the headers retries speak.
//!
//! A retry layer that only sees "error or not" retries a `400` as eagerly as
//! a `503`, repeats a `POST` that may already have charged a card, and
//! ignores the server telling it when to come back. This module turns what
//! an HTTP exchange carries into the [`Failure`] the decision engine
//! understands, with these rules (`docs/behaviour.md` in the repository has each in full):
//!
//! - statuses: 502/503/504 and 429 are transient, 408 and timeouts are
//!   "result unknown", 500 is retried only on request, every other 4xx never;
//! - methods: GET, HEAD, OPTIONS, TRACE, PUT and DELETE may be repeated;
//!   POST and PATCH only with an `Idempotency-Key` ([`new_idempotency_key`]
//!   makes one: a UUID v4 written as a quoted string);
//! - hints: `retry-after-ms`, `x-ms-retry-after-ms`, `Retry-After`,
//!   `grpc-retry-pushback-ms`, `x-should-retry` and Envoy's
//!   `x-envoy-overloaded`, read by one reader through the parsers of
//!   [`hint`](crate::outcome::hint), never re-implemented;
//! - headers that travel with each attempt: [`RETRY_ATTEMPT`],
//!   [`REQUEST_TIMEOUT`] / `grpc-timeout`, and the `x-no-retry` answer of
//!   a layer below that already retried (the one-layer rule).
//!
//! ```
//! use http::{HeaderMap, HeaderValue, StatusCode};
//! use stagger::http::response_failure;
//! use stagger::{Class, Hint};
//! use std::time::{Duration, SystemTime};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("2"));
//! let f = response_failure(StatusCode::TOO_MANY_REQUESTS, &headers, false, SystemTime::now()).unwrap();
//! assert_eq!(f.class, Class::Transient);
//! assert_eq!(f.hint, Some(Hint::RetryAfter(Duration::from_secs(2))));
//!
//! assert!(response_failure(StatusCode::OK, &HeaderMap::new(), false, SystemTime::now()).is_none());
//! assert_eq!(
//!     response_failure(StatusCode::NOT_FOUND, &HeaderMap::new(), false, SystemTime::now()).unwrap().class,
//!     Class::Permanent,
//! );
//! ```

use std::error::Error as StdError;
use std::io;
use std::time::{Duration, SystemTime};

use http::header::{HeaderName, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::classify;
use crate::outcome::{Class, Failure};

mod call;
mod hints;
pub(crate) mod inbound;

#[cfg(feature = "grpc")]
pub(crate) use call::mark_if_gave_up;
#[cfg(feature = "reqwest")]
pub(crate) use call::{is_nested, Nested};
pub(crate) use hints::ENVOY_ATTEMPT_COUNT;

#[cfg(feature = "grpc")]
pub(crate) use call::propagate_priority;
pub use call::{AttemptLog, CallOptions, RetryInfo, Settings};
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(crate) use call::{Facts, Opened};
pub use inbound::Inbound;

/// `x-retry-attempt: N`: the 1-based number of the attempt a request is.
pub const RETRY_ATTEMPT: HeaderName = HeaderName::from_static("x-retry-attempt");
/// `Idempotency-Key`: makes a POST or PATCH safe to repeat.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `x-request-timeout-ms`: the caller's remaining time, in whole milliseconds.
pub const REQUEST_TIMEOUT: HeaderName =
    HeaderName::from_static(crate::outcome::deadline::REQUEST_TIMEOUT_HEADER);
/// `grpc-timeout`: the caller's remaining time, gRPC's encoding.
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
/// `grpc-status`: a gRPC call's status code.
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-retry-pushback-ms`: a gRPC server's retry hint.
pub(crate) const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");
/// `grpc-previous-rpc-attempts`: gRPC's count of attempts before this one.
pub(crate) const GRPC_PREVIOUS_ATTEMPTS: HeaderName =
    HeaderName::from_static("grpc-previous-rpc-attempts");
/// `x-criticality`: the request's [`Priority`](crate::priority::Priority),
/// also its gRPC metadata key (docs/behaviour.md §16).
pub(crate) const PRIORITY: HeaderName = HeaderName::from_static(crate::priority::HEADER);
/// `x-no-retry: 1` on a failure response: a layer below already retried this
/// failure (or was told not to), so the caller should fail fast and pass it
/// up instead of multiplying the attempts (the one-layer rule).
pub(crate) const NO_RETRY: HeaderName = HeaderName::from_static("x-no-retry");

/// Whether a request or response is gRPC (`content-type: application/grpc…`).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

/// Whether a request may be repeated: its method is idempotent, or it
/// carries an `Idempotency-Key`.
///
/// ```
/// use http::{HeaderMap, Method};
/// use stagger::http::{is_idempotent, new_idempotency_key, IDEMPOTENCY_KEY};
///
/// let mut headers = HeaderMap::new();
/// assert!(is_idempotent(&Method::PUT, &headers));
/// assert!(!is_idempotent(&Method::POST, &headers));
/// headers.insert(IDEMPOTENCY_KEY, new_idempotency_key());
/// assert!(is_idempotent(&Method::POST, &headers));
/// ```
pub fn is_idempotent(method: &Method, headers: &HeaderMap) -> bool {
    // Methods are case-sensitive (RFC 9110 §9.1): only the standard ones.
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    ) || headers.contains_key(IDEMPOTENCY_KEY)
}

/// Whether the method is one that needs an `Idempotency-Key` to be
/// repeated (POST, PATCH).
pub(crate) fn needs_key(method: &Method) -> bool {
    *method == Method::POST || *method == Method::PATCH
}

/// A fresh `Idempotency-Key` value: a random UUID v4 written as a quoted
/// string, e.g. `"0b5c…-…"`. Send the same value on every attempt of a call.
///
/// ```
/// let key = stagger::http::new_idempotency_key();
/// let s = key.to_str().unwrap();
/// assert!(s.starts_with('"') && s.ends_with('"') && s.len() == 38);
/// ```
pub fn new_idempotency_key() -> HeaderValue {
    let mut buf = [0u8; 38];
    buf[0] = b'"';
    buf[37] = b'"';
    uuid::Uuid::new_v4()
        .hyphenated()
        .encode_lower(&mut buf[1..37]);
    // A quoted hyphenated UUID is visible ASCII, so this cannot fail.
    HeaderValue::from_bytes(&buf).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

/// Formats `x-retry-attempt` (without allocating for attempts 1 to 9).
pub(crate) fn attempt_value(attempt: u32) -> HeaderValue {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match SMALL.get(attempt as usize) {
        Some(s) => HeaderValue::from_static(s),
        None => HeaderValue::from(attempt),
    }
}

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
    let grpc = (|| {
        // A count of earlier attempts: 0 is valid here.
        let v = headers.get(GRPC_PREVIOUS_ATTEMPTS)?.to_str().ok()?.trim();
        if v.is_empty() || v.len() > 9 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        v.parse::<u32>().ok().map(|n| n.saturating_add(1))
    })();
    [ours, envoy, grpc].into_iter().flatten().max().unwrap_or(1)
}

/// The `grpc-status` a header map carries, if any: the one reading of that
/// header for every front-end (and for tools that count gRPC answers). A
/// value that is not a decimal number reads as UNKNOWN (2), as grpc-java
/// reads it.
///
/// ```
/// use http::{HeaderMap, HeaderValue};
/// use stagger::http::grpc_status;
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

/// A transport error (no response) as the engine's [`Failure`]: its class
/// and the fact whether the request surely never left (a refused
/// connection or stream, a name lookup that failed for now).
pub fn error_failure(error: &(dyn StdError + 'static)) -> Failure {
    let f = Failure::new(error_class(error));
    if never_sent(error) {
        f.not_sent()
    } else {
        f
    }
}

/// The class of a transport error (no response): a DNS lookup that failed
/// for now (a temporary resolver failure) is transient; otherwise the first
/// [`std::io::Error`] in its `source()` chain decides (refused or reset
/// connections are transient, a timeout is unknown); an error with no I/O
/// cause is "result unknown", so only idempotent calls repeat it.
pub(crate) fn error_class(error: &(dyn StdError + 'static)) -> Class {
    if dns_failed_for_now(error) {
        return Class::Transient;
    }
    match find_io(error) {
        Some(e) => classify::io_kind(e.kind()),
        None => Class::Unknown,
    }
}

/// Whether a transport error certainly happened before the request was
/// sent (the connection was refused, or the name did not resolve for now),
/// so even a non-idempotent request can be repeated safely.
pub(crate) fn never_sent(error: &(dyn StdError + 'static)) -> bool {
    find_io(error).is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
        || dns_failed_for_now(error)
        || refused_stream(error)
}

/// Whether an HTTP/2 stream was refused before the server processed it
/// (REFUSED_STREAM, which is also how a GOAWAY reports the streams it did
/// not process): for HTTP over h2 and gRPC alike, the request never left.
fn refused_stream(error: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(error);
    // The same bound as `find_io`: a chain is never walked without end.
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

/// The start of the message std gives every failed `getaddrinfo` lookup,
/// followed by the resolver's own words (`gai_strerror`).
const LOOKUP_FAILED: &str = "failed to lookup address information";

/// Whether a transport error is a DNS lookup that failed for now and may
/// work on the next try (docs/behaviour.md §2: "DNS temporary failure: retry").
///
/// Neither std nor hyper-util gives such failures an error kind of their
/// own, so the check reads the words of the `source()` chain:
///
/// - an [`io::Error`] whose message starts with "failed to lookup address
///   information" (std's lookup error) decides by the resolver's words: a
///   temporary failure (`EAI_AGAIN`: "Temporary failure in name resolution"
///   in glibc, "Try again" in musl) is one, a name that does not exist
///   ("Name or service not known", "Name does not resolve") is not;
/// - without such an error, a link that reads "dns error" (hyper-util's
///   connector wrapping whatever its resolver returned) is taken as a
///   failure for now: the resolver's words cannot be read, and the request
///   never left.
fn dns_failed_for_now(error: &(dyn StdError + 'static)) -> bool {
    let mut dns = false;
    let mut cur: Option<&(dyn StdError + 'static)> = Some(error);
    // The same bound as `find_io`: a chain is never walked without end.
    for _ in 0..=32 {
        let Some(e) = cur else { break };
        if let Some(io) = e.downcast_ref::<io::Error>() {
            let text = io.to_string().to_ascii_lowercase();
            if text.starts_with(LOOKUP_FAILED) {
                return crate::classify::is_temporary_dns_failure(&text);
            }
        } else if e.to_string().eq_ignore_ascii_case("dns error") {
            dns = true;
        }
        cur = e.source();
    }
    dns
}

fn find_io<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a io::Error> {
    let mut e: Option<&(dyn StdError + 'static)> = Some(error);
    let mut depth = 0;
    while let Some(cur) = e {
        if let Some(io) = cur.downcast_ref::<io::Error>() {
            // An io::Error may itself wrap the real cause.
            if let Some(inner) = io.get_ref().and_then(|i| {
                let i: &(dyn StdError + 'static) = i;
                i.downcast_ref::<io::Error>()
            }) {
                return Some(inner);
            }
            return Some(io);
        }
        depth += 1;
        if depth > 32 {
            return None;
        }
        e = cur.source();
    }
    None
}

/// The clock the HTTP front-ends read: tokio's, which is the monotonic
/// clock in a normal runtime and the virtual one in a paused test runtime,
/// so the engine's deadlines and the front-end's sleeps share one time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokioClock;

impl crate::time::Clock for TokioClock {
    #[inline]
    fn now(&self) -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// An error and its causes on one line (`outer: inner: …`), skipping
/// causes whose text the outer error already shows.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = error.to_string();
    let mut cur = error.source();
    let mut depth = 0;
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        depth += 1;
        if depth > 16 {
            break;
        }
        cur = e.source();
    }
    out
}

/// The error of an attempt that ran out of time (its result is unknown).
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptTimedOut;

impl std::fmt::Display for AttemptTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("attempt timed out")
    }
}

impl StdError for AttemptTimedOut {}

/// The remaining-time header a request should carry: `grpc-timeout` for
/// gRPC, `x-request-timeout-ms` otherwise.
pub(crate) fn timeout_header(grpc: bool, remaining: Duration) -> (HeaderName, HeaderValue) {
    if grpc {
        let v = crate::outcome::deadline::format_grpc_timeout(remaining);
        (
            GRPC_TIMEOUT,
            HeaderValue::from_str(&v).unwrap_or(HeaderValue::from_static("0n")),
        )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Hint;

    #[test]
    fn example_inbound_attempt() {
        use http::{HeaderMap, HeaderValue};

        let mut h = HeaderMap::new();
        assert_eq!(inbound_attempt(&h), 1);
        h.insert("grpc-previous-rpc-attempts", HeaderValue::from_static("1"));
        assert_eq!(inbound_attempt(&h), 2);
        h.insert("x-retry-attempt", HeaderValue::from_static("4"));
        assert_eq!(inbound_attempt(&h), 4);
        let mut mesh = HeaderMap::new();
        mesh.insert("x-retry-attempt", HeaderValue::from_static("1"));
        mesh.insert("x-envoy-attempt-count", HeaderValue::from_static("2"));
        assert_eq!(inbound_attempt(&mesh), 2);
    }

    fn h(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.insert(*k, HeaderValue::from_static(v));
        }
        m
    }

    #[test]
    fn an_http2_refused_stream_never_left_for_http_too() {
        let e = h2::Error::from(h2::Reason::REFUSED_STREAM);
        assert!(never_sent(&e), "{e}");
        let e = h2::Error::from(h2::Reason::INTERNAL_ERROR);
        assert!(!never_sent(&e), "{e}");
    }

    #[test]
    fn statuses_follow_the_table() {
        let now = SystemTime::now();
        let f = |s: u16, r| response_failure(StatusCode::from_u16(s).unwrap(), &h(&[]), r, now);
        assert_eq!(f(200, false), None);
        assert_eq!(f(302, false), None);
        assert_eq!(f(503, false).unwrap().class, Class::Transient);
        assert_eq!(f(408, false).unwrap().class, Class::Unknown);
        assert_eq!(f(500, false).unwrap().class, Class::Permanent);
        assert_eq!(f(500, true).unwrap().class, Class::Transient);
        assert_eq!(f(409, true).unwrap().class, Class::Permanent);
    }

    #[test]
    fn hints_come_from_the_shared_parsers() {
        let now = SystemTime::now();
        let f = response_failure(
            StatusCode::SERVICE_UNAVAILABLE,
            &h(&[("retry-after", "soon")]),
            false,
            now,
        );
        assert_eq!(f.unwrap().hint, Some(Hint::Invalid));
        let g = response_failure(
            StatusCode::OK,
            &h(&[("grpc-status", "8"), ("grpc-retry-pushback-ms", "250")]),
            false,
            now,
        )
        .unwrap();
        assert_eq!(g.class, Class::OnlyWithHint);
        assert_eq!(g.hint, Some(Hint::Pushback(Duration::from_millis(250))));
        let g = response_failure(
            StatusCode::OK,
            &h(&[("grpc-status", "14"), ("grpc-retry-pushback-ms", "-1")]),
            false,
            now,
        )
        .unwrap();
        assert_eq!(g.hint, Some(Hint::DoNotRetry));
        assert_eq!(
            response_failure(StatusCode::OK, &h(&[("grpc-status", "0")]), false, now),
            None
        );
        let n = response_failure(
            StatusCode::BAD_GATEWAY,
            &h(&[("x-no-retry", "1")]),
            false,
            now,
        );
        // The one-layer rule's fact, as the layers read it.
        let n = n.unwrap();
        assert!(n.gave_up_below, "{n:?}");
        assert_eq!(n.hint, None);
        // The raw reading leaves the one-layer rule to the caller.
        let both = h(&[("retry-after", "2"), ("x-no-retry", "1")]);
        let raw = raw_response_failure(StatusCode::TOO_MANY_REQUESTS, &both, false, false, now);
        assert_eq!(
            raw.unwrap().hint,
            Some(Hint::RetryAfter(Duration::from_secs(2)))
        );
    }

    #[test]
    fn io_causes_decide_transport_errors() {
        #[derive(Debug)]
        struct Wrap(io::Error);
        impl std::fmt::Display for Wrap {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("wrapped")
            }
        }
        impl StdError for Wrap {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let refused = Wrap(io::ErrorKind::ConnectionRefused.into());
        assert_eq!(error_class(&refused), Class::Transient);
        assert!(never_sent(&refused));
        let reset = Wrap(io::ErrorKind::ConnectionReset.into());
        assert!(!never_sent(&reset));
        let other = std::fmt::Error;
        assert_eq!(error_class(&other), Class::Unknown);
    }

    /// One link of a constructed error chain: its text and its cause.
    #[derive(Debug)]
    struct Link(&'static str, Option<Box<dyn StdError + Send + Sync>>);

    impl std::fmt::Display for Link {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl StdError for Link {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    /// hyper-util's legacy client around its connector's "dns error" around
    /// the resolver's error, as a failed lookup reaches the tower layer.
    fn lookup(cause: impl Into<Box<dyn StdError + Send + Sync>>) -> Link {
        Link(
            "client error (Connect)",
            Some(Box::new(Link("dns error", Some(cause.into())))),
        )
    }

    #[test]
    fn a_temporary_dns_failure_is_transient_and_unsent() {
        let again = "failed to lookup address information: Temporary failure in name resolution";
        for e in [
            lookup(io::Error::other(again)),
            // The same failure in lower case, and in musl's words.
            lookup(io::Error::other(
                "failed to lookup address information: temporary failure in name resolution",
            )),
            lookup(io::Error::other(
                "failed to lookup address information: Try again",
            )),
            // A resolver whose error is not an io::Error: its words are
            // unknown, and the request never left.
            lookup(Link("no answer from 10.0.0.2", None)),
            Link("dns error", None),
        ] {
            assert_eq!(error_class(&e), Class::Transient, "{}", error_chain(&e));
            assert!(never_sent(&e), "{}", error_chain(&e));
        }
        // std's error on its own, without hyper-util around it.
        let plain = io::Error::other(again);
        assert_eq!(error_class(&plain), Class::Transient);
    }

    #[test]
    fn other_lookup_failures_keep_their_io_class() {
        // The name does not exist: asking again gives the same answer.
        let missing = lookup(io::Error::other(
            "failed to lookup address information: Name or service not known",
        ));
        assert_eq!(error_class(&missing), Class::Permanent);
        assert!(!never_sent(&missing));
        // "try again" outside a lookup failure is not a DNS failure.
        let other = io::Error::other("busy, try again");
        assert_eq!(error_class(&other), Class::Permanent);
        // Nor is a connect error that is not about DNS.
        let refused = Link(
            "tcp connect error",
            Some(Box::new(io::Error::from(io::ErrorKind::ConnectionRefused))),
        );
        assert_eq!(error_class(&refused), Class::Transient);
        let unknown = Link("tcp connect error", Some(Box::new(Link("odd", None))));
        assert_eq!(error_class(&unknown), Class::Unknown);
    }

    #[test]
    fn keys_are_quoted_uuids_and_differ() {
        let a = new_idempotency_key();
        let b = new_idempotency_key();
        assert_ne!(a, b);
        let s = a.to_str().unwrap();
        assert_eq!(&s[15..16], "4", "version nibble of {s}");
    }

    #[test]
    fn timeout_headers() {
        let (n, v) = timeout_header(false, Duration::from_millis(1500));
        assert_eq!(
            (n.as_str(), v.to_str().unwrap()),
            ("x-request-timeout-ms", "1500")
        );
        let (n, v) = timeout_header(true, Duration::from_millis(1500));
        assert_eq!(
            (n.as_str(), v.to_str().unwrap()),
            ("grpc-timeout", "1500000u")
        );
    }
}
