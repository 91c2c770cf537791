//! The one attempt loop every asynchronous front-end runs, written once.
//!
//! A call is a set of attempts. Retrying is the case with one attempt in
//! flight, hedging the case with several, and the engine alone decides which
//! (see [`Plan`]): when the next attempt starts (after a backoff, after a
//! hedge delay, at once after a non-fatal failure or a transparent retry),
//! which answer ends the call and what each attempt costs the guardrails.
//! The loop starts what the engine says, polls every running attempt and its
//! time limit, reports each answer, waits until the engine's next instant,
//! and drops whatever still runs once the call is over. Nothing here depends
//! on the transport, so the async executors, the tower layer, the reqwest
//! middleware and the gRPC layer share it and keep only what is theirs: how
//! attempt k's request is built, which facts an answer carries (through
//! their protocol's one fact reader) and what the caller gets at the end.
//!
//! The success path keeps nothing it does not need: the first attempt runs
//! in place (no box, no list), the clock is read only when a rule asks for
//! the time, and the list of attempts side by side is made only when a
//! second one starts while the first still runs.
//!
//! The loop is runtime-agnostic: time comes from a [`Clock`] and waits from
//! any `FnMut(Duration) -> impl Future` (tokio's timer, or the user's
//! sleeper in the executor).

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::engine::call::{Call, LazyRng};
use crate::engine::hedge::{HedgePolicy, HedgeStep, HedgedCall};
use crate::engine::policy::{Pace, Policy};
use crate::outcome::{Decision, Failure, NotRetried, Outcome, StopReason};
use crate::time::{Clock, NotBefore};

/// One attempt, as the engine asks for it ([`Step::Send`]) and as the
/// executors hand it to a closure that asks for it
/// ([`RetryAttemptExt::retry_with_attempt`](crate::RetryAttemptExt::retry_with_attempt)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// The engine's id of the attempt, from 1 (transparent retries
    /// included): what a [`Plan`] is told its outcome by.
    pub id: u32,
    /// The attempt number it is sent as, from 1 (`x-retry-attempt`, and
    /// `grpc-previous-rpc-attempts` + 1): attempts that never left the
    /// client do not count.
    pub number: u32,
    /// How long this attempt may take: `min(attempt_timeout, time left
    /// before the deadline)`, `None` when unbounded.
    pub timeout: Option<Duration>,
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

impl End {
    /// The stop reason the caller is told: a taken answer is the call's
    /// success as far as retrying goes.
    pub(crate) fn reason(self) -> StopReason {
        match self {
            End::Stopped(r) => r,
            End::Taken => StopReason::Success,
        }
    }
}

/// What the loop hands back: how the call ended and the last answer
/// reported (the winner, after a success). Answers of cancelled attempts are
/// never kept.
#[derive(Debug)]
pub(crate) struct Finish<T> {
    pub(crate) end: End,
    pub(crate) last: Option<Answer<T>>,
}

/// One transport's part of a call.
pub(crate) trait Attempts {
    /// What an attempt resolves to.
    type Answer;
    /// A running attempt.
    type Future: Future<Output = Self::Answer>;

    /// Builds and starts `attempt`, or `None` when the request cannot be
    /// sent again (a one-shot body already spent).
    fn start(&mut self, attempt: Attempt) -> Option<Self::Future>;

    /// The facts of `attempt`'s answer.
    fn judge(&mut self, attempt: &Attempt, answer: &Answer<Self::Answer>) -> Verdict;

    /// Told after the engine judged `attempt`'s answer: what it was and what
    /// the engine said (an attempt hook's input). The default does nothing.
    fn judged(&mut self, _attempt: &Attempt, _judged: Judged<'_, Self::Answer>) {}

    /// Ready once the request body outgrew what can be replayed; the default
    /// never does.
    fn poll_overflow(&mut self, _cx: &mut Context<'_>) -> Poll<Overflow> {
        Poll::Pending
    }
}

/// An answer as the engine judged it, for [`Attempts::judged`].
pub(crate) struct Judged<'a, T> {
    pub(crate) answer: &'a Answer<T>,
    pub(crate) outcome: &'a Outcome,
    pub(crate) decision: Decision,
    /// The next attempt is a transparent retry (this one never left).
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) transparent: bool,
}

