//! The decision engine.
//!
//! A [`Policy`] answers one question: an attempt just ended like *this*, at
//! *this* time — retry after how long, or stop, and why? It never sleeps,
//! reads a socket or spawns; the front-end (an executor, a tower layer,
//! `stagger run`, the simulator) owns the I/O and the waiting and drives the
//! policy through a small protocol:
//!
//! 1. Make a [`Call`] for each logical request (its per-call state: attempt
//!    number, previous delay, deadline, idempotency, random stream).
//! 2. Before every attempt, call [`Policy::start_attempt`]. It returns the
//!    attempt's timeout (`min(attempt_timeout, remaining)`), or a
//!    [`StopReason`] when the deadline has passed or a guardrail (breaker,
//!    throttle) refuses the attempt.
//! 3. After the attempt, call [`Policy::decide`] with its [`Outcome`]. It
//!    answers [`Decision::Retry`] with the delay to wait, or
//!    [`Decision::Stop`] with the reason.
//! 4. On `Retry`, wait that long and go back to 2.
//!
//! Time comes in as any [`Clock`]: pass an `Instant` (a frozen clock) for a
//! pure call, or a clock that is read only when a rule needs the time, so the
//! success path of a call without deadline or observers never reads it.
//!
//! ```
//! use stagger::{Call, Class, Decision, Policy, StopReason};
//! use std::time::{Duration, Instant};
//!
//! let policy = Policy::default(); // 3 attempts, 100 ms ×2 up to 10 s, full jitter
//! let mut call = Call::seeded(42).idempotent(true);
//! let now = Instant::now();
//!
//! policy.start_attempt(&mut call, now).unwrap();
//! let Decision::Retry { after } = policy.decide(&mut call, Class::Transient, now) else { panic!() };
//! assert!(after < Duration::from_millis(100));
//!
//! policy.start_attempt(&mut call, now).unwrap();
//! let Decision::Retry { after } = policy.decide(&mut call, Class::Unknown, now) else { panic!() };
//! assert!(after < Duration::from_millis(200));
//!
//! policy.start_attempt(&mut call, now).unwrap();
//! assert_eq!(policy.decide(&mut call, Class::Transient, now), Decision::Stop(StopReason::AttemptsExhausted));
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::classify::{Class, Failure, Hint, Outcome};
use crate::clock::Clock;
use crate::deadline::{self, LatencyEstimate};
use crate::error::ConfigError;
use crate::event::{Event, Observer};
use crate::rng::{FastRng, RandomSource};

/// Why a call stopped. The names (see [`StopReason::as_str`]) are the same in
/// errors, events, JSON and docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The last attempt succeeded.
    Success,
    /// The failure is not worth retrying (its class, a non-idempotent call
    /// with an unknown result, or a server that asked not to be retried).
    NotRetryable,
    /// Max attempts were made.
    AttemptsExhausted,
    /// Waiting and trying again would not finish before the deadline.
    Deadline,
    /// The retry budget refused the retry.
    Budget,
    /// The circuit breaker is open.
    BreakerOpen,
    /// Adaptive throttling rejected the attempt locally.
    Throttled,
    /// The server asked for a wait longer than `max_retry_after`.
    HintTooLong,
    /// The caller cancelled the call.
    Cancelled,
}

impl StopReason {
    /// Every reason, in a fixed order.
    pub const ALL: [StopReason; 9] = [
        StopReason::Success,
        StopReason::NotRetryable,
        StopReason::AttemptsExhausted,
        StopReason::Deadline,
        StopReason::Budget,
        StopReason::BreakerOpen,
        StopReason::Throttled,
        StopReason::HintTooLong,
        StopReason::Cancelled,
    ];

