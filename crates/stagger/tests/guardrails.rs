//! `Policy::decide` with guardrails, end to end on a manual clock.

use stagger::Backoff;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use stagger::export::Stats;
use stagger::guardrails::budget::{
    QuotaBudget, RatioBudget, RatioBudgetConfig, RefillBudget, RefillBudgetConfig,
};
use stagger::guardrails::{BreakerConfig, BreakerState, Guardrails};
use stagger::random::FastRng;
use stagger::time::{Clock, ManualClock};
use stagger::{
    Breaker, Call, Class, Decision, Event, Failure, Outcome, Policy, StopReason, Throttle,
};

/// Runs one call whose attempts fail with `failures` (then succeed), and
/// returns its stop reason, attempts and the delays it was told to sleep.
fn run(
    policy: &Policy,
    clock: &ManualClock,
    seed: u64,
    failures: &mut dyn Iterator<Item = Class>,
) -> (StopReason, u32, Vec<Duration>) {
    let mut call = Call::seeded(seed).idempotent(true);
    let mut slept = Vec::new();
    loop {
        if let Err(reason) = policy.start_attempt(&mut call, clock) {
            return (reason, call.attempts(), slept);
        }
        let outcome = match failures.next() {
            Some(class) => Outcome::from(class),
            None => Outcome::Success,
        };
        match policy.decide(&mut call, outcome, clock) {
            Decision::Retry { after } => {
                slept.push(after);
                clock.advance(after);
            }
            Decision::Stop(reason) => return (reason, call.attempts(), slept),
        }
    }
}

fn failing(n: usize) -> impl Iterator<Item = Class> {
    std::iter::repeat_n(Class::Transient, n)
}

#[test]
fn a_budget_stop_is_never_a_retry_and_never_sleeps() {
    let clock = ManualClock::new();
    let stats = Arc::new(Stats::new());
    let policy = Policy::builder()
        .max_attempts(10)
        .backoff(Backoff {
            base: Duration::from_millis(10),
            ..Backoff::new()
        })
        .budget(
            RatioBudget::new(RatioBudgetConfig {
                ratio: 0.1,
                floor: 3,
                floor_per_request: None,
                ..Default::default()
            })
            .unwrap(),
        )
        .observer(stats.clone())
        .build()
        .unwrap();
    let (reason, attempts, slept) = run(&policy, &clock, 1, &mut failing(100));
    assert_eq!(reason, StopReason::Budget);
    assert_eq!(attempts, 4, "1 first attempt + the 3 retries of the floor");
    assert_eq!(slept.len(), 3, "no sleep for the refused retry");
    let s = stats.snapshot();
    assert_eq!(s.budget_refusals, 1);
    assert_eq!(s.stopped(StopReason::Budget), 1);
}

#[test]
fn the_first_attempt_is_never_blocked_by_a_budget() {
    let clock = ManualClock::new();
    let policy = Policy::builder()
        .budget(
            RefillBudget::new(RefillBudgetConfig {
                capacity: 1.0,
                ratio: 0.0,
            })
            .unwrap(),
        )
        .build()
        .unwrap();
    let (reason, ..) = run(&policy, &clock, 1, &mut failing(100));
    assert_eq!(reason, StopReason::Budget, "the one token is spent");
    for seed in 0..50 {
        let (reason, attempts, _) = run(&policy, &clock, seed, &mut failing(1));
        assert_eq!(
            (reason, attempts),
            (StopReason::Budget, 1),
            "first attempt ran"
        );
        let (reason, attempts, _) = run(&policy, &clock, seed, &mut failing(0));
        assert_eq!((reason, attempts), (StopReason::Success, 1));
    }
}

