//! `Retry-After` values from an untrusted server: parsing never panics, a
//! value is accepted only in the forms RFC 9110 allows, and the hint never
//! asks for a wait the decision engine cannot bound.
#![no_main]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use stagger::hint::fuzzing::{parse_retry_after, retry_after_hint};
use stagger::hint::RetryAfter;
use stagger::Hint;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    match parse_retry_after(s) {
        Ok(RetryAfter::Delay(_)) => {
            let t = s.trim_matches(|c| c == ' ' || c == '\t');
            assert!(
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()),
                "{s:?}"
            );
        }
        Ok(RetryAfter::At(at)) => {
            assert!(s.is_ascii(), "{s:?}");
            let _ = at.duration_since(SystemTime::UNIX_EPOCH);
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match retry_after_hint(s, now) {
        Hint::RetryAfter(_) | Hint::Invalid => {}
        other => panic!("unexpected hint {other:?} for {s:?}"),
    }
    // The same bytes as a header on a 503: classified without panicking.
    if let Ok(v) = http::HeaderValue::from_bytes(data) {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, v);
        let f =
            stagger::http::response_failure(http::StatusCode::SERVICE_UNAVAILABLE, &h, false, now);
        assert!(f.is_some());
    }
});