    /// The snake_case name of SPEC §10.
    pub const fn as_str(&self) -> &'static str {
        match self {
            StopReason::Success => "success",
            StopReason::NotRetryable => "not_retryable",
            StopReason::AttemptsExhausted => "attempts_exhausted",
            StopReason::Deadline => "deadline",
            StopReason::Budget => "budget",
            StopReason::BreakerOpen => "breaker_open",
            StopReason::Throttled => "throttled",
            StopReason::HintTooLong => "hint_too_long",
            StopReason::Cancelled => "cancelled",
        }
    }

    pub(crate) fn index(&self) -> usize {
        *self as usize
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the front-end must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait `after`, then start the next attempt.
    Retry {
        /// The delay to sleep.
        after: Duration,
    },
    /// Stop; the call is over.
    Stop(StopReason),
}

/// A guardrail's refusal: why, and when trying again could succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// `Budget`, `BreakerOpen` or `Throttled`.
    pub reason: StopReason,
    /// When the guardrail might admit again, if it knows.
    pub retry_in: Option<Duration>,
}

/// One word of per-call state that the guardrails keep between their hooks
/// (which breaker period admitted the attempt, whether it is a half-open
/// probe, what the last retry cost the budget). It lives in the [`Call`],
/// so the shared guardrails stay free of per-call memory; the engine never
/// reads it.
///
/// ```
/// use stagger::Ticket;
/// let mut t = Ticket::default();
/// assert_eq!(t.get(), 0);
/// t.set(42);
/// assert_eq!(t.get(), 42);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// The stored word (0 for a new call).
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Replaces the stored word.
    #[inline]
    pub fn set(&mut self, word: u64) {
        self.0 = word;
    }
}

/// The seam for shared guardrails (retry budgets, circuit breakers, adaptive
/// throttling): consulted before every attempt and before every retry, and
/// told every outcome. Implementations are shared by all calls of a client,
/// so they must be `Send + Sync` and cheap. Per-call state goes in the
/// call's [`Ticket`], which every hook of the same call sees.
/// [`Guardrails`](crate::Guardrails) is the ready implementation.
pub trait Guardrail: Send + Sync {
    /// Before attempt `attempt` (1-based) starts. Refusing stops the call
    /// without running the attempt. `rng` is the call's own random stream
    /// (for probabilistic rules such as adaptive throttling).
    fn before_attempt(
        &self,
        attempt: u32,
        ticket: &mut Ticket,
        rng: &mut dyn RandomSource,
        now: Instant,
    ) -> Result<(), Refusal> {
        let _ = (attempt, ticket, rng, now);
        Ok(())
    }

    /// Before a retry of failed attempt `attempt` is scheduled with `delay`.
    /// Refusing stops the call at once, without sleeping. Never called for a
    /// first attempt.
    fn before_retry(
        &self,
        attempt: u32,
        ticket: &mut Ticket,
        failure: &Failure,
        delay: Duration,
        now: Instant,
    ) -> Result<(), Refusal> {
        let _ = (attempt, ticket, failure, delay, now);
        Ok(())
    }

    /// After attempt `attempt` ended with `outcome`, with its latency when
    /// known.
    fn record(
        &self,
        attempt: u32,
        ticket: &mut Ticket,
        outcome: &Outcome,
        latency: Option<Duration>,
        now: Instant,
    ) {
        let _ = (attempt, ticket, outcome, latency, now);
    }

    /// Attempt `attempt` was admitted but will never report an outcome (the
    /// front-end dropped it): give back whatever it holds, such as a
    /// half-open probe slot. See [`Policy::abandon`].
    fn abandon(&self, attempt: u32, ticket: &mut Ticket, now: Instant) {
        let _ = (attempt, ticket, now);
    }
}

/// Per-call state, owned by the front-end: never shared between calls.
///
/// The random stream is the call's own, so two calls that fail at the same
/// instant draw independent delays.
#[derive(Debug)]
pub struct Call<R = LazyRng> {
    attempt: u32,
    backoff_origin: u32,
    previous_delay: Option<u64>,
    deadline: Option<Instant>,
    started: Option<Instant>,
    attempt_started: Option<Instant>,
    idempotent: bool,
    ticket: Ticket,
    retry_in: Option<Duration>,
    rng: R,
}

