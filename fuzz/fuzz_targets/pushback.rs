//! gRPC pushback and the remaining-time headers from untrusted peers:
//! parsing never panics, only plain digits are a pushback, and every parsed
//! timeout formats back to a value that parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger::deadline::format_grpc_timeout;
use stagger::hint::fuzzing::{parse_grpc_timeout, parse_pushback, parse_timeout_ms};
use stagger::Hint;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse_pushback(s) {
        Hint::Pushback(_) => {
            let t = s.trim_matches(|c| c == ' ' || c == '\t');
            assert!(
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()),
                "{s:?}"
            );
        }
        Hint::DoNotRetry => {}
        other => panic!("unexpected hint {other:?} for {s:?}"),
    }
    if let Some(d) = parse_grpc_timeout(s) {
        let back = parse_grpc_timeout(&format_grpc_timeout(d)).expect("round trip");
        assert!(back <= d);
    }
    let _ = parse_timeout_ms(s);
    if let Ok(v) = http::HeaderValue::from_bytes(data) {
        let mut h = http::HeaderMap::new();
        h.insert("x-retry-attempt", v.clone());
        h.insert("x-request-timeout-ms", v.clone());
        h.insert("grpc-retry-pushback-ms", v);
        h.insert("grpc-status", http::HeaderValue::from_static("8"));
        let inbound = stagger::http::Inbound::from_headers(&h, std::time::Instant::now());
        assert!(inbound.attempt() >= 1);
        let f = stagger::http::response_failure(
            http::StatusCode::OK,
            &h,
            false,
            std::time::SystemTime::now(),
        );
        assert!(f.is_some());
    }
});
