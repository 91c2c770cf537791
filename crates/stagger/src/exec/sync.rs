//! The blocking executor: retries a closure on the current thread, sleeping
//! with `std::thread::sleep` (or a sleeper you pass, so tests never sleep).
//!
//! A blocking closure cannot be interrupted, so the executor cannot cut an
//! attempt off at its timeout. A closure that takes an [`Attempt`]
//! ([`RetryAttemptExt::retry_with_attempt`]) is handed each attempt's
//! timeout — `min(attempt_timeout, time left before the deadline)` — to
//! apply to its own I/O (a socket's read timeout, say). A closure that
//! takes nothing cannot see it, so a policy with an `attempt_timeout` is
//! refused for it with an error naming the setting, never silently
//! ignored. The deadline bounds every wait either way.
//!
//! ```
//! use stagger::exec::Attempt;
//! use stagger::{Policy, RetryAttemptExt, RetryExt};
//! use std::time::Duration;
//!
//! let policy = Policy::builder().attempt_timeout(Duration::from_millis(300)).build().unwrap();
//! let report = (|a: &Attempt| {
//!     assert_eq!(a.timeout, Some(Duration::from_millis(300)));
//!     Ok::<_, std::io::Error>(a.number)
//! })
//! .retry_with_attempt(&policy)
//! .report();
//! assert_eq!(report.result.unwrap(), 1);
//!
//! // The same policy with a closure that cannot see the timeout: refused.
//! let err = (|| Ok::<_, std::io::Error>(1)).retry(&policy).call().unwrap_err();
//! assert_eq!(err.refused().unwrap().field(), "attempt_timeout");
//! ```

use std::time::Duration;

use crate::classify::Classify;
use crate::engine::call::Call;
use crate::engine::drive::Attempt;
use crate::engine::policy::{Pace, Policy};
use crate::exec::settings::{DefaultSettings, Settings};
use crate::exec::{
    AcceptAll, AllTransient, ByClass, Classifier, Notice, Notify, OkCheck, Report, Silent,
};
use crate::outcome::error::ConfigError;
use crate::outcome::error::RetryError;
use crate::outcome::Decision;
use crate::outcome::{Class, Failure, Outcome};
use crate::time::{Clock, MonotonicClock, NotBefore};

/// The body of a blocking retried call: a closure that takes nothing
/// ([`Plain`]) or one that takes the [`Attempt`] ([`WithAttempt`]).
pub trait Operation {
    /// The value of a successful attempt.
    type Value;
    /// The error of a failed attempt.
    type Error;
    /// Whether the closure is shown the attempt's timeout.
    const SEES_ATTEMPT: bool;

    /// Runs one attempt.
    fn run(&mut self, attempt: &Attempt) -> Result<Self::Value, Self::Error>;
}

/// The error type of a retried call's attempts, whichever executor runs
/// them (what [`Retry::when_classified`] classifies).
pub trait Answers {
    /// The error of a failed attempt.
    type Error;
}

impl<T, E, F: FnMut() -> Result<T, E>> Answers for Plain<F> {
    type Error = E;
}

impl<T, E, F: FnMut(&Attempt) -> Result<T, E>> Answers for WithAttempt<F> {
    type Error = E;
}

/// A closure `FnMut() -> Result<T, E>` (see [`RetryExt::retry`]).
#[derive(Debug, Clone, Copy)]
pub struct Plain<F>(F);

impl<T, E, F: FnMut() -> Result<T, E>> Operation for Plain<F> {
    type Value = T;
    type Error = E;
    const SEES_ATTEMPT: bool = false;

    #[inline(always)]
    fn run(&mut self, _attempt: &Attempt) -> Result<T, E> {
        (self.0)()
    }
}

/// A closure `FnMut(&Attempt) -> Result<T, E>` (see
/// [`RetryAttemptExt::retry_with_attempt`]).
#[derive(Debug, Clone, Copy)]
pub struct WithAttempt<F>(F);

impl<T, E, F: FnMut(&Attempt) -> Result<T, E>> Operation for WithAttempt<F> {
    type Value = T;
    type Error = E;
    const SEES_ATTEMPT: bool = true;

    #[inline(always)]
    fn run(&mut self, attempt: &Attempt) -> Result<T, E> {
        (self.0)(attempt)
    }
}

