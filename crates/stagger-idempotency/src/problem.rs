//! The layer's own answers: `application/problem+json` (RFC 9457), one type per rule.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use std::time::Duration;

/// The rules the layer answers for, each with its problem type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    KeyMissing,
    KeyInvalid,
    BodyTooLarge,
    BodyUnreadable,
    KeyReused,
    KeyInUse,
    StoreUnavailable,
    HandlerFailed,
}

/// The URI prefix of every problem type the layer answers with.
pub const PROBLEM_TYPE_PREFIX: &str = "urn:stagger:idempotency:";

impl Rule {
    fn parts(self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Rule::KeyMissing => (
                StatusCode::BAD_REQUEST,
                "key-missing",
                "Idempotency-Key is required",
            ),
            Rule::KeyInvalid => (
                StatusCode::BAD_REQUEST,
                "key-invalid",
                "Idempotency-Key is not valid",
            ),
            Rule::BodyTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                "The request body is too large to fingerprint",
            ),
            Rule::BodyUnreadable => (
                StatusCode::BAD_REQUEST,
                "body-unreadable",
                "The request body could not be read",
            ),
            Rule::KeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "key-reused",
                "Idempotency-Key was used for a different request",
            ),
            Rule::KeyInUse => (
                StatusCode::CONFLICT,
                "key-in-use",
                "A request with this Idempotency-Key is still being processed",
            ),
            Rule::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "The idempotency store is unavailable; nothing was executed",
            ),
            Rule::HandlerFailed => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "handler-failed",
                "The handler's answer could not be read; the key was released",
            ),
        }
    }

    /// The answer: the rule's status, a problem document naming it, and `Retry-After` when given.
    pub(crate) fn answer(self, detail: &str, retry_after: Option<Duration>) -> Response<Bytes> {
        let (status, name, title) = self.parts();
        let body = serde_json::json!({
            "type": format!("{PROBLEM_TYPE_PREFIX}{name}"),
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
        });
        let mut response = Response::new(Bytes::from(body.to_string()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(wait) = retry_after {
            // Whole seconds, rounded up, at least 1: a client must not come back before the lease
            // could have ended.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        }
        response
    }
}
