//! The decision engine's rules (docs/behaviour.md §2–4, §9–10), pinned at their edges.

use stagger::hint::RetryAfter;
use stagger::Backoff;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use stagger::time::{Clock, ManualClock};
use stagger::{Call, Class, Decision, Event, Failure, Hint, Jitter, Outcome, Policy, StopReason};

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

fn fail_once(
    policy: &Policy,
    call: &mut Call<stagger::random::FastRng>,
    f: impl Into<Outcome>,
    now: Instant,
) -> Decision {
    policy.start_attempt(call, now).expect("attempt admitted");
    policy.decide(call, f, now)
}

#[test]
fn retry_after_3600_with_a_5s_deadline_stops_at_once_with_deadline() {
    let policy = Policy::default();
    let now = Instant::now();
    let mut call = Call::seeded(1).deadline(now + 5 * S);
    let f = Failure::transient().with_hint(Hint::RetryAfter(3600 * S));
    assert_eq!(
        fail_once(&policy, &mut call, f, now),
        Decision::Stop(StopReason::Deadline)
    );
}

#[test]
fn retry_after_beyond_max_retry_after_stops_with_hint_too_long() {
    let policy = Policy::default(); // max_retry_after 60 s
    let now = Instant::now();
    let mut call = Call::seeded(1);
    let f = Failure::transient().with_hint(Hint::RetryAfter(61 * S));
    assert_eq!(
        fail_once(&policy, &mut call, f, now),
        Decision::Stop(StopReason::HintTooLong)
    );
    // Exactly the maximum is honoured.
    let mut call = Call::seeded(1);
    let f = Failure::transient().with_hint(Hint::RetryAfter(60 * S));
    assert!(matches!(
        fail_once(&policy, &mut call, f, now),
        Decision::Retry { .. }
    ));
}

#[test]
fn a_stream_of_hints_never_exceeds_max_attempts() {
    for max in 1..=6 {
        let policy = Policy::builder().max_attempts(max).build().unwrap();
        let clock = ManualClock::new();
        let mut call = Call::seeded(max as u64);
        let mut attempts = 0;
        loop {
            policy.start_attempt(&mut call, &clock).unwrap();
            attempts += 1;
            assert!(attempts <= max, "attempt {attempts} of {max}");
            let f = Failure::transient().with_hint(Hint::RetryAfter(MS));
            match policy.decide(&mut call, f, &clock) {
                Decision::Retry { after } => clock.advance(after),
                Decision::Stop(r) => {
                    assert_eq!(r, StopReason::AttemptsExhausted);
                    break;
                }
            }
        }
        assert_eq!(attempts, max);
        // Pushback, which resets the backoff, does not reset the attempt count.
        let mut call = Call::seeded(9);
        let mut attempts = 0;
        loop {
            policy.start_attempt(&mut call, &clock).unwrap();
            attempts += 1;
            let f = Failure::transient().with_hint(Hint::Pushback(MS));
            if let Decision::Stop(_) = policy.decide(&mut call, f, &clock) {
                break;
            }
        }
        assert_eq!(attempts, max);
    }
}

#[test]
fn hint_wait_is_h_plus_up_to_one_backoff_step() {
    let policy = Policy::builder().max_attempts(10).build().unwrap();
    let now = Instant::now();
    let mut saw_spread = false;
    for seed in 0..500 {
        let mut call = Call::seeded(seed);
        // Fail twice without hint to reach retry 3 (b_3 = 400 ms).
        for _ in 0..2 {
            let _ = fail_once(&policy, &mut call, Class::Transient, now);
        }
        let f = Failure::transient().with_hint(Hint::RetryAfter(2 * S));
        let Decision::Retry { after } = fail_once(&policy, &mut call, f, now) else {
            panic!()
        };
        assert!(after >= 2 * S && after < 2 * S + 400 * MS, "{after:?}");
        saw_spread |= after > 2 * S + 200 * MS;
    }
    assert!(saw_spread, "the spread should use the whole backoff step");
}

