//! The circuit breaker pinned at every boundary, on a manual clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagger::guardrails::BreakerConfig;
use stagger::guardrails::BreakerState;
use stagger::time::{Clock, ManualClock};
use stagger::{Breaker, Class, Event, Failure, Outcome};

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

/// The rate rule alone (no run-of-failures trip below the minimum), to pin
/// the rate's boundaries.
fn rate_only() -> Breaker {
    Breaker::new(BreakerConfig {
        sparse_failures: None,
        ..Default::default()
    })
    .unwrap()
}

fn no_jitter() -> BreakerConfig {
    BreakerConfig {
        open_jitter: 0.0,
        seed: Some(7),
        ..Default::default()
    }
}

type Log = Arc<Mutex<Vec<(BreakerState, BreakerState)>>>;

fn logged(config: BreakerConfig) -> (Breaker, Log) {
    let log: Log = Arc::default();
    let sink = log.clone();
    let b = Breaker::new(BreakerConfig {
        observer: Some(Arc::new(move |e: &Event| {
            if let Event::BreakerStateChanged { from, to } = *e {
                sink.lock().unwrap().push((from, to));
            }
        })),
        ..config
    })
    .unwrap();
    (b, log)
}

#[test]
fn trips_at_50_percent_with_20_calls() {
    let clock = ManualClock::new();
    let b = rate_only();
    for _ in 0..10 {
        call(&b, &clock, Outcome::Success);
    }
    for _ in 0..9 {
        call(&b, &clock, fail());
    }
    assert_eq!(b.counts(clock.now()), (19, 9));
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, &clock, fail()); // 10 of 20 = 50 %
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn does_not_trip_with_19_calls_even_all_failing() {
    let clock = ManualClock::new();
    let b = rate_only();
    for _ in 0..19 {
        call(&b, &clock, fail());
    }
    assert_eq!(b.counts(clock.now()), (19, 19));
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn does_not_trip_just_under_50_percent() {
    let clock = ManualClock::new();
    let b = rate_only();
    for _ in 0..11 {
        call(&b, &clock, Outcome::Success);
    }
    for _ in 0..9 {
        call(&b, &clock, fail()); // 9 of 20 = 45 %
    }
    assert_eq!(b.state(), BreakerState::Closed);
    for _ in 0..200 {
        call(&b, &clock, Outcome::Success);
        call(&b, &clock, fail()); // always 2 failures short of half
    }
    assert_eq!(b.counts(clock.now()), (420, 209));
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn a_thin_client_opens_after_5_failures_in_a_row() {
    let clock = ManualClock::new();
    let b = Breaker::default();
    // Half a call per second: 5 calls per 10 s window, never the 20 the
    // rate needs.
    for _ in 0..40 {
        call(&b, &clock, Outcome::Success);
        clock.advance(Duration::from_secs(2));
    }
    assert!(b.counts(clock.now()).0 < 20);
    for _ in 0..4 {
        call(&b, &clock, fail());
        clock.advance(Duration::from_secs(2));
    }
    assert_eq!(b.state(), BreakerState::Closed, "4 in a row is a blip");
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Open, "5 in a row: down");
}

#[test]
fn a_success_ends_the_run_of_failures() {
    let clock = ManualClock::new();
    let b = Breaker::default();
    for _ in 0..10 {
        for _ in 0..4 {
            call(&b, &clock, fail());
        }
        call(&b, &clock, Outcome::Success);
        clock.advance(Duration::from_secs(10));
    }
    assert_eq!(b.state(), BreakerState::Closed);
    let b = Breaker::new(BreakerConfig {
        sparse_failures: Some(2),
        ..Default::default()
    })
    .unwrap();
    call(&b, &clock, fail());
    call(&b, &clock, Outcome::Success);
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Open);
}