/// What a driver must do next, as the engine says ([`Plan::poll`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Start this attempt now (then ask again: a hedged call may want
    /// another at once).
    Send(Attempt),
    /// Wait for an answer or the instant `at`, whichever comes first, then
    /// tell the plan ([`Plan::slept`]) and ask again.
    WaitUntil {
        /// When to ask again.
        at: Instant,
        /// The exact wait when the engine just chose it (a retry's backoff
        /// as drawn, a pacing wait), `None` to read it off the clock.
        wait: Option<Duration>,
    },
    /// Wait for an answer.
    Wait,
    /// The call is over: drop every attempt still running.
    Stop(StopReason),
}

/// A call's engine as the loop drives it: the sans-IO protocol of
/// [`Policy`] (one attempt in flight) or of [`HedgePolicy`] (several).
pub(crate) trait Engine {
    /// What to do next; the clock is read only if a rule needs the time.
    fn poll<C: Clock>(&mut self, clock: &C) -> Step;
    /// How running attempt `id` ended; `None` if it was not running.
    fn report<C: Clock>(&mut self, id: u32, outcome: Outcome, clock: &C) -> Option<Decision>;
    /// No further attempt may be sent, for `why`.
    fn commit(&mut self, why: NotRetried);
    /// The front-end cancelled running attempt `id` on its own.
    fn withdraw(&mut self, id: u32);
    /// The caller gave up: the call stops with `cancelled` unless it
    /// already stopped, and the attempts still running give back what they
    /// hold.
    fn cancel<C: Clock>(&mut self, clock: &C);
    /// Running attempt `id`'s answer is the call's, whatever its outcome
    /// will be (a gRPC response whose headers commit the call): the call
    /// stops, every other attempt is cancelled, and `id` stays open for the
    /// front-end to report to the retry policy when it ends.
    fn take<C: Clock>(&mut self, id: u32, clock: &C);
    /// The wait until `at` is over: the sleeper says so, whatever the
    /// clock reads (a test's instant sleeper, a timer that fires a little
    /// early). The default trusts the clock.
    fn waited(&mut self, _at: Instant) {}
    /// The call's state.
    fn call(&self) -> &Call;
}

/// The engine of one call, as every driver speaks it: the sans-IO protocol
/// of a call's attempts, whether retried one at a time under a [`Policy`]
/// or hedged several at once under a [`HedgePolicy`] (chosen once, from the
/// call's facts, by [`Plan::new`]). The tower, reqwest and gRPC layers and
/// the executors all drive it; a front-end of your own drives it the same
/// way:
///
/// 1. [`poll`](Plan::poll): [`Step::Send`] an attempt, [`Step::WaitUntil`]
///    an instant (then [`slept`](Plan::slept)), [`Step::Wait`] for an
///    answer, or [`Step::Stop`];
/// 2. [`report`](Plan::report) each attempt's [`Outcome`] by its id;
/// 3. [`commit`](Plan::commit) when the request can no longer be sent
///    again, [`cancel`](Plan::cancel) when the caller gives up.
///
/// The plan reads only the clock it is given, also when it is dropped;
/// dropping a plan whose attempts still run gives back what they hold (a
/// half-open breaker's probe slot).
///
/// ```
/// use stagger::exec::{Plan, Step};
/// use stagger::time::ManualClock;
/// use stagger::{Backoff, Call, Failure, Jitter, Outcome, Policy, StopReason};
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .max_attempts(3)
///     .backoff(Backoff { base: Duration::from_millis(100), jitter: Jitter::None, ..Backoff::new() })
///     .build()?;
/// let clock = ManualClock::new();
/// let mut plan = Plan::new(&policy, None, Call::new(), &clock);
/// let mut sent = Vec::new();
/// let reason = loop {
///     match plan.poll() {
///         Step::Send(a) => {
///             sent.push(clock.elapsed());
///             // The transport's answer: the first two attempts fail.
///             let outcome = if a.number < 3 { Outcome::Failure(Failure::transient()) } else { Outcome::Success };
///             clock.advance(Duration::from_millis(10));
///             plan.report(a.id, outcome);
///         }
///         Step::WaitUntil { at, .. } => {
///             clock.advance(at - stagger::time::Clock::now(&clock));
///             plan.slept(at);
///         }
///         Step::Stop(reason) => break reason,
///         _ => unreachable!("one attempt at a time, answered at once"),
///     }
/// };
/// assert_eq!(reason, StopReason::Success);
/// assert_eq!(sent, [Duration::ZERO, Duration::from_millis(110), Duration::from_millis(320)]);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
pub struct Plan<'p>(Kind<'p>);