/// Something that blocks the thread for a while (the blocking twin of
/// the async executor's sleep closure).
///
/// A sleeper that can be woken early by the caller giving up (a signal, a
/// shutdown) says so with [`interrupted`](BlockingSleeper::interrupted): the
/// call then stops with [`StopReason::Cancelled`](crate::StopReason) instead
/// of starting its next attempt.
///
/// ```
/// use stagger::Backoff;
/// use stagger::exec::BlockingSleeper;
/// use stagger::{Policy, RetryExt, StopReason};
/// use std::time::Duration;
///
/// /// Woken by a shutdown before the first wait is over.
/// struct Shutdown(bool);
/// impl BlockingSleeper for Shutdown {
///     fn sleep(&mut self, _d: Duration) {
///         self.0 = true;
///     }
///     fn interrupted(&self) -> bool {
///         self.0
///     }
/// }
///
/// let policy = Policy::builder().backoff(Backoff { base: Duration::ZERO, ..Backoff::new() }).build().unwrap();
/// let report = (|| Err::<(), _>("busy")).retry(&policy).sleep(Shutdown(false)).report();
/// assert_eq!(report.reason, StopReason::Cancelled);
/// assert_eq!(report.attempts, 1);
/// ```
pub trait BlockingSleeper {
    /// Blocks for `d`.
    fn sleep(&mut self, d: Duration);

    /// Whether the last wait ended because the caller gave up; the default
    /// never does.
    fn interrupted(&self) -> bool {
        false
    }
}

/// `std::thread::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleep;

impl BlockingSleeper for ThreadSleep {
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d)
    }
}

impl<F: FnMut(Duration)> BlockingSleeper for F {
    fn sleep(&mut self, d: Duration) {
        self(d)
    }
}

/// A failed attempt: what it left behind and how it failed.
type Failed<T, E> = (Kept<T, E>, Failure);

/// What the last failed attempt left behind.
pub(crate) enum Kept<T, E> {
    Nothing,
    Error(E),
    Value(T),
}

impl<T, E> Kept<T, E> {
    /// The attempt's answer again, `None` if it left nothing.
    pub(crate) fn into_answer(self) -> Option<Result<T, E>> {
        match self {
            Kept::Nothing => None,
            Kept::Error(e) => Some(Err(e)),
            Kept::Value(v) => Some(Ok(v)),
        }
    }

    pub(crate) fn into_result(self) -> Result<T, Option<E>> {
        match self {
            Kept::Nothing => Err(None),
            Kept::Error(e) => Err(Some(e)),
            Kept::Value(v) => Ok(v),
        }
    }
}

/// Adds `.retry(&policy)` to every `FnMut() -> Result<T, E>`.
pub trait RetryExt<T, E>: FnMut() -> Result<T, E> + Sized {
    /// Runs this closure under `policy`; finish with [`Retry::call`] or
    /// [`Retry::report`].
    fn retry(self, policy: &Policy) -> Retry<'_, Plain<Self>> {
        Retry {
            op: Plain(self),
            policy,
            when: AllTransient,
            ok: AcceptAll,
            notify: Silent,
            sleep: ThreadSleep,
            clock: MonotonicClock,
            settings: DefaultSettings,
        }
    }
}

impl<T, E, F: FnMut() -> Result<T, E>> RetryExt<T, E> for F {}

/// Adds `.retry_with_attempt(&policy)` to every
/// `FnMut(&Attempt) -> Result<T, E>`: the closure is shown each attempt's
/// number and timeout (see [`Attempt`]).
pub trait RetryAttemptExt<T, E>: FnMut(&Attempt) -> Result<T, E> + Sized {
    /// Runs this closure under `policy`, handing it each [`Attempt`].
    fn retry_with_attempt(self, policy: &Policy) -> Retry<'_, WithAttempt<Self>> {
        Retry::start(WithAttempt(self), policy)
    }
}

impl<T, E, F: FnMut(&Attempt) -> Result<T, E>> RetryAttemptExt<T, E> for F {}

