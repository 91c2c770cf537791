//! The asynchronous executor: retries a closure returning a future.
//!
//! It is runtime-agnostic: a sleeper is any `FnMut(Duration) -> impl Future`
//! (tokio's `sleep` is the default with the `tokio` feature), so tests can
//! pass an instant sleeper and never wait. When the policy has an attempt
//! timeout or the call a deadline, each attempt races a timer of
//! `min(attempt_timeout, remaining)`; an attempt that loses is dropped and
//! counted as a timeout (result unknown: retried only if idempotent).
//!
//! ```
//! use stagger::{AsyncRetryExt, Policy};
//! use std::time::Duration;
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! # rt.block_on(async {
//! let policy = Policy::default();
//! let mut left = 1;
//! let value = (|| { let fail = left > 0; left -= 1; async move { if fail { Err("busy") } else { Ok(5) } } })
//!     .retry(&policy)
//!     .sleep(|_d: Duration| async {}) // never really wait in a doc test
//!     .call()
//!     .await
//!     .unwrap();
//! assert_eq!(value, 5);
//! # });
//! ```

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::classify::{Classify, Failure, Outcome};
use crate::clock::{Clock, MonotonicClock};
use crate::error::RetryError;
use crate::exec::sync::{judge, notice, CallSettings, Kept};
use crate::exec::{AcceptAll, AllTransient, ByClass, Classifier, Notify, OkCheck, Report, Silent};
use crate::policy::{Decision, Policy};

/// Something that waits asynchronously. Implemented for every
/// `FnMut(Duration) -> impl Future<Output = ()>`.
pub trait Sleeper {
    /// The wait.
    type Sleep: Future<Output = ()>;
    /// Starts waiting `d`.
    fn sleep(&mut self, d: Duration) -> Self::Sleep;
}

impl<F, Fut> Sleeper for F
where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    type Sleep = Fut;
    fn sleep(&mut self, d: Duration) -> Fut {
        self(d)
    }
}

/// tokio's timer (feature `tokio`).
#[cfg(feature = "tokio")]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleep;

#[cfg(feature = "tokio")]
impl Sleeper for TokioSleep {
    type Sleep = tokio::time::Sleep;
    fn sleep(&mut self, d: Duration) -> tokio::time::Sleep {
        tokio::time::sleep(d)
    }
}

/// Placeholder sleeper when no runtime feature is on: set one with
/// [`AsyncRetry::sleep`] (it does not implement [`Sleeper`], so forgetting
/// is a compile error, not a busy loop).
#[cfg(not(feature = "tokio"))]
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSleeper;

/// The default sleeper: tokio's with the `tokio` feature.
#[cfg(feature = "tokio")]
pub type DefaultSleeper = TokioSleep;
/// The default sleeper: none without a runtime feature.
#[cfg(not(feature = "tokio"))]
pub type DefaultSleeper = NoSleeper;

/// Adds `.retry(&policy)` to every `FnMut() -> impl Future<Output = Result<T, E>>`.
pub trait AsyncRetryExt<Fut>: FnMut() -> Fut + Sized {
    /// Runs this closure's futures under `policy`; finish with
    /// [`AsyncRetry::call`] or [`AsyncRetry::report`].
    fn retry(
        self,
        policy: &Policy,
    ) -> AsyncRetry<'_, Self, AllTransient, AcceptAll, Silent, DefaultSleeper, MonotonicClock> {
        AsyncRetry {
            op: self,
            policy,
            when: AllTransient,
            ok: AcceptAll,
            notify: Silent,
            sleep: DefaultSleeper::default(),
            clock: MonotonicClock,
            settings: CallSettings::default(),
        }
    }
}

impl<F, Fut> AsyncRetryExt<Fut> for F
where
    F: FnMut() -> Fut,
    Fut: Future,
{
}

/// An asynchronous retried call being configured; see [`AsyncRetryExt::retry`].
pub struct AsyncRetry<'p, F, W, K, N, S, C> {
    op: F,
    policy: &'p Policy,
    when: W,
    ok: K,
    notify: N,
    sleep: S,
    clock: C,
    settings: CallSettings,
}

impl<'p, F, W, K, N, S, C> AsyncRetry<'p, F, W, K, N, S, C> {
    /// Classifies errors with a closure returning a [`Class`](crate::Class)
    /// or a [`Failure`].
    pub fn when<W2>(self, when: W2) -> AsyncRetry<'p, F, W2, K, N, S, C> {
        AsyncRetry {
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

    /// Classifies errors by their [`Classify`] implementation.
    pub fn when_classified<Fut, T, E: Classify>(self) -> AsyncRetry<'p, F, ByClass, K, N, S, C>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.when(ByClass)
    }

