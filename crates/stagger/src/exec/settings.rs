//! Per-call settings of the executors, kept as a zero-sized type until a
//! builder method sets one, so a successful call never carries them.

use std::time::{Duration, Instant};

use crate::engine::call::Call;
use crate::engine::call::LazyRng;
use crate::random::FastRng;
use crate::time::Clock;

/// Per-call settings of an executor, set through its builder methods
/// (`deadline`, `timeout`, `idempotent`, `seed`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CallSettings {
    pub(crate) deadline: Option<Instant>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) idempotent: bool,
    pub(crate) seed: Option<u64>,
}

/// Where an executor's per-call settings come from: [`DefaultSettings`]
/// until a builder method sets one, then [`CallSettings`]. Keeping the
/// defaults a zero-sized type keeps them out of a successful call's work.
pub trait Settings: Copy {
    /// The settings.
    fn get(&self) -> CallSettings;
}

/// No deadline, not idempotent, a fresh random stream.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultSettings;

impl Settings for DefaultSettings {
    #[inline]
    fn get(&self) -> CallSettings {
        CallSettings::default()
    }
}

impl Settings for CallSettings {
    #[inline]
    fn get(&self) -> CallSettings {
        *self
    }
}

impl CallSettings {
    /// No deadline: nothing about the call itself needs the clock.
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        self.deadline.is_none() && self.timeout.is_none()
    }

    #[inline]
    pub(crate) fn call<C: Clock>(&self, clock: &C) -> Call<LazyRng> {
        // Built only once a first attempt has failed (or the call needs
        // the clock), so seeding a fresh stream here costs successes nothing.
        let rng = match self.seed {
            Some(s) => LazyRng::from(FastRng::seeded(s)),
            // Seeded on the first draw: a retry with no delay to jitter
            // never pays for it.
            None => LazyRng::default(),
        };
        let mut call = Call::with_rng(rng).idempotent(self.idempotent);
        let deadline =
            crate::outcome::deadline::earliest(&[self.deadline], &[self.timeout], || clock.now());
        if let Some(d) = deadline {
            call = call.deadline(d);
        }
        call
    }
}