/// Which engine a plan runs.
enum Kind<'p> {
    Retry(Retrying<'p>),
    Hedge(Hedging<'p>),
}

impl<'p> Plan<'p> {
    /// The engine for `call`: hedged when `hedging` is set and the call can
    /// hedge ([`HedgePolicy::can_hedge`]), retried by `policy` otherwise.
    /// `clock` is the one clock it reads, also when it is dropped or
    /// cancelled (the loop is given the same one).
    pub fn new(
        policy: &'p Policy,
        hedging: Option<&'p HedgePolicy>,
        call: Call,
        clock: &'p dyn Clock,
    ) -> Self {
        match hedging {
            Some(h) if h.can_hedge(&call) => Plan(Kind::Hedge(Hedging {
                policy: h,
                call: h.call(call),
                clock,
            })),
            _ => Plan(Kind::Retry(Retrying {
                policy,
                clock,
                call,
                state: State::Ready,
                waited: Duration::ZERO,
                backoff: None,
                paced_until: None,
            })),
        }
    }

    /// What to do next. The clock is read only when a rule needs the time.
    #[inline]
    pub fn poll(&mut self) -> Step {
        let clock = self.clock();
        Engine::poll(self, &clock)
    }

    /// How attempt `id` ended: the decision (retry after how long, or stop
    /// and why), or `None` when that attempt was not running (already
    /// reported or cancelled).
    pub fn report(&mut self, id: u32, outcome: Outcome) -> Option<Decision> {
        let clock = self.clock();
        Engine::report(self, id, outcome, &clock)
    }

    /// The wait until `at` ([`Step::WaitUntil`]) is over, whatever the clock
    /// reads (a sleeper that returned a little early).
    pub fn slept(&mut self, at: Instant) {
        Engine::waited(self, at);
    }

    /// No further attempt may be sent, for `why` (the request body cannot
    /// be sent again, say); the running ones go on.
    pub fn commit(&mut self, why: NotRetried) {
        Engine::commit(self, why);
    }

    /// The caller gave up: the call stops as `cancelled` unless it already
    /// stopped, and the attempts still running give back what they hold.
    pub fn cancel(&mut self) {
        let clock = self.clock();
        Engine::cancel(self, &clock);
    }

    /// The clock the plan was given.
    fn clock(&self) -> &'p dyn Clock {
        match &self.0 {
            Kind::Retry(r) => r.clock,
            Kind::Hedge(h) => h.clock,
        }
    }

    /// Whether the call's attempts may run side by side (it hedges), so a
    /// replayed body must let any of them read on.
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn side_by_side(&self) -> bool {
        matches!(self.0, Kind::Hedge(_))
    }

    /// The call's state (attempts made, idempotency, why not retried).
    pub fn call(&self) -> &Call {
        match &self.0 {
            Kind::Retry(r) => &r.call,
            Kind::Hedge(h) => h.call.call(),
        }
    }

    /// Time waited on the engine's word between attempts.
    pub fn waited(&self) -> Duration {
        match &self.0 {
            Kind::Retry(r) => r.waited,
            Kind::Hedge(h) => h.call.waited(),
        }
    }

    /// The call's state, taken out once the call is over (the plan is left
    /// with a blank call and nothing running).
    #[cfg_attr(not(feature = "grpc"), allow(dead_code))]
    pub(crate) fn take_call(&mut self) -> Call {
        match &mut self.0 {
            Kind::Retry(r) => {
                r.state = State::Done(StopReason::Cancelled);
                std::mem::take(&mut r.call)
            }
            Kind::Hedge(h) => {
                h.policy.cancel(&mut h.call, h.clock.now());
                std::mem::take(&mut h.call.call)
            }
        }
    }
}

impl Drop for Plan<'_> {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl std::fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("hedged", &self.side_by_side())
            .field("call", self.call())
            .finish()
    }
}