/// A busy client's window holds the minimum, so only the rate judges: a run
/// of failures inside a 30 % failure rate never opens it.
#[test]
fn a_busy_client_is_judged_by_the_rate_alone() {
    let clock = ManualClock::new();
    let b = Breaker::default();
    for _ in 0..20 {
        call(&b, &clock, Outcome::Success);
    }
    for _ in 0..50 {
        for _ in 0..6 {
            call(&b, &clock, Outcome::Success);
        }
        for _ in 0..3 {
            call(&b, &clock, fail()); // runs of 3, and of 9 below
        }
        clock.advance(Duration::from_millis(100));
    }
    for _ in 0..9 {
        call(&b, &clock, fail());
    }
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn the_time_window_forgets_failures_older_than_10_s() {
    let clock = ManualClock::new();
    let b = rate_only();
    for _ in 0..19 {
        call(&b, &clock, fail());
    }
    clock.advance(Duration::from_secs(10));
    assert_eq!(b.counts(clock.now()), (0, 0));
    call(&b, &clock, fail());
    assert_eq!(
        b.state(),
        BreakerState::Closed,
        "only 1 call in the window now"
    );
}

#[test]
fn open_fails_fast_with_retry_in_then_half_opens_after_5_s() {
    let clock = ManualClock::new();
    let (b, log) = logged(BreakerConfig {
        min_calls: 1,
        ..no_jitter()
    });
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Open);
    let refused = b.acquire(clock.now()).unwrap_err();
    assert_eq!(refused.retry_in, Duration::from_secs(5));
    clock.advance(Duration::from_millis(4_999));
    assert_eq!(
        b.acquire(clock.now()).unwrap_err().retry_in,
        Duration::from_millis(1)
    );
    clock.advance(Duration::from_millis(1));
    let probe = b.acquire(clock.now()).unwrap();
    assert!(probe.is_probe());
    assert_eq!(b.state(), BreakerState::HalfOpen);
    b.record(probe, &Outcome::Success, None, clock.now());
    assert_eq!(b.state(), BreakerState::Closed);
    assert_eq!(b.counts(clock.now()), (0, 0), "closing clears the window");
    use BreakerState::*;
    assert_eq!(
        *log.lock().unwrap(),
        vec![(Closed, Open), (Open, HalfOpen), (HalfOpen, Closed)]
    );
}

#[test]
fn a_failed_probe_reopens_for_another_period() {
    let clock = ManualClock::new();
    let (b, log) = logged(BreakerConfig {
        min_calls: 1,
        ..no_jitter()
    });
    call(&b, &clock, fail());
    clock.advance(Duration::from_secs(5));
    assert!(call(&b, &clock, fail()));
    assert_eq!(b.state(), BreakerState::Open);
    assert_eq!(
        b.acquire(clock.now()).unwrap_err().retry_in,
        Duration::from_secs(5)
    );
    assert_eq!(
        log.lock().unwrap().last(),
        Some(&(BreakerState::HalfOpen, BreakerState::Open))
    );
}

#[test]
fn half_open_admits_exactly_probes_concurrent_calls() {
    for probes in [1u32, 2, 3, 5] {
        let clock = ManualClock::new();
        let b = Breaker::new(BreakerConfig {
            min_calls: 1,
            probes,
            ..no_jitter()
        })
        .unwrap();
        call(&b, &clock, fail());
        clock.advance(Duration::from_secs(5));
        let admitted: Vec<_> = (0..probes + 3)
            .filter_map(|_| b.acquire(clock.now()).ok())
            .collect();
        assert_eq!(admitted.len() as u32, probes);
        assert!(admitted.iter().all(|p| p.is_probe()));
        assert_eq!(b.probes_in_flight(), probes);
        // A cancelled probe gives its slot back without deciding anything.
        b.record(
            admitted[0],
            &Outcome::Failure(Failure::new(Class::Cancelled)),
            None,
            clock.now(),
        );
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let again = b.acquire(clock.now()).expect("the freed slot");
        assert!(b.acquire(clock.now()).is_err());
        b.release(again, clock.now());
        assert_eq!(b.probes_in_flight(), probes - 1);
    }
}

#[test]
fn probes_admitted_from_many_threads_never_exceed_the_limit() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        min_calls: 1,
        probes: 3,
        ..no_jitter()
    })
    .unwrap();
    call(&b, &clock, fail());
    clock.advance(Duration::from_secs(5));
    let now = clock.now();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || (0..100).filter(|_| b.acquire(now).is_ok()).count())
        })
        .collect();
    let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(admitted, 3);
}

#[test]
fn lost_probes_are_reclaimed_after_the_probe_timeout() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        min_calls: 1,
        probe_timeout: Duration::from_secs(2),
        ..no_jitter()
    })
    .unwrap();
    call(&b, &clock, fail());
    clock.advance(Duration::from_secs(5));
    let lost = b.acquire(clock.now()).unwrap(); // its caller is dropped
    clock.advance(Duration::from_millis(1_999));
    assert_eq!(
        b.acquire(clock.now()).unwrap_err().retry_in,
        Duration::from_millis(1)
    );
    clock.advance(Duration::from_millis(1));
    let probe = b.acquire(clock.now()).expect("slot reclaimed");
    b.record(probe, &Outcome::Success, None, clock.now());
    assert_eq!(b.state(), BreakerState::Closed);
    // The lost probe reporting late changes nothing: its period is over.
    b.record(lost, &fail(), None, clock.now());
    assert_eq!(b.state(), BreakerState::Closed);
}

