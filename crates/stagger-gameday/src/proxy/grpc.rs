//! gRPC answers as the proxy counts them.
//!
//! A gRPC call's outcome is not its HTTP status: a failed call is HTTP 200
//! with `grpc-status` other than 0, either in the headers of a
//! "trailers-only" answer or in the trailers after the messages (gRPC over
//! HTTP/2, PROTOCOL-HTTP2.md in grpc/grpc). So an answer whose content type
//! is `application/grpc…` is counted by its `grpc-status`, and one whose
//! status only comes in the trailers is counted when they pass through.

use http::HeaderMap;
use stagger::classify::GRPC_CODE_NAMES;
use stagger::grpc::grpc_status;
pub(super) use stagger::grpc::is_grpc;

/// A gRPC status code's name (`UNAVAILABLE` for 14), or the number for
/// one gRPC does not define.
pub fn name(code: u32) -> String {
    GRPC_CODE_NAMES
        .get(code as usize)
        .map_or_else(|| code.to_string(), |n| (*n).to_string())
}

/// gRPC's status when a call ends without one (UNKNOWN).
pub(super) const UNKNOWN: u32 = 2;

/// The `grpc-status` in `h`, if there is one (an unreadable value is
/// UNKNOWN, as a client would take it).
pub(super) fn status(h: &HeaderMap) -> Option<u32> {
    grpc_status(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_answers_are_told_by_content_type_and_counted_by_grpc_status() {
        let mut h = HeaderMap::new();
        assert!(!is_grpc(&h));
        h.insert("content-type", "application/grpc+proto".parse().unwrap());
        assert!(is_grpc(&h));
        assert_eq!(status(&h), None);
        h.insert("grpc-status", "14".parse().unwrap());
        assert_eq!(status(&h), Some(14));
        assert_eq!(name(14), "UNAVAILABLE");
        h.insert("grpc-status", "fourteen".parse().unwrap());
        assert_eq!(status(&h), Some(UNKNOWN));
        assert_eq!(
            (name(0).as_str(), name(16).as_str()),
            ("OK", "UNAUTHENTICATED")
        );
        assert_eq!(name(99), "99");
    }
}
