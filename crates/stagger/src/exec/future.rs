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
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::classify::{Classify, Failure, Outcome};
use crate::clock::{Clock, MonotonicClock};
use crate::error::RetryError;
use crate::exec::sync::{CallSettings, Kept};
use crate::exec::{
    AcceptAll, AllTransient, ByClass, Classifier, Notice, Notify, OkCheck, Report, Silent,
};
use crate::policy::{Decision, Policy, StopReason};

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
    pub async fn call(self) -> Result<T, RetryError<E>> {
        self.report().await.result
    }

    /// Runs the call and reports attempts and stop reason.
    pub async fn report(mut self) -> Report<T, E> {
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
                    let elapsed = call.elapsed(self.clock.now());
                    return Report::finish(
                        last.into_result(),
                        call.attempts(),
                        reason,
                        elapsed,
                        timed_out,
                    );
                }
            };
            let result = match timeout {
                None => Some((self.op)().await),
                Some(t) => {
                    let attempt = pin!((self.op)());
                    let mut attempt = attempt;
                    let mut timer = pin!(self.sleep.sleep(t));
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
            };
            timed_out = result.is_none();
            let failure = match result {
                Some(Ok(v)) => match self.ok.check(&v) {
                    None => {
                        if policy.watches_success(&call) {
                            policy.decide(&mut call, Outcome::Success, &self.clock);
                        }
                        return Report {
                            result: Ok(v),
                            attempts: call.attempts(),
                            reason: StopReason::Success,
                        };
                    }
                    Some(f) => {
                        last = Kept::Value(v);
                        f
                    }
                },
                Some(Err(e)) => {
                    let f = self.when.classify(&e);
                    last = Kept::Error(e);
                    f
                }
                None => {
                    last = Kept::Nothing;
                    Failure::timeout()
                }
            };
            let decision = policy.decide(&mut call, failure, &self.clock);
            if call.attempts() == 1 {
                call.start_clock(self.clock.now());
            }
            match decision {
                Decision::Retry { after } => {
                    if self.notify.wants() {
                        let (error, value) = match &last {
                            Kept::Error(e) => (Some(e), None),
                            Kept::Value(v) => (None, Some(v)),
                            Kept::Nothing => (None, None),
                        };
                        self.notify.notify(&Notice {
                            attempt: call.attempts(),
                            error,
                            value,
                            class: failure.class,
                            delay: after,
                            elapsed: call.elapsed(self.clock.now()),
                        });
                    }
                    self.sleep.sleep(after).await;
                }
                Decision::Stop(reason) => {
                    let elapsed = call.elapsed(self.clock.now());
                    return Report::finish(
                        last.into_result(),
                        call.attempts(),
                        reason,
                        elapsed,
                        timed_out,
                    );
                }
            }
        }
    }
}
