//! A sliding window of successful-attempt latencies, read as a percentile.
//!
//! A hedge that waits for a fixed delay fires either too early for a slow
//! dependency (every call doubles) or too late for a fast one (the tail is
//! untouched). Waiting for a percentile of the client's *own* recent
//! latencies adapts: with `p95`, about one call in twenty is still running
//! when the hedge goes out, whatever the dependency's speed today.
//!
//! The window is a ring of `B` time buckets, each a histogram of latencies
//! in log-spaced bins (8 per doubling, so a percentile is read within
//! 12.5 %). Every bin is one atomic word packing the bucket's epoch tag with
//! a count, exactly like the budgets' windows: a writer that finds an old
//! tag restarts the bin with one compare-and-swap. No lock, no sweeper, no
//! allocation after construction, and a fixed size whatever the traffic.
//!
//! Reading a percentile sums the live buckets bin by bin, so it costs one
//! pass over the histogram; once the window holds 1,000 samples the answer
//! is cached for the rest of the bucket (a tenth of the window), which keeps
//! a busy client's per-call cost at one load.

use std::time::{Duration, Instant};

use crate::guardrails::sync::{AtomicU64, Ordering::Relaxed};
use crate::guardrails::window::{bump, count, is_epoch, pack, Timebase};

/// Time buckets per window (two under loom, to keep the model small).
const BUCKETS: usize = if cfg!(loom) { 2 } else { 10 };
/// Sub-bins per doubling (a power of two).
const SUB: u64 = 8;
const SUB_BITS: u32 = SUB.trailing_zeros();
/// The largest exponent binned (latencies in microseconds): 2^27 µs is
/// 134 s; anything longer counts in the last bin. Under loom, 2^4 µs.
const MAX_EXP: u32 = if cfg!(loom) { 4 } else { 27 };
/// Bins per bucket.
pub(crate) const BINS: usize = ((MAX_EXP - SUB_BITS + 2) as u64 * SUB) as usize;
/// Samples the window must hold before a percentile is cached for the rest
/// of its bucket; below that every read recomputes it.
const CACHE_FROM: u64 = 1_000;
/// The cache word's value when no percentile is cached.
const NONE: u64 = (1 << 32) - 1;

/// The bin of a latency of `us` microseconds.
#[inline]
pub(crate) fn bin(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let e = 63 - us.leading_zeros();
    if e > MAX_EXP {
        return BINS - 1;
    }
    let sub = (us >> (e - SUB_BITS)) & (SUB - 1);
    ((u64::from(e - SUB_BITS) + 1) * SUB + sub) as usize
}

/// The largest latency, in microseconds, that falls in bin `i`.
pub(crate) fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let e = i / SUB - 1 + u64::from(SUB_BITS);
    let sub = i % SUB;
    ((SUB + sub + 1) << (e - u64::from(SUB_BITS))) - 1
}

/// Successful latencies over a sliding window, shared by every call of a
/// client; see the module docs.
#[derive(Debug)]
pub(crate) struct LatencyWindow {
    time: Timebase,
    bins: Box<[[AtomicU64; BINS]; BUCKETS]>,
    /// `[epoch tag | permille (10 bits) | value µs (22 bits)]` of the last
    /// percentile read; `NONE` when not cached.
    cache: AtomicU64,
}

impl LatencyWindow {
    /// A window `window` long (moving in tenths).
    pub(crate) fn new(window: Duration) -> Self {
        let width =
            Duration::from_nanos((crate::guardrails::sync::nanos(window) / BUCKETS as u64).max(1));
        LatencyWindow {
            time: Timebase::new(width),
            bins: Box::new(std::array::from_fn(|_| {
                std::array::from_fn(|_| AtomicU64::new(0))
            })),
            cache: AtomicU64::new(pack(u64::MAX, NONE)),
        }
    }