impl Engine for Plan<'_> {
    fn call(&self) -> &Call {
        Plan::call(self)
    }

    fn take<C: Clock>(&mut self, id: u32, clock: &C) {
        match &mut self.0 {
            Kind::Retry(r) => {
                if r.state == State::Running && id == r.call.attempts() {
                    r.state = State::Done(StopReason::Success);
                }
            }
            Kind::Hedge(h) => {
                h.policy.withdraw(&mut h.call, id);
                h.policy.cancel(&mut h.call, clock.now());
            }
        }
    }

    #[inline]
    fn poll<C: Clock>(&mut self, clock: &C) -> Step {
        match &mut self.0 {
            Kind::Retry(r) => r.poll(clock),
            Kind::Hedge(h) => h.poll(clock),
        }
    }

    #[inline]
    fn report<C: Clock>(&mut self, id: u32, outcome: Outcome, clock: &C) -> Option<Decision> {
        match &mut self.0 {
            Kind::Retry(r) => r.report(id, outcome, clock),
            Kind::Hedge(h) => h.report(id, outcome, clock),
        }
    }

    fn commit(&mut self, why: NotRetried) {
        match &mut self.0 {
            Kind::Retry(r) => r.call.commit(why),
            Kind::Hedge(h) => h.call.commit(why),
        }
    }

    fn waited(&mut self, at: Instant) {
        // A retry's backoff is the sleeper's to keep; a hedge's delays are
        // read off the clock the hedging policy keeps its window by.
        if let Kind::Retry(r) = &mut self.0 {
            if r.state == State::Until(at) {
                r.state = State::Ready;
            }
        }
    }

    fn withdraw(&mut self, id: u32) {
        match &mut self.0 {
            Kind::Retry(r) => r.withdraw(id),
            Kind::Hedge(h) => h.policy.withdraw(&mut h.call, id),
        }
    }

    #[inline]
    fn cancel<C: Clock>(&mut self, clock: &C) {
        match &mut self.0 {
            Kind::Retry(r) => r.cancel(clock),
            Kind::Hedge(h) => {
                if h.call.in_flight() > 0 {
                    h.policy.cancel(&mut h.call, clock.now());
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The next attempt may start now.
    Ready,
    /// One attempt runs.
    Running,
    /// The next attempt may start at this instant.
    Until(Instant),
    Done(StopReason),
}

/// A retried call: [`Policy::start_attempt`] and [`Policy::decide`] as a
/// poll/report engine with one attempt in flight.
pub(crate) struct Retrying<'p> {
    policy: &'p Policy,
    clock: &'p dyn Clock,
    call: Call<LazyRng>,
    state: State,
    waited: Duration,
    /// The backoff just decided, until the loop starts waiting it.
    backoff: Option<Duration>,
    /// The end of the pacing wait the loop was last told to wait: once the
    /// sleeper says it is over, the engine's time is at least this.
    paced_until: Option<Instant>,
}

impl Retrying<'_> {
    fn poll<C: Clock>(&mut self, clock: &C) -> Step {
        match self.state {
            State::Done(r) => Step::Stop(r),
            State::Running => Step::Wait,
            State::Until(at) if clock.now() < at => Step::WaitUntil {
                at,
                wait: self.backoff.take(),
            },
            State::Ready | State::Until(_) => {
                match self
                    .policy
                    .pace(&mut self.call, NotBefore(clock, self.paced_until))
                {
                    Pace::Go => self.paced_until = None,
                    Pace::Until(at, wait) => {
                        self.paced_until = Some(at);
                        self.waited = self.waited.saturating_add(wait);
                        self.state = State::Until(at);
                        return Step::WaitUntil {
                            at,
                            wait: Some(wait),
                        };
                    }
                    Pace::Stop(r) => {
                        self.state = State::Done(r);
                        return Step::Stop(r);
                    }
                }
                match self.policy.start_attempt(&mut self.call, clock) {
                    Ok(timeout) => {
                        self.state = State::Running;
                        let id = self.call.attempts();
                        Step::Send(Attempt {
                            id,
                            number: id - self.call.transparent_retries_made(),
                            timeout,
                        })
                    }
                    Err(r) => {
                        self.state = State::Done(r);
                        Step::Stop(r)
                    }
                }
            }
        }
    }

    fn report<C: Clock>(&mut self, id: u32, outcome: Outcome, clock: &C) -> Option<Decision> {
        if self.state != State::Running || id != self.call.attempts() {
            return None;
        }
        let decision = self.policy.decide(&mut self.call, outcome, clock);
        self.state = match decision {
            Decision::Retry { after } if after.is_zero() => State::Ready,
            Decision::Retry { after } => {
                self.waited = self.waited.saturating_add(after);
                self.backoff = Some(after);
                match clock.now().checked_add(after) {
                    Some(at) => State::Until(at),
                    // Past what a clock can hold: no caller waits that long.
                    None => State::Done(StopReason::Deadline),
                }
            }
            Decision::Stop(r) => State::Done(r),
        };
        Some(decision)
    }

    fn withdraw(&mut self, id: u32) {
        if self.state == State::Running && id == self.call.attempts() {
            self.policy.abandon(&mut self.call, self.clock);
            self.state = State::Done(StopReason::NotRetryable);
        }
    }

    fn cancel<C: Clock>(&mut self, clock: &C) {
        match self.state {
            State::Done(_) => {}
            State::Running => {
                self.policy.abandon(&mut self.call, clock);
                self.state = State::Done(StopReason::Cancelled);
            }
            _ => self.state = State::Done(StopReason::Cancelled),
        }
    }
}

/// A hedged call: [`HedgePolicy::poll`] and [`HedgePolicy::report`].
pub(crate) struct Hedging<'p> {
    policy: &'p HedgePolicy,
    call: HedgedCall,
    clock: &'p dyn Clock,
}