#[test]
fn pushback_waits_exactly_and_restarts_the_backoff() {
    let policy = Policy::builder()
        .max_attempts(10)
        .backoff(Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let now = Instant::now();
    let mut call = Call::seeded(3);
    for want in [100, 200, 400] {
        assert_eq!(
            fail_once(&policy, &mut call, Class::Transient, now),
            Decision::Retry { after: want * MS }
        );
    }
    let f = Failure::transient().with_hint(Hint::Pushback(1234 * MS));
    assert_eq!(
        fail_once(&policy, &mut call, f, now),
        Decision::Retry { after: 1234 * MS }
    );
    // The next plain failure starts over at b_1.
    assert_eq!(
        fail_once(&policy, &mut call, Class::Transient, now),
        Decision::Retry { after: 100 * MS }
    );
    assert_eq!(
        fail_once(&policy, &mut call, Class::Transient, now),
        Decision::Retry { after: 200 * MS }
    );
}

#[test]
fn negative_or_malformed_pushback_stops_the_call() {
    let policy = Policy::default();
    let now = Instant::now();
    // `grpc-retry-pushback-ms: -1`, as the transports read it.
    let f = Failure::transient().with_hint(Hint::DoNotRetry);
    assert_eq!(
        fail_once(&policy, &mut Call::seeded(1), f, now),
        Decision::Stop(StopReason::NotRetryable)
    );
}

#[test]
fn invalid_hint_falls_back_to_the_backoff_and_is_reported() {
    let events = Arc::new(Mutex::new(vec![]));
    let sink = events.clone();
    let policy = Policy::builder()
        .backoff(Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .observer(Arc::new(move |e: &Event| sink.lock().unwrap().push(*e)))
        .build()
        .unwrap();
    let now = Instant::now();
    // `Retry-After: soon`, as the transports read it.
    let hint = Hint::Invalid;
    let f = Failure::transient().with_hint(hint);
    assert_eq!(
        fail_once(&policy, &mut Call::seeded(1), f, now),
        Decision::Retry { after: 100 * MS }
    );
    let ev = events.lock().unwrap();
    assert!(ev.contains(&Event::HintInvalid { attempt: 1 }), "{ev:?}");
    assert!(!ev.iter().any(|e| matches!(e, Event::HintUsed { .. })));
}

#[test]
fn http_dates_in_the_past_mean_no_wait_beyond_the_spread() {
    let policy = Policy::default();
    let now = Instant::now();
    // `Retry-After: Sun, 06 Nov 1994 08:49:37 GMT`, read 10 s later.
    let at = RetryAfter::At(UNIX_EPOCH + Duration::from_secs(784_111_777));
    let hint = Hint::RetryAfter(at.wait(UNIX_EPOCH + Duration::from_secs(784_111_777 + 10)));
    assert_eq!(hint, Hint::RetryAfter(Duration::ZERO));
    let Decision::Retry { after } = fail_once(
        &policy,
        &mut Call::seeded(1),
        Failure::transient().with_hint(hint),
        now,
    ) else {
        panic!()
    };
    assert!(after < 100 * MS);
}

#[test]
fn classes_decide_what_is_retried() {
    let policy = Policy::default();
    let now = Instant::now();
    let cases: [(Class, bool, Option<Hint>, Option<StopReason>); 9] = [
        (Class::Transient, false, None, None),
        (Class::Unknown, false, None, Some(StopReason::NotRetryable)),
        (Class::Unknown, true, None, None),
        (Class::Permanent, true, None, Some(StopReason::NotRetryable)),
        (Class::Cancelled, true, None, Some(StopReason::Cancelled)),
        (
            Class::OnlyWithHint,
            true,
            None,
            Some(StopReason::NotRetryable),
        ),
        (
            Class::OnlyWithHint,
            true,
            Some(Hint::Invalid),
            Some(StopReason::NotRetryable),
        ),
        (Class::OnlyWithHint, false, Some(Hint::Pushback(MS)), None),
        (Class::OnlyWithHint, false, Some(Hint::RetryAfter(MS)), None),
    ];
    for (class, idempotent, hint, want) in cases {
        let mut call = Call::seeded(1).idempotent(idempotent);
        let mut f = Failure::new(class);
        f.hint = hint;
        let got = fail_once(&policy, &mut call, f, now);
        match want {
            Some(r) => assert_eq!(
                got,
                Decision::Stop(r),
                "{class:?} idempotent={idempotent} {hint:?}"
            ),
            None => assert!(
                matches!(got, Decision::Retry { .. }),
                "{class:?} {hint:?}: {got:?}"
            ),
        }
    }
}

#[test]
fn deadline_rule_accounts_for_one_typical_attempt() {
    let policy = Policy::builder()
        .backoff(Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .typical_attempt(50 * MS)
        .measure_latency(false)
        .build()
        .unwrap();
    let now = Instant::now();
    // now + 100 ms delay + 50 ms typical = 150 ms: a deadline at 150 ms stops,
    // one at 151 ms allows the retry.
    let mut call = Call::seeded(1).deadline(now + 150 * MS);
    assert_eq!(
        fail_once(&policy, &mut call, Class::Transient, now),
        Decision::Stop(StopReason::Deadline)
    );
    let mut call = Call::seeded(1).deadline(now + 151 * MS);
    assert_eq!(
        fail_once(&policy, &mut call, Class::Transient, now),
        Decision::Retry { after: 100 * MS }
    );
}

#[test]
fn measured_latency_raises_the_typical_attempt() {
    let policy = Policy::builder()
        .backoff(Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let clock = ManualClock::new();
    for _ in 0..20 {
        let mut call = Call::seeded(1).deadline(clock.now() + 10 * S);
        policy.start_attempt(&mut call, &clock).unwrap();
        clock.advance(400 * MS);
        assert_eq!(
            policy.decide(&mut call, Outcome::Success, &clock),
            Decision::Stop(StopReason::Success)
        );
    }
    let t = policy.typical_attempt();
    assert!(t > 390 * MS && t <= 400 * MS, "{t:?}");
    // 100 ms wait + 400 ms typical does not fit in 450 ms.
    let mut call = Call::seeded(1).deadline(clock.now() + 450 * MS);
    policy.start_attempt(&mut call, &clock).unwrap();
    assert_eq!(
        policy.decide(&mut call, Class::Transient, &clock),
        Decision::Stop(StopReason::Deadline)
    );
}

#[test]
fn attempt_timeout_is_bounded_by_the_remaining_time() {
    let policy = Policy::builder().attempt_timeout(2 * S).build().unwrap();
    let clock = ManualClock::new();
    let mut call = Call::seeded(1).deadline(clock.now() + 3 * S);
    assert_eq!(policy.start_attempt(&mut call, &clock), Ok(Some(2 * S)));
    clock.advance(2500 * MS);
    let _ = policy.decide(&mut call, Class::Unknown, &clock);
    assert_eq!(policy.start_attempt(&mut call, &clock), Ok(Some(500 * MS)));
    clock.advance(S);
    assert_eq!(
        policy.start_attempt(&mut call, &clock),
        Err(StopReason::Deadline)
    );
}

#[test]
fn events_follow_the_call() {
    let events = Arc::new(Mutex::new(vec![]));
    let sink = events.clone();
    let policy = Policy::builder()
        .backoff(Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .observer(Arc::new(move |e: &Event| sink.lock().unwrap().push(*e)))
        .build()
        .unwrap();
    let clock = ManualClock::new();
    let mut call = Call::seeded(1);
    policy.start_attempt(&mut call, &clock).unwrap();
    clock.advance(10 * MS);
    let Decision::Retry { after } = policy.decide(&mut call, Class::Transient, &clock) else {
        panic!()
    };
    clock.advance(after);
    policy.start_attempt(&mut call, &clock).unwrap();
    let _ = policy.decide(&mut call, Outcome::Success, &clock);
    let ev = events.lock().unwrap().clone();
    assert_eq!(
        ev,
        vec![
            Event::AttemptStarted { attempt: 1 },
            Event::AttemptFailed {
                attempt: 1,
                class: Class::Transient
            },
            Event::RetryScheduled {
                attempt: 1,
                delay: 100 * MS,
                cause: Class::Transient,
                elapsed: 10 * MS
            },
            Event::AttemptStarted { attempt: 2 },
            Event::RetryStarted {
                attempt: 2,
                cause: Class::Transient
            },
            Event::Stopped {
                reason: StopReason::Success,
                attempts: 2
            },
        ]
    );
}

#[test]
fn stop_reason_names_are_the_spec_names() {
    let names: Vec<&str> = StopReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        [
            "success",
            "not_retryable",
            "attempts_exhausted",
            "deadline",
            "budget",
            "breaker_open",
            "throttled",
            "hint_too_long",
            "cancelled"
        ]
    );
}

#[test]
fn a_call_past_its_deadline_makes_no_attempt() {
    let policy = Policy::default();
    let now = Instant::now();
    let mut call = Call::seeded(1).deadline(now);
    assert_eq!(
        policy.start_attempt(&mut call, now),
        Err(StopReason::Deadline)
    );
    assert_eq!(call.attempts(), 0);
}

#[test]
fn huge_hints_and_deadlines_never_panic() {
    let policy = Policy::default();
    let now = Instant::now();
    for h in [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 2),
        Duration::ZERO,
    ] {
        for hint in [Hint::RetryAfter(h), Hint::Pushback(h)] {
            let mut call = Call::seeded(1).deadline(now + 5 * S);
            let _ = fail_once(
                &policy,
                &mut call,
                Failure::transient().with_hint(hint),
                now,
            );
            let mut call = Call::seeded(1);
            let _ = fail_once(
                &policy,
                &mut call,
                Failure::transient().with_hint(hint),
                now,
            );
        }
    }
}

/// Review regression: a malformed hint on a call that then stops (its last
/// attempt) was never counted; every failure is counted by class.
#[test]
fn invalid_hints_and_failures_are_counted_even_when_the_call_stops() {
    let stats = Arc::new(stagger::export::Stats::new());
    let policy = Policy::builder()
        .max_attempts(1)
        .observer(stats.clone())
        .build()
        .unwrap();
    let now = Instant::now();
    let f = Failure::transient().with_hint(Hint::Invalid);
    assert_eq!(
        fail_once(&policy, &mut Call::seeded(1), f, now),
        Decision::Stop(StopReason::AttemptsExhausted)
    );
    let _ = fail_once(&policy, &mut Call::seeded(2), Class::Permanent, now);
    let s = stats.snapshot();
    assert_eq!(s.hints_invalid, 1);
    let failed = |c| s.failed_by_class.iter().find(|(k, _)| *k == c).unwrap().1;
    assert_eq!(failed(Class::Transient), 1);
    assert_eq!(failed(Class::Permanent), 1);
    assert_eq!(s.retries, 0);
}
