//! The concurrency shim: std's atomics normally, loom's under `cfg(loom)`.
//!
//! Every shared guardrail takes its atomics, its lazily fixed time origin
//! and its stripe index from here, so the loom tests (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p stagger --release --lib loom`)
//! explore the real code's interleavings, not a copy of it.

use std::time::{Duration, Instant};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many stripes a striped counter has (a power of two). The first
/// [`OWNED`] are each claimed by one thread at a time, which then counts
/// with a plain load and store (no locked instruction: an uncontended
/// compare-and-swap costs more than the rest of a budget deposit); threads
/// beyond that share the others with compare-and-swap. Four under loom, to
/// keep the model small.
pub(crate) const STRIPES: usize = if cfg!(loom) { 4 } else { 16 };
/// Stripes a thread can own exclusively.
pub(crate) const OWNED: usize = STRIPES * 3 / 4;

/// Where this thread counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stripe {
    /// A stripe only this thread writes: plain load and store.
    Owned(usize),
    /// A stripe other threads may write too: compare-and-swap.
    Shared(usize),
}

/// The stripe this thread writes to. A thread claims a free owned stripe
/// on first use and gives it back when it exits; when all are taken it
/// shares the rest.
#[cfg(not(loom))]
const UNSET: usize = usize::MAX;
#[cfg(not(loom))]
const SHARED_FLAG: usize = 1 << 16;

#[cfg(not(loom))]
thread_local! {
    /// This thread's stripe (`SHARED_FLAG` set for a shared one).
    static MINE: std::cell::Cell<usize> = const { std::cell::Cell::new(UNSET) };
    /// Holds the claim on an owned stripe until the thread exits.
    static GUARD: std::cell::Cell<Option<Claim>> = const { std::cell::Cell::new(None) };
}

/// Bit `i`: owned stripe `i` is claimed by a live thread.
#[cfg(not(loom))]
static CLAIMED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A claim on an owned stripe. Dropped when its thread exits: gives the
/// stripe back, and sends any later count from this thread's other
/// destructors to a shared stripe.
#[cfg(not(loom))]
struct Claim(usize);

#[cfg(not(loom))]
impl Drop for Claim {
    fn drop(&mut self) {
        let _ = MINE.try_with(|m| m.set(SHARED_FLAG | OWNED));
        CLAIMED.fetch_and(!(1 << self.0), std::sync::atomic::Ordering::Release);
    }
}

#[cfg(not(loom))]
#[inline]
pub(crate) fn stripe() -> Stripe {
    let i = MINE
        .try_with(std::cell::Cell::get)
        .unwrap_or(SHARED_FLAG | OWNED);
    let i = if i == UNSET { claim() } else { i };
    if i & SHARED_FLAG == 0 {
        Stripe::Owned(i)
    } else {
        Stripe::Shared(i & !SHARED_FLAG)
    }
}

#[cfg(not(loom))]
#[cold]
fn claim() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering as O};

    static NEXT_SHARED: AtomicUsize = AtomicUsize::new(0);
    let mut claimed = CLAIMED.load(O::Acquire);
    let index = loop {
        let free = !claimed & ((1u64 << OWNED) - 1);
        if free == 0 {
            break SHARED_FLAG | (OWNED + NEXT_SHARED.fetch_add(1, O::Relaxed) % (STRIPES - OWNED));
        }
        let bit = free.trailing_zeros() as usize;
        match CLAIMED.compare_exchange_weak(claimed, claimed | 1 << bit, O::AcqRel, O::Acquire) {
            Ok(_) => {
                if GUARD.try_with(|g| g.set(Some(Claim(bit)))).is_err() {
                    // Thread-locals are being torn down: give it back.
                    CLAIMED.fetch_and(!(1 << bit), O::Release);
                    break SHARED_FLAG | OWNED;
                }
                break bit;
            }
            Err(seen) => claimed = seen,
        }
    };
    let _ = MINE.try_with(|m| m.set(index));
    index
}

/// The stripe this loom thread writes to: the n-th thread to count owns
/// stripe n (a modelled counter, so every execution assigns the same).
#[cfg(loom)]
pub(crate) fn stripe() -> Stripe {
    loom::lazy_static! {
        static ref NEXT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
    }
    loom::thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    let n = MINE.with(|m| *m);
    if n < OWNED {
        Stripe::Owned(n)
    } else {
        Stripe::Shared(OWNED + n % (STRIPES - OWNED))
    }
}

/// A time origin fixed by the first instant a guardrail sees, so that its
/// buckets line up with the first call whatever clock drives it (a
/// [`ManualClock`](crate::ManualClock) in tests, the monotonic clock in
/// production). Instants before the origin count as the origin.
#[derive(Debug, Default)]
pub(crate) struct Origin {
    #[cfg(not(loom))]
    at: std::sync::OnceLock<Instant>,
    #[cfg(loom)]
    at: loom::sync::Mutex<Option<Instant>>,
}

impl Origin {
    /// Nanoseconds from the origin to `now` (saturating), fixing the origin
    /// at `now` on first use.
    #[inline]
    pub(crate) fn nanos(&self, now: Instant) -> u64 {
        let origin = self.get_or_init(now);
        nanos(now.saturating_duration_since(origin))
    }

    #[cfg(not(loom))]
    #[inline]
    fn get_or_init(&self, now: Instant) -> Instant {
        *self.at.get_or_init(|| now)
    }

    /// The origin, once fixed.
    #[cfg(not(loom))]
    pub(crate) fn get(&self) -> Option<Instant> {
        self.at.get().copied()
    }

    #[cfg(loom)]
    fn get_or_init(&self, now: Instant) -> Instant {
        *self.at.lock().unwrap().get_or_insert(now)
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(d.subsec_nanos()))
}

/// Aligns its contents to 128 bytes (two cache lines, the unit of the
/// adjacent-line prefetcher), so two hot counters never share a line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Builds an array of atomics (loom's cannot be built in a `const`).
pub(crate) fn atomics<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}
