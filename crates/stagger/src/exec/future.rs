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
use std::time::Duration;

use crate::call::Call;
use crate::call::LazyRng;
use crate::classify::Classify;
use crate::clock::{Clock, MonotonicClock};
use crate::error::RetryError;
use crate::exec::settings::{DefaultSettings, Settings};
use crate::exec::sync::{judge, notice, Kept};
use crate::exec::{AcceptAll, AllTransient, ByClass, Classifier, Notify, OkCheck, Report, Silent};
use crate::outcome::Decision;
use crate::outcome::{Failure, Outcome};
use crate::policy::Policy;

/// Something that waits asynchronously. Implemented for every
/// `FnMut(Duration) -> impl Future<Output = ()>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot wait between attempts: the async executor needs a sleeper",
    label = "no sleeper to wait with",
    note = "turn on stagger's `tokio` feature to wait on tokio's timer (`stagger = {{ features = [\"tokio\"] }}`), or pass your runtime's timer with `.sleep(|d| your_runtime::sleep(d))`"
)]
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
    fn retry(self, policy: &Policy) -> AsyncRetry<'_, Self> {
        AsyncRetry {
            op: self,
            policy,
            when: AllTransient,
            ok: AcceptAll,
            notify: Silent,
            sleep: DefaultSleeper::default(),
            clock: MonotonicClock,
            settings: DefaultSettings,
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
pub struct AsyncRetry<
    'p,
    F,
    W = AllTransient,
    K = AcceptAll,
    N = Silent,
    S = DefaultSleeper,
    C = MonotonicClock,
    P = DefaultSettings,
> {
    op: F,
    policy: &'p Policy,
    when: W,
    ok: K,
    notify: N,
    sleep: S,
    clock: C,
    settings: P,
}

crate::exec::builder_methods!(AsyncRetry);

impl<'p, F, W, K, N, S, C, P> AsyncRetry<'p, F, W, K, N, S, C, P> {
    /// Classifies errors by their [`Classify`] implementation.
    pub fn when_classified<Fut, T, E: Classify>(self) -> AsyncRetry<'p, F, ByClass, K, N, S, C, P>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.when(ByClass)
    }
}

impl<'p, F, Fut, T, E, W, K, N, S, C, P> AsyncRetry<'p, F, W, K, N, S, C, P>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    W: Classifier<E>,
    K: OkCheck<T>,
    N: Notify<T, E>,
    C: Clock,
    P: Settings,
{
    /// Runs the call.
    pub async fn call(mut self) -> Result<T, RetryError<E>>
    where
        S: Sleeper,
    {
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
            && self.settings.get().is_plain()
            && self.policy.attempt_timeout().is_none()
            && !self.notify.wants()
    }

    /// Runs the call and reports attempts and stop reason.
    pub async fn report(mut self) -> Report<T, E>
    where
        S: Sleeper,
    {
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
        S: Sleeper,
    {
        Box::pin(self.report_slow(first))
    }

    async fn report_slow(self, mut first: Option<(Kept<T, E>, Failure)>) -> Report<T, E>
    where
        S: Sleeper,
    {
        let AsyncRetry {
            mut op,
            policy,
            mut when,
            mut ok,
            mut notify,
            mut sleep,
            clock,
            settings,
        } = self;
        // If this future is dropped mid-attempt (the caller gave up), the
        // guard tells the guardrails, so a breaker's half-open probe slot is
        // freed at once instead of after its probe timeout.
        let mut guard = InFlight {
            policy,
            call: settings.get().call(&clock),
            clock: &clock,
        };
        let call = &mut guard.call;
        let mut last: Kept<T, E> = Kept::Nothing;
        let mut timed_out = false;
        if notify.wants() {
            call.start_clock(clock.now());
        }
        loop {
            let timeout = match policy.start_attempt(call, &clock) {
                Ok(t) => t,
                Err(reason) => {
                    return Report::finish(last.into_result(), call, &clock, reason, timed_out);
                }
            };
            let failed = match first.take() {
                Some(failed) => Some(failed),
                None => {
                    let result = match timeout {
                        None => Some(op().await),
                        Some(t) => race(op(), sleep.sleep(t)).await,
                    };
                    timed_out = result.is_none();
                    match result {
                        None => None,
                        Some(r) => match judge(r, &mut when, &mut ok) {
                            Ok(v) => {
                                if policy.watches_success(call) {
                                    policy.decide(call, Outcome::Success, &clock);
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
            match policy.decide(call, failure, &clock) {
                Decision::Retry { after } => {
                    if notify.wants() {
                        notify.notify(&notice(&last, call, failure, after, &clock));
                    }
                    sleep.sleep(after).await;
                }
                Decision::Stop(reason) => {
                    return Report::finish(last.into_result(), call, &clock, reason, timed_out);
                }
            }
        }
    }
}

/// The per-call state of a running async call; on drop it abandons an
/// attempt still in flight (a no-op once the attempt's outcome is recorded).
struct InFlight<'a, 'p, C: Clock> {
    policy: &'p Policy,
    call: Call<LazyRng>,
    clock: &'a C,
}

impl<C: Clock> Drop for InFlight<'_, '_, C> {
    fn drop(&mut self) {
        self.policy.abandon(&mut self.call, self.clock);
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
