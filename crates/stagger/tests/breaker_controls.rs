//! An operator's hand on the breaker: disabled, metrics-only, forced open,
//! close-and-reset and open-for-a-while, one control for many breakers,
//! on a manual clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagger::guardrails::{BreakerConfig, BreakerControl, BreakerState, Transition};
use stagger::time::{Clock, ManualClock};
use stagger::{Breaker, Call, Class, Decision, Event, Failure, Outcome, Policy, StopReason};

use BreakerState::*;

fn fail() -> Outcome {
    Outcome::Failure(Failure::transient())
}

/// Runs one call through the breaker; `false` if it was refused.
fn call(b: &Breaker, clock: &ManualClock, outcome: Outcome) -> bool {
    match b.acquire(clock.now()) {
        Ok(p) => {
            b.record(p, &outcome, None, clock.now());
            true
        }
        Err(_) => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Changed(BreakerState, BreakerState),
    WouldOpen,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Opens after 5 failures of at least 5 calls, open 5 s without jitter,
/// every event logged.
fn logged() -> (Breaker, Log) {
    let log: Log = Arc::default();
    let sink = log.clone();
    let b = Breaker::new(BreakerConfig {
        min_calls: 5,
        open_jitter: 0.0,
        seed: Some(3),
        observer: Some(Arc::new(move |e: &Event| match *e {
            Event::BreakerStateChanged { from, to } => {
                sink.lock().unwrap().push(Seen::Changed(from, to))
            }
            Event::BreakerWouldOpen => sink.lock().unwrap().push(Seen::WouldOpen),
            _ => {}
        })),
        ..Default::default()
    })
    .unwrap();
    (b, log)
}

#[test]
fn a_disabled_breaker_passes_every_call_and_counts_nothing() {
    let clock = ManualClock::new();
    let (b, log) = logged();
    assert_eq!(b.transition(Transition::Disable, clock.now()), Disabled);
    for _ in 0..100 {
        assert!(
            call(&b, &clock, fail()),
            "a disabled breaker refuses nothing"
        );
    }
    assert_eq!(b.state(), Disabled);
    assert_eq!(b.counts(clock.now()), (0, 0), "nothing recorded");
    assert_eq!(*log.lock().unwrap(), vec![Seen::Changed(Closed, Disabled)]);
}

#[test]
fn metrics_only_counts_and_says_when_it_would_open_but_refuses_nothing() {
    let clock = ManualClock::new();
    let (b, log) = logged();
    b.transition(Transition::MetricsOnly, clock.now());
    for _ in 0..4 {
        assert!(call(&b, &clock, fail()));
    }
    assert_eq!(b.counts(clock.now()), (4, 4), "outcomes are counted");
    assert!(call(&b, &clock, fail()), "the fifth failure still passes");
    assert_eq!(b.state(), MetricsOnly);
    assert_eq!(
        *log.lock().unwrap(),
        vec![Seen::Changed(Closed, MetricsOnly), Seen::WouldOpen]
    );
    assert_eq!(
        b.counts(clock.now()),
        (0, 0),
        "judged afresh after saying so"
    );
    for _ in 0..20 {
        assert!(call(&b, &clock, Outcome::Success));
    }
    assert_eq!(b.counts(clock.now()), (20, 0));
}

#[test]
fn forced_open_refuses_every_call_until_released_then_starts_from_clean_counts() {
    let clock = ManualClock::new();
    let (b, log) = logged();
    for _ in 0..4 {
        call(&b, &clock, fail());
    }
    assert_eq!(b.counts(clock.now()), (4, 4));
    assert_eq!(b.transition(Transition::ForceOpen, clock.now()), ForcedOpen);
    for _ in 0..50 {
        let refused = b.acquire(clock.now()).unwrap_err();
        assert_eq!(refused.retry_in, Duration::from_secs(5));
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(
        b.state_at(clock.now()),
        ForcedOpen,
        "no open period ends it"
    );
    assert_eq!(b.transition(Transition::CloseAndReset, clock.now()), Closed);
    assert_eq!(
        b.counts(clock.now()),
        (0, 0),
        "the old failures are forgotten"
    );
    for _ in 0..4 {
        call(&b, &clock, fail());
    }
    assert_eq!(
        b.state(),
        Closed,
        "four failures after the reset: the fifth old one does not count"
    );
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            Seen::Changed(Closed, ForcedOpen),
            Seen::Changed(ForcedOpen, Closed)
        ]
    );
}

#[test]
fn a_call_admitted_before_a_forced_state_reports_into_nothing() {
    let clock = ManualClock::new();
    let (b, _) = logged();
    let slow: Vec<_> = (0..5).map(|_| b.acquire(clock.now()).unwrap()).collect();
    b.transition(Transition::MetricsOnly, clock.now());
    for p in slow {
        b.record(p, &fail(), None, clock.now());
    }
    assert_eq!(b.counts(clock.now()), (0, 0));
    b.transition(Transition::CloseAndReset, clock.now());
    assert_eq!(b.state(), Closed);
}

#[test]
fn open_for_a_duration_then_half_open_as_usual() {
    let clock = ManualClock::new();
    let (b, log) = logged();
    let t = Transition::OpenFor(Duration::from_secs(30));
    assert_eq!(b.transition(t, clock.now()), Open);
    clock.advance(Duration::from_secs(29));
    assert_eq!(
        b.acquire(clock.now()).unwrap_err().retry_in,
        Duration::from_secs(1)
    );
    clock.advance(Duration::from_secs(1));
    let probe = b.acquire(clock.now()).expect("half-open after 30 s");
    assert!(probe.is_probe());
    assert!(b.acquire(clock.now()).is_err(), "one probe");
    b.record(probe, &Outcome::Success, None, clock.now());
    assert_eq!(b.state(), Closed);
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            Seen::Changed(Closed, Open),
            Seen::Changed(Open, HalfOpen),
            Seen::Changed(HalfOpen, Closed)
        ]
    );
}