    /// Retries some successful values too.
    pub fn retry_ok_if<K2>(self, ok: K2) -> AsyncRetry<'p, F, W, K2, N, S, C> {
        AsyncRetry {
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

    /// Calls `notify` before every wait.
    pub fn notify<N2>(self, notify: N2) -> AsyncRetry<'p, F, W, K, N2, S, C> {
        AsyncRetry {
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

    /// Waits with `sleep` (any `FnMut(Duration) -> impl Future<Output = ()>`).
    pub fn sleep<S2>(self, sleep: S2) -> AsyncRetry<'p, F, W, K, N, S2, C> {
        AsyncRetry {
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

    /// Reads time from `clock`.
    pub fn clock<C2>(self, clock: C2) -> AsyncRetry<'p, F, W, K, N, S, C2> {
        AsyncRetry {
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
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.settings.deadline = Some(deadline);
        self
    }

    /// A deadline `timeout` after the call starts.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
        self
    }

    /// Declares the call idempotent, so timeouts are retried.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.settings.idempotent = idempotent;
        self
    }

    /// Seeds the call's jitter.
    pub fn seed(mut self, seed: u64) -> Self {
        self.settings.seed = Some(seed);
        self
    }
}

impl<'p, F, Fut, T, E, W, K, N, S, C> AsyncRetry<'p, F, W, K, N, S, C>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    W: Classifier<E>,
    K: OkCheck<T>,
    N: Notify<T, E>,
    S: Sleeper,
    C: Clock,
{
    /// Runs the call.
    pub async fn call(mut self) -> Result<T, RetryError<E>> {
        // The fast path again rather than `self.report().await.result`: one
        // state machine instead of two nested ones on the success path.
        let first = if self.is_plain() {
            match judge((self.op)().await, &mut self.when, &mut self.ok) {
                Ok(v) => return Ok(v),
                Err(failed) => Some(failed),
            }
        } else {
            None
        };
        self.boxed_slow(first).await.result
    }

    /// Nothing needs the clock, a timer or shared state before the first
    /// attempt has failed.
    #[inline]
    fn is_plain(&self) -> bool {
        self.policy.is_passive()
            && self.settings.is_plain()
            && self.policy.attempt_timeout().is_none()
            && !self.notify.wants()
    }

    /// Runs the call and reports attempts and stop reason.
    pub async fn report(mut self) -> Report<T, E> {
        // Fast path, as in the blocking executor: no per-call state and no
        // timer until the first attempt has failed.
        let first = if self.is_plain() {
            match judge((self.op)().await, &mut self.when, &mut self.ok) {
                Ok(v) => return Report::success(v, 1),
                Err(failed) => Some(failed),
            }
        } else {
            None
        };
        // The retry loop's state (timers, the call, the next attempt's
        // future) is boxed once per *failing* call, so the future of a call
        // that succeeds stays small and allocation-free.
        self.boxed_slow(first).await
    }

    /// The retry loop behind a type-erased box: the success path's future
    /// type never contains it.
    fn boxed_slow<'s>(
        self,
        first: Option<(Kept<T, E>, Failure)>,
    ) -> Pin<Box<dyn Future<Output = Report<T, E>> + 's>>
    where
        Self: 's,
        T: 's,
        E: 's,
        Fut: 's,
    {
        Box::pin(self.report_slow(first))
    }

    async fn report_slow(mut self, mut first: Option<(Kept<T, E>, Failure)>) -> Report<T, E> {
        let policy = self.policy;
        let mut call = self.settings.call(&self.clock);
        let mut last: Kept<T, E> = Kept::Nothing;
        let mut timed_out = false;
        if self.notify.wants() {
            call.start_clock(self.clock.now());
        }
        loop {
            let timeout = match policy.start_attempt(&mut call, &self.clock) {
                Ok(t) => t,
                Err(reason) => {
                    return Report::finish(
                        last.into_result(),
                        &call,
                        &self.clock,
                        reason,
                        timed_out,
                    );
                }
            };
            let failed = match first.take() {
                Some(failed) => Some(failed),
                None => {
                    let result = match timeout {
                        None => Some((self.op)().await),
                        Some(t) => race((self.op)(), self.sleep.sleep(t)).await,
                    };
                    timed_out = result.is_none();
                    match result {
                        None => None,
                        Some(r) => match judge(r, &mut self.when, &mut self.ok) {
                            Ok(v) => {
                                if policy.watches_success(&call) {
                                    policy.decide(&mut call, Outcome::Success, &self.clock);
                                }
                                return Report::success(v, call.attempts());
                            }
                            Err(failed) => Some(failed),
                        },
                    }
                }
            };
            let failure;
            (last, failure) = failed.unwrap_or((Kept::Nothing, Failure::timeout()));
            match policy.decide(&mut call, failure, &self.clock) {
                Decision::Retry { after } => {
                    if self.notify.wants() {
                        self.notify
                            .notify(&notice(&last, &call, failure, after, &self.clock));
                    }
                    self.sleep.sleep(after).await;
                }
                Decision::Stop(reason) => {
                    return Report::finish(
                        last.into_result(),
                        &call,
                        &self.clock,
                        reason,
                        timed_out,
                    );
                }
            }
        }
    }
}

/// Runs `attempt` until it finishes (`Some`) or `timer` fires first (`None`).
async fn race<A: Future, S: Future<Output = ()>>(attempt: A, timer: S) -> Option<A::Output> {
    let mut attempt = pin!(attempt);
    let mut timer = pin!(timer);
    poll_fn(|cx| {
        if let Poll::Ready(r) = attempt.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}
