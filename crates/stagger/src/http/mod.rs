//! HTTP rules (feature `http`): which responses and errors are worth
//! retrying, which requests may be repeated, and the headers retries speak.
//!
//! A retry layer that only sees "error or not" retries a `400` as eagerly as
//! a `503`, repeats a `POST` that may already have charged a card, and
//! ignores the server telling it when to come back. This module turns what
//! an HTTP exchange carries into the [`Failure`](crate::Failure) the decision engine
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

mod call;
mod errors;
mod facts;
mod hints;
mod idempotency;
pub(crate) mod inbound;
mod info;
mod settings;
mod wire;

pub(crate) use crate::grpc::wire::number_value as attempt_value;
pub use errors::{error_chain, error_failure, AttemptTimedOut};
#[cfg(feature = "grpc")]
pub(crate) use errors::{error_class, never_sent};
pub use facts::response_failure;
pub(crate) use facts::{no_retry, raw_response_failure};
pub(crate) use idempotency::needs_key;
pub use idempotency::{is_idempotent, new_idempotency_key};
#[cfg(feature = "tower")]
pub(crate) use wire::rebuild;
pub(crate) use wire::{inbound_attempt, timeout_header, NO_RETRY, PRIORITY};
pub use wire::{parse_attempt, IDEMPOTENCY_KEY, REQUEST_TIMEOUT, RETRY_ATTEMPT};

#[cfg(feature = "reqwest")]
pub(crate) use call::{is_nested, Nested};
#[cfg(feature = "tower")]
pub(crate) use hints::ENVOY_ATTEMPT_COUNT;
#[cfg(feature = "grpc")]
pub(crate) use info::mark_if_gave_up;

#[cfg(feature = "grpc")]
pub(crate) use call::propagate_priority;
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(crate) use call::{Facts, Opened};
pub use inbound::Inbound;
pub use info::{AttemptLog, RetryInfo};
pub use settings::{CallOptions, Settings};

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

#[cfg(test)]
mod tests {
    use std::error::Error as StdError;
    use std::io;
    use std::time::{Duration, SystemTime};

    use http::{HeaderMap, HeaderValue, StatusCode};

    use super::errors::{error_class, never_sent};
    use super::*;
    use crate::outcome::{Class, Hint};

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