#[test]
fn a_forced_state_takes_the_half_open_probe_slot_back() {
    let clock = ManualClock::new();
    let (b, _) = logged();
    b.transition(Transition::OpenFor(Duration::ZERO), clock.now());
    let probe = b.acquire(clock.now()).unwrap();
    assert_eq!(b.probes_in_flight(), 1);
    b.transition(Transition::ForceOpen, clock.now());
    assert_eq!(b.probes_in_flight(), 0);
    // The probe's late success does not close a forced-open breaker.
    b.record(probe, &Outcome::Success, None, clock.now());
    assert_eq!(b.state(), ForcedOpen);
}

#[test]
fn one_control_drives_many_breakers_and_late_ones_join_the_held_state() {
    let clock = ManualClock::new();
    let control = BreakerControl::new();
    let (a, b) = (Breaker::default(), Breaker::default());
    control.attach("a", &a);
    control.clone().attach("b", &b); // clones share the control
    control.transition(Transition::ForceOpen, "isolate", clock.now());
    assert!(a.acquire(clock.now()).is_err() && b.acquire(clock.now()).is_err());
    let late = Breaker::default();
    control.attach("late", &late);
    assert_eq!(late.state_at(clock.now()), ForcedOpen);

    assert_eq!(
        control.transition_one("a", Transition::Disable, "a only", clock.now()),
        Some(Disabled)
    );
    assert_eq!(
        control.transition_one("nope", Transition::Disable, "", clock.now()),
        None
    );
    assert_eq!(
        control.states(clock.now()),
        vec![
            ("a".to_owned(), Disabled),
            ("b".to_owned(), ForcedOpen),
            ("late".to_owned(), ForcedOpen)
        ]
    );
    control.transition(Transition::CloseAndReset, "released", clock.now());
    let after = Breaker::default();
    control.attach("after", &after);
    assert!(control
        .states(clock.now())
        .iter()
        .all(|(_, s)| *s == Closed));
}

#[test]
fn a_forced_open_breaker_stops_the_policy_with_breaker_open_before_any_attempt() {
    let clock = ManualClock::new();
    let breaker = Breaker::default();
    let policy = Policy::builder()
        .max_attempts(3)
        .breaker(breaker.clone())
        .build()
        .unwrap();
    let mut c = Call::seeded(1);
    policy.start_attempt(&mut c, clock.now()).unwrap();
    // Forced open while the first attempt runs: its retry is refused now.
    breaker.transition(Transition::ForceOpen, clock.now());
    assert_eq!(
        policy.decide(&mut c, Class::Transient, clock.now()),
        Decision::Stop(StopReason::BreakerOpen)
    );
    let mut next = Call::seeded(2);
    assert!(policy.start_attempt(&mut next, clock.now()).is_err());
    breaker.transition(Transition::Disable, clock.now());
    let mut third = Call::seeded(3);
    policy.start_attempt(&mut third, clock.now()).unwrap();
}
