//! The decision engine.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::engine::call::{Call, Scheduled};
use crate::guardrails::event::{Event, Observer};
use crate::guardrails::guard::Guardrail;
use crate::outcome::deadline::{self, LatencyEstimate};
use crate::outcome::{
    Class, Decision, Failure, Hint, Idempotency, NotRetried, Outcome, StopReason,
};
use crate::random::RandomSource;
use crate::time::Clock;

mod builder;

pub use builder::PolicyBuilder;

/// Reads a clock at most once, and only if asked.
struct LazyNow<C> {
    clock: C,
    now: Option<Instant>,
}

impl<C: Clock> LazyNow<C> {
    #[inline]
    fn get(&mut self) -> Instant {
        match self.now {
            Some(t) => t,
            None => {
                let t = self.clock.now();
                self.now = Some(t);
                t
            }
        }
    }
}

/// The decision engine.
///
/// A [`Policy`] answers one question: an attempt just ended like *this*, at
/// *this* time — retry after how long, or stop, and why? It never sleeps,
/// reads a socket or spawns; the front-end (an executor, a tower layer,
/// `stagger run`, the simulator) owns the I/O and the waiting and drives the
/// policy through a small protocol:
///
/// 1. Make a [`Call`] for each logical request (its per-call state: attempt
///    number, previous delay, deadline, idempotency, random stream).
/// 2. Before every attempt, call [`Policy::start_attempt`]. It returns the
///    attempt's timeout (`min(attempt_timeout, remaining)`), or a
///    [`StopReason`] when the deadline has passed or a guardrail (breaker,
///    throttle) refuses the attempt.
/// 3. After the attempt, call [`Policy::decide`] with its [`Outcome`]. It
///    answers [`Decision::Retry`] with the delay to wait, or
///    [`Decision::Stop`] with the reason.
/// 4. On `Retry`, wait that long and go back to 2.
///
/// Time comes in as any [`Clock`]: pass an `Instant` (a frozen clock) for a
/// pure call, or a clock that is read only when a rule needs the time, so the
/// success path of a call without deadline or observers never reads it.
///
/// ```
/// use stagger::{Call, Class, Decision, Policy, StopReason};
/// use std::time::{Duration, Instant};
///
/// let policy = Policy::default(); // 3 attempts, 100 ms ×2 up to 10 s, full jitter
/// let mut call = Call::seeded(42).idempotent(true);
/// let now = Instant::now();
///
/// policy.start_attempt(&mut call, now).unwrap();
/// let Decision::Retry { after } = policy.decide(&mut call, Class::Transient, now) else { panic!() };
/// assert!(after < Duration::from_millis(100));
///
/// policy.start_attempt(&mut call, now).unwrap();
/// let Decision::Retry { after } = policy.decide(&mut call, Class::Unknown, now) else { panic!() };
/// assert!(after < Duration::from_millis(200));
///
/// policy.start_attempt(&mut call, now).unwrap();
/// assert_eq!(policy.decide(&mut call, Class::Transient, now), Decision::Stop(StopReason::AttemptsExhausted));
/// ```
///
/// A retry policy: the backoff schedule, the limits, and the shared
/// guardrails and observers. Cheap to clone (shared parts are `Arc`s) and
/// shared by every call of a client.
#[derive(Clone)]
pub struct Policy {
    backoff: Backoff,
    max_attempts: u32,
    max_retry_after: Duration,
    attempt_timeout: Option<Duration>,
    typical_attempt: Duration,
    estimate: Option<Arc<LatencyEstimate>>,
    guardrail: Option<Arc<dyn Guardrail>>,
    observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("backoff", &self.backoff)
            .field("max_attempts", &self.max_attempts)
            .field("max_retry_after", &self.max_retry_after)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("typical_attempt", &self.typical_attempt)
            .field("measures_latency", &self.estimate.is_some())
            .field("guardrail", &self.guardrail.is_some())
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Default for Policy {
    /// The defaults: 3 attempts, base 100 ms, ×2, cap 10 s, full jitter,
    /// `max_retry_after` 60 s, no attempt timeout, no guardrails.
    fn default() -> Self {
        PolicyBuilder::new().build_unchecked()
    }
}

/// What the engine says before an attempt a pacing guardrail may hold back
/// ([`Policy::pace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Start the attempt now.
    Go,
    /// Wait until this instant (this long from now), then ask again.
    Until(Instant, Duration),
    /// The wait would pass the deadline: the call stops.
    Stop(StopReason),
}

