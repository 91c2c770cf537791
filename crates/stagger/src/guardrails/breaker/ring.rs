//! The breaker's count window: a true ring of the last N outcomes.
//!
//! tower-resilience calls a cumulative counter a "sliding window": after an
//! hour of successes, 50 straight failures are 50 in thousands and the
//! breaker never trips. Here slot `i % N` holds outcome `i` as one bit, so
//! outcome `i` overwrites outcome `i − N` and the window really is the last
//! N calls. One `fetch_add` claims a slot; one `fetch_or`/`fetch_and` writes
//! it; failures are the population count of the filled slots.

use crate::guardrails::sync::{AtomicU64, Ordering::*, Padded};

#[derive(Debug)]
pub(crate) struct CountRing {
    n: u64,
    cursor: Padded<AtomicU64>,
    /// Bit `i % 64` of word `i / 64`: slot `i` failed.
    bits: Box<[AtomicU64]>,
}

impl CountRing {
    /// A ring of `n` (≥ 1) slots, all empty.
    pub(crate) fn new(n: u32) -> Self {
        let n = u64::from(n.max(1));
        CountRing {
            n,
            cursor: Padded(AtomicU64::new(0)),
            bits: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records one outcome, overwriting the one N calls ago.
    #[inline]
    pub(crate) fn push(&self, failed: bool) {
        let slot = self.cursor.fetch_add(1, AcqRel) % self.n;
        let cell = &self.bits[(slot / 64) as usize];
        let mask = 1u64 << (slot % 64);
        if failed {
            cell.fetch_or(mask, AcqRel);
        } else if cell.load(Acquire) & mask != 0 {
            cell.fetch_and(!mask, AcqRel);
        }
    }

    /// `(calls, failures)` among the last N outcomes.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let filled = self.cursor.load(Acquire).min(self.n);
        let mut failures = 0u64;
        for (i, cell) in self.bits.iter().enumerate() {
            let first = i as u64 * 64;
            if first >= filled {
                break;
            }
            let live = filled - first;
            let mask = if live >= 64 {
                u64::MAX
            } else {
                (1u64 << live) - 1
            };
            failures += u64::from((cell.load(Acquire) & mask).count_ones());
        }
        (filled, failures)
    }

    /// Forgets every outcome.
    pub(crate) fn clear(&self) {
        self.cursor.store(0, Release);
        for cell in self.bits.iter() {
            cell.store(0, Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_exactly_the_last_n() {
        let r = CountRing::new(100);
        for _ in 0..1_000 {
            r.push(false);
        }
        for _ in 0..50 {
            r.push(true);
        }
        assert_eq!(r.counts(), (100, 50));
        for _ in 0..100 {
            r.push(false);
        }
        assert_eq!(r.counts(), (100, 0));
    }

    #[test]
    fn a_partly_filled_ring_counts_only_its_calls() {
        let r = CountRing::new(130);
        for i in 0..70 {
            r.push(i % 2 == 0);
        }
        assert_eq!(r.counts(), (70, 35));
        r.clear();
        assert_eq!(r.counts(), (0, 0));
    }
}