    /// Records one successful attempt's latency.
    #[inline]
    pub(crate) fn observe(&self, latency: Duration, now: Instant) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let e = self.time.epoch(now);
        let slot = &self.bins[(e % BUCKETS as u64) as usize][bin(us)];
        bump(slot, e, 1);
    }

    /// Successful attempts in the window ending at `now`.
    #[cfg(any(test, loom))]
    pub(crate) fn samples(&self, now: Instant) -> u64 {
        let e = self.time.epoch(now);
        let mut n = 0u64;
        self.each_live(e, |_, c| n = n.saturating_add(c));
        n
    }

    fn each_live(&self, e: u64, mut f: impl FnMut(usize, u64)) {
        for back in 0..(BUCKETS as u64).min(e.saturating_add(1)) {
            let be = e - back;
            let bucket = &self.bins[(be % BUCKETS as u64) as usize];
            for (i, slot) in bucket.iter().enumerate() {
                let w = slot.load(Relaxed);
                if is_epoch(w, be) && count(w) > 0 {
                    f(i, count(w));
                }
            }
        }
    }

    /// The `permille`/1000 quantile of the window ending at `now`, read as
    /// the upper edge of its bin; `None` with fewer than `min_samples`
    /// samples. Cached for the rest of the bucket once 1,000 samples are in.
    pub(crate) fn percentile(
        &self,
        permille: u32,
        min_samples: u64,
        now: Instant,
    ) -> Option<Duration> {
        let e = self.time.epoch(now);
        let key = (u64::from(permille.min(1000)) << 22) & ((1 << 32) - 1);
        let cached = self.cache.load(Relaxed);
        if is_epoch(cached, e) && count(cached) != NONE && count(cached) & !((1 << 22) - 1) == key {
            return Some(Duration::from_micros(count(cached) & ((1 << 22) - 1)));
        }
        let mut hist = [0u64; BINS];
        let mut total = 0u64;
        self.each_live(e, |i, c| {
            hist[i] = hist[i].saturating_add(c);
            total = total.saturating_add(c);
        });
        if total == 0 || total < min_samples {
            return None;
        }
        // The smallest bin whose running count reaches ceil(q · total).
        let rank = (u128::from(total) * u128::from(permille.min(1000))).div_ceil(1000);
        let rank = u64::try_from(rank).unwrap_or(u64::MAX).max(1);
        let mut seen = 0u64;
        let mut at = BINS - 1;
        for (i, c) in hist.iter().enumerate() {
            seen = seen.saturating_add(*c);
            if seen >= rank {
                at = i;
                break;
            }
        }
        let us = upper(at);
        // A percentile of a few samples moves with every new one: it is
        // cached only once the window holds enough for it to settle.
        if us < (1 << 22) && total >= CACHE_FROM {
            self.cache.store(pack(e, key | us), Relaxed);
        }
        Some(Duration::from_micros(us))
    }
}

#[cfg(all(test, loom))]
mod loom;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bins_are_monotone_and_cover_their_values() {
        let mut last = 0;
        for us in (0..5_000u64).chain([65_535, 1 << 20, (1 << 27) - 1]) {
            let b = bin(us);
            assert!(b >= last, "bin({us}) went down");
            last = b;
            assert!(us <= upper(b), "{us} above its bin's edge {}", upper(b));
            if b > 0 {
                assert!(us > upper(b - 1), "{us} fits the bin below");
            }
            // Within one eighth above.
            assert!(
                upper(b) as f64 <= us as f64 * 1.125 + 1.0,
                "{us} → {}",
                upper(b)
            );
        }
        assert_eq!(bin(u64::MAX), BINS - 1);
    }

    #[test]
    fn percentile_reads_the_window_within_an_eighth() {
        let w = LatencyWindow::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(w.percentile(950, 1, t0), None);
        // 1..=100 ms, one each: p95 is 95 ms, p50 is 50 ms.
        for ms in 1..=100u64 {
            w.observe(Duration::from_millis(ms), t0);
        }
        assert_eq!(w.samples(t0), 100);
        let p95 = w.percentile(950, 20, t0).unwrap().as_secs_f64() * 1e3;
        assert!((95.0..=95.0 * 1.125).contains(&p95), "{p95}");
        let p50 = w.percentile(500, 20, t0).unwrap().as_secs_f64() * 1e3;
        assert!((50.0..=50.0 * 1.125).contains(&p50), "{p50}");
        assert_eq!(
            w.percentile(950, 101, t0),
            None,
            "below the minimum sample count"
        );
    }

    #[test]
    fn old_latencies_leave_the_window() {
        let w = LatencyWindow::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for _ in 0..50 {
            w.observe(Duration::from_millis(200), t0);
        }
        let later = t0 + Duration::from_secs(6);
        for _ in 0..50 {
            w.observe(Duration::from_millis(10), later);
        }
        let p = w.percentile(900, 1, later).unwrap();
        assert!(
            p >= Duration::from_millis(200),
            "both halves in the window: {p:?}"
        );
        let gone = t0 + Duration::from_secs(11);
        assert_eq!(w.samples(gone), 50);
        let p = w.percentile(900, 1, gone).unwrap();
        assert!(p < Duration::from_millis(12), "the slow half left: {p:?}");
    }
}
