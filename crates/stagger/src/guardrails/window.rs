//! Sliding windows of time buckets, shared by the budgets, the breaker, the
//! throttle and the SLI window.
//!
//! A window is a ring of `B` buckets, each `width` long; time is cut into
//! epochs (`nanos since origin / width`) and epoch `e` lives in slot
//! `e % B`. Every slot word packs a 32-bit epoch tag with a 32-bit count, so
//! a writer that finds an old tag knows the slot is stale and restarts it
//! with one compare-and-swap: no sweeper thread, no lock, and a fixed size
//! whatever the traffic.
//!
//! Writers are spread over stripes (one cache-line-padded ring each) by
//! thread, so threads that count at the same time do not fight over one
//! line; a thread that owns its stripe counts with a plain load and store.
//! Readers add the stripes up. The buckets before the current one do not
//! change any more, so their sum is cached once per epoch; reading a window
//! costs one cached word plus the current slot of each stripe.
//!
//! Turning an `Instant` into an epoch costs a call into std's time
//! arithmetic, so each thread remembers, per time base, the instants where
//! its last epoch starts and ends: a hit is two comparisons.
//!
//! A count that lands after its bucket was summed (a thread that read the
//! time just before an epoch ended) is seen when the window next moves; a
//! writer whose epoch is already a whole window old drops its count.

use std::time::{Duration, Instant};

use crate::guardrails::sync::{
    atomics, nanos, stripe, AtomicU64, Ordering::Relaxed, Origin, Padded, Stripe, STRIPES,
};

/// Epoch tags wrap after 2^32 buckets: 13 years of 100 ms buckets, the
/// shortest any window here allows.
const TAG_BITS: u32 = 32;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const COUNT_BITS: u32 = 64 - TAG_BITS;
/// The largest count one slot holds (2^32 − 1); counts saturate there.
pub(crate) const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

#[inline]
pub(crate) const fn pack(epoch: u64, count: u64) -> u64 {
    ((epoch & TAG_MASK) << COUNT_BITS) | count
}

#[inline]
pub(crate) const fn count(word: u64) -> u64 {
    word & COUNT_MAX
}

/// Whether `word` holds a count for exactly `epoch`.
#[inline]
pub(crate) const fn is_epoch(word: u64, epoch: u64) -> bool {
    word >> COUNT_BITS == epoch & TAG_MASK
}

/// How many epochs `word`'s tag lies behind `epoch`, modulo 2^32 (a tag
/// that looks more than 2^31 behind is in fact ahead).
#[inline]
pub(crate) const fn age(word: u64, epoch: u64) -> u64 {
    epoch.wrapping_sub(word >> COUNT_BITS) & TAG_MASK
}

/// Whether `word`'s tag is ahead of `epoch` (the slot was reused by a later
/// epoch, so a count for `epoch` is out of every window that could read it).
#[inline]
pub(crate) const fn is_ahead(word: u64, epoch: u64) -> bool {
    age(word, epoch) >= 1 << (TAG_BITS - 1)
}

/// How many epochs `word`'s tag lies ahead of `epoch` (meaningful when
/// [`is_ahead`]).
#[inline]
pub(crate) const fn ahead_by(word: u64, epoch: u64) -> u64 {
    (word >> COUNT_BITS).wrapping_sub(epoch) & TAG_MASK
}

/// Converts instants to epochs: a lazily fixed origin and a bucket width,
/// with the division done by a precomputed reciprocal (a hardware 64-bit
/// divide costs more than the rest of a budget check).
#[derive(Debug)]
pub(crate) struct Timebase {
    origin: Origin,
    width_ns: u64,
    reciprocal: u64,
    /// Names this time base in the per-thread span cache.
    #[cfg_attr(loom, allow(dead_code))]
    id: u64,
}

/// One thread's memory of where an epoch of one time base lies.
#[cfg(not(loom))]
#[derive(Clone, Copy)]
struct Span {
    id: u64,
    start: Instant,
    end: Instant,
    epoch: u64,
}

#[cfg(not(loom))]
thread_local! {
    static SPANS: [std::cell::Cell<Option<Span>>; 4] =
        const { [const { std::cell::Cell::new(None) }; 4] };
}

