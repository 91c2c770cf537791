//! Time as the engine reads it: the [`Clock`] seam, the real monotonic
//! clock and a manual one for tests and simulations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Nothing in stagger's decision logic calls `Instant::now()` itself: every
/// function that needs the time takes it as an argument, and the front-ends
/// read it from a [`Clock`]. Real code passes [`MonotonicClock`]; tests pass a
/// [`ManualClock`], whose clones share one time that only moves when told to,
/// and the simulator passes its virtual time as a plain `Instant` (an
/// `Instant` is a frozen clock), so every schedule can be replayed exactly.
///
/// A source of monotonic time: the time seam.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock (`std::time::Instant::now`).
#[derive(Debug, Clone, Copy, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when [`advance`](ManualClock::advance) or
/// [`set`](ManualClock::set) is called. Clones share the same time.
///
/// ```
/// use stagger::time::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// let other = clock.clone();
/// other.advance(Duration::from_millis(250));
/// assert_eq!(clock.now() - t0, Duration::from_millis(250));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    origin: Instant,
    offset_ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at an arbitrary fixed origin.
    pub fn new() -> Self {
        ManualClock {
            origin: Instant::now(),
            offset_ns: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `by` (saturating at about 584 years).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .offset_ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the time to `origin + since_origin`. Time may not go backwards:
    /// an earlier value is ignored.
    pub fn set(&self, since_origin: Duration) {
        let t = u64::try_from(since_origin.as_nanos()).unwrap_or(u64::MAX);
        self.offset_ns.fetch_max(t, Ordering::AcqRel);
    }

    /// Time elapsed since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.offset_ns.load(Ordering::Acquire))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.elapsed()
    }
}

/// A clock frozen at one instant: lets the pure form
/// `policy.decide(&mut call, outcome, now)` take an `Instant` directly.
impl Clock for Instant {
    #[inline]
    fn now(&self) -> Instant {
        *self
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

/// A clock that reads no earlier than a floor: a driver's sleeper said a
/// wait until the floor is over, and its word is taken over the clock's
/// (a sleeper that returns early must not make the driver wait again and
/// again for the same instant).
pub(crate) struct NotBefore<'a, C: ?Sized>(pub(crate) &'a C, pub(crate) Option<Instant>);

impl<C: Clock + ?Sized> Clock for NotBefore<'_, C> {
    #[inline]
    fn now(&self) -> Instant {
        let t = self.0.now();
        self.1.map_or(t, |floor| t.max(floor))
    }
}