/// A [`FastRng`] seeded from the per-thread stream on first use, so a call
/// that never fails never pays for seeding.
#[derive(Debug, Default)]
pub struct LazyRng(Option<FastRng>);

impl RandomSource for LazyRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0.get_or_insert_with(FastRng::fresh).next_u64()
    }
}

impl Default for Call<LazyRng> {
    fn default() -> Self {
        Self::new()
    }
}

impl Call<LazyRng> {
    /// A call with its own fresh random stream, not idempotent, no deadline.
    #[inline]
    pub const fn new() -> Self {
        Call::with_rng(LazyRng(None))
    }
}

impl Call<FastRng> {
    /// A call whose jitter replays exactly for the same seed.
    pub const fn seeded(seed: u64) -> Self {
        Call::with_rng(FastRng::seeded(seed))
    }
}

impl<R> Call<R> {
    /// A call drawing its jitter from `rng`.
    #[inline]
    pub const fn with_rng(rng: R) -> Self {
        Call {
            attempt: 0,
            backoff_origin: 0,
            previous_delay: None,
            deadline: None,
            started: None,
            attempt_started: None,
            idempotent: false,
            ticket: Ticket(0),
            retry_in: None,
            rng,
        }
    }

    /// Declares whether the call is idempotent: only idempotent calls are
    /// retried after a failure whose result is unknown (a timeout).
    #[inline]
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets the absolute deadline covering every attempt and wait.
    #[inline]
    pub const fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Attempts started so far.
    pub const fn attempts(&self) -> u32 {
        self.attempt
    }

    /// The call's deadline, if any.
    pub const fn get_deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// When the call started, if the engine or the front-end has read the
    /// clock for it.
    pub const fn started(&self) -> Option<Instant> {
        self.started
    }

    /// When a guardrail that stopped the call said it might admit again
    /// (an open breaker's `retry_in`), if one did.
    pub const fn retry_in(&self) -> Option<Duration> {
        self.retry_in
    }

    /// Whether the call was declared idempotent.
    pub const fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// Time since the call started, as far as the engine knows (zero if the
    /// clock was never needed).
    pub fn elapsed(&self, now: Instant) -> Duration {
        self.started
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// Marks when the call started, if nothing has yet (front-ends that read
    /// the clock before the first attempt call this; otherwise the engine
    /// marks it the first time it needs the time).
    pub fn start_clock(&mut self, now: Instant) {
        self.started.get_or_insert(now);
    }

    /// The call's random source.
    pub fn rng(&mut self) -> &mut R {
        &mut self.rng
    }
}

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
    /// SPEC §1 defaults: 3 attempts, base 100 ms, ×2, cap 10 s, full jitter,
    /// `max_retry_after` 60 s, no attempt timeout, no guardrails.
    fn default() -> Self {
        PolicyBuilder::new().build_unchecked()
    }
}

