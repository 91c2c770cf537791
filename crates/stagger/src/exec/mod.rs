//! Executors: the front-ends that run a closure under a [`Policy`], and
//! the protocol every front-end speaks to the engine ([`Plan`], [`Step`],
//! [`Attempt`]), for a front-end of your own.
//!
//! They own the sleeping and the clock reading; every rule comes from
//! [`Policy::decide`](crate::Policy::decide). Entry points are extension
//! methods on closures, in the spirit of backon's `.retry()`:
//!
//! ```
//! use stagger::Backoff;
//! use stagger::{Class, Policy, RetryExt, StopReason};
//! use std::time::Duration;
//!
//! let policy = Policy::builder().backoff(Backoff { base: Duration::ZERO, ..Backoff::new() }).build().unwrap();
//! let mut failures = 2;
//! let report = (|| if failures > 0 { failures -= 1; Err("busy") } else { Ok(7) })
//!     .retry(&policy)
//!     .when(|_e: &&str| Class::Transient)
//!     .report();
//! assert_eq!(report.attempts, 3);
//! assert_eq!(report.reason, StopReason::Success);
//! assert_eq!(report.result.unwrap(), 7);
//! ```
//!
//! [`Policy`]: crate::Policy

use std::time::{Duration, Instant};

use crate::engine::call::Call;
use crate::outcome::error::RetryError;
use crate::outcome::Class;
use crate::outcome::StopReason;
use crate::time::Clock;

pub(crate) mod future;
pub(crate) mod hedge;
mod hooks;
pub(crate) mod settings;
pub(crate) mod sync;

use settings::{CallSettings, Settings};

// The extension traits are at the crate root only (one path each). The
// executors' type parameters (the default classifier, check, hook, sleeper
// and the closure wrappers) and the traits closures already implement are
// not named here: a user passes a closure and never writes their names.
pub use crate::engine::drive::{Attempt, Plan, Step};
pub use hedge::Hedged;
pub(crate) use hooks::{AcceptAll, AllTransient, ByClass, Classifier, Notify, OkCheck, Silent};
pub use sync::{BlockingSleeper, Retry};

// The builder methods of a retried call, blocking or async: each one
// replaces one part of the configured call and keeps the rest.
impl<'p, F, W, K, N, S, C, P> Retry<'p, F, W, K, N, S, C, P> {
    /// Classifies errors with a closure returning a
    /// [`Class`](crate::Class) or a [`Failure`](crate::Failure).
    pub fn when<W2>(self, when: W2) -> Retry<'p, F, W2, K, N, S, C, P> {
        Retry {
            op: self.op,
            policy: self.policy,
            when,
            ok: self.ok,
            notify: self.notify,
            sleep: self.sleep,
            clock: self.clock,
            settings: self.settings,
        }
    }

    /// Retries some successful values too: the closure returns
    /// `Some(class)` for a value that means "try again".
    pub fn retry_ok_if<K2>(self, ok: K2) -> Retry<'p, F, W, K2, N, S, C, P> {
        Retry {
            op: self.op,
            policy: self.policy,
            when: self.when,
            ok,
            notify: self.notify,
            sleep: self.sleep,
            clock: self.clock,
            settings: self.settings,
        }
    }

    /// Calls `notify` before every wait with one argument, a [`Notice`]:
    /// the attempt that failed, its error (or the value judged a failure),
    /// its class, the delay about to be slept and the time since the first
    /// attempt started. A hook of another shape is refused where the call
    /// is run: `call` and `report` then say the closure "doesn't satisfy
    /// `FnOnce<(&Notice<'_, T, E>,)>`".
    ///
    /// ```
    /// use stagger::exec::Notice;
    /// use stagger::{Backoff, Policy, RetryExt};
    /// use std::time::Duration;
    ///
    /// let policy = Policy::builder().backoff(Backoff { base: Duration::ZERO, ..Backoff::new() }).build().unwrap();
    /// let mut seen = Vec::new();
    /// let _ = (|| Err::<(), _>("busy"))
    ///     .retry(&policy)
    ///     .notify(|n: &Notice<'_, (), &'static str>| seen.push((n.attempt, n.error.copied(), n.delay)))
    ///     .call();
    /// assert_eq!(seen, [(1, Some("busy"), Duration::ZERO), (2, Some("busy"), Duration::ZERO)]);
    /// ```
    pub fn notify<N2>(self, notify: N2) -> Retry<'p, F, W, K, N2, S, C, P> {
        Retry {
            op: self.op,
            policy: self.policy,
            when: self.when,
            ok: self.ok,
            notify,
            sleep: self.sleep,
            clock: self.clock,
            settings: self.settings,
        }
    }

    /// Waits with `sleep` instead of the default sleeper.
    pub fn sleep<S2>(self, sleep: S2) -> Retry<'p, F, W, K, N, S2, C, P> {
        Retry {
            op: self.op,
            policy: self.policy,
            when: self.when,
            ok: self.ok,
            notify: self.notify,
            sleep,
            clock: self.clock,
            settings: self.settings,
        }
    }

    /// Reads time from `clock` instead of the monotonic clock.
    pub fn clock<C2>(self, clock: C2) -> Retry<'p, F, W, K, N, S, C2, P> {
        Retry {
            op: self.op,
            policy: self.policy,
            when: self.when,
            ok: self.ok,
            notify: self.notify,
            sleep: self.sleep,
            clock,
            settings: self.settings,
        }
    }

    /// An absolute deadline over every attempt and wait.
    pub fn deadline(self, deadline: Instant) -> Retry<'p, F, W, K, N, S, C, CallSettings>
    where
        P: Settings,
    {
        self.with_settings(|s| s.deadline = Some(deadline))
    }

    /// A deadline `timeout` after the call starts.
    pub fn timeout(self, timeout: Duration) -> Retry<'p, F, W, K, N, S, C, CallSettings>
    where
        P: Settings,
    {
        self.with_settings(|s| s.timeout = Some(timeout))
    }

    /// Declares the call idempotent, so timeouts (unknown results)
    /// are retried.
    pub fn idempotent(self, idempotent: bool) -> Retry<'p, F, W, K, N, S, C, CallSettings>
    where
        P: Settings,
    {
        self.with_settings(|s| s.idempotent = idempotent)
    }

    /// Seeds the call's jitter so its delays replay exactly.
    pub fn seed(self, seed: u64) -> Retry<'p, F, W, K, N, S, C, CallSettings>
    where
        P: Settings,
    {
        self.with_settings(|s| s.seed = Some(seed))
    }

    /// The same call with its per-call settings changed by `set`.
    fn with_settings(
        self,
        set: impl FnOnce(&mut CallSettings),
    ) -> Retry<'p, F, W, K, N, S, C, CallSettings>
    where
        P: Settings,
    {
        let mut settings = self.settings.get();
        set(&mut settings);
        Retry {
            op: self.op,
            policy: self.policy,
            when: self.when,
            ok: self.ok,
            notify: self.notify,
            sleep: self.sleep,
            clock: self.clock,
            settings,
        }
    }
}