/// A retried call being configured, blocking ([`RetryExt::retry`]) or
/// asynchronous ([`AsyncRetryExt::retry`](crate::AsyncRetryExt::retry)):
/// finish it with `call` or `report`, which block or return a future. The
/// type parameters (the operation, classifier, success check, notify hook,
/// sleeper, clock and per-call settings) default to what the blocking
/// `.retry()` starts with; each builder method replaces one.
pub struct Retry<
    'p,
    F,
    W = AllTransient,
    K = AcceptAll,
    N = Silent,
    S = ThreadSleep,
    C = MonotonicClock,
    P = DefaultSettings,
> {
    pub(super) op: F,
    pub(super) policy: &'p Policy,
    pub(super) when: W,
    pub(super) ok: K,
    pub(super) notify: N,
    pub(super) sleep: S,
    pub(super) clock: C,
    pub(super) settings: P,
}

impl<'p, F> Retry<'p, F> {
    /// `op` under `policy` with every other part at its default.
    const fn start(op: F, policy: &'p Policy) -> Self {
        Retry {
            op,
            policy,
            when: AllTransient,
            ok: AcceptAll,
            notify: Silent,
            sleep: ThreadSleep,
            clock: MonotonicClock,
            settings: DefaultSettings,
        }
    }
}

impl<'p, F: Answers, W, K, N, S, C, P> Retry<'p, F, W, K, N, S, C, P> {
    /// Classifies errors by their [`Classify`] implementation (for example
    /// `std::io::Error`: refused and reset connections are transient, a
    /// timeout is unknown, not-found is permanent).
    pub fn when_classified(self) -> Retry<'p, F, ByClass, K, N, S, C, P>
    where
        F::Error: Classify,
    {
        self.when(ByClass)
    }
}

