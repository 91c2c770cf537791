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

/// How many stripes a striped counter has. A power of two; threads are
/// spread over them round-robin, so up to this many threads count without
/// sharing a cache line (two under loom, to keep the model small).
pub(crate) const STRIPES: usize = if cfg!(loom) { 2 } else { 8 };

/// The stripe this thread writes to, in `0..STRIPES`.
#[cfg(not(loom))]
#[inline]
pub(crate) fn stripe() -> usize {
    use std::cell::Cell;
    use std::sync::atomic::AtomicUsize;

    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.try_with(|m| {
        let mut i = m.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % STRIPES;
            m.set(i);
        }
        i
    })
    .unwrap_or(0)
}

/// The stripe this loom thread writes to (a modelled counter, so every
/// execution assigns the same stripes).
#[cfg(loom)]
pub(crate) fn stripe() -> usize {
    loom::lazy_static! {
        static ref NEXT: loom::sync::atomic::AtomicUsize = loom::sync::atomic::AtomicUsize::new(0);
    }
    loom::thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    MINE.with(|m| *m)
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