impl Policy {
    /// A builder starting from the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::new()
    }

    /// The `seed` preset (gRPC's knobs): 5 attempts, 100 ms ×2 up to 10 s,
    /// full jitter.
    pub fn seed() -> Self {
        PolicyBuilder::new().max_attempts(5).build_unchecked()
    }

    /// The `aggressive` preset of SPEC §1, the same knobs as
    /// [`seed`](Policy::seed): 5 attempts, 100 ms ×2 up to 10 s, full jitter.
    pub fn aggressive() -> Self {
        Self::seed()
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
    /// or the measured mean latency of successful attempts if larger.
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
    fn emit(&self, event: Event) {
        if let Some(o) = &self.observer {
            o.on_event(&event);
        }
    }

    /// No guardrail and no observer: nothing shared needs to see attempts
    /// start or succeed. Front-ends use it to skip work on the success path.
    #[inline]
    pub fn is_passive(&self) -> bool {
        self.guardrail.is_none() && self.observer.is_none()
    }

    /// Whether a successful attempt needs reporting through
    /// [`decide`](Policy::decide) (guardrails, observers or latency
    /// measurement are attached). Front-ends may skip `decide` on success
    /// when this is false.
    #[inline]
    pub fn watches_success<R>(&self, call: &Call<R>) -> bool {
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
            return Ok(self.attempt_timeout);
        }
        self.start_attempt_watched(call, clock.now())
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
    /// Rules, in order: the guardrails are told the outcome; a success stops
    /// with `success`; a cancelled, permanent, or (for a non-idempotent call)
    /// unknown failure, a hint-only failure without a hint, or a server
    /// asking not to be retried stops with `not_retryable`; max attempts stop
    /// with `attempts_exhausted`; the delay is the jittered backoff, or for a
    /// `Retry-After` of `h` the wait `h + U(0, b_n)`, or for a pushback exactly
    /// the pushback (after which the backoff restarts at its first step); a
    /// wait that would leave less than one typical attempt before the deadline
    /// stops with `deadline`; a hint above `max_retry_after` stops with
    /// `hint_too_long`; a guardrail may refuse the retry (`budget`,
    /// `breaker_open`). A stop never asks the front-end to sleep.
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
        if let (Some(l), Some(e), Outcome::Success) = (latency, &self.estimate, outcome) {
            e.observe(l);
        }
        if let Some(g) = &self.guardrail {
            g.record(call.attempt, &mut call.ticket, outcome, latency, now.get());
        }
    }

    /// Whether failure `f` of the call's latest attempt may be retried at
    /// all: its class, the server's say, and max attempts.
    #[inline]
    fn may_retry<R>(&self, call: &Call<R>, f: &Failure) -> Result<(), StopReason> {
        let retryable = match f.class {
            Class::Cancelled => return Err(StopReason::Cancelled),
            Class::Permanent => false,
            Class::Unknown => call.idempotent,
            Class::Transient => true,
            Class::OnlyWithHint => {
                matches!(f.hint, Some(Hint::RetryAfter(_)) | Some(Hint::Pushback(_)))
            }
        };
        if !retryable || f.hint == Some(Hint::DoNotRetry) {
            return Err(StopReason::NotRetryable);
        }
        if call.attempt >= self.max_attempts {
            return Err(StopReason::AttemptsExhausted);
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
                        after: Duration::from_nanos(self.jittered(call, retry)),
                    }
                }
            };
        }
        self.decide_failure_watched(call, f, now)
    }

    #[inline(never)]
    fn decide_failure_watched<R: RandomSource, C: Clock>(
        &self,
        call: &mut Call<R>,
        f: Failure,
        now: &mut LazyNow<C>,
    ) -> Decision {
        if self.guardrail.is_some() || call.attempt_started.is_some() {
            self.record(call, &Outcome::Failure(f), now);
        }
        if self.observer.is_some() {
            self.emit(Event::AttemptFailed {
                attempt: call.attempt,
                class: f.class,
            });
            // Counted whether or not the call goes on.
            if f.hint == Some(Hint::Invalid) {
                self.emit(Event::HintInvalid {
                    attempt: call.attempt,
                });
            }
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
            _ => (self.jittered(call, retry), None),
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
        Decision::Retry { after: delay }
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

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Builds a [`Policy`]; [`build`](PolicyBuilder::build) validates every field
/// and names the first bad one.
///
/// ```
/// use stagger::{Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::builder()
///     .max_attempts(4)
///     .base(Duration::from_millis(50))
///     .cap(Duration::from_secs(2))
///     .jitter(Jitter::Equal)
///     .attempt_timeout(Duration::from_millis(800))
///     .build()
///     .unwrap();
/// assert_eq!(policy.max_attempts(), 4);
///
/// let err = Policy::builder().max_attempts(0).build().unwrap_err();
/// assert_eq!(err.field(), "max_attempts");
/// ```
#[derive(Clone)]
pub struct PolicyBuilder {
    backoff: Backoff,
    max_attempts: u32,
    max_retry_after: Duration,
    attempt_timeout: Option<Duration>,
    typical_attempt: Duration,
    measure_latency: bool,
    guardrail: Option<Arc<dyn Guardrail>>,
    observer: Option<Arc<dyn Observer>>,
    /// Budget, breaker and throttle set through the builder's conveniences
    /// (see `guard.rs`), combined into one [`Guardrails`](crate::Guardrails)
    /// at build time.
    pub(crate) parts: crate::guard::Parts,
}

impl Default for PolicyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl PolicyBuilder {
    /// The defaults of SPEC §1.
    pub fn new() -> Self {
        PolicyBuilder {
            backoff: Backoff::new(),
            max_attempts: 3,
            max_retry_after: Duration::from_secs(60),
            attempt_timeout: None,
            typical_attempt: Duration::ZERO,
            measure_latency: true,
            guardrail: None,
            observer: None,
            parts: crate::guard::Parts::default(),
        }
    }

    /// Replaces the whole backoff schedule.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the backoff base.
    pub fn base(mut self, base: Duration) -> Self {
        self.backoff = self.backoff.base(base);
        self
    }

    /// Sets the backoff multiplier.
    pub fn multiplier(mut self, m: f64) -> Self {
        self.backoff = self.backoff.multiplier(m);
        self
    }

    /// Sets the backoff cap.
    pub fn cap(mut self, cap: Duration) -> Self {
        self.backoff = self.backoff.cap(cap);
        self
    }

    /// Sets the jitter.
    pub fn jitter(mut self, jitter: crate::Jitter) -> Self {
        self.backoff = self.backoff.jitter(jitter);
        self
    }

    /// Max attempts, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The longest server hint honoured; a longer one stops the call with
    /// `hint_too_long`. Default 60 s.
    pub fn max_retry_after(mut self, d: Duration) -> Self {
        self.max_retry_after = d;
        self
    }

    /// A timeout for each attempt (further bounded by the call's deadline).
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.attempt_timeout = Some(d);
        self
    }

    /// The floor of the typical-attempt estimate used by the deadline rule.
    pub fn typical_attempt(mut self, d: Duration) -> Self {
        self.typical_attempt = d;
        self
    }

    /// Whether to measure successful attempts of calls that have a deadline
    /// and use the mean when it exceeds the floor (default on).
    pub fn measure_latency(mut self, on: bool) -> Self {
        self.measure_latency = on;
        self
    }

    /// Attaches a custom guardrail. For stagger's own budget, breaker and
    /// throttle use [`budget`](PolicyBuilder::budget),
    /// [`breaker`](PolicyBuilder::breaker) and
    /// [`throttle`](PolicyBuilder::throttle) instead (setting both is a
    /// configuration error naming `guardrail`).
    pub fn guardrail(mut self, g: Arc<dyn Guardrail>) -> Self {
        self.guardrail = Some(g);
        self
    }

    /// Attaches an observer of every event.
    pub fn observer(mut self, o: Arc<dyn Observer>) -> Self {
        self.observer = Some(o);
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<Policy, ConfigError> {
        self.backoff.validate()?;
        if self.max_attempts == 0 {
            return Err(ConfigError::new(
                "max_attempts",
                "must be at least 1 (the first attempt counts)",
            ));
        }
        if self.attempt_timeout == Some(Duration::ZERO) {
            return Err(ConfigError::new(
                "attempt_timeout",
                "must be greater than zero",
            ));
        }
        if self.guardrail.is_some() && !self.parts.is_empty() {
            return Err(ConfigError::new(
                "guardrail",
                "a custom guardrail cannot be combined with budget/breaker/throttle",
            ));
        }
        Ok(self.build_unchecked())
    }

    pub(crate) fn build_unchecked(self) -> Policy {
        let guardrail = match self.guardrail {
            Some(g) => Some(g),
            None => self.parts.into_guardrail(self.observer.clone()),
        };
        Policy {
            backoff: self.backoff,
            max_attempts: self.max_attempts.max(1),
            max_retry_after: self.max_retry_after,
            attempt_timeout: self.attempt_timeout,
            typical_attempt: self.typical_attempt,
            estimate: self
                .measure_latency
                .then(|| Arc::new(LatencyEstimate::new())),
            guardrail,
            observer: self.observer,
        }
    }
}
