//! Which requests may be repeated, and the key that makes a write
//! repeatable.

use http::{HeaderMap, HeaderValue, Method};

use super::IDEMPOTENCY_KEY;

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