impl<'p, F, T, E, W, K, N, S, C, P> Retry<'p, F, W, K, N, S, C, P>
where
    F: Operation<Value = T, Error = E>,
    W: Classifier<E>,
    K: OkCheck<T>,
    N: Notify<T, E>,
    S: BlockingSleeper,
    C: Clock,
    P: Settings,
{
    /// Runs the call; the error keeps the stop reason, the attempt count and
    /// the last underlying error.
    #[inline]
    pub fn call(mut self) -> Result<T, RetryError<E>> {
        match self.first_attempt() {
            Ok(v) => Ok(v),
            Err(first) => self.call_slow(first),
        }
    }

    /// Runs the call and reports attempts and stop reason, success or not.
    #[inline]
    pub fn report(mut self) -> Report<T, E> {
        match self.first_attempt() {
            Ok(v) => Report::success(v, 1),
            Err(first) => self.report_slow(first),
        }
    }

    /// Fast path: with nothing that needs the clock or a shared guardrail,
    /// the first attempt runs before any per-call state exists, so a call
    /// that succeeds costs one branch over a plain call. `Err` carries the
    /// failed first attempt, or `None` when the slow path must run it.
    #[inline(always)]
    fn first_attempt(&mut self) -> Result<T, Option<Failed<T, E>>> {
        let refused = !F::SEES_ATTEMPT && self.policy.attempt_timeout().is_some();
        if refused
            || !self.policy.is_passive()
            || !self.settings.get().is_plain()
            || self.notify.wants()
        {
            return Err(None);
        }
        let first = Attempt {
            id: 1,
            number: 1,
            timeout: self.policy.attempt_timeout(),
        };
        judge(self.op.run(&first), &mut self.when, &mut self.ok).map_err(Some)
    }

    /// The slow path for [`call`](Retry::call): only the result leaves it,
    /// small enough to come back in registers.
    #[inline(never)]
    fn call_slow(self, first: Option<Failed<T, E>>) -> Result<T, RetryError<E>> {
        self.drive(first).result
    }

    #[inline(never)]
    fn report_slow(self, first: Option<Failed<T, E>>) -> Report<T, E> {
        self.drive(first)
    }

    /// Sleeps `d`; `Err(cancelled)` when the sleeper was woken because the
    /// caller gave up.
    #[inline]
    fn wait(&mut self, d: Duration) -> Result<(), crate::outcome::StopReason> {
        self.sleep.sleep(d);
        if self.sleep.interrupted() {
            Err(crate::outcome::StopReason::Cancelled)
        } else {
            Ok(())
        }
    }

    #[inline(always)]
    fn drive(mut self, mut first: Option<Failed<T, E>>) -> Report<T, E> {
        if !F::SEES_ATTEMPT && self.policy.attempt_timeout().is_some() {
            return Report::refused(ConfigError::new(
                "attempt_timeout",
                "a blocking closure cannot be interrupted and this one cannot see its \
                 timeout: use `retry_with_attempt` and apply `Attempt::timeout`, or drop the setting",
            ));
        }
        let policy = self.policy;
        let mut call = self.settings.get().call(&self.clock);
        let mut last: Kept<T, E> = Kept::Nothing;
        if self.notify.wants() {
            call.start_clock(self.clock.now());
        }
        // The end of the last pacing wait: once slept, the engine's time is
        // at least this, whatever the clock reads.
        let mut paced_until = None;
        loop {
            let paced = match policy.pace(&mut call, NotBefore(&self.clock, paced_until)) {
                Pace::Go => Ok(()),
                Pace::Until(at, wait) => {
                    paced_until = Some(at);
                    match self.wait(wait) {
                        Ok(()) => continue,
                        cancelled => cancelled,
                    }
                }
                Pace::Stop(reason) => Err(reason),
            };
            if let Err(reason) = paced {
                return Report::finish(last.into_result(), &call, &self.clock, reason, false);
            }
            paced_until = None;
            let timeout = match policy.start_attempt(&mut call, &self.clock) {
                Ok(t) => t,
                Err(reason) => {
                    return Report::finish(last.into_result(), &call, &self.clock, reason, false)
                }
            };
            let attempt = Attempt {
                id: call.attempts(),
                number: call.attempts(),
                timeout,
            };
            let failed = match first.take() {
                Some(failed) => failed,
                None => match judge(self.op.run(&attempt), &mut self.when, &mut self.ok) {
                    Ok(v) => {
                        if policy.watches_success(&call) {
                            // A success always stops; only the guardrails
                            // need to hear of it.
                            let _ = policy.decide(&mut call, Outcome::Success, &self.clock);
                        }
                        return Report::success(v, call.attempts());
                    }
                    Err(failed) => failed,
                },
            };
            let failure;
            (last, failure) = failed;
            match policy.decide(&mut call, failure, &self.clock) {
                Decision::Retry { after } => {
                    if self.notify.wants() {
                        self.notify
                            .notify(&notice(&last, &call, failure, after, &self.clock));
                    }
                    if let Err(reason) = self.wait(after) {
                        return Report::finish(
                            last.into_result(),
                            &call,
                            &self.clock,
                            reason,
                            false,
                        );
                    }
                }
                Decision::Stop(reason) => {
                    let mut report =
                        Report::finish(last.into_result(), &call, &self.clock, reason, false);
                    // A blocking closure reports its own timeouts: say that
                    // the result was unknown, which is why it stopped.
                    if let (Err(e), Class::Unknown) = (&mut report.result, failure.class) {
                        e.set_unknown();
                    }
                    return report;
                }
            }
        }
    }
}

/// Turns one attempt's result into a value to return, or what failed and how.
#[inline]
pub(crate) fn judge<T, E, W: Classifier<E>, K: OkCheck<T>>(
    result: Result<T, E>,
    when: &mut W,
    ok: &mut K,
) -> Result<T, (Kept<T, E>, Failure)> {
    match result {
        Ok(v) => match ok.check(&v) {
            None => Ok(v),
            Some(f) => Err((Kept::Value(v), f)),
        },
        Err(e) => {
            let f = when.classify(&e);
            Err((Kept::Error(e), f))
        }
    }
}

/// What a notify hook is shown about the attempt that just failed.
pub(crate) fn notice<'a, T, E, R, C: Clock>(
    last: &'a Kept<T, E>,
    call: &Call<R>,
    failure: Failure,
    delay: Duration,
    clock: &C,
) -> Notice<'a, T, E> {
    let (error, value) = match last {
        Kept::Error(e) => (Some(e), None),
        Kept::Value(v) => (None, Some(v)),
        Kept::Nothing => (None, None),
    };
    Notice {
        attempt: call.attempts(),
        error,
        value,
        class: failure.class,
        delay,
        elapsed: call.elapsed(clock.now()),
    }
}
