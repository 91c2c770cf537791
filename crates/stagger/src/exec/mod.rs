//! Executors: the front-ends that run a closure under a [`Policy`].
//!
//! They own the sleeping and the clock reading; every rule comes from
//! [`Policy::decide`](crate::Policy::decide). Entry points are extension
//! methods on closures, in the spirit of backon's `.retry()`:
//!
//! ```
//! use stagger::{Class, Policy, RetryExt, StopReason};
//! use std::time::Duration;
//!
//! let policy = Policy::builder().base(Duration::ZERO).build().unwrap();
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

use std::time::Duration;

use crate::call::Call;
use crate::classify::Classify;
use crate::clock::Clock;
use crate::error::RetryError;
use crate::outcome::StopReason;
use crate::outcome::{Class, Failure};

pub(crate) mod future;
pub(crate) mod hedge;
pub(crate) mod settings;
pub(crate) mod sync;

// The extension traits are at the crate root only (one path each). The
// executors' type parameters (the default classifier, check, hook, sleeper
// and the closure wrappers) and the traits closures already implement are
// not named here: a user passes a closure and never writes their names.
pub use future::AsyncRetry;
pub use hedge::Hedged;
pub use sync::{Attempt, BlockingSleeper, Retry};

/// The builder methods both executors share: each one replaces one part of
/// the configured call and keeps the rest.
macro_rules! builder_methods {
    ($ty:ident) => {
        impl<'p, F, W, K, N, S, C, P> $ty<'p, F, W, K, N, S, C, P> {
            /// Classifies errors with a closure returning a
            /// [`Class`](crate::Class) or a [`Failure`](crate::Failure).
            pub fn when<W2>(self, when: W2) -> $ty<'p, F, W2, K, N, S, C, P> {
                $ty {
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
            pub fn retry_ok_if<K2>(self, ok: K2) -> $ty<'p, F, W, K2, N, S, C, P> {
                $ty {
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

            /// Calls `notify` before every wait with the attempt number, the
            /// error, the delay and the elapsed time.
            pub fn notify<N2>(self, notify: N2) -> $ty<'p, F, W, K, N2, S, C, P> {
                $ty {
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
            pub fn sleep<S2>(self, sleep: S2) -> $ty<'p, F, W, K, N, S2, C, P> {
                $ty {
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
            pub fn clock<C2>(self, clock: C2) -> $ty<'p, F, W, K, N, S, C2, P> {
                $ty {
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
            pub fn deadline(
                self,
                deadline: std::time::Instant,
            ) -> $ty<'p, F, W, K, N, S, C, $crate::exec::settings::CallSettings>
            where
                P: $crate::exec::settings::Settings,
            {
                let mut settings = self.settings.get();
                settings.deadline = Some(deadline);
                self.with_settings(settings)
            }

            /// A deadline `timeout` after the call starts.
            pub fn timeout(
                self,
                timeout: std::time::Duration,
            ) -> $ty<'p, F, W, K, N, S, C, $crate::exec::settings::CallSettings>
            where
                P: $crate::exec::settings::Settings,
            {
                let mut settings = self.settings.get();
                settings.timeout = Some(timeout);
                self.with_settings(settings)
            }

            /// Declares the call idempotent, so timeouts (unknown results)
            /// are retried.
            pub fn idempotent(
                self,
                idempotent: bool,
            ) -> $ty<'p, F, W, K, N, S, C, $crate::exec::settings::CallSettings>
            where
                P: $crate::exec::settings::Settings,
            {
                let mut settings = self.settings.get();
                settings.idempotent = idempotent;
                self.with_settings(settings)
            }

            /// Seeds the call's jitter so its delays replay exactly.
            pub fn seed(
                self,
                seed: u64,
            ) -> $ty<'p, F, W, K, N, S, C, $crate::exec::settings::CallSettings>
            where
                P: $crate::exec::settings::Settings,
            {
                let mut settings = self.settings.get();
                settings.seed = Some(seed);
                self.with_settings(settings)
            }

            /// The same call with explicit per-call settings.
            fn with_settings(
                self,
                settings: $crate::exec::settings::CallSettings,
            ) -> $ty<'p, F, W, K, N, S, C, $crate::exec::settings::CallSettings> {
                $ty {
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
    };
}
pub(crate) use builder_methods;

/// Decides the class of an error. Implemented for closures
/// `FnMut(&E) -> X` where `X` is a [`Class`] or a [`Failure`].
pub trait Classifier<E> {
    /// The failure this error represents.
    fn classify(&mut self, error: &E) -> Failure;
}

/// The default classifier: every error is transient (as backon and tower
/// do). Use [`ByClass`] (`.when_classified()`) for errors that implement
/// [`Classify`], such as `std::io::Error`.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllTransient;

impl<E> Classifier<E> for AllTransient {
    #[inline]
    fn classify(&mut self, _: &E) -> Failure {
        Failure::transient()
    }
}

/// Classifies errors through their [`Classify`] implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByClass;

impl<E: Classify> Classifier<E> for ByClass {
    #[inline]
    fn classify(&mut self, error: &E) -> Failure {
        Failure::new(error.class())
    }
}

impl<E, F, X> Classifier<E> for F
where
    F: FnMut(&E) -> X,
    X: Into<Failure>,
{
    #[inline]
    fn classify(&mut self, error: &E) -> Failure {
        self(error).into()
    }
}

/// Decides whether a *successful* value should be treated as a failure (for
/// example a response that says "try again"). Implemented for closures
/// `FnMut(&T) -> Option<X>` with `X` a [`Class`] or a [`Failure`].
pub trait OkCheck<T> {
    /// `Some(failure)` to retry despite the value.
    fn check(&mut self, value: &T) -> Option<Failure>;
}

/// The default: every `Ok` is a success.
#[derive(Debug, Clone, Copy, Default)]
pub struct AcceptAll;

impl<T> OkCheck<T> for AcceptAll {
    #[inline]
    fn check(&mut self, _: &T) -> Option<Failure> {
        None
    }
}

impl<T, F, X> OkCheck<T> for F
where
    F: FnMut(&T) -> Option<X>,
    X: Into<Failure>,
{
    #[inline]
    fn check(&mut self, value: &T) -> Option<Failure> {
        self(value).map(Into::into)
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

/// A hook called before each wait.
pub trait Notify<T, E> {
    /// Called with what failed and how long the executor will wait.
    fn notify(&mut self, notice: &Notice<'_, T, E>);

    /// Whether the hook wants notices (lets the executor skip reading the
    /// clock for a hook that does nothing).
    fn wants(&self) -> bool {
        true
    }
}

/// The default: no hook.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl<T, E> Notify<T, E> for Silent {
    #[inline]
    fn notify(&mut self, _: &Notice<'_, T, E>) {}

    #[inline]
    fn wants(&self) -> bool {
        false
    }
}

impl<T, E, F: FnMut(&Notice<'_, T, E>)> Notify<T, E> for F {
    #[inline]
    fn notify(&mut self, notice: &Notice<'_, T, E>) {
        self(notice)
    }
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
    pub(crate) fn refused(why: crate::error::ConfigError) -> Self {
        Report {
            result: Err(RetryError::from(crate::error::Failed {
                reason: StopReason::NotRetryable,
                attempts: 0,
                elapsed: None,
                last: None,
                timed_out: false,
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
            RetryError::from(crate::error::Failed {
                reason,
                attempts,
                elapsed,
                last,
                timed_out,
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
