//! loom models of the breaker: no double probe, no lost count, one
//! transition per period.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p stagger --release --lib loom`.

use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};
use std::time::{Duration, Instant};

use ::loom::thread;

use super::*;
use crate::outcome::Failure;

fn model(f: impl Fn() + Sync + Send + 'static) {
    bounded(3, f);
}

/// `model` with `preemptions` forced switches at most: two is loom's
/// advice for a model whose every step takes the breaker's lock.
fn bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = ::loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

fn fail() -> Outcome {
    Outcome::Failure(Failure::transient())
}

/// `builder` built with a seed and an observer counting its transitions.
fn counting(config: BreakerConfig) -> (Breaker, std::sync::Arc<AtomicUsize>) {
    let events = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = events.clone();
    let b = Breaker::new(BreakerConfig {
        seed: Some(1),
        observer: Some(Arc::new(move |_: &Event| {
            seen.fetch_add(1, StdOrdering::Relaxed);
        })),
        ..config
    })
    .unwrap();
    (b, events)
}

/// A breaker that opens on one failure, for one second, without jitter,
/// counting its transitions.
fn touchy(probes: u32) -> (Breaker, std::sync::Arc<AtomicUsize>) {
    counting(BreakerConfig {
        min_calls: 1,
        open_for: Duration::from_secs(1),
        open_jitter: 0.0,
        probes,
        ..Default::default()
    })
}

/// A thin client's breaker: the rate never judges (100 calls needed), two
/// failures in a row open it.
fn sparse() -> (Breaker, std::sync::Arc<AtomicUsize>) {
    counting(BreakerConfig {
        min_calls: 100,
        sparse_failures: Some(2),
        ..Default::default()
    })
}

fn trip(b: &Breaker, t: Instant) {
    let p = b.acquire(t).unwrap();
    b.record(p, &fail(), None, t);
    assert_eq!(b.state(), BreakerState::Open);
}

#[test]
fn loom_half_open_admits_exactly_one_probe() {
    let t0 = Instant::now();
    model(move || {
        let (b, events) = touchy(1);
        trip(&b, t0);
        let later = t0 + Duration::from_secs(2);
        let b2 = b.clone();
        let h = thread::spawn(move || b2.acquire(later).is_ok());
        let mine = b.acquire(later).is_ok();
        let other = h.join().unwrap();
        assert!(mine ^ other, "exactly one probe");
        assert_eq!(b.probes_in_flight(), 1);
        assert_eq!(
            events.load(StdOrdering::Relaxed),
            2,
            "closed→open, open→half-open"
        );
    });
}

#[test]
fn loom_closed_counts_are_not_lost() {
    let t0 = Instant::now();
    model(move || {
        let b = Breaker::new(BreakerConfig {
            min_calls: 100,
            seed: Some(1),
            ..Default::default()
        })
        .unwrap();
        let p = b.acquire(t0).unwrap();
        b.record(p, &Outcome::Success, None, t0);
        let (b1, b2) = (b.clone(), b.clone());
        let h1 = thread::spawn(move || {
            let p = b1.acquire(t0).unwrap();
            b1.record(p, &Outcome::Success, None, t0);
        });
        let h2 = thread::spawn(move || {
            let p = b2.acquire(t0).unwrap();
            b2.record(p, &fail(), None, t0);
        });
        h1.join().unwrap();
        h2.join().unwrap();
        assert_eq!(b.counts(t0), (3, 1));
    });
}

#[test]
fn loom_concurrent_trips_open_once() {
    let t0 = Instant::now();
    model(move || {
        let (b, events) = touchy(1);
        let (b1, b2) = (b.clone(), b.clone());
        let (p1, p2) = (b.acquire(t0).unwrap(), b.acquire(t0).unwrap());
        let h1 = thread::spawn(move || b1.record(p1, &fail(), None, t0));
        let h2 = thread::spawn(move || b2.record(p2, &fail(), None, t0));
        h1.join().unwrap();
        h2.join().unwrap();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(events.load(StdOrdering::Relaxed), 1);
    });
}

#[test]
fn loom_racing_probes_decide_once() {
    let t0 = Instant::now();
    model(move || {
        let (b, events) = touchy(2);
        trip(&b, t0);
        let later = t0 + Duration::from_secs(2);
        let (p1, p2) = (b.acquire(later).unwrap(), b.acquire(later).unwrap());
        assert!(b.acquire(later).is_err(), "two probes, no third");
        let (b1, b2) = (b.clone(), b.clone());
        let h1 = thread::spawn(move || b1.record(p1, &Outcome::Success, None, later));
        let h2 = thread::spawn(move || b2.record(p2, &fail(), None, later));
        h1.join().unwrap();
        h2.join().unwrap();
        assert_ne!(b.state(), BreakerState::HalfOpen);
        assert_eq!(
            events.load(StdOrdering::Relaxed),
            3,
            "one way out of half-open"
        );
    });
}