impl Hedging<'_> {
    fn poll<C: Clock>(&mut self, clock: &C) -> Step {
        match self.policy.poll(&mut self.call, clock.now()) {
            HedgeStep::Send { attempt, timeout } => {
                let call = self.call.call();
                Step::Send(Attempt {
                    id: attempt,
                    number: call.attempts() - call.transparent_retries_made(),
                    timeout,
                })
            }
            HedgeStep::WaitUntil(at) => Step::WaitUntil { at, wait: None },
            HedgeStep::Wait => Step::Wait,
            HedgeStep::Stop(r) => Step::Stop(r),
        }
    }

    fn report<C: Clock>(&mut self, id: u32, outcome: Outcome, clock: &C) -> Option<Decision> {
        self.policy.judge(&mut self.call, id, outcome, clock.now())
    }
}

/// An attempt running beside the first one.
struct Beside<F, S> {
    attempt: Attempt,
    answer: Pin<Box<F>>,
    limit: Option<Pin<Box<S>>>,
}

/// Runs a call to its end under `engine`: attempts from `attempts`, time
/// from `clock`, waits from `sleep`. The attempts still running when it
/// returns have been dropped (cancelled).
pub(crate) async fn drive<E, A, C, S, Sl>(
    engine: &mut E,
    attempts: &mut A,
    clock: &C,
    mut sleep: S,
) -> Finish<A::Answer>
where
    E: Engine,
    A: Attempts,
    C: Clock,
    S: FnMut(Duration) -> Sl,
    Sl: Future<Output = ()>,
{
    // The oldest running attempt runs in place; attempts sent while it runs
    // go in a list, made only then.
    let mut lead = pin!(None::<A::Future>);
    let mut lead_attempt: Option<Attempt> = None;
    let mut lead_limit = pin!(None::<Sl>);
    let mut beside: Vec<Beside<A::Future, Sl>> = Vec::new();
    // The engine's next instant and the wait until it, in place.
    let mut timer = pin!(None::<Sl>);
    let mut timer_at: Option<Instant> = None;
    let mut last = None;
    let mut overflowed = false;
    let end = poll_fn(|cx| loop {
        // Checked before the engine is asked for a step and again before an
        // answer is judged: an attempt that outgrew the buffer as it was sent
        // has made the call unrepeatable by the time it answers.
        if !overflowed && overflow(engine, attempts, &mut lead_attempt, &mut beside, cx) {
            overflowed = true;
            if lead_attempt.is_none() {
                lead.set(None);
                lead_limit.set(None);
            }
        }
        match engine.poll(clock) {
            Step::Send(a) => {
                let Some(answer) = attempts.start(a) else {
                    engine.cancel(clock);
                    return Poll::Ready(End::Stopped(StopReason::NotRetryable));
                };
                if lead_attempt.is_none() && beside.is_empty() {
                    lead.set(Some(answer));
                    lead_attempt = Some(a);
                    lead_limit.set(a.timeout.map(&mut sleep));
                } else {
                    beside.push(Beside {
                        attempt: a,
                        answer: Box::pin(answer),
                        limit: a.timeout.map(|t| Box::pin(sleep(t))),
                    });
                }
                continue;
            }
            Step::Stop(r) => return Poll::Ready(End::Stopped(r)),
            Step::WaitUntil { at, wait } => {
                if timer_at != Some(at) {
                    let wait = wait.unwrap_or_else(|| at.saturating_duration_since(clock.now()));
                    timer.set(Some(sleep(wait)));
                    timer_at = Some(at);
                }
            }
            Step::Wait => {
                if timer_at.take().is_some() {
                    timer.set(None);
                }
            }
        }
        let came = poll_lead(lead.as_mut(), &mut lead_attempt, lead_limit.as_mut(), cx)
            .or_else(|| poll_beside(&mut beside, cx));
        if let Some((a, answer)) = came {
            if !overflowed && overflow(engine, attempts, &mut lead_attempt, &mut beside, cx) {
                overflowed = true;
                if lead_attempt.is_none() {
                    lead.set(None);
                    lead_limit.set(None);
                }
            }
            let taken = judge(engine, attempts, clock, &a, &answer);
            last = Some(answer);
            if taken {
                return Poll::Ready(End::Taken);
            }
            continue;
        }
        if let Some(fired) = poll_timer(timer.as_mut(), &mut timer_at, cx) {
            if let Some(at) = fired {
                engine.waited(at);
            }
            continue;
        }
        return Poll::Pending;
    })
    .await;
    Finish { end, last }
}

