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
    // The DNS TXT form: a list of choices, each a config, or an error.
    if let Ok(Some(choices)) = stagger_audit::lenient::choices(s) {
        let _ = choices.len();
    }
    // The lenient reading (other spellings) ends the same
    // way: a config, or an error naming a field.
    match stagger_audit::lenient::read(s) {
        Ok((c, _)) => check(&c),
        Err(e) => assert!(!e.field.is_empty()),
    }
    match ServiceConfig::from_json(s) {
        Ok(c) => check(&c),
        Err(e) => assert!(!e.field().is_empty()),
    }
});

fn check(c: &ServiceConfig) {
    for m in &c.methods {
        let p = &m.policy;
        assert!((1..=5).contains(&p.max_attempts()));
        if p.has_retry_policy() {
            assert!(p.max_attempts() >= 2);
            let codes = p.retryable_codes().unwrap_or(&[]);
            assert!(!codes.is_empty() && codes.iter().all(|c| *c <= 16));
            let b = p.backoff();
            assert!(!b.base.is_zero() && !b.cap.is_zero());
            assert!(b.multiplier > 0.0);
        }
        for (service, method) in &m.names {
            let _ = c.policy(service, method);
            let _ = c.hedge_policy_with(service, method, None);
        }
    }
    if let Some(t) = c.throttling {
        assert!(t.max_tokens > 0.0 && t.max_tokens <= 1000.0 && t.token_ratio > 0.0);
        assert!(t.token_bucket().is_ok());
    }
    let _ = c.policy("", "");
}