/// A thin client's run of failures: two failures racing each other count
/// both, and the breaker opens exactly once.
#[test]
fn loom_sparse_run_counts_every_failure_and_opens_once() {
    let t0 = Instant::now();
    model(move || {
        let (b, events) = sparse();
        let (b1, b2) = (b.clone(), b.clone());
        let (p1, p2) = (b.acquire(t0).unwrap(), b.acquire(t0).unwrap());
        let h1 = thread::spawn(move || b1.record(p1, &fail(), None, t0));
        let h2 = thread::spawn(move || b2.record(p2, &fail(), None, t0));
        h1.join().unwrap();
        h2.join().unwrap();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(events.load(StdOrdering::Relaxed), 1);
    });
}

/// A success racing a failure after one failure: the run is either broken
/// or complete, and the state agrees with the events either way.
#[test]
fn loom_sparse_run_success_racing_a_failure() {
    let t0 = Instant::now();
    model(move || {
        let (b, events) = sparse();
        let p = b.acquire(t0).unwrap();
        b.record(p, &fail(), None, t0);
        let (b1, b2) = (b.clone(), b.clone());
        let (p1, p2) = (b.acquire(t0).unwrap(), b.acquire(t0).unwrap());
        let h1 = thread::spawn(move || b1.record(p1, &Outcome::Success, None, t0));
        let h2 = thread::spawn(move || b2.record(p2, &fail(), None, t0));
        h1.join().unwrap();
        h2.join().unwrap();
        let opened = events.load(StdOrdering::Relaxed);
        assert!(opened <= 1);
        assert_eq!(b.state() == BreakerState::Open, opened == 1);
        if opened == 0 {
            assert_eq!(b.counts(t0), (3, 2));
        }
    });
}

/// A trip racing an operator's force-open: whichever lands first, the
/// operator's state is the one that stays.
#[test]
fn loom_forced_open_survives_a_racing_trip() {
    let t0 = Instant::now();
    model(move || {
        let (b, events) = touchy(1);
        let p = b.acquire(t0).unwrap();
        let b1 = b.clone();
        let h = thread::spawn(move || b1.record(p, &fail(), None, t0));
        b.transition(Transition::ForceOpen, t0);
        h.join().unwrap();
        assert_eq!(b.state_at(t0), BreakerState::ForcedOpen);
        let seen = events.load(StdOrdering::Relaxed);
        assert!(
            seen == 1 || seen == 2,
            "forced, or opened then forced: {seen}"
        );
        assert!(b.acquire(t0 + Duration::from_secs(60)).is_err());
    });
}

/// A half-open probe's success racing a force-open: the probe never
/// closes a forced breaker, and no slot stays taken.
#[test]
fn loom_a_probe_racing_a_force_open_never_closes_it() {
    let t0 = Instant::now();
    model(move || {
        let (b, _) = touchy(1);
        trip(&b, t0);
        let later = t0 + Duration::from_secs(2);
        let probe = b.acquire(later).unwrap();
        let b1 = b.clone();
        let h = thread::spawn(move || b1.record(probe, &Outcome::Success, None, later));
        b.transition(Transition::ForceOpen, later);
        h.join().unwrap();
        assert_eq!(b.state_at(later), BreakerState::ForcedOpen);
        assert_eq!(b.probes_in_flight(), 0);
    });
}

/// Traffic during a forced-open period racing the release: the release
/// restores automatic behaviour from clean counts, and a call refused
/// before it or admitted after it leaves nothing behind.
#[test]
fn loom_release_racing_traffic_starts_from_clean_counts() {
    let t0 = Instant::now();
    model(move || {
        let (b, _) = touchy(1);
        b.transition(Transition::ForceOpen, t0);
        let b1 = b.clone();
        let h = thread::spawn(move || {
            if let Ok(p) = b1.acquire(t0) {
                b1.record(p, &Outcome::Success, None, t0);
                true
            } else {
                false
            }
        });
        b.transition(Transition::CloseAndReset, t0);
        let admitted = h.join().unwrap();
        assert_eq!(b.state_at(t0), BreakerState::Closed);
        let (calls, failures) = b.counts(t0);
        assert_eq!(failures, 0);
        assert!(
            calls <= u64::from(admitted),
            "only a call after the release"
        );
    });
}

/// Metrics-only: two failures racing each other both pass, and the
/// breaker stays metrics-only whichever reaches its rule.
#[test]
fn loom_metrics_only_never_refuses_and_stays_metrics_only() {
    let t0 = Instant::now();
    // Two records in metrics-only mode each take the lock several times;
    // three preemptions of them are some two minutes of interleavings.
    bounded(2, move || {
        let (b, _) = touchy(1);
        b.transition(Transition::MetricsOnly, t0);
        let b1 = b.clone();
        let h = thread::spawn(move || {
            let p = b1.acquire(t0).unwrap();
            b1.record(p, &fail(), None, t0);
        });
        let p = b.acquire(t0).unwrap();
        b.record(p, &fail(), None, t0);
        h.join().unwrap();
        assert_eq!(b.state_at(t0), BreakerState::MetricsOnly);
        assert!(b.acquire(t0).is_ok());
    });
}
