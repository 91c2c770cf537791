//! The headers a server reads from every inbound request — the caller's
//! remaining time (`x-request-timeout-ms`, gRPC's `grpc-timeout`) and the
//! attempt number (`x-retry-attempt`, gRPC's `grpc-previous-rpc-attempts`):
//! parsing never panics, accepts only plain digits (and a gRPC unit), never
//! yields a deadline further away than the format allows, and every accepted
//! value formats back to itself.
//!
//! Input: a selector byte (bit 0: a gRPC request; bits 1–4: which headers
//! are present), then up to four header values separated by `\n`.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use stagger::deadline::format_grpc_timeout;
use stagger::hint::fuzzing::{format_timeout_ms, parse_grpc_timeout, parse_timeout_ms};
use stagger::http::{parse_attempt, Inbound};

/// 12 digits of milliseconds.
const MAX_HTTP: Duration = Duration::from_millis(999_999_999_999);
/// 8 digits of hours.
const MAX_GRPC: Duration = Duration::from_secs(99_999_999 * 3600);

fn digits(s: &str) -> bool {
    let t = s.trim_matches(|c| c == ' ' || c == '\t');
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let values: Vec<&[u8]> = rest.splitn(4, |b| *b == b'\n').collect();

    // The parsers on their own.
    for v in &values {
        let Ok(s) = std::str::from_utf8(v) else {
            continue;
        };
        if let Some(d) = parse_timeout_ms(s) {
            assert!(digits(s) && d <= MAX_HTTP, "{s:?}");
            assert_eq!(parse_timeout_ms(&format_timeout_ms(d)), Some(d), "{s:?}");
        }
        if let Some(d) = parse_grpc_timeout(s) {
            assert!(d <= MAX_GRPC, "{s:?}");
            let back = parse_grpc_timeout(&format_grpc_timeout(d)).expect("round trip");
            assert!(back <= d, "{s:?}");
        }
        if let Ok(h) = http::HeaderValue::from_bytes(v) {
            if let Some(n) = parse_attempt(&h) {
                assert!(n >= 1 && digits(s), "{s:?}");
                assert_eq!(parse_attempt(&http::HeaderValue::from(n)), Some(n));
            }
        }
    }

    // The same values as a request's headers, read the way a server layer does.
    let names = [
        "x-retry-attempt",
        "grpc-previous-rpc-attempts",
        "x-request-timeout-ms",
        "grpc-timeout",
    ];
    let mut headers = http::HeaderMap::new();
    if sel & 1 == 1 {
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
    }
    for (i, (name, v)) in names.iter().zip(&values).enumerate() {
        if sel & (2 << i) == 0 {
            continue;
        }
        if let Ok(v) = http::HeaderValue::from_bytes(v) {
            headers.insert(*name, v);
        }
    }
    let now = Instant::now();
    let inbound = Inbound::from_headers(&headers, now);
    assert!(inbound.attempt() >= 1);
    assert!(inbound.attempt() >= 1);
    if let Some(d) = inbound.deadline() {
        let max = if sel & 1 == 1 { MAX_GRPC } else { MAX_HTTP };
        assert!(d >= now && d - now <= max);
    }
});