/// Whether the request body has just outgrown what can be replayed: if so the
/// engine is told, and every running attempt but the leader is withdrawn
/// (the lead slot's, by clearing `lead_attempt`; the caller drops it).
fn overflow<E: Engine, A: Attempts, F, S>(
    engine: &mut E,
    attempts: &mut A,
    lead_attempt: &mut Option<Attempt>,
    beside: &mut Vec<Beside<F, S>>,
    cx: &mut Context<'_>,
) -> bool {
    let Poll::Ready(o) = attempts.poll_overflow(cx) else {
        return false;
    };
    engine.commit(o.why);
    // Every attempt but the leader is cancelled at once, and its answer is
    // never the call's.
    if let Some(a) = lead_attempt.filter(|a| Some(a.id) != o.leader) {
        engine.withdraw(a.id);
        *lead_attempt = None;
    }
    beside.retain(|r| {
        let keep = Some(r.attempt.id) == o.leader;
        if !keep {
            engine.withdraw(r.attempt.id);
        }
        keep
    });
    true
}

/// Hands an attempt's answer to the engine (and what the engine said to
/// the attempts' hook): `true` when it is the one answer the call takes.
fn judge<E: Engine, A: Attempts, C: Clock>(
    engine: &mut E,
    attempts: &mut A,
    clock: &C,
    a: &Attempt,
    answer: &Answer<A::Answer>,
) -> bool {
    match attempts.judge(a, answer) {
        Verdict::Report(outcome) => {
            let transparent = engine.call().transparent_retries_made();
            if let Some(decision) = engine.report(a.id, outcome, clock) {
                let judged = Judged {
                    answer,
                    outcome: &outcome,
                    decision,
                    transparent: engine.call().transparent_retries_made() > transparent,
                };
                attempts.judged(a, judged);
            }
            false
        }
        Verdict::Take => {
            engine.take(a.id, clock);
            true
        }
    }
}

/// Polls the attempt running in place: its answer, if it has one, with the
/// slot emptied.
fn poll_lead<F: Future, S: Future<Output = ()>>(
    mut lead: Pin<&mut Option<F>>,
    lead_attempt: &mut Option<Attempt>,
    mut lead_limit: Pin<&mut Option<S>>,
    cx: &mut Context<'_>,
) -> Option<(Attempt, Answer<F::Output>)> {
    let a = (*lead_attempt)?;
    let answer = poll_one(
        lead.as_mut().as_pin_mut(),
        lead_limit.as_mut().as_pin_mut(),
        cx,
    )?;
    lead.set(None);
    *lead_attempt = None;
    lead_limit.set(None);
    Some((a, answer))
}

/// Polls the engine's timer: once it fired, `Some` of the instant it was
/// set for (taken), with the timer cleared.
fn poll_timer<S: Future<Output = ()>>(
    mut timer: Pin<&mut Option<S>>,
    timer_at: &mut Option<Instant>,
    cx: &mut Context<'_>,
) -> Option<Option<Instant>> {
    timer.as_mut().as_pin_mut()?.poll(cx).is_ready().then(|| {
        timer.set(None);
        timer_at.take()
    })
}

