//! loom models of the latency window: concurrent observations lose no
//! count, and a bin restarted by a later bucket never mixes two epochs.
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

/// Two threads record the same latency at the same instant (one bin, one
/// compare-and-swap word): both counts land.
#[test]
fn loom_latency_same_bin_loses_no_count() {
    let t0 = Instant::now();
    model(move || {
        let w = std::sync::Arc::new(LatencyWindow::new(Duration::from_secs(10)));
        w.observe(Duration::from_micros(5), t0); // fixes the origin
        let w2 = w.clone();
        let h = thread::spawn(move || w2.observe(Duration::from_micros(5), t0));
        w.observe(Duration::from_micros(5), t0);
        h.join().unwrap();
        assert_eq!(w.samples(t0), 3);
        assert_eq!(w.percentile(1000, 3, t0), Some(Duration::from_micros(5)));
    });
}

/// A reader racing a writer sees the window before or after the write,
/// never a torn count, and the percentile is always one of the two answers.
#[test]
fn loom_latency_reader_sees_before_or_after() {
    let t0 = Instant::now();
    model(move || {
        let w = std::sync::Arc::new(LatencyWindow::new(Duration::from_secs(10)));
        w.observe(Duration::from_micros(2), t0);
        let w2 = w.clone();
        let h = thread::spawn(move || w2.observe(Duration::from_micros(9), t0));
        let p = w.percentile(1000, 1, t0).unwrap();
        h.join().unwrap();
        assert!(
            p == Duration::from_micros(2) || p >= Duration::from_micros(9),
            "{p:?}"
        );
        assert_eq!(w.samples(t0), 2);
    });
}

/// A count for an old bucket racing the restart of its slot by a later
/// bucket (two buckets under loom: epochs 0 and 2 share a slot) is either
/// dropped or overwritten, never added to the later bucket's count.
#[test]
fn loom_latency_stale_writer_never_pollutes_a_later_bucket() {
    let t0 = Instant::now();
    model(move || {
        let w = std::sync::Arc::new(LatencyWindow::new(Duration::from_secs(10)));
        w.observe(Duration::from_micros(3), t0); // epoch 0
        let later = t0 + Duration::from_secs(10); // epoch 2, same slot
        let w2 = w.clone();
        let h = thread::spawn(move || w2.observe(Duration::from_micros(3), t0));
        w.observe(Duration::from_micros(3), later);
        h.join().unwrap();
        assert_eq!(w.samples(later), 1);
    });
}
