//! The loop every hedging front-end runs, written once.
//!
//! A hedged call is a handful of attempts in flight, one timer and the
//! engine: start what [`HedgePolicy::poll`] says, poll every running
//! attempt and its time limit, report each answer with
//! [`HedgePolicy::report`], wake when the next hedge is due, and drop
//! whatever still runs once the call is over. None of that depends on the
//! transport, so the executor, the tower layer, the reqwest middleware and
//! the gRPC layer share this loop and keep only what is theirs: how attempt
//! k's request is built, which facts an answer carries (through their
//! protocol's one fact reader) and what the caller gets at the end.
//!
//! The loop is runtime-agnostic: time comes from a [`Clock`] and waits from
//! any `FnMut(Duration) -> impl Future` (tokio's timer, or the user's
//! sleeper in the executor).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::{HedgePolicy, HedgeStep, HedgedCall};
use crate::clock::Clock;
use crate::outcome::{Failure, NotRetried, Outcome, StopReason};
use crate::rng::RandomSource;

/// The attempt the engine asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The engine's id of the attempt (transparent retries included).
    pub(crate) id: u32,
    /// The number the attempt is sent as (`x-retry-attempt`, and
    /// `grpc-previous-rpc-attempts` + 1): attempts that never left the
    /// client do not count.
    pub(crate) number: u32,
    /// Its time limit, `min(attempt_timeout, remaining)`, if bounded.
    pub(crate) timeout: Option<Duration>,
}

/// How one attempt ended.
#[derive(Debug)]
pub(crate) enum Answer<T> {
    /// The transport's answer (a response or an error).
    Came(T),
    /// The attempt's time limit passed first.
    TimedOut,
}

/// What the front-end reads from an answer.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The facts, for the engine to judge.
    Report(Outcome),
    /// This answer is the call's, whatever the engine would say (a gRPC
    /// response whose headers commit the call): every other attempt is
    /// cancelled.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    Take,
}

/// The request body can no longer be sent again: attempt `leader` (the one
/// furthest along, if it still runs) goes on alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow {
    pub(crate) leader: Option<u32>,
    pub(crate) why: NotRetried,
}

/// How the call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The engine stopped it.
    Stopped(StopReason),
    /// The front-end took an answer ([`Verdict::Take`]).
    Taken,
}

/// What the loop hands back: how the call ended and the last answer
/// reported (the winner, after a success). Answers of cancelled attempts are
/// never kept.
#[derive(Debug)]
pub(crate) struct Finish<T> {
    pub(crate) end: End,
    pub(crate) last: Option<Answer<T>>,
}

/// One transport's part of a hedged call.
pub(crate) trait Attempts {
    /// What an attempt resolves to.
    type Answer;
    /// A running attempt.
    type Future: Future<Output = Self::Answer>;

    /// Builds and starts `attempt`, or `None` when the request cannot be
    /// sent again (a one-shot body already spent).
    fn start(&mut self, attempt: Attempt) -> Option<Self::Future>;

    /// The facts of an answer.
    fn judge(&mut self, answer: &Answer<Self::Answer>) -> Verdict;

    /// Ready once the request body outgrew what can be replayed; the default
    /// never does.
    fn poll_overflow(&mut self, _cx: &mut Context<'_>) -> Poll<Overflow> {
        Poll::Pending
    }
}

struct Running<F, S> {
    id: u32,
    answer: Pin<Box<F>>,
    limit: Option<Pin<Box<S>>>,
}

/// Runs hedged call `h` under `policy` to its end: attempts from
/// `attempts`, time from `clock`, waits from `sleep`. The attempts still
/// running when it returns have been dropped (cancelled).
pub(crate) async fn drive<A, R, C, S, Sl>(
    policy: &HedgePolicy,
    h: &mut HedgedCall<R>,
    attempts: &mut A,
    clock: &C,
    mut sleep: S,
) -> Finish<A::Answer>
where
    A: Attempts,
    R: RandomSource,
    C: Clock,
    S: FnMut(Duration) -> Sl,
    Sl: Future<Output = ()>,
{
    let mut running: Vec<Running<A::Future, Sl>> = Vec::new();
    let mut timer: Option<(Instant, Pin<Box<Sl>>)> = None;
    let mut last = None;
    let mut overflowed = false;
    let end = poll_fn(|cx| loop {
        let now = clock.now();
        if !overflowed {
            if let Poll::Ready(o) = attempts.poll_overflow(cx) {
                overflowed = true;
                h.commit(o.why);
                // Every attempt but the leader is cancelled at once, and its
                // answer is never the call's.
                running.retain(|r| {
                    let keep = Some(r.id) == o.leader;
                    if !keep {
                        policy.withdraw(h, r.id);
                    }
                    keep
                });
            }
        }
        match policy.poll(h, now) {
            HedgeStep::Send { attempt, timeout } => {
                let call = h.call();
                let number = call.attempts() - call.transparent_retries_made();
                let a = Attempt {
                    id: attempt,
                    number,
                    timeout,
                };
                let Some(answer) = attempts.start(a) else {
                    policy.cancel(h, now);
                    return Poll::Ready(End::Stopped(StopReason::NotRetryable));
                };
                running.push(Running {
                    id: attempt,
                    answer: Box::pin(answer),
                    limit: timeout.map(|t| Box::pin(sleep(t))),
                });
                continue;
            }
            HedgeStep::Stop(r) => return Poll::Ready(End::Stopped(r)),
            HedgeStep::WaitUntil(at) => {
                if timer.as_ref().is_none_or(|(t, _)| *t != at) {
                    timer = Some((at, Box::pin(sleep(at.saturating_duration_since(now)))));
                }
            }
            HedgeStep::Wait => timer = None,
        }
        if let Some((i, answer)) = poll_running(&mut running, cx) {
            let id = running.remove(i).id;
            let now = clock.now();
            match attempts.judge(&answer) {
                Verdict::Report(outcome) => {
                    policy.report(h, id, outcome, now);
                    last = Some(answer);
                }
                Verdict::Take => {
                    policy.cancel(h, now);
                    last = Some(answer);
                    return Poll::Ready(End::Taken);
                }
            }
            continue;
        }
        if let Some((_, t)) = &mut timer {
            if t.as_mut().poll(cx).is_ready() {
                timer = None;
                continue;
            }
        }
        return Poll::Pending;
    })
    .await;
    // The attempts still running are cancelled here.
    drop(running);
    Finish { end, last }
}

/// The first running attempt (in the order they were sent) that answered
/// or ran out of time, and how.
fn poll_running<F: Future, S: Future<Output = ()>>(
    running: &mut [Running<F, S>],
    cx: &mut Context<'_>,
) -> Option<(usize, Answer<F::Output>)> {
    running.iter_mut().enumerate().find_map(|(i, r)| {
        if let Poll::Ready(a) = r.answer.as_mut().poll(cx) {
            return Some((i, Answer::Came(a)));
        }
        let limit = r.limit.as_mut()?;
        limit
            .as_mut()
            .poll(cx)
            .is_ready()
            .then_some((i, Answer::TimedOut))
    })
}

/// The fact of an attempt that ran out of time: its result is unknown.
pub(crate) fn timed_out() -> Verdict {
    Verdict::Report(Outcome::Failure(Failure::timeout()))
}
