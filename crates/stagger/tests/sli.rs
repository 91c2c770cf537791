//! The retry-amplification SLI on a manual clock.

use stagger::Backoff;
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
        sli.on_event(&Event::RetryStarted {
            attempt: 2,
            cause: Class::Transient,
        });
    }
}

#[test]
fn healthy_is_strictly_under_10_percent() {
    let clock = ManualClock::new();
    let sli = SliWindow::with_clock(clock.clone());
    assert_eq!(
        sli.snapshot().state,
        SliState::Healthy,
        "no traffic is healthy"
    );
    feed(&sli, 100, 9);
    assert_eq!(sli.snapshot().state, SliState::Healthy);
    feed(&sli, 0, 1);
    assert_eq!(sli.snapshot().ratio, 0.1);
    assert_eq!(
        sli.snapshot().state,
        SliState::Elevated,
        "10 % is not under 10 %"
    );
}

#[test]
fn alarm_needs_more_than_20_percent_for_a_whole_minute() {
    let clock = ManualClock::new();
    let sli = SliWindow::with_clock(clock.clone());
    // Exactly 20 % for two minutes: elevated, never alarm.
    for _ in 0..24 {
        feed(&sli, 10, 2);
        clock.advance(Duration::from_secs(5));
        assert_eq!(sli.snapshot().state, SliState::Elevated);
    }
    // 30 % from t = 120 s: alarm once it has held for 60 s, judged on whole
    // 5 s buckets (so at 65 s).
    let start = clock.elapsed();
    loop {
        feed(&sli, 10, 3);
        let held = clock.elapsed() - start;
        let state = sli.snapshot().state;
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
    assert_eq!(sli.snapshot().state, SliState::Healthy);
    for _ in 0..20 {
        feed(&sli, 10, 20);
        clock.advance(Duration::from_secs(5));
        if clock.elapsed() < Duration::from_secs(40 + 60) {
            assert_ne!(
                sli.snapshot().state,
                SliState::Alarm,
                "at {:?}",
                clock.elapsed()
            );
        }
    }
    assert_eq!(sli.snapshot().state, SliState::Alarm);
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
            let _ = policy.decide(&mut call, Outcome::Success, &clock);
        }
    }
    let s = sli.snapshot();
    assert_eq!((s.requests, s.retries), (10, 3));
    assert_eq!(s.state, SliState::Elevated);
}

/// 200 calls to a dependency that is down, behind a breaker, arriving every
/// 50 ms and answered (with a failure) 20 ms after each attempt starts, so
/// calls overlap: what the SLI and the counters see, next to what the
/// dependency received.
struct DeadDependency {
    /// Attempts that started (reached the dependency).
    attempts: u64,
    /// Attempts 2 and later that started: the retries the dependency got.
    retries_sent: u64,
    /// Calls whose first attempt the breaker refused.
    refused_at_once: u64,
}

fn dead_dependency(policy: &Policy, clock: &ManualClock) -> DeadDependency {
    const CALLS: u64 = 200;
    let ms = Duration::from_millis;
    // Each pending step: when it happens, which call, and whether it is an
    // attempt answering (true) or an attempt about to start (false).
    let mut calls: Vec<Call<_>> = (0..CALLS).map(Call::seeded).collect();
    let mut steps: Vec<(Duration, usize, bool)> = (0..CALLS as usize)
        .map(|i| (ms(50) * i as u32, i, false))
        .collect();
    let mut seen = DeadDependency {
        attempts: 0,
        retries_sent: 0,
        refused_at_once: 0,
    };
    while let Some(k) = (0..steps.len()).min_by_key(|k| steps[*k].0) {
        let (at, i, answer) = steps.swap_remove(k);
        clock.set(at);
        let call = &mut calls[i];
        if answer {
            if let Decision::Retry { after } = policy.decide(call, Class::Transient, clock) {
                steps.push((at + after, i, false));
            }
        } else if policy.start_attempt(call, clock).is_ok() {
            seen.attempts += 1;
            if call.attempts() > 1 {
                seen.retries_sent += 1;
            }
            steps.push((at + ms(20), i, true));
        } else if call.attempts() == 0 {
            seen.refused_at_once += 1;
        }
    }
    seen
}

#[test]
fn breaker_open_on_a_dead_dependency_counts_every_call_and_only_sent_retries() {
    let clock = ManualClock::new();
    let sli = Arc::new(SliWindow::with_clock(clock.clone()));
    let stats = Arc::new(stagger::export::Stats::new());
    let scheduled = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = scheduled.clone();
    let observers: Vec<Arc<dyn Observer>> = vec![
        sli.clone(),
        stats.clone(),
        Arc::new(move |e: &Event| {
            if let Event::RetryScheduled { .. } = e {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }),
    ];
    let breaker = stagger::Breaker::default();
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(100),
            ..Backoff::new()
        })
        .breaker(breaker)
        .observer(Arc::new(observers))
        .build()
        .unwrap();
    let seen = dead_dependency(&policy, &clock);
    let scheduled = scheduled.load(std::sync::atomic::Ordering::Relaxed);
    // The case is the one the counters got wrong: calls the breaker refused
    // before their first attempt, and retries scheduled that it then
    // stopped from leaving.
    assert!(seen.refused_at_once > 100, "{}", seen.refused_at_once);
    assert!(scheduled > seen.retries_sent, "{scheduled} scheduled");
    let s = stats.snapshot();
    assert_eq!(s.logical_requests, 200);
    assert_eq!(s.attempts, seen.attempts);
    assert_eq!(s.retries, seen.retries_sent);
    assert_eq!(s.retries, seen.attempts - (200 - seen.refused_at_once));
    let w = sli.snapshot();
    assert_eq!((w.requests, w.retries), (200, seen.retries_sent));
    // The breaker protects the dependency: amplification stays near 1 per
    // call that got through, and the retry ratio is low, not an alarm.
    assert!(w.ratio < 0.2, "{w:?}");
    assert_ne!(w.state, SliState::Alarm);
}
