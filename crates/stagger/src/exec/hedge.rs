//! The asynchronous hedging executor: runs a closure's futures under a
//! [`HedgePolicy`], several at once.
//!
//! The closure gets the attempt number and returns that attempt's future.
//! The executor polls every running attempt and one timer, reports each
//! answer to the policy and does what [`HedgePolicy::poll`] says; when the
//! call ends, the attempts still running are dropped (cancelled). Like the
//! retry executor it is runtime-agnostic: the timer comes from any
//! [`Sleeper`] (tokio's by default with the `tokio` feature).
//!
//! ```
//! use stagger::{HedgeDelay, HedgeExt, HedgePolicy};
//! use stagger::hedging::HedgePolicyConfig;
//! use std::time::Duration;
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! # rt.block_on(async {
//! let hedging = HedgePolicy::new(HedgePolicyConfig {
//!     delay: HedgeDelay::Fixed(Duration::from_millis(20)),
//!     ..Default::default()
//! })
//!     .unwrap();
//! // Attempt 1 stalls for a second; the hedge, sent 20 ms later, answers in 5 ms.
//! let report = (|attempt: u32| async move {
//!     let took = if attempt == 1 { 1_000 } else { 5 };
//!     tokio::time::sleep(Duration::from_millis(took)).await;
//!     Ok::<_, std::io::Error>(attempt)
//! })
//! .hedge(&hedging)
//! .idempotent(true)
//! .report()
//! .await;
//! assert_eq!(report.result.unwrap(), 2);
//! assert_eq!(report.attempts, 2);
//! # });
//! ```

use std::future::Future;

use crate::engine::call::Call;
use crate::engine::drive::{drive, timed_out, Answer, Attempt, Attempts, End, Plan, Verdict};
use crate::engine::hedge::HedgePolicy;
use crate::exec::future::{DefaultSleeper, Sleeper};
use crate::exec::{AllTransient, Classifier, Report};
use crate::outcome::error::RetryError;
use crate::outcome::{Idempotency, Outcome, StopReason};
use crate::time::{Clock, MonotonicClock};

/// Adds `.hedge(&policy)` to every `FnMut(u32) -> impl Future<Output = Result<T, E>>`
/// (the argument is the attempt number, from 1).
pub trait HedgeExt<Fut>: FnMut(u32) -> Fut + Sized {
    /// Runs this closure's futures under `policy`; finish with
    /// [`Hedged::call`] or [`Hedged::report`].
    fn hedge(self, policy: &HedgePolicy) -> Hedged<'_, Self> {
        Hedged {
            op: self,
            policy,
            when: AllTransient,
            sleep: DefaultSleeper::default(),
            clock: MonotonicClock,
            idempotency: Idempotency::Unspecified,
        }
    }
}

impl<F, Fut> HedgeExt<Fut> for F
where
    F: FnMut(u32) -> Fut,
    Fut: Future,
{
}

/// A hedged call being configured; see [`HedgeExt::hedge`].
pub struct Hedged<'p, F, W = AllTransient, S = DefaultSleeper, C = MonotonicClock> {
    op: F,
    policy: &'p HedgePolicy,
    when: W,
    sleep: S,
    clock: C,
    idempotency: Idempotency,
}

impl<'p, F, W, S, C> Hedged<'p, F, W, S, C> {
    /// Classifies errors with a closure returning a
    /// [`Class`](crate::Class) or a [`Failure`](crate::Failure).
    pub fn when<W2>(self, when: W2) -> Hedged<'p, F, W2, S, C> {
        Hedged {
            op: self.op,
            policy: self.policy,
            when,
            sleep: self.sleep,
            clock: self.clock,
            idempotency: self.idempotency,
        }
    }

    /// Waits with `sleep` instead of the default sleeper.
    pub fn sleep<S2>(self, sleep: S2) -> Hedged<'p, F, W, S2, C> {
        Hedged {
            op: self.op,
            policy: self.policy,
            when: self.when,
            sleep,
            clock: self.clock,
            idempotency: self.idempotency,
        }
    }

    /// Reads time from `clock` instead of the monotonic clock.
    pub fn clock<C2>(self, clock: C2) -> Hedged<'p, F, W, S, C2> {
        Hedged {
            op: self.op,
            policy: self.policy,
            when: self.when,
            sleep: self.sleep,
            clock,
            idempotency: self.idempotency,
        }
    }

    /// Declares the call idempotent: only idempotent calls hedge (see
    /// [`Call::idempotent`]).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotency = if idempotent {
            Idempotency::Idempotent
        } else {
            Idempotency::Unspecified
        };
        self
    }
}

