//! loom models of the limiter: concurrent admissions never exceed the
//! limit, the reserve holds, and no update of the limit or of the count in
//! flight is lost.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p stagger --release --lib loom`.

use std::time::{Duration, Instant};

use ::loom::thread;

use super::*;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = ::loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two requests racing for the last place: exactly one gets it.
#[test]
fn loom_last_place_goes_to_one_thread() {
    let t0 = Instant::now();
    model(move || {
        let l = Limiter::fixed(1);
        let l2 = l.clone();
        let h = thread::spawn(move || l2.try_acquire(false, t0).ok());
        let mine = l.try_acquire(false, t0).ok();
        let theirs = h.join().unwrap();
        assert_eq!(u32::from(mine.is_some()) + u32::from(theirs.is_some()), 1);
        assert_eq!(l.in_flight(), 1);
        for t in mine.into_iter().chain(theirs) {
            l.release(t, Completion::Served, t0);
        }
        assert_eq!(l.in_flight(), 0);
    });
}

/// Two retries racing for the last place retries may use: one gets it and
/// the reserved place is still there for a first attempt.
#[test]
fn loom_racing_retries_never_take_the_reserved_place() {
    let t0 = Instant::now();
    model(move || {
        // Limit 5, reserve 0.2: retries may fill 4.
        let l = Limiter::fixed(5);
        let held: Vec<Token> = (0..3).map(|_| l.try_acquire(true, t0).unwrap()).collect();
        let l2 = l.clone();
        let h = thread::spawn(move || l2.try_acquire(true, t0).ok());
        let mine = l.try_acquire(true, t0).ok();
        let theirs = h.join().unwrap();
        assert_eq!(u32::from(mine.is_some()) + u32::from(theirs.is_some()), 1);
        assert!(l.try_acquire(false, t0).is_ok(), "the reserved place");
        assert_eq!(l.in_flight(), 5);
        drop(held);
    });
}

/// A release racing an admission: the admission sees the place or not, but
/// the count in flight ends exact.
#[test]
fn loom_release_and_admission_lose_no_update() {
    let t0 = Instant::now();
    model(move || {
        let l = Limiter::fixed(1);
        let t = l.try_acquire(false, t0).unwrap();
        let l2 = l.clone();
        let h = thread::spawn(move || l2.release(t, Completion::Served, t0));
        let got = l.try_acquire(false, t0).ok();
        h.join().unwrap();
        assert_eq!(l.in_flight(), u32::from(got.is_some()));
    });
}

/// Two answers in time at once: both increases land (no lost update).
#[test]
fn loom_aimd_concurrent_increases_both_land() {
    let t0 = Instant::now();
    model(move || {
        let l = Limiter::builder(Aimd {
            initial: 3,
            ..Aimd::new()
        })
        .build()
        .unwrap();
        let a = l.try_acquire(false, t0).unwrap();
        let b = l.try_acquire(false, t0).unwrap();
        let kept = l.try_acquire(false, t0).unwrap();
        let l2 = l.clone();
        let h = thread::spawn(move || l2.release(a, Completion::Served, t0));
        l.release(b, Completion::Served, t0);
        h.join().unwrap();
        // 3 + 1/3, then + 1/3.333 whichever lands first (in thousandths,
        // to within rounding: 3633).
        let milli = l.inner.limit.load(Ordering::Relaxed);
        assert!((3632..=3634).contains(&milli), "{milli}");
        l.release(kept, Completion::Cancelled, t0);
    });
}

/// Two late answers of one round: the limit is cut once, not twice.
#[test]
fn loom_aimd_one_cut_per_round_trip() {
    let t0 = Instant::now();
    model(move || {
        let l = Limiter::builder(Aimd {
            initial: 100,
            backoff: 0.5,
            ..Aimd::new()
        })
        .build()
        .unwrap();
        let a = l.try_acquire(false, t0).unwrap();
        let b = l.try_acquire(false, t0).unwrap();
        let late = t0 + Duration::from_secs(2);
        let l2 = l.clone();
        let h = thread::spawn(move || l2.release(a, Completion::Overloaded, late));
        l.release(b, Completion::Overloaded, late);
        h.join().unwrap();
        assert_eq!(l.limit(), 50);
    });
}

/// Concurrent gradient samples keep the limit within its bounds and the
/// averages between the samples' latencies.
#[test]
fn loom_gradient_concurrent_samples_stay_in_bounds() {
    let t0 = Instant::now();
    model(move || {
        let l = Limiter::builder(Gradient {
            initial: 4,
            min: 4,
            max: 6,
            ..Gradient::new()
        })
        .seed(1)
        .build()
        .unwrap();
        let a = l.try_acquire(false, t0).unwrap();
        let b = l.try_acquire(false, t0).unwrap();
        let l2 = l.clone();
        let h = thread::spawn(move || {
            l2.release(a, Completion::Served, t0 + Duration::from_millis(10))
        });
        l.release(b, Completion::Served, t0 + Duration::from_millis(30));
        h.join().unwrap();
        assert!((4..=6).contains(&l.limit()));
        let Algo::Gradient(s) = &l.inner.algo else {
            unreachable!()
        };
        let short = s.short.load(Ordering::Relaxed);
        assert!((10_000_000..=30_000_000).contains(&short), "{short}");
        assert_eq!(l.in_flight(), 0);
    });
}
