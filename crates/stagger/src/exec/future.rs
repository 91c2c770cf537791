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

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;

use crate::engine::drive::{drive, timed_out, Answer, Attempt, Attempts, Judged, Plan, Verdict};
use crate::engine::policy::Policy;
use crate::exec::settings::{DefaultSettings, Settings};
use crate::exec::sync::{judge, Answers, Kept, Retry};
use crate::exec::{AcceptAll, AllTransient, Classifier, Notice, Notify, OkCheck, Report, Silent};
use crate::outcome::error::RetryError;
use crate::outcome::Decision;
use crate::outcome::{Failure, Outcome};
use crate::time::{Clock, MonotonicClock};

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
/// [`Retry::sleep`] (it does not implement [`Sleeper`], so forgetting
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
    /// Runs this closure's futures under `policy`; finish with `call` or
    /// `report` (see [`Retry`]), which return futures.
    fn retry(
        self,
        policy: &Policy,
    ) -> Retry<'_, Async<Self>, AllTransient, AcceptAll, Silent, DefaultSleeper> {
        Retry {
            op: Async(self),
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

/// A closure `FnMut() -> impl Future<Output = Result<T, E>>` (see
/// [`AsyncRetryExt::retry`]).
#[derive(Debug, Clone, Copy)]
pub struct Async<F>(F);

impl<F, Fut, T, E> Answers for Async<F>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    type Error = E;
}

impl<'p, F, Fut, T, E, W, K, N, S, C, P> Retry<'p, Async<F>, W, K, N, S, C, P>
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
            match judge((self.op.0)().await, &mut self.when, &mut self.ok) {
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
            match judge((self.op.0)().await, &mut self.when, &mut self.ok) {
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

    /// The slow path: the one attempt loop ([`drive`]) under a retrying
    /// plan, with this closure's attempts. `first` is the first attempt's
    /// failure when the fast path already ran it.
    async fn report_slow(self, first: Option<(Kept<T, E>, Failure)>) -> Report<T, E>
    where
        S: Sleeper,
    {
        let Retry {
            op: Async(op),
            policy,
            when,
            ok,
            notify,
            mut sleep,
            clock,
            settings,
        } = self;
        let mut call = settings.get().call(&clock);
        // A notify hook is shown the time since the first attempt started.
        let started = notify.wants().then(|| clock.now());
        if let Some(at) = started {
            call.start_clock(at);
        }
        // Dropping the plan mid-attempt (the caller gave up) tells the
        // guardrails, so a breaker's half-open probe slot is freed at once
        // instead of after its probe timeout.
        let mut plan = Plan::new(policy, None, call, &clock);
        let (first, first_failure) = match first {
            Some((kept, failure)) => (kept.into_answer(), Some(failure)),
            None => (None, None),
        };
        let mut attempts = Closure {
            op,
            when,
            ok,
            notify,
            first,
            first_failure,
            clock: &clock,
            started,
        };
        let finish = drive(&mut plan, &mut attempts, &clock, |d| sleep.sleep(d)).await;
        let timed_out = matches!(finish.last, Some(Answer::TimedOut));
        let result = match finish.last {
            Some(Answer::Came(r)) => r.map_err(Some),
            _ => Err(None),
        };
        Report::finish(result, plan.call(), &clock, finish.end.reason(), timed_out)
    }
}

/// The closure's part of the loop: attempt k is its next future, an
/// answer's facts come from the classifier and the success check, and the
/// notify hook is told before every wait.
struct Closure<'c, F, T, E, W, K, N, C> {
    op: F,
    when: W,
    ok: K,
    notify: N,
    /// The first attempt's answer, when the fast path already ran it.
    first: Option<Result<T, E>>,
    /// How it failed, as the fast path judged it (judged once, not twice).
    first_failure: Option<Failure>,
    clock: &'c C,
    /// When the call started, if a notify hook wants the elapsed time.
    started: Option<Instant>,
}

pin_project! {
    /// An attempt: the closure's future, or the fast path's answer handed
    /// back as the first attempt.
    #[project = RunningProj]
    enum Running<Fut, T, E> {
        Done { answer: Option<Result<T, E>> },
        Sent { #[pin] fut: Fut },
    }
}

impl<Fut, T, E> Future for Running<Fut, T, E>
where
    Fut: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        match self.project() {
            RunningProj::Sent { fut } => fut.poll(cx),
            RunningProj::Done { answer } => match answer.take() {
                Some(a) => Poll::Ready(a),
                // Polled again after it answered: never ready again.
                None => Poll::Pending,
            },
        }
    }
}

impl<F, Fut, T, E, W, K, N, C> Attempts for Closure<'_, F, T, E, W, K, N, C>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    W: Classifier<E>,
    K: OkCheck<T>,
    N: Notify<T, E>,
    C: Clock,
{
    type Answer = Result<T, E>;
    type Future = Running<Fut, T, E>;

    fn start(&mut self, _: Attempt) -> Option<Self::Future> {
        Some(match self.first.take() {
            Some(answer) => Running::Done {
                answer: Some(answer),
            },
            None => Running::Sent { fut: (self.op)() },
        })
    }

    fn judge(&mut self, _: &Attempt, answer: &Answer<Result<T, E>>) -> Verdict {
        if let Some(failure) = self.first_failure.take() {
            return Verdict::Report(Outcome::Failure(failure));
        }
        match answer {
            Answer::Came(Ok(v)) => Verdict::Report(match self.ok.check(v) {
                None => Outcome::Success,
                Some(f) => Outcome::Failure(f),
            }),
            Answer::Came(Err(e)) => Verdict::Report(Outcome::Failure(self.when.classify(e))),
            Answer::TimedOut => timed_out(),
        }
    }

    fn judged(&mut self, attempt: &Attempt, judged: Judged<'_, Result<T, E>>) {
        let (Decision::Retry { after }, Outcome::Failure(failure)) =
            (judged.decision, judged.outcome)
        else {
            return;
        };
        if !self.notify.wants() {
            return;
        }
        let (error, value) = match judged.answer {
            Answer::Came(Err(e)) => (Some(e), None),
            Answer::Came(Ok(v)) => (None, Some(v)),
            Answer::TimedOut => (None, None),
        };
        let elapsed = self.started.map_or(Duration::ZERO, |s| {
            self.clock.now().saturating_duration_since(s)
        });
        self.notify.notify(&Notice {
            attempt: attempt.number,
            error,
            value,
            class: failure.class,
            delay: after,
            elapsed,
        });
    }
}