/// Polls one running attempt and its time limit: its answer, if it has one.
fn poll_one<F: Future, S: Future<Output = ()>>(
    answer: Option<Pin<&mut F>>,
    limit: Option<Pin<&mut S>>,
    cx: &mut Context<'_>,
) -> Option<Answer<F::Output>> {
    if let Poll::Ready(a) = answer?.poll(cx) {
        return Some(Answer::Came(a));
    }
    limit?.poll(cx).is_ready().then_some(Answer::TimedOut)
}

/// The first attempt beside the lead (in the order they were sent) that
/// answered or ran out of time, taken out of the list.
fn poll_beside<F: Future, S: Future<Output = ()>>(
    beside: &mut Vec<Beside<F, S>>,
    cx: &mut Context<'_>,
) -> Option<(Attempt, Answer<F::Output>)> {
    let (i, answer) = beside.iter_mut().enumerate().find_map(|(i, r)| {
        let limit = r.limit.as_mut().map(Pin::as_mut);
        Some((i, poll_one(Some(r.answer.as_mut()), limit, cx)?))
    })?;
    Some((beside.remove(i).attempt, answer))
}

/// The fact of an attempt that ran out of time: its result is unknown.
pub(crate) fn timed_out() -> Verdict {
    Verdict::Report(Outcome::Failure(Failure::timeout()))
}

