//! gRPC service configs: any JSON (or not-JSON) is either accepted and
//! within A6's limits, or rejected with an error naming a field; never a
//! panic. Protobuf durations (`"0.1s"`) are also parsed on their own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger::config::{parse_proto_duration, ServiceConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // The durations inside a config, on their own: decimal seconds and an `s`.
    if let Some(d) = parse_proto_duration(s) {
        assert!(s.ends_with('s') && d.as_secs() < 1_000_000_000_000, "{s:?}");
    }
    match ServiceConfig::from_json(s) {
        Ok(c) => {
            for m in &c.methods {
                if let Some(r) = &m.retry {
                    assert!((2..=5).contains(&r.max_attempts));
                    assert!(!r.retryable.is_empty() && r.retryable.iter().all(|c| *c <= 16));
                    assert!(!r.initial_backoff.is_zero() && !r.max_backoff.is_zero());
                    assert!(r.multiplier > 0.0);
                }
                for (service, method) in &m.names {
                    let _ = c.policy(service, method);
                }
            }
            if let Some(t) = c.throttling {
                assert!(t.max_tokens > 0.0 && t.max_tokens <= 1000.0 && t.token_ratio > 0.0);
                assert!(t.token_bucket().is_ok());
            }
            let _ = c.policy("", "");
        }
        Err(e) => assert!(!e.field().is_empty()),
    }
});
