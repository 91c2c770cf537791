//! The retry-amplification SLI on a manual clock.

use std::sync::Arc;
use std::time::Duration;

use stagger::export::{SliState, SliWindow};
use stagger::time::ManualClock;
use stagger::{Call, Class, Decision, Event, Observer, Outcome, Policy};

fn feed(sli: &SliWindow<ManualClock>, requests: u32, retries: u32) {
    for _ in 0..requests {
        sli.on_event(&Event::AttemptStarted { attempt: 1 });
    }
    for _ in 0..retries {
        sli.on_event(&Event::RetryScheduled {
            attempt: 1,
            delay: Duration::ZERO,
            cause: Class::Transient,
            elapsed: Duration::ZERO,
        });
    }
}

#[test]
fn healthy_is_strictly_under_10_percent() {
    let clock = ManualClock::new();
    let sli = SliWindow::with_clock(clock.clone());
    assert_eq!(sli.state(), SliState::Healthy, "no traffic is healthy");
    feed(&sli, 100, 9);
    assert_eq!(sli.state(), SliState::Healthy);
    feed(&sli, 0, 1);
    assert_eq!(sli.snapshot().ratio, 0.1);
    assert_eq!(sli.state(), SliState::Elevated, "10 % is not under 10 %");
}

#[test]
fn alarm_needs_more_than_20_percent_for_a_whole_minute() {
    let clock = ManualClock::new();
    let sli = SliWindow::with_clock(clock.clone());
    // Exactly 20 % for two minutes: elevated, never alarm.
    for _ in 0..24 {
        feed(&sli, 10, 2);
        clock.advance(Duration::from_secs(5));
        assert_eq!(sli.state(), SliState::Elevated);
    }
    // 30 % from t = 120 s: alarm once it has held for 60 s, judged on whole
    // 5 s buckets (so at 65 s).
    let start = clock.elapsed();
    loop {
        feed(&sli, 10, 3);
        let held = clock.elapsed() - start;
        let state = sli.state();
        if held <= Duration::from_secs(60) {
            assert_eq!(state, SliState::Elevated, "after {held:?}");
        } else {
            assert_eq!(state, SliState::Alarm, "after {held:?}");
            break;
        }
        clock.advance(Duration::from_secs(5));
    }
}

#[test]
fn a_dip_below_20_percent_restarts_the_minute() {
    let clock = ManualClock::new();
    let sli = SliWindow::with_clock(clock.clone());
    for _ in 0..8 {
        feed(&sli, 10, 5); // 50 % for 40 s
        clock.advance(Duration::from_secs(5));
    }
    feed(&sli, 400, 0); // the ratio drops to ~8 %
    assert_eq!(sli.state(), SliState::Healthy);
    for _ in 0..20 {
        feed(&sli, 10, 20);
        clock.advance(Duration::from_secs(5));
        if clock.elapsed() < Duration::from_secs(40 + 60) {
            assert_ne!(sli.state(), SliState::Alarm, "at {:?}", clock.elapsed());
        }
    }
    assert_eq!(sli.state(), SliState::Alarm);
}

#[test]
fn old_traffic_leaves_the_minute() {
    let clock = ManualClock::new();
    let sli = SliWindow::with_clock(clock.clone());
    feed(&sli, 10, 10);
    clock.advance(Duration::from_secs(60));
    let s = sli.snapshot();
    assert_eq!((s.requests, s.retries, s.state), (0, 0, SliState::Healthy));
}

#[test]
fn the_sli_observes_a_policy() {
    let clock = ManualClock::new();
    let sli = Arc::new(SliWindow::with_clock(clock.clone()));
    let policy = Policy::builder().observer(sli.clone()).build().unwrap();
    for seed in 0..10 {
        let mut call = Call::seeded(seed);
        policy.start_attempt(&mut call, &clock).unwrap();
        let class = if seed < 3 {
            Class::Transient
        } else {
            Class::Permanent
        };
        if let Decision::Retry { .. } = policy.decide(&mut call, class, &clock) {
            policy.start_attempt(&mut call, &clock).unwrap();
            policy.decide(&mut call, Outcome::Success, &clock);
        }
    }
    let s = sli.snapshot();
    assert_eq!((s.requests, s.retries), (10, 3));
    assert_eq!(s.state, SliState::Elevated);
}