/// What a notify hook is shown before each wait.
#[derive(Debug)]
pub struct Notice<'a, T, E> {
    /// The attempt that failed (1-based).
    pub attempt: u32,
    /// Its error, if it returned one (`None` for a timeout or a rejected value).
    pub error: Option<&'a E>,
    /// The value it returned, if it succeeded but was judged a failure.
    pub value: Option<&'a T>,
    /// The failure's class.
    pub class: Class,
    /// The wait before the next attempt.
    pub delay: Duration,
    /// Time since the first attempt started (a notify hook makes the
    /// executor read the clock before the first attempt).
    pub elapsed: Duration,
}

/// Everything an executor knows at the end of a call.
#[derive(Debug)]
pub struct Report<T, E> {
    /// The value, or why there is none. An `Ok` whose value was judged a
    /// failure is still returned as `Ok` when retries stop; `reason` says so.
    pub result: Result<T, RetryError<E>>,
    /// Attempts made.
    pub attempts: u32,
    /// Why the call stopped.
    pub reason: StopReason,
}

impl<T, E> Report<T, E> {
    #[inline]
    pub(crate) fn success(value: T, attempts: u32) -> Self {
        Report {
            result: Ok(value),
            attempts,
            reason: StopReason::Success,
        }
    }

    /// A call the executor refused to run: `why` names the setting.
    #[cold]
    pub(crate) fn refused(why: crate::outcome::error::ConfigError) -> Self {
        Report {
            result: Err(RetryError::from(crate::outcome::error::Failed {
                reason: StopReason::NotRetryable,
                attempts: 0,
                elapsed: None,
                last: None,
                timed_out: false,
                unknown: false,
                retry_in: None,
                refused: Some(why),
            })),
            attempts: 0,
            reason: StopReason::NotRetryable,
        }
    }

    pub(crate) fn finish<R, C: Clock>(
        result: Result<T, Option<E>>,
        call: &Call<R>,
        clock: &C,
        reason: StopReason,
        timed_out: bool,
    ) -> Self {
        let attempts = call.attempts();
        let elapsed = call
            .started()
            .map(|s| clock.now().saturating_duration_since(s));
        let result = result.map_err(|last| {
            RetryError::from(crate::outcome::error::Failed {
                reason,
                attempts,
                elapsed,
                last,
                timed_out,
                unknown: false,
                retry_in: call.retry_in(),
                refused: None,
            })
        });
        Report {
            result,
            attempts,
            reason,
        }
    }
}
