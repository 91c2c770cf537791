//! What is worth retrying.
//!
//! A retry only helps when the next attempt can turn out differently. Every
//! failure is put in a [`Class`]; the decision engine retries
//! [`Class::Transient`] failures, retries [`Class::Unknown`] ones (a timeout:
//! the work may have been done) only for idempotent calls, retries
//! [`Class::OnlyWithHint`] ones only when the server said when, and never
//! retries [`Class::Permanent`] or [`Class::Cancelled`] ones.
//!
//! ```
//! use stagger::classify::http_status;
//! use stagger::Class;
//! assert_eq!(http_status(503, false), Class::Transient);
//! assert_eq!(http_status(408, false), Class::Unknown);
//! assert_eq!(http_status(500, false), Class::Permanent);
//! assert_eq!(http_status(500, true), Class::Transient);
//! assert_eq!(http_status(404, false), Class::Permanent);
//! ```

use std::io;

use crate::outcome::Class;

/// Errors that know their own class. Implemented for [`std::io::Error`];
/// the executors use it when no classifier closure is given.
pub trait Classify {
    /// The class of this error.
    fn class(&self) -> Class;
}

impl Classify for io::Error {
    fn class(&self) -> Class {
        io_error(self)
    }
}

/// The class of an I/O error: its [`io::ErrorKind`], except that a
/// *temporary* name-resolution failure is transient (docs/behaviour.md §2). The standard
/// library reports resolver errors with an uncategorised kind and the
/// resolver's message, so that message is what tells a temporary failure
/// (`EAI_AGAIN`: "Temporary failure in name resolution", "try again") from a
/// name that does not exist, which stays permanent.
///
/// ```
/// use stagger::classify::io_error;
/// use stagger::Class;
/// use std::io;
///
/// let e = io::Error::other(
///     "failed to lookup address information: Temporary failure in name resolution",
/// );
/// assert_eq!(io_error(&e), Class::Transient);
/// let e = io::Error::other("failed to lookup address information: Name or service not known");
/// assert_eq!(io_error(&e), Class::Permanent);
/// ```
pub fn io_error(e: &io::Error) -> Class {
    match io_kind(e.kind()) {
        Class::Permanent if is_temporary_dns_failure(&e.to_string()) => Class::Transient,
        class => class,
    }
}

/// Whether an error message is a resolver's "try again later".
pub(crate) fn is_temporary_dns_failure(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("lookup address information")
        && (m.contains("temporary failure") || m.contains("try again"))
}

/// The class of an I/O error kind: dropped or refused connections and
/// unreachable networks are transient, a timeout is unknown, an interruption
/// is transient, anything else (not found, permission, invalid data, …) is
/// permanent.
pub(crate) fn io_kind(kind: io::ErrorKind) -> Class {
    use io::ErrorKind::*;
    match kind {
        ConnectionRefused | ConnectionReset | ConnectionAborted | NotConnected | BrokenPipe
        | AddrNotAvailable | Interrupted | WouldBlock | UnexpectedEof | HostUnreachable
        | NetworkUnreachable | NetworkDown | ResourceBusy => Class::Transient,
        TimedOut => Class::Unknown,
        _ => Class::Permanent,
    }
}

/// The class of an HTTP status code (docs/behaviour.md §2). Success and redirect codes
/// are not failures and are not failures of a response; this function
/// treats them as permanent so that it is total.
///
/// 500 is retried only when `retry_500` is set.
pub fn http_status(status: u16, retry_500: bool) -> Class {
    match status {
        502..=504 | 429 => Class::Transient,
        500 if retry_500 => Class::Transient,
        408 => Class::Unknown,
        _ => Class::Permanent,
    }
}

/// `None` for a status that is not a failure (1xx–3xx), else its class.
///
/// `keyed` says the request carried an `Idempotency-Key`. A server that
/// honours the key answers 409 to a second request with the same key while
/// the first is still running (draft-ietf-httpapi-idempotency-key-header,
/// docs/behaviour.md §2): that conflict clears by itself once the first
/// request ends, so it is worth retrying, but only when the server said
/// when ([`Class::OnlyWithHint`]). Any other 409 stays permanent.
// Read by the http front-ends only.
#[cfg_attr(not(feature = "http"), allow(dead_code))]
pub(crate) fn http_failure(status: u16, retry_500: bool, keyed: bool) -> Option<Class> {
    match status {
        409 if keyed => Some(Class::OnlyWithHint),
        s => (s >= 400).then(|| http_status(s, retry_500)),
    }
}

/// The class of a gRPC status code: UNAVAILABLE (14) transient,
/// RESOURCE_EXHAUSTED (8) only with pushback, DEADLINE_EXCEEDED (4) unknown,
/// OK (0) and everything else permanent — CANCELLED (1) included: received
/// from a server it is an ordinary status, not the caller cancelling.
pub fn grpc_code(code: u32) -> Class {
    match code {
        14 => Class::Transient,
        8 => Class::OnlyWithHint,
        4 => Class::Unknown,
        _ => Class::Permanent,
    }
}