/// The loop without a runtime: a scripted transport whose answers come at
/// virtual instants, waits that end at virtual instants, and an executor
/// that steps a `ManualClock` to the next instant anything waits for (the
/// way a sans-IO protocol's tests step a pair of endpoints).
#[cfg(all(test, not(loom)))]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::task::Waker;

    use super::*;
    use crate::engine::hedge::HedgePolicyConfig;
    use crate::outcome::Idempotency;
    use crate::time::ManualClock;
    use crate::{Backoff, HedgeDelay, Jitter};

    const MS: Duration = Duration::from_millis(1);

    /// Every instant something waits for, so the executor knows where to
    /// step next.
    type Instants = Rc<RefCell<Vec<Instant>>>;

    /// Ready once the clock reaches `at`, with `value`.
    struct At<T> {
        at: Instant,
        clock: ManualClock,
        due: Instants,
        value: Option<T>,
    }

    impl<T: Unpin> Future for At<T> {
        type Output = T;
        fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<T> {
            if self.clock.now() >= self.at {
                return Poll::Ready(self.value.take().expect("polled after its end"));
            }
            let at = self.at;
            self.due.borrow_mut().push(at);
            Poll::Pending
        }
    }

    /// Answers attempt `k` (1-based) with `script[k - 1]`: after this long,
    /// this outcome. Records when each attempt started.
    struct Script {
        script: Vec<(Duration, Outcome)>,
        clock: ManualClock,
        due: Instants,
        started: Vec<(u32, Duration)>,
        origin: Instant,
    }

    impl Attempts for Script {
        type Answer = Outcome;
        type Future = At<Outcome>;

        fn start(&mut self, attempt: Attempt) -> Option<At<Outcome>> {
            let now = self.clock.now();
            self.started.push((attempt.id, now - self.origin));
            let (after, outcome) = self.script[attempt.id as usize - 1];
            Some(At {
                at: now + after,
                clock: self.clock.clone(),
                due: self.due.clone(),
                value: Some(outcome),
            })
        }

        fn judge(&mut self, _attempt: &Attempt, answer: &Answer<Outcome>) -> Verdict {
            match answer {
                Answer::Came(o) => Verdict::Report(*o),
                Answer::TimedOut => timed_out(),
            }
        }
    }

    /// Runs `fut` to its end on `clock`: whenever it waits, the clock steps
    /// to the earliest instant anything waits for. Bounded: a loop that
    /// never ends fails the test.
    fn run<F: Future>(fut: F, clock: &ManualClock, due: &Instants) -> F::Output {
        let mut fut = pin!(fut);
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..1_000 {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                return v;
            }
            let next = due.borrow_mut().drain(..).min().expect("waits for nothing");
            clock.advance(next.saturating_duration_since(clock.now()));
        }
        panic!("the loop did not end in 1,000 steps");
    }

    fn fail() -> Outcome {
        Outcome::Failure(Failure::transient())
    }

    fn script(clock: &ManualClock, due: &Instants, s: &[(u64, Outcome)]) -> Script {
        Script {
            script: s
                .iter()
                .map(|&(ms, o)| (Duration::from_millis(ms), o))
                .collect(),
            clock: clock.clone(),
            due: due.clone(),
            started: Vec::new(),
            origin: clock.now(),
        }
    }

    fn sleeper(clock: &ManualClock, due: &Instants) -> impl FnMut(Duration) -> At<()> {
        let (clock, due) = (clock.clone(), due.clone());
        move |d| At {
            at: clock.now() + d,
            clock: clock.clone(),
            due: due.clone(),
            value: Some(()),
        }
    }

    #[test]
    fn a_retried_call_sends_after_each_backoff_and_stops_on_success() {
        let clock = ManualClock::new();
        let due = Instants::default();
        let policy = Policy::builder()
            .max_attempts(3)
            .backoff(Backoff {
                base: 100 * MS,
                jitter: Jitter::None,
                ..Backoff::new()
            })
            .build()
            .unwrap();
        let mut plan = Plan::new(&policy, None, Call::new(), &clock);
        let mut t = script(
            &clock,
            &due,
            &[(10, fail()), (10, fail()), (10, Outcome::Success)],
        );
        let finish = run(
            drive(&mut plan, &mut t, &clock, sleeper(&clock, &due)),
            &clock,
            &due,
        );
        assert_eq!(finish.end, End::Stopped(StopReason::Success));
        assert!(matches!(finish.last, Some(Answer::Came(Outcome::Success))));
        // 10 ms answers, then waits of 100 and 200 ms.
        assert_eq!(
            t.started,
            [(1, Duration::ZERO), (2, 110 * MS), (3, 320 * MS)]
        );
        assert_eq!(clock.elapsed(), 330 * MS);
        assert_eq!(plan.waited(), 300 * MS);
    }

    #[test]
    fn an_attempt_past_its_timeout_is_a_timed_out_failure() {
        let clock = ManualClock::new();
        let due = Instants::default();
        let policy = Policy::builder()
            .max_attempts(2)
            .attempt_timeout(50 * MS)
            .backoff(Backoff {
                base: 10 * MS,
                jitter: Jitter::None,
                ..Backoff::new()
            })
            .build()
            .unwrap();
        // A timed-out attempt's result is unknown: retried only when the
        // request is idempotent.
        let call = Call::new().idempotency(Idempotency::Idempotent);
        let mut plan = Plan::new(&policy, None, call, &clock);
        let mut t = script(
            &clock,
            &due,
            &[(1_000, Outcome::Success), (5, Outcome::Success)],
        );
        let finish = run(
            drive(&mut plan, &mut t, &clock, sleeper(&clock, &due)),
            &clock,
            &due,
        );
        assert_eq!(finish.end, End::Stopped(StopReason::Success));
        assert_eq!(t.started, [(1, Duration::ZERO), (2, 60 * MS)]);
        assert_eq!(clock.elapsed(), 65 * MS);
    }

    #[test]
    fn a_hedged_call_sends_its_hedge_at_the_delay_and_takes_the_first_answer() {
        let clock = ManualClock::new();
        let due = Instants::default();
        let policy = Policy::builder().max_attempts(2).build().unwrap();
        let hedging = HedgePolicy::new(HedgePolicyConfig {
            max_attempts: 2,
            delay: HedgeDelay::Fixed(50 * MS),
            max_extra_load: None,
            ..Default::default()
        })
        .unwrap();
        let call = Call::new().idempotency(Idempotency::Idempotent);
        let mut plan = Plan::new(&policy, Some(&hedging), call, &clock);
        assert!(plan.side_by_side());
        let mut t = script(
            &clock,
            &due,
            &[(200, Outcome::Success), (30, Outcome::Success)],
        );
        let finish = run(
            drive(&mut plan, &mut t, &clock, sleeper(&clock, &due)),
            &clock,
            &due,
        );
        assert_eq!(finish.end, End::Stopped(StopReason::Success));
        assert_eq!(t.started, [(1, Duration::ZERO), (2, 50 * MS)]);
        // The hedge answered at 80 ms; the first attempt was dropped.
        assert_eq!(clock.elapsed(), 80 * MS);
    }
}
