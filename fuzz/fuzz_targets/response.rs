//! A whole response from an untrusted server — any status, any headers —
//! classified and then decided on: never a panic, and whatever the server
//! says, a retry waits no longer than the policy's `max_retry_after` and
//! never wakes past the call's deadline.
//!
//! Input: two bytes of status, two bytes choosing `max_retry_after` and the
//! deadline (in seconds), then `name: value` header lines separated by `\n`.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use stagger::http::response_failure;
use stagger::{Call, Decision, Outcome, Policy};
use stagger::time::{Clock, ManualClock};

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let code = 100 + u16::from_le_bytes([data[0], data[1]]) % 900;
    let Ok(status) = http::StatusCode::from_u16(code) else {
        return;
    };
    let max_hint = Duration::from_secs(u64::from(data[2]));
    let budget = Duration::from_secs(1 + u64::from(data[3]));
    let mut headers = http::HeaderMap::new();
    for line in data[4..].split(|b| *b == b'\n').take(16) {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let retry_500 = data[2] & 1 == 1;
    let failure = response_failure(status, &headers, retry_500, wall);
    // Pure: the same response reads the same way twice.
    assert_eq!(failure, response_failure(status, &headers, retry_500, wall));
    let Some(failure) = failure else {
        return;
    };

    let Ok(policy) = Policy::builder()
        .max_attempts(5)
        .max_retry_after(max_hint)
        .build()
    else {
        return;
    };
    let clock = ManualClock::new();
    let t0 = clock.now();
    let deadline = t0 + budget;
    let mut call = Call::seeded(u64::from(data[0]))
        .idempotent(data[1] & 1 == 1)
        .deadline(deadline);
    if policy.start_attempt(&mut call, &clock).is_err() {
        return;
    }
    if let Decision::Retry { after } = policy.decide(&mut call, Outcome::Failure(failure), &clock) {
        let wake = t0 + after;
        assert!(
            wake < deadline,
            "{failure:?} waits {after:?} past a {budget:?} deadline"
        );
        if let Some(stagger::Hint::RetryAfter(h) | stagger::Hint::Pushback(h)) = failure.hint {
            assert!(h <= max_hint, "{failure:?} hint above {max_hint:?}");
        }
    }
});