#[test]
fn an_open_breaker_stops_calls_before_their_first_attempt() {
    let clock = ManualClock::new();
    let stats = Arc::new(Stats::new());
    let breaker = Breaker::new(BreakerConfig {
        min_calls: 4,
        open_jitter: 0.0,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder()
        .max_attempts(1)
        .breaker(breaker.clone())
        .observer(stats.clone())
        .build()
        .unwrap();
    for seed in 0..4 {
        run(&policy, &clock, seed, &mut failing(1));
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    let (reason, attempts, slept) = run(&policy, &clock, 9, &mut failing(0));
    assert_eq!(
        (reason, attempts, slept.len()),
        (StopReason::BreakerOpen, 0, 0)
    );
    assert_eq!(
        stats.snapshot().breaker_opens,
        1,
        "the policy's observer hears the breaker"
    );
    clock.advance(Duration::from_secs(5));
    let (reason, attempts, _) = run(&policy, &clock, 10, &mut failing(0));
    assert_eq!(
        (reason, attempts),
        (StopReason::Success, 1),
        "the probe closes it"
    );
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[test]
fn a_dependency_that_is_down_gets_zero_retries() {
    let clock = ManualClock::new();
    let breaker = Breaker::new(BreakerConfig {
        min_calls: 1,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder()
        .max_attempts(5)
        .breaker(breaker)
        .build()
        .unwrap();
    // The first failure trips the breaker; the retry it would have slept
    // for would wake into an open breaker, so the call stops at once.
    let (reason, attempts, slept) = run(&policy, &clock, 1, &mut failing(100));
    assert_eq!(
        (reason, attempts, slept.len()),
        (StopReason::BreakerOpen, 1, 0)
    );
}

#[test]
fn quota_refunds_through_the_engine() {
    let clock = ManualClock::new();
    let quota = QuotaBudget::default();
    let policy = Policy::builder()
        .max_attempts(5)
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .budget(quota.clone())
        .build()
        .unwrap();
    let (reason, ..) = run(
        &policy,
        &clock,
        1,
        &mut [Class::Transient, Class::Unknown].into_iter(),
    );
    assert_eq!(reason, StopReason::Success);
    assert_eq!(
        quota.available(),
        495,
        "−5 −10, then +10 for the last retry"
    );
    run(&policy, &clock, 2, &mut failing(0));
    assert_eq!(quota.available(), 496, "+1 for a first-attempt success");
}

#[test]
fn throttling_rejects_first_attempts_locally() {
    let clock = ManualClock::new();
    let throttle = Throttle::default();
    let policy = Policy::builder()
        .max_attempts(1)
        .throttle(throttle.clone())
        .build()
        .unwrap();
    let mut throttled = 0;
    for seed in 0..2_000 {
        let (reason, attempts, _) = run(&policy, &clock, seed, &mut failing(1));
        if reason == StopReason::Throttled {
            assert_eq!(attempts, 0);
            throttled += 1;
        }
    }
    // Every sent request fails, so p climbs towards (n − 0)/(n + 1).
    assert!(throttled > 1_500, "{throttled}");
    assert!(throttle.reject_probability(clock.now()) > 0.99);
}

#[test]
fn throttling_frees_the_breaker_probe_it_refused() {
    let clock = ManualClock::new();
    let breaker = Breaker::new(BreakerConfig {
        min_calls: 1,
        open_jitter: 0.0,
        ..Default::default()
    })
    .unwrap();
    let throttle = Throttle::default();
    let guards = Guardrails::new()
        .breaker(breaker.clone())
        .throttle(throttle.clone());
    let policy = Policy::builder()
        .max_attempts(1)
        .guardrail(Arc::new(guards))
        .build()
        .unwrap();
    // Teach the throttle that everything fails, and trip the breaker.
    let mut rng = FastRng::seeded(3);
    for _ in 0..1_000 {
        if throttle.admit(&mut rng, clock.now()) {
            throttle.record(&Outcome::from(Class::Transient), clock.now());
        }
    }
    run(&policy, &clock, 0, &mut failing(1));
    clock.advance(Duration::from_secs(5));
    for seed in 0..200 {
        let (reason, ..) = run(&policy, &clock, seed, &mut failing(0));
        if reason == StopReason::Success {
            break;
        }
        assert_eq!(
            reason,
            StopReason::Throttled,
            "never stuck on a leaked probe slot"
        );
    }
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[test]
fn abandoning_an_attempt_frees_its_probe_slot() {
    let clock = ManualClock::new();
    let breaker = Breaker::new(BreakerConfig {
        min_calls: 1,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder()
        .max_attempts(1)
        .breaker(breaker.clone())
        .build()
        .unwrap();
    run(&policy, &clock, 0, &mut failing(1));
    clock.advance(Duration::from_secs(6));
    let mut dropped = Call::seeded(1);
    policy.start_attempt(&mut dropped, &clock).unwrap();
    assert_eq!(breaker.probes_in_flight(), 1);
    let (reason, ..) = run(&policy, &clock, 2, &mut failing(0));
    assert_eq!(reason, StopReason::BreakerOpen, "the slot is taken");
    policy.abandon(&mut dropped, &clock);
    assert_eq!(breaker.probes_in_flight(), 0);
    let (reason, ..) = run(&policy, &clock, 3, &mut failing(0));
    assert_eq!(reason, StopReason::Success);
}

#[test]
fn breaker_events_reach_the_policy_observer_in_order() {
    let clock = ManualClock::new();
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let policy = Policy::builder()
        .max_attempts(1)
        .breaker(
            Breaker::new(BreakerConfig {
                min_calls: 1,
                ..Default::default()
            })
            .unwrap(),
        )
        .observer(Arc::new(move |e: &Event| {
            if let Event::BreakerStateChanged { from, to } = *e {
                sink.lock().unwrap().push((from, to));
            }
        }))
        .build()
        .unwrap();
    run(&policy, &clock, 0, &mut failing(1));
    clock.advance(Duration::from_secs(6));
    run(&policy, &clock, 1, &mut failing(0));
    use BreakerState::*;
    assert_eq!(
        *log.lock().unwrap(),
        vec![(Closed, Open), (Open, HalfOpen), (HalfOpen, Closed)]
    );
}

#[test]
fn guarded_preset_schedule_and_guardrails() {
    let clock = ManualClock::new();
    let policy = Policy::guarded();
    assert_eq!(policy.max_attempts(), 5);
    assert_eq!(policy.backoff().base, Duration::from_millis(100));
    assert_eq!(policy.backoff().cap, Duration::from_secs(10));
    // After 30 good calls, call k that fails once may retry while
    // k ≤ clamp(0.1·(30 + k), 1, 10) + 0.1·(30 + k), that is for k ≤ 7;
    // call 8 is refused. Every failure is followed by a success, so the
    // breaker sees no run of failures and stays closed.
    for seed in 100..130 {
        run(&policy, &clock, seed, &mut failing(0));
    }
    let mut retries = 0;
    for seed in 0..7 {
        let (reason, attempts, _) = run(&policy, &clock, seed, &mut failing(1));
        assert_eq!(reason, StopReason::Success);
        retries += attempts - 1;
    }
    assert_eq!(retries, 7);
    let (reason, ..) = run(&policy, &clock, 99, &mut failing(1));
    assert_eq!(reason, StopReason::Budget);
    // Enough failures, and the breaker opens too.
    for seed in 0..30 {
        run(&policy, &clock, seed, &mut failing(100));
    }
    let (reason, ..) = run(&policy, &clock, 98, &mut failing(0));
    assert_eq!(reason, StopReason::BreakerOpen);
}

/// A lone client — a request every 15 s against a healthy dependency —
/// still gets its retry when a rare transient failure hits it, in every
/// window, and even on its very first call.
#[test]
fn a_lone_client_with_a_rare_transient_failure_still_gets_its_retry() {
    let clock = ManualClock::new();
    let policy = Policy::guarded();
    let (reason, attempts, _) = run(&policy, &clock, 1, &mut failing(1));
    assert_eq!((reason, attempts), (StopReason::Success, 2), "first call");
    for minute in 0..10u64 {
        for k in 0..3 {
            clock.advance(Duration::from_secs(15));
            run(&policy, &clock, 100 + minute * 3 + k, &mut failing(0));
        }
        clock.advance(Duration::from_secs(15));
        let (reason, attempts, _) = run(&policy, &clock, minute, &mut failing(1));
        assert_eq!(
            (reason, attempts),
            (StopReason::Success, 2),
            "minute {minute}"
        );
    }
}

/// The drill's shape for one process: half a request per second, then a
/// stall. The first failing call gets one retry (it could be a blip); the
/// next failing call in the same window fails fast; after five failures in
/// a row the breaker opens and the dependency gets nothing from this client.
#[test]
fn a_thin_client_in_a_stall_retries_once_then_fails_fast() {
    let clock = ManualClock::new();
    let policy = Policy::guarded();
    for seed in 0..20 {
        run(&policy, &clock, seed, &mut failing(0));
        clock.advance(Duration::from_secs(2));
    }
    let (reason, attempts, _) = run(&policy, &clock, 50, &mut failing(100));
    assert_eq!((reason, attempts), (StopReason::Budget, 2));
    clock.advance(Duration::from_secs(2));
    let (reason, attempts, _) = run(&policy, &clock, 51, &mut failing(100));
    assert_eq!((reason, attempts), (StopReason::Budget, 1));
    clock.advance(Duration::from_secs(2));
    let (reason, attempts, _) = run(&policy, &clock, 52, &mut failing(100));
    assert_eq!((reason, attempts), (StopReason::Budget, 1));
    clock.advance(Duration::from_secs(2));
    // The fifth failure in a row opens the breaker.
    let (reason, attempts, _) = run(&policy, &clock, 53, &mut failing(100));
    assert_eq!((reason, attempts), (StopReason::BreakerOpen, 1));
    let (reason, attempts, _) = run(&policy, &clock, 54, &mut failing(0));
    assert_eq!((reason, attempts), (StopReason::BreakerOpen, 0));
}

#[test]
fn a_custom_guardrail_and_builder_parts_do_not_mix() {
    let err = Policy::builder()
        .guardrail(Arc::new(Guardrails::new()))
        .breaker(Breaker::default())
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "guardrail");
}

proptest! {
    /// Whatever the failures, a call under a budget only ever sleeps for
    /// retries the budget granted, and a `budget` stop follows a failure.
    #[test]
    fn budget_stops_follow_the_budget(classes in proptest::collection::vec(0u8..4, 0..12), seed in any::<u64>()) {
        let clock = ManualClock::new();
        let budget = RatioBudget::new(RatioBudgetConfig {
            ratio: 0.0,
            floor: 2,
            floor_per_request: None,
            ..Default::default()
        }).unwrap();
        let policy = Policy::builder().max_attempts(8).budget(budget.clone()).build().unwrap();
        let mut failures = classes.iter().map(|c| match c {
            0 => Class::Transient,
            1 => Class::Unknown,
            2 => Class::OnlyWithHint,
            _ => Class::Transient,
        });
        let (reason, attempts, slept) = run(&policy, &clock, seed, &mut failures);
        prop_assert!(slept.len() <= 2);
        prop_assert_eq!(budget.counts(clock.now()).1, slept.len() as u64);
        prop_assert!(attempts >= 1);
        if reason == StopReason::Budget {
            prop_assert_eq!(slept.len(), 2);
        }
    }
}

#[test]
fn failures_without_retries_do_not_touch_the_budget() {
    let clock = ManualClock::new();
    let budget = RatioBudget::new(RatioBudgetConfig {
        ratio: 0.0,
        floor: 1,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder().budget(budget.clone()).build().unwrap();
    let (reason, ..) = run(&policy, &clock, 1, &mut [Class::Permanent].into_iter());
    assert_eq!(reason, StopReason::NotRetryable);
    assert_eq!(budget.available(clock.now()), 1);
    let _ = Failure::transient();
}