impl Timebase {
    /// Buckets `width` long (at least 1 ns).
    pub(crate) fn new(width: Duration) -> Self {
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let width_ns = nanos(width).max(1);
        Timebase {
            origin: Origin::default(),
            width_ns,
            reciprocal: u64::MAX / width_ns,
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Nanoseconds since the origin.
    #[inline]
    pub(crate) fn nanos(&self, now: Instant) -> u64 {
        self.origin.nanos(now)
    }

    /// The epoch `now` falls in.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn epoch(&self, now: Instant) -> u64 {
        let slot = (self.id & 3) as usize;
        if let Ok(Some(span)) = SPANS.try_with(|s| s[slot].get()) {
            if span.id == self.id && span.start <= now && now < span.end {
                return span.epoch;
            }
        }
        self.epoch_slow(now, slot)
    }

    #[cfg(not(loom))]
    #[cold]
    fn epoch_slow(&self, now: Instant, slot: usize) -> u64 {
        let epoch = self.epoch_of(self.nanos(now));
        let start = self
            .origin
            .get()
            .and_then(|o| o.checked_add(Duration::from_nanos(epoch.saturating_mul(self.width_ns))));
        if let Some(start) = start {
            if let Some(end) = start.checked_add(Duration::from_nanos(self.width_ns)) {
                let span = Span {
                    id: self.id,
                    start,
                    end,
                    epoch,
                };
                let _ = SPANS.try_with(|s| s[slot].set(Some(span)));
            }
        }
        epoch
    }

    /// The epoch `now` falls in.
    #[cfg(loom)]
    pub(crate) fn epoch(&self, now: Instant) -> u64 {
        self.epoch_of(self.nanos(now))
    }

    /// The epoch of a time in nanoseconds since the origin.
    #[inline]
    pub(crate) fn epoch_of(&self, ns: u64) -> u64 {
        // floor(ns * floor((2^64-1)/w) / 2^64) is at most 2 below ns / w.
        let mut q = ((u128::from(ns) * u128::from(self.reciprocal)) >> 64) as u64;
        let mut r = ns - q * self.width_ns;
        while r >= self.width_ns {
            q += 1;
            r -= self.width_ns;
        }
        q
    }
}

/// Adds `n` to the count of `epoch` in `slot`, restarting a stale slot.
/// Returns `false` (and counts nothing) when the slot already belongs to a
/// later epoch.
#[inline]
pub(crate) fn bump(slot: &AtomicU64, epoch: u64, n: u64) -> bool {
    let mut word = slot.load(Relaxed);
    loop {
        let new = if is_epoch(word, epoch) {
            pack(epoch, count(word).saturating_add(n).min(COUNT_MAX))
        } else if is_ahead(word, epoch) {
            return false;
        } else {
            pack(epoch, n.min(COUNT_MAX))
        };
        if new == word {
            return true;
        }
        match slot.compare_exchange_weak(word, new, Relaxed, Relaxed) {
            Ok(_) => return true,
            Err(seen) => word = seen,
        }
    }
}

/// `K` counters over a window of `B` buckets, written through per-thread
/// stripes.
#[derive(Debug)]
pub(crate) struct Window<const B: usize, const K: usize> {
    stripes: [Padded<[[AtomicU64; K]; B]>; STRIPES],
    /// Per counter: the sum of the `B - 1` buckets before the tagged epoch.
    past: Padded<[AtomicU64; K]>,
}

impl<const B: usize, const K: usize> Default for Window<B, K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const B: usize, const K: usize> Window<B, K> {
    /// All counts zero.
    pub(crate) fn new() -> Self {
        Window {
            stripes: std::array::from_fn(|_| Padded(std::array::from_fn(|_| atomics()))),
            past: Padded(atomics()),
        }
    }

    /// Adds `n` to counter `k` in `epoch`'s bucket.
    #[inline]
    pub(crate) fn add(&self, epoch: u64, k: usize, n: u64) {
        let i = (epoch % B as u64) as usize;
        match stripe() {
            Stripe::Owned(s) => {
                // Only this thread writes here (besides `clear`): no lock.
                let slot = &self.stripes[s].0[i][k];
                let word = slot.load(Relaxed);
                let new = if is_epoch(word, epoch) {
                    pack(epoch, count(word).saturating_add(n).min(COUNT_MAX))
                } else if is_ahead(word, epoch) {
                    return;
                } else {
                    pack(epoch, n.min(COUNT_MAX))
                };
                slot.store(new, Relaxed);
            }
            Stripe::Shared(s) => {
                bump(&self.stripes[s].0[i][k], epoch, n);
            }
        }
    }