impl<F, Fut, T, E, W, S, C> Hedged<'_, F, W, S, C>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    W: Classifier<E>,
    C: Clock,
{
    /// Runs the call: the first success, or why it stopped.
    pub async fn call(self) -> Result<T, RetryError<E>>
    where
        S: Sleeper,
    {
        self.report().await.result
    }

    /// Runs the call and returns the full [`Report`].
    pub async fn report(mut self) -> Report<T, E>
    where
        S: Sleeper,
    {
        let policy = self.policy;
        let call = Call::new().idempotency(self.idempotency);
        let mut plan = Plan::new(policy.policy(), Some(policy), call, &self.clock);
        let mut attempts = Closure {
            op: &mut self.op,
            when: &mut self.when,
        };
        let sleep = &mut self.sleep;
        let finish = drive(&mut plan, &mut attempts, &self.clock, |d| sleep.sleep(d)).await;
        let timed_out = matches!(finish.last, Some(Answer::TimedOut));
        let result = match (finish.end, finish.last) {
            (End::Stopped(StopReason::Success), Some(Answer::Came(Ok(v)))) => Ok(v),
            (_, Some(Answer::Came(Err(e)))) => Err(Some(e)),
            _ => Err(None),
        };
        let reason = finish.end.reason();
        Report::finish(result, plan.call(), &self.clock, reason, timed_out)
    }
}

/// The closure's part of the loop: attempt k is its future, an error's facts
/// come from the classifier.
struct Closure<'a, F, W> {
    op: &'a mut F,
    when: &'a mut W,
}

impl<F, Fut, T, E, W> Attempts for Closure<'_, F, W>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    W: Classifier<E>,
{
    type Answer = Result<T, E>;
    type Future = Fut;

    fn start(&mut self, attempt: Attempt) -> Option<Fut> {
        Some((self.op)(attempt.number))
    }

    fn judge(&mut self, _: &Attempt, answer: &Answer<Result<T, E>>) -> Verdict {
        match answer {
            Answer::Came(Ok(_)) => Verdict::Report(Outcome::Success),
            Answer::Came(Err(e)) => Verdict::Report(Outcome::Failure(self.when.classify(e))),
            Answer::TimedOut => timed_out(),
        }
    }
}

#[cfg(all(test, not(loom), feature = "tokio"))]
mod tests {
    use super::*;
    use crate::engine::hedge::{HedgeDelay, HedgePolicyConfig};
    use crate::outcome::Class;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// tokio's (paused) clock, so waits and time agree.
    struct Paused;
    impl Clock for Paused {
        fn now(&self) -> Instant {
            tokio::time::Instant::now().into_std()
        }
    }

    fn fixed(k: u32, ms: u64) -> HedgePolicy {
        HedgePolicy::new(HedgePolicyConfig {
            max_attempts: k,
            delay: HedgeDelay::Fixed(Duration::from_millis(ms)),
            max_extra_load: None,
            ..Default::default()
        })
        .unwrap()
    }

    /// Each attempt takes `took[attempt - 1]` ms and answers `result`.
    async fn run(
        h: &HedgePolicy,
        idempotent: bool,
        took: &'static [u64],
        fail: &'static [bool],
    ) -> (Report<u32, &'static str>, Duration, Arc<AtomicU32>) {
        let dropped = Arc::new(AtomicU32::new(0));
        let start = tokio::time::Instant::now();
        struct Count(Arc<AtomicU32>, bool);
        impl Drop for Count {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let d = dropped.clone();
        let report = (move |attempt: u32| {
            let guard = Count(d.clone(), false);
            async move {
                let mut guard = guard;
                let i = attempt as usize - 1;
                tokio::time::sleep(Duration::from_millis(took[i])).await;
                guard.1 = true;
                if fail[i] {
                    Err("busy")
                } else {
                    Ok(attempt)
                }
            }
        })
        .hedge(h)
        .idempotent(idempotent)
        .when(|_: &&str| Class::Transient)
        .clock(Paused)
        .report()
        .await;
        (report, start.elapsed(), dropped)
    }

    #[test]
    fn the_first_success_wins_and_the_loser_is_cancelled() {
        rt().block_on(async {
            let h = fixed(2, 20);
            let (r, took, dropped) = run(&h, true, &[1_000, 5], &[false, false]).await;
            assert_eq!(r.result.unwrap(), 2);
            assert_eq!(r.attempts, 2);
            assert_eq!(took, Duration::from_millis(25));
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "attempt 1 was dropped");
        });
    }

    #[test]
    fn a_fast_answer_sends_no_hedge() {
        rt().block_on(async {
            let h = fixed(3, 20);
            let (r, took, _) = run(&h, true, &[10, 10, 10], &[false; 3]).await;
            assert_eq!((r.result.unwrap(), r.attempts), (1, 1));
            assert_eq!(took, Duration::from_millis(10));
        });
    }

    #[test]
    fn a_call_not_declared_idempotent_waits_for_its_one_attempt() {
        rt().block_on(async {
            let h = fixed(2, 20);
            let (r, took, _) = run(&h, false, &[1_000, 5], &[false, false]).await;
            assert_eq!((r.result.unwrap(), r.attempts), (1, 1));
            assert_eq!(took, Duration::from_secs(1));
        });
    }

    #[test]
    fn a_failure_sends_the_next_attempt_at_once_and_the_last_failure_stops() {
        rt().block_on(async {
            let h = fixed(3, 500);
            let (r, took, _) = run(&h, true, &[5, 7, 9], &[true; 3]).await;
            let err = r.result.unwrap_err();
            assert_eq!(err.reason(), StopReason::AttemptsExhausted);
            assert_eq!(r.attempts, 3);
            assert_eq!(
                took,
                Duration::from_millis(21),
                "5 + 7 + 9, no delay waited"
            );
        });
    }
}