/// Review regression: a probe slot reclaimed after the probe timeout kept
/// the old generation, so the lost probe's late release freed the new
/// probe's slot and a second concurrent probe got in (probes = 1).
#[test]
fn a_reclaimed_probe_slot_cannot_be_freed_by_the_lost_probe() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        min_calls: 1,
        probe_timeout: Duration::from_secs(2),
        ..no_jitter()
    })
    .unwrap();
    call(&b, &clock, fail());
    clock.advance(Duration::from_secs(5));
    let lost = b.acquire(clock.now()).unwrap();
    clock.advance(Duration::from_secs(2));
    let probe = b.acquire(clock.now()).expect("slot reclaimed");
    assert_eq!(b.probes_in_flight(), 1);
    b.release(lost, clock.now()); // the lost caller is finally dropped
    assert_eq!(
        b.probes_in_flight(),
        1,
        "the live probe still holds the slot"
    );
    assert!(
        b.acquire(clock.now()).is_err(),
        "no second concurrent probe"
    );
    b.record(lost, &Outcome::Success, None, clock.now());
    assert_eq!(
        b.state(),
        BreakerState::HalfOpen,
        "a stale verdict decides nothing"
    );
    b.record(probe, &Outcome::Success, None, clock.now());
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn outcomes_from_an_earlier_period_are_ignored() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        min_calls: 1,
        ..no_jitter()
    })
    .unwrap();
    let slow = b.acquire(clock.now()).unwrap(); // admitted while closed
    call(&b, &clock, fail());
    clock.advance(Duration::from_secs(5));
    let probe = b.acquire(clock.now()).unwrap();
    b.record(slow, &Outcome::Success, None, clock.now());
    assert_eq!(
        b.state(),
        BreakerState::HalfOpen,
        "a stale success does not close"
    );
    b.record(probe, &Outcome::Success, None, clock.now());
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn a_count_window_forgets_outcomes_older_than_its_last_n() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        count_window: Some(10),
        min_calls: 10,
        ..Default::default()
    })
    .unwrap();
    for _ in 0..4 {
        call(&b, &clock, fail());
    }
    for _ in 0..10 {
        call(&b, &clock, Outcome::Success);
    }
    assert_eq!(
        b.counts(clock.now()),
        (10, 0),
        "the 4 failures fell out of the ring"
    );
    for _ in 0..4 {
        call(&b, &clock, fail());
    }
    assert_eq!(b.counts(clock.now()), (10, 4));
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Open, "5 of the last 10");
}

/// Regression for tower-resilience's "sliding window", a cumulative
/// counter: after 1 000 successes, 50 straight failures are 50 of 1 050 and
/// it never trips. A true ring of the last 100 holds 50 of 100.
#[test]
fn tower_resilience_cumulative_window_50_failures_after_1000_successes_trip() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        count_window: Some(100),
        ..Default::default()
    })
    .unwrap();
    for _ in 0..1_000 {
        call(&b, &clock, Outcome::Success);
    }
    for i in 0..50 {
        assert_eq!(b.state(), BreakerState::Closed, "after {i} failures");
        call(&b, &clock, fail());
    }
    assert_eq!(b.counts(clock.now()), (100, 50));
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn consecutive_failures_trip_whatever_the_rate() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(5),
        ..Default::default()
    })
    .unwrap();
    for _ in 0..100 {
        call(&b, &clock, Outcome::Success);
    }
    for _ in 0..4 {
        call(&b, &clock, fail());
    }
    call(&b, &clock, Outcome::Success); // breaks the run
    for _ in 0..4 {
        call(&b, &clock, fail());
    }
    assert_eq!(b.state(), BreakerState::Closed);
    call(&b, &clock, fail());
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn slow_calls_count_as_failures() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        slow_call: Some(Duration::from_millis(500)),
        sparse_failures: None,
        ..Default::default()
    })
    .unwrap();
    for _ in 0..10 {
        let p = b.acquire(clock.now()).unwrap();
        b.record(
            p,
            &Outcome::Success,
            Some(Duration::from_millis(500)),
            clock.now(),
        );
    }
    assert_eq!(
        b.counts(clock.now()),
        (10, 0),
        "at the threshold is not slow"
    );
    for _ in 0..10 {
        let p = b.acquire(clock.now()).unwrap();
        b.record(
            p,
            &Outcome::Success,
            Some(Duration::from_millis(501)),
            clock.now(),
        );
    }
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn permanent_errors_are_not_dependency_failures() {
    let clock = ManualClock::new();
    let b = Breaker::default();
    for _ in 0..100 {
        call(&b, &clock, Outcome::Failure(Failure::permanent()));
    }
    assert_eq!(b.counts(clock.now()), (100, 0));
    assert_eq!(b.state(), BreakerState::Closed);
}