impl Policy {
    /// A builder starting from the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::new()
    }

    /// The backoff schedule.
    pub fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// Max attempts, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The longest server hint the policy will honour.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// The configured per-attempt timeout.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.attempt_timeout
    }

    /// The time one more attempt is expected to need: the configured floor,
    /// or the measured mean latency of finished attempts (successes,
    /// failures and attempts cut by their timeout) if larger.
    pub fn typical_attempt(&self) -> Duration {
        match &self.estimate {
            Some(e) => self.typical_attempt.max(e.get()),
            None => self.typical_attempt,
        }
    }

    /// The observer, if any (front-ends use it to emit their own events).
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.observer.as_ref()
    }

    #[inline]
    pub(crate) fn emit(&self, event: Event) {
        if let Some(o) = &self.observer {
            o.on_event(&event);
        }
    }

    /// No guardrail and no observer: nothing shared needs to see attempts
    /// start or succeed. Front-ends use it to skip work on the success path.
    #[inline]
    pub(crate) fn is_passive(&self) -> bool {
        self.guardrail.is_none() && self.observer.is_none()
    }

    /// Whether a successful attempt needs reporting through
    /// [`decide`](Policy::decide) (guardrails, observers or latency
    /// measurement are attached). Front-ends may skip `decide` on success
    /// when this is false.
    #[inline]
    pub(crate) fn watches_success<R>(&self, call: &Call<R>) -> bool {
        self.guardrail.is_some() || self.observer.is_some() || call.attempt_started.is_some()
    }

    /// Step 2 of the protocol: admits the next attempt and returns its timeout
    /// (`min(attempt_timeout, remaining)`; `None` for unbounded), or why the
    /// call must stop instead (`deadline`, `breaker_open`, `throttled`).
    #[inline]
    pub fn start_attempt<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        clock: C,
    ) -> Result<Option<Duration>, StopReason> {
        if call.deadline.is_none() && self.guardrail.is_none() && self.observer.is_none() {
            call.attempt = call.attempt.saturating_add(1);
            if call.hedged && call.scheduled.take().is_none() {
                call.mark_hedge();
            }
            return Ok(self.attempt_timeout);
        }
        self.start_attempt_watched(call, clock.now())
    }

    /// Before the next attempt is started, what a pacing guardrail asks
    /// of a driver that can wait ([`Guardrail::pace`]): go now (the pacing
    /// is taken, [`start_attempt`](Self::start_attempt) takes no more),
    /// wait until an instant and ask again, or stop because that wait
    /// would pass the deadline (`throttled`, the wait in `retry_in`).
    #[inline(always)]
    pub(crate) fn pace<R: RandomSource, C: Clock>(&self, call: &mut Call<R>, clock: C) -> Pace {
        match &self.guardrail {
            // A policy without guardrails, or pacing already taken: nothing
            // to ask (the success path reads no clock for it).
            None => Pace::Go,
            Some(_) if call.paced => Pace::Go,
            Some(g) => self.pace_slow(&**g, call, clock.now()),
        }
    }

    #[inline(never)]
    fn pace_slow<R: RandomSource>(
        &self,
        g: &dyn Guardrail,
        call: &mut Call<R>,
        now: Instant,
    ) -> Pace {
        let Some(wait) = g.pace(call.attempt.saturating_add(1), now) else {
            call.paced = true;
            return Pace::Go;
        };
        match now.checked_add(wait) {
            Some(at) if call.deadline.is_none_or(|d| at < d) => Pace::Until(at, wait),
            _ => {
                call.retry_in = Some(wait);
                Pace::Stop(self.stop(call, StopReason::Throttled))
            }
        }
    }

    fn start_attempt_watched<R: RandomSource>(
        &self,
        call: &mut Call<R>,
        now: Instant,
    ) -> Result<Option<Duration>, StopReason> {
        call.started.get_or_insert(now);
        if let Some(d) = call.deadline {
            if now >= d {
                return Err(self.stop(call, StopReason::Deadline));
            }
        }
        let next = call.attempt.saturating_add(1);
        if let Some(g) = &self.guardrail {
            // A caller of this protocol is refused what the drivers wait
            // (see `pace`), with the wait in `retry_in`.
            if !std::mem::take(&mut call.paced) {
                if let Some(wait) = g.pace(next, now) {
                    call.retry_in = Some(wait);
                    return Err(self.stop(call, StopReason::Throttled));
                }
            }
            if let Err(r) = g.before_attempt(next, &mut call.ticket, &mut call.rng, now) {
                call.retry_in = r.retry_in;
                return Err(self.stop(call, r.reason));
            }
        }
        call.attempt = next;
        if call.deadline.is_some() || self.guardrail.is_some() {
            call.attempt_started = Some(now);
        }
        self.emit(Event::AttemptStarted { attempt: next });
        // What is sent now is counted now, as what the engine scheduled.
        match call.scheduled.take() {
            Some(Scheduled::Retry(cause)) => self.emit(Event::RetryStarted {
                attempt: next,
                cause,
            }),
            Some(Scheduled::Transparent) => {
                self.emit(Event::TransparentRetryStarted { attempt: next })
            }
            // Only a hedge starts a later attempt that nothing scheduled.
            None if next > 1 && call.hedged => {
                call.mark_hedge();
                self.emit(Event::HedgeStarted { attempt: next })
            }
            None => {}
        }
        Ok(deadline::attempt_timeout(
            self.attempt_timeout,
            call.deadline,
            now,
        ))
    }

    /// Tells the guardrails that the attempt just started will never report
    /// an outcome (the front-end dropped it, for example a future cancelled
    /// mid-attempt), so they can give back what it holds at once: a
    /// half-open breaker's probe slot is freed without counting a success or
    /// a failure. Without this call a lost probe slot frees itself after the
    /// breaker's probe timeout. Does nothing when no attempt is in flight.
    ///
    /// ```
    /// use stagger::{Breaker, Call, Policy};
    /// use std::time::Instant;
    ///
    /// let policy = Policy::builder().breaker(Breaker::default()).build().unwrap();
    /// let mut call = Call::seeded(1);
    /// let now = Instant::now();
    /// policy.start_attempt(&mut call, now).unwrap();
    /// policy.abandon(&mut call, now); // the attempt was dropped
    /// ```
    pub fn abandon<R, C: Clock>(&self, call: &mut Call<R>, clock: C) {
        if let Some(g) = &self.guardrail {
            if call.attempt > 0 && call.attempt_started.take().is_some() {
                g.abandon(call.attempt, &mut call.ticket, clock.now());
            }
        }
    }

    fn stop<R>(&self, call: &Call<R>, reason: StopReason) -> StopReason {
        self.emit(Event::Stopped {
            reason,
            attempts: call.attempt,
        });
        reason
    }

    /// Step 3 of the protocol: given how the attempt ended, retry after how
    /// long, or stop and why.
    ///
    /// Rules, in order:
    /// 1. the guardrails are told the outcome; a success stops with `success`;
    /// 2. a failure of a cancelled call stops with `cancelled`; a failure at
    ///    or past the call's deadline stops with `deadline`, whatever its class;
    /// 3. from the failure's class and the facts: a permanent failure, an
    ///    unknown result (a timeout) of a call whose idempotency is
    ///    unspecified and whose attempt was sent, or a hint-only failure
    ///    without a usable hint stops with `not_retryable` — unless the
    ///    server said to retry it ([`Failure::should_retry`], which makes a
    ///    permanent or hint-only failure worth retrying but lifts none of the
    ///    rules below);
    /// 4. a proxy shedding load ([`Failure::overloaded`],
    ///    [`NotRetried::Overloaded`]), a server's "do not retry" (a pushback
    ///    or `x-should-retry: false`) or a layer below that gave up
    ///    ([`Failure::gave_up_below`]) stops with `not_retryable`
    ///    ([`NotRetried::ServerSaidNo`]); max attempts stop with
    ///    `attempts_exhausted`; a committed call ([`Call::commit`]), a
    ///    [`Idempotency::NotIdempotent`] call whose attempt was sent, or a
    ///    call serving an inbound retry ([`Call::serving_retry`]) stops with
    ///    `not_retryable`, and [`Call::not_retried`] says which;
    /// 5. the delay is the jittered backoff, or for a `Retry-After` of `h` the
    ///    wait `h + U(0, b_n)`, or for a pushback exactly the pushback (after
    ///    which the backoff restarts at its first step); a wait that would
    ///    leave less than one typical attempt before the deadline stops with
    ///    `deadline`; a hint above `max_retry_after` stops with
    ///    `hint_too_long`; a guardrail may refuse the retry (`budget`,
    ///    `breaker_open`).
    ///
    /// A stop never asks the front-end to sleep.
    #[inline]
    pub fn decide<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        outcome: impl Into<Outcome>,
        clock: C,
    ) -> Decision {
        let mut now = LazyNow { clock, now: None };
        match outcome.into() {
            Outcome::Success => {
                if self.watches_success(call) {
                    self.record(call, &Outcome::Success, &mut now);
                    self.stop(call, StopReason::Success);
                }
                Decision::Stop(StopReason::Success)
            }
            Outcome::Failure(f) => self.decide_failure(call, f, &mut now),
        }
    }

    fn record<R, C: Clock>(&self, call: &mut Call<R>, outcome: &Outcome, now: &mut LazyNow<C>) {
        let latency = call
            .attempt_started
            .take()
            .map(|s| now.get().saturating_duration_since(s));
        // Every finished attempt teaches the estimate, failures and attempts
        // cut by their timeout too: a slow failure needs as much time to try
        // again as a slow success. A caller's cancellation says nothing.
        let cancelled = matches!(outcome, Outcome::Failure(f) if f.class == Class::Cancelled);
        if let (Some(l), Some(e), false) = (latency, &self.estimate, cancelled) {
            e.observe(l);
        }
        if let Some(g) = &self.guardrail {
            g.record(call.attempt, &mut call.ticket, outcome, latency, now.get());
        }
    }

    /// Whether failure `f` of the call's latest attempt may be retried at
    /// all, from the facts alone: its class, what the server and the layers
    /// below said, the call's idempotency and commitment, the one-layer rule
    /// and max attempts. When a failure that could have cleared is held
    /// back, the call records why. This is the one place these rules live.
    #[inline]
    fn may_retry<R>(&self, call: &mut Call<R>, f: &Failure) -> Result<(), StopReason> {
        // `x-should-retry: true` turns a failure its class would not retry
        // into one worth retrying; it is a verdict on the failure, never on
        // the safety of repeating the request.
        let server_yes = f.should_retry == Some(true);
        let worth = match f.class {
            Class::Cancelled => return Err(StopReason::Cancelled),
            Class::Permanent => server_yes,
            Class::Transient => true,
            // The work may have happened: repeat it only if that is safe
            // (declared, or the attempt never left).
            Class::Unknown => call.idempotency != Idempotency::Unspecified || f.not_sent,
            Class::OnlyWithHint => {
                server_yes || matches!(f.hint, Some(Hint::RetryAfter(_)) | Some(Hint::Pushback(_)))
            }
        };
        if !worth {
            return Err(StopReason::NotRetryable);
        }
        if f.overloaded {
            return Err(held_back(call, NotRetried::Overloaded));
        }
        if f.gave_up_below || f.hint == Some(Hint::DoNotRetry) || f.should_retry == Some(false) {
            return Err(held_back(call, NotRetried::ServerSaidNo));
        }
        // Transparent retries never reached the server: they are not attempts
        // of the call's budget of attempts.
        if call.attempt.saturating_sub(call.transparent) >= self.max_attempts {
            return Err(StopReason::AttemptsExhausted);
        }
        if let Some(why) = call.committed {
            return Err(held_back(call, why));
        }
        if call.idempotency == Idempotency::NotIdempotent && !f.not_sent {
            return Err(held_back(call, NotRetried::NotIdempotent));
        }
        if call.serving_retry {
            return Err(held_back(call, NotRetried::ServingRetry));
        }
        Ok(())
    }

    #[inline]
    fn decide_failure<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        f: Failure,
        now: &mut LazyNow<C>,
    ) -> Decision {
        if f.not_sent && call.transparent_left > 0 {
            return self.decide_transparent(call, f, now);
        }
        // The common case — no hint, no deadline, nothing shared watching —
        // needs only the class, the attempt count and a jittered delay; every
        // other rule below has nothing to say about it.
        if f.hint.is_none()
            && self.is_passive()
            && call.deadline.is_none()
            && call.attempt_started.is_none()
        {
            return match self.may_retry(call, &f) {
                Err(reason) => Decision::Stop(reason),
                Ok(()) => {
                    let retry = call.attempt.saturating_sub(call.backoff_origin).max(1);
                    Decision::Retry {
                        after: Duration::from_nanos(self.backoff_of(call, retry)),
                    }
                }
            };
        }
        self.decide_failure_watched(call, f, now)
    }

    /// Tells the guardrails and the observer that an attempt failed (the
    /// failure as the guardrails count it: past the deadline or not).
    #[inline]
    fn note_failure<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        f: &Failure,
        past_deadline: bool,
        now: &mut LazyNow<C>,
    ) {
        if self.guardrail.is_some() || call.attempt_started.is_some() {
            let seen = Failure {
                past_deadline,
                ..*f
            };
            self.record(call, &Outcome::Failure(seen), now);
        }
        if self.observer.is_some() {
            self.emit(Event::AttemptFailed {
                attempt: call.attempt,
                class: f.class,
            });
            // Counted whether or not the call goes on.
            if f.has_invalid_hint() {
                self.emit(Event::HintInvalid {
                    attempt: call.attempt,
                });
            }
        }
    }

    #[inline(never)]
    fn decide_failure_watched<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        f: Failure,
        now: &mut LazyNow<C>,
    ) -> Decision {
        let past_deadline = call.deadline.is_some_and(|d| now.get() >= d);
        self.note_failure(call, &f, past_deadline, now);
        if f.class != Class::Cancelled && past_deadline {
            // The deadline ended this attempt (or arrived with it): that is
            // why the call stops, whatever the failure's class.
            return Decision::Stop(self.stop(call, StopReason::Deadline));
        }
        if let Err(reason) = self.may_retry(call, &f) {
            return Decision::Stop(self.stop(call, reason));
        }
        let retry = call.attempt.saturating_sub(call.backoff_origin).max(1);
        let (delay_ns, hint) = match f.hint {
            Some(Hint::RetryAfter(h)) => {
                let spread = self.backoff.backoff_ns(retry) as f64 * call.rng.next_f64();
                (nanos(h).saturating_add(spread as u64), Some(h))
            }
            Some(Hint::Pushback(h)) => (nanos(h), Some(h)),
            _ => (self.backoff_of(call, retry), None),
        };
        let delay = Duration::from_nanos(delay_ns);
        if let Some(deadline) = call.deadline {
            let wake = now
                .get()
                .checked_add(delay)
                .and_then(|t| t.checked_add(self.typical_attempt()));
            if wake.is_none_or(|t| t >= deadline) {
                return Decision::Stop(self.stop(call, StopReason::Deadline));
            }
        }
        if hint.is_some_and(|h| h > self.max_retry_after) {
            return Decision::Stop(self.stop(call, StopReason::HintTooLong));
        }
        if let Some(g) = &self.guardrail {
            if let Err(r) = g.before_retry(call.attempt, &mut call.ticket, &f, delay, now.get()) {
                if r.reason == StopReason::Budget {
                    self.emit(Event::BudgetRefused {
                        attempt: call.attempt,
                    });
                }
                call.retry_in = r.retry_in;
                return Decision::Stop(self.stop(call, r.reason));
            }
        }
        if let Some(Hint::Pushback(_)) = f.hint {
            // gRPC A6: after a pushback the backoff starts over.
            call.backoff_origin = call.attempt;
            call.previous_delay = None;
        }
        if self.observer.is_some() {
            if let Some(h) = f.hint.filter(|h| *h != Hint::Invalid) {
                self.emit(Event::HintUsed {
                    hint: h,
                    wait: delay,
                });
            }
            let t = now.get();
            call.started.get_or_insert(t);
            self.emit(Event::RetryScheduled {
                attempt: call.attempt,
                delay,
                cause: f.class,
                elapsed: call.elapsed(t),
            });
        }
        // Kept whether or not anyone listens: the next attempt is this
        // retry, not a hedge, in the call's own record too.
        call.scheduled = Some(Scheduled::Retry(f.class));
        Decision::Retry { after: delay }
    }

    /// A failure whose attempt never left the client, while the call still
    /// has transparent retries: retried with backoff and bounded by the
    /// deadline, but outside max attempts and unseen by the guardrails (it
    /// is neither a failure of the dependency nor a retry it receives).
    #[inline(never)]
    fn decide_transparent<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        f: Failure,
        now: &mut LazyNow<C>,
    ) -> Decision {
        if call.attempt_started.take().is_some() {
            if let Some(g) = &self.guardrail {
                g.abandon(call.attempt, &mut call.ticket, now.get());
            }
        }
        let reason = match f.class {
            Class::Cancelled => Some(StopReason::Cancelled),
            Class::Permanent => Some(StopReason::NotRetryable),
            _ => match call.committed {
                Some(why) => Some(held_back(call, why)),
                None if call.deadline.is_some_and(|d| now.get() >= d) => Some(StopReason::Deadline),
                None => None,
            },
        };
        if let Some(r) = reason {
            return Decision::Stop(self.stop(call, r));
        }
        call.transparent_left -= 1;
        call.transparent = call.transparent.saturating_add(1);
        let retry = call.attempt.saturating_sub(call.backoff_origin).max(1);
        let delay = Duration::from_nanos(self.backoff_of(call, retry));
        if let Some(deadline) = call.deadline {
            let wake = now
                .get()
                .checked_add(delay)
                .and_then(|t| t.checked_add(self.typical_attempt()));
            if wake.is_none_or(|t| t >= deadline) {
                return Decision::Stop(self.stop(call, StopReason::Deadline));
            }
        }
        call.scheduled = Some(Scheduled::Transparent);
        Decision::Retry { after: delay }
    }

    /// The wait before the next attempt when the server gave no hint: the
    /// jittered backoff, or none for a hedged call, whose next attempt goes
    /// out at once (its other attempts are the spacing).
    #[inline]
    fn backoff_of<R: RandomSource>(&self, call: &mut Call<R>, retry: u32) -> u64 {
        if call.hedged {
            return 0;
        }
        self.jittered(call, retry)
    }

    #[inline]
    fn jittered<R: RandomSource>(&self, call: &mut Call<R>, retry: u32) -> u64 {
        let d = self
            .backoff
            .delay_ns(retry, call.previous_delay, &mut call.rng);
        call.previous_delay = Some(d);
        d
    }
}

/// Records why a failure that could have cleared was not retried.
fn held_back<R>(call: &mut Call<R>, why: NotRetried) -> StopReason {
    call.not_retried = Some(why);
    StopReason::NotRetryable
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