    /// Counter `k` in `epoch`'s own bucket, over every stripe.
    #[inline]
    pub(crate) fn current(&self, epoch: u64, k: usize) -> u64 {
        let i = (epoch % B as u64) as usize;
        let mut sum = 0u64;
        for stripe in &self.stripes {
            let w = stripe.0[i][k].load(Relaxed);
            if is_epoch(w, epoch) {
                sum = sum.saturating_add(count(w));
            }
        }
        sum
    }

    /// Counter `k` over the `B - 1` buckets before `epoch` (cached per
    /// epoch).
    #[inline]
    pub(crate) fn past(&self, epoch: u64, k: usize) -> u64 {
        let cached = self.past.0[k].load(Relaxed);
        if is_epoch(cached, epoch) {
            return count(cached);
        }
        self.refresh_past(epoch, k)
    }

    #[cold]
    fn refresh_past(&self, epoch: u64, k: usize) -> u64 {
        let mut sum = 0u64;
        for back in 1..(B as u64).min(epoch.saturating_add(1)) {
            let e = epoch - back;
            let i = (e % B as u64) as usize;
            for stripe in &self.stripes {
                let w = stripe.0[i][k].load(Relaxed);
                if is_epoch(w, e) {
                    sum = sum.saturating_add(count(w));
                }
            }
        }
        let sum = sum.min(COUNT_MAX);
        self.past.0[k].store(pack(epoch, sum), Relaxed);
        sum
    }

    /// Counter `k` over the whole window ending in `epoch`'s bucket.
    #[inline]
    pub(crate) fn total(&self, epoch: u64, k: usize) -> u64 {
        self.past(epoch, k).saturating_add(self.current(epoch, k))
    }

    /// Forgets every count. A stripe owner's load-then-store that straddles
    /// the clear can put back what it read before it; the breaker only
    /// clears while half-open, when no outcome is recorded into the window,
    /// so there the race needs a call admitted before the breaker opened to
    /// be preempted between two instructions for a whole open period.
    pub(crate) fn clear(&self) {
        for stripe in &self.stripes {
            for slot in &stripe.0 {
                for c in slot {
                    c.store(0, Relaxed);
                }
            }
        }
        for c in &self.past.0 {
            c.store(pack(u64::MAX, 0), Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reciprocal_division_is_exact() {
        for w in [1u64, 3, 7, 1_000, 999_999_937, 1_000_000_000, u64::MAX / 3] {
            let tb = Timebase::new(Duration::from_nanos(w));
            for ns in [
                0,
                1,
                w - 1,
                w,
                w + 1,
                2 * w.min(u64::MAX / 2),
                u64::MAX - 1,
                u64::MAX,
            ] {
                assert_eq!(tb.epoch_of(ns), ns / w, "ns {ns} w {w}");
            }
        }
    }

    #[test]
    fn a_stale_slot_restarts_and_a_late_count_is_dropped() {
        let slot = AtomicU64::new(0);
        assert!(bump(&slot, 5, 2));
        assert!(bump(&slot, 5, 1));
        assert_eq!(count(slot.load(Relaxed)), 3);
        assert!(bump(&slot, 15, 1));
        assert_eq!(count(slot.load(Relaxed)), 1);
        assert!(!bump(&slot, 5, 1), "epoch 5 is older than the slot's 15");
        assert_eq!(count(slot.load(Relaxed)), 1);
    }

    #[test]
    fn window_sums_only_live_buckets() {
        let w: Window<4, 1> = Window::new();
        w.add(0, 0, 1);
        w.add(1, 0, 2);
        w.add(3, 0, 4);
        assert_eq!(w.total(3, 0), 7);
        assert_eq!(w.total(4, 0), 6, "epoch 0 left the window");
        w.add(4, 0, 8);
        assert_eq!(w.total(4, 0), 14);
        assert_eq!(w.total(7, 0), 8);
        assert_eq!(w.total(8, 0), 0);
        w.clear();
        assert_eq!(w.total(7, 0), 0);
    }

    #[test]
    fn counts_saturate() {
        let slot = AtomicU64::new(0);
        bump(&slot, 1, COUNT_MAX - 1);
        bump(&slot, 1, 5);
        assert_eq!(count(slot.load(Relaxed)), COUNT_MAX);
    }
}