#[test]
fn open_periods_are_jittered_by_up_to_20_percent() {
    let mut lengths = Vec::new();
    for seed in 0..40 {
        let clock = ManualClock::new();
        let b = Breaker::new(BreakerConfig {
            min_calls: 1,
            seed: Some(seed),
            ..Default::default()
        })
        .unwrap();
        call(&b, &clock, fail());
        let open = b.acquire(clock.now()).unwrap_err().retry_in;
        assert!(
            open >= Duration::from_secs(5) && open <= Duration::from_secs(6),
            "{open:?}"
        );
        lengths.push(open);
    }
    lengths.sort();
    lengths.dedup();
    assert!(
        lengths.len() > 30,
        "breakers with different seeds open for different times"
    );
    // One breaker draws a new length for each period.
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        min_calls: 1,
        seed: Some(3),
        ..Default::default()
    })
    .unwrap();
    let mut periods = Vec::new();
    for _ in 0..5 {
        call(&b, &clock, fail());
        let open = b.acquire(clock.now()).unwrap_err().retry_in;
        periods.push(open);
        clock.advance(open);
    }
    periods.dedup();
    assert_eq!(periods.len(), 5, "{periods:?}");
}

#[test]
fn the_breaker_is_a_fixed_size_handle() {
    assert_eq!(std::mem::size_of::<Breaker>(), std::mem::size_of::<usize>());
}

#[test]
fn bad_configs_name_their_field() {
    let cases = [
        (
            Breaker::new(BreakerConfig {
                failure_rate: 0.0,
                ..Default::default()
            })
            .unwrap_err(),
            "failure_rate",
        ),
        (
            Breaker::new(BreakerConfig {
                failure_rate: f64::NAN,
                ..Default::default()
            })
            .unwrap_err(),
            "failure_rate",
        ),
        (
            Breaker::new(BreakerConfig {
                min_calls: 0,
                ..Default::default()
            })
            .unwrap_err(),
            "min_calls",
        ),
        (
            Breaker::new(BreakerConfig {
                window: Duration::ZERO,
                ..Default::default()
            })
            .unwrap_err(),
            "window",
        ),
        (
            Breaker::new(BreakerConfig {
                count_window: Some(0),
                ..Default::default()
            })
            .unwrap_err(),
            "count_window",
        ),
        (
            Breaker::new(BreakerConfig {
                count_window: Some(10),
                ..Default::default()
            })
            .unwrap_err(),
            "min_calls",
        ),
        (
            Breaker::new(BreakerConfig {
                consecutive_failures: Some(0),
                ..Default::default()
            })
            .unwrap_err(),
            "consecutive_failures",
        ),
        (
            Breaker::new(BreakerConfig {
                slow_call: Some(Duration::ZERO),
                ..Default::default()
            })
            .unwrap_err(),
            "slow_call",
        ),
        (
            Breaker::new(BreakerConfig {
                open_for: Duration::ZERO,
                ..Default::default()
            })
            .unwrap_err(),
            "open_for",
        ),
        (
            Breaker::new(BreakerConfig {
                open_jitter: 1.5,
                ..Default::default()
            })
            .unwrap_err(),
            "open_jitter",
        ),
        (
            Breaker::new(BreakerConfig {
                probes: 256,
                ..Default::default()
            })
            .unwrap_err(),
            "probes",
        ),
        (
            Breaker::new(BreakerConfig {
                probe_timeout: Duration::ZERO,
                ..Default::default()
            })
            .unwrap_err(),
            "probe_timeout",
        ),
    ];
    for (err, field) in cases {
        assert_eq!(err.field(), field, "{err}");
    }
}

/// `state()` said `Open` on an idle client until its next call, long after
/// the open period ended (and the breaker-open alert could fire on it).
#[test]
fn an_idle_breaker_reads_half_open_once_its_open_period_ends() {
    let clock = ManualClock::new();
    let b = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..no_jitter()
    })
    .unwrap();
    call(&b, &clock, fail());
    assert_eq!(b.state_at(clock.now()), BreakerState::Open);
    clock.advance(Duration::from_millis(4_999));
    assert_eq!(b.state_at(clock.now()), BreakerState::Open, "still open");
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        b.state_at(clock.now()),
        BreakerState::HalfOpen,
        "no call came, yet the next one would be a probe"
    );
    // The state read changed nothing: the next call is admitted as the probe.
    let p = b.acquire(clock.now()).unwrap();
    assert!(p.is_probe());
    b.record(p, &Outcome::Success, None, clock.now());
    assert_eq!(b.state_at(clock.now()), BreakerState::Closed);
    // On the real clock, a breaker that just opened reads open.
    let live = Breaker::new(BreakerConfig {
        consecutive_failures: Some(1),
        ..no_jitter()
    })
    .unwrap();
    let now = std::time::Instant::now();
    let p = live.acquire(now).unwrap();
    live.record(p, &fail(), None, now);
    assert_eq!(live.state(), BreakerState::Open);
}