/// The class of a gRPC status code under a method's `retryableStatusCodes`
/// (or a hedging policy's `nonFatalStatusCodes`), as gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) says: a listed
/// code is retried — RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED included, with
/// or without pushback, since an operator who lists a code means it — and an
/// unlisted one never. The "only with pushback" and "only if idempotent"
/// rules of [`grpc_code`] are for calls without such a list.
#[cfg(any(feature = "http", feature = "serde", test))]
pub(crate) fn grpc_code_listed(code: u32, retryable: &[u32]) -> Class {
    if retryable.contains(&code) {
        Class::Transient
    } else {
        Class::Permanent
    }
}

/// gRPC status code names, by number (0 `OK` to 16 `UNAUTHENTICATED`).
pub const GRPC_CODE_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The name of gRPC status `code` (`"UNAVAILABLE"` for 14), or `None` for a
/// number gRPC does not define.
///
/// ```
/// assert_eq!(stagger::classify::grpc_code_name(14), Some("UNAVAILABLE"));
/// assert_eq!(stagger::classify::grpc_code_name(17), None);
/// ```
pub fn grpc_code_name(code: u32) -> Option<&'static str> {
    GRPC_CODE_NAMES.get(code as usize).copied()
}

/// The gRPC status of an HTTP answer that carries none (a proxy's plain
/// HTTP error), as gRPC maps them: 400 INTERNAL, 401 UNAUTHENTICATED,
/// 403 PERMISSION_DENIED, 404 UNIMPLEMENTED, 429/502/503/504 UNAVAILABLE,
/// anything else UNKNOWN.
///
/// ```
/// use stagger::classify::grpc_code_of_http;
/// assert_eq!(grpc_code_of_http(503), 14);
/// assert_eq!(grpc_code_of_http(404), 12);
/// assert_eq!(grpc_code_of_http(500), 2);
/// ```
pub fn grpc_code_of_http(status: u16) -> u32 {
    match status {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => 14,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_grpc_code_listed() {
        assert_eq!(grpc_code_listed(13, &[13, 14]), Class::Transient);
        assert_eq!(grpc_code_listed(14, &[13]), Class::Permanent);
        assert_eq!(grpc_code_listed(8, &[8]), Class::Transient);
        assert_eq!(grpc_code_listed(4, &[4]), Class::Transient);
    }

    #[test]
    fn http_table_of_spec_section_2() {
        for s in [502, 503, 504, 429] {
            assert_eq!(http_status(s, false), Class::Transient, "{s}");
        }
        assert_eq!(http_status(408, false), Class::Unknown);
        for s in [400, 401, 403, 404, 405, 409, 410, 422, 418, 451, 500, 501] {
            assert_eq!(http_status(s, false), Class::Permanent, "{s}");
        }
        assert_eq!(http_status(500, true), Class::Transient);
        assert_eq!(http_failure(200, true, false), None);
        assert_eq!(http_failure(304, true, true), None);
        assert_eq!(http_failure(503, false, false), Some(Class::Transient));
    }

    #[test]
    fn a_conflict_answering_a_keyed_request_waits_for_a_hint() {
        assert_eq!(http_failure(409, false, true), Some(Class::OnlyWithHint));
        assert_eq!(http_failure(409, true, false), Some(Class::Permanent));
        // The key changes nothing for other statuses.
        for s in [400, 422, 500] {
            assert_eq!(http_failure(s, false, true), Some(Class::Permanent), "{s}");
        }
        assert_eq!(http_failure(503, false, true), Some(Class::Transient));
    }

    #[test]
    fn io_errors() {
        assert_eq!(io_kind(io::ErrorKind::ConnectionRefused), Class::Transient);
        assert_eq!(io_kind(io::ErrorKind::ConnectionReset), Class::Transient);
        assert_eq!(io_kind(io::ErrorKind::TimedOut), Class::Unknown);
        assert_eq!(io_kind(io::ErrorKind::NotFound), Class::Permanent);
        assert_eq!(io_kind(io::ErrorKind::PermissionDenied), Class::Permanent);
        let e = io::Error::from(io::ErrorKind::ConnectionAborted);
        assert_eq!(e.class(), Class::Transient);
    }

    #[test]
    fn proxy_statuses_map_as_grpc_documents() {
        let table = [
            (400, "INTERNAL"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "UNIMPLEMENTED"),
            (429, "UNAVAILABLE"),
            (502, "UNAVAILABLE"),
            (503, "UNAVAILABLE"),
            (504, "UNAVAILABLE"),
            (500, "UNKNOWN"),
            (408, "UNKNOWN"),
            (418, "UNKNOWN"),
        ];
        for (status, name) in table {
            assert_eq!(
                grpc_code_name(grpc_code_of_http(status)),
                Some(name),
                "{status}"
            );
        }
    }

    #[test]
    fn grpc_codes() {
        assert_eq!(grpc_code(14), Class::Transient);
        assert_eq!(grpc_code(8), Class::OnlyWithHint);
        assert_eq!(grpc_code(4), Class::Unknown);
        // A server's CANCELLED is not the caller cancelling.
        assert_eq!(grpc_code(1), Class::Permanent);
        assert_eq!(grpc_code(3), Class::Permanent);
    }
}
