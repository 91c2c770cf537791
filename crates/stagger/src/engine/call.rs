//! Per-call state: what one logical request carries from attempt to
//! attempt (attempt number, previous delay, deadline, idempotency, the
//! facts the engine is told about the call, its random stream).

use std::time::{Duration, Instant};

use crate::guardrails::guard::Ticket;
use crate::outcome::{Class, Idempotency, NotRetried};
use crate::random::{FastRng, RandomSource};

/// Per-call state, owned by the front-end: never shared between calls.
///
/// The random stream is the call's own, so two calls that fail at the same
/// instant draw independent delays.
#[derive(Debug)]
pub struct Call<R = LazyRng> {
    pub(crate) attempt: u32,
    pub(crate) backoff_origin: u32,
    pub(crate) previous_delay: Option<u64>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) started: Option<Instant>,
    pub(crate) attempt_started: Option<Instant>,
    pub(crate) idempotency: Idempotency,
    pub(crate) serving_retry: bool,
    pub(crate) committed: Option<NotRetried>,
    pub(crate) not_retried: Option<NotRetried>,
    pub(crate) ticket: Ticket,
    pub(crate) retry_in: Option<Duration>,
    pub(crate) transparent_left: u32,
    pub(crate) transparent: u32,
    /// Attempts of this call may run side by side (a hedged call): the next
    /// one after a failure goes out at once, or after the server's hint,
    /// never after a backoff.
    pub(crate) hedged: bool,
    /// The next attempt's pacing is already taken (the loop waited for it
    /// through [`Policy::pace`](crate::Policy)): admitting it takes no more.
    pub(crate) paced: bool,
    /// Which attempts started as hedges (bit `k - 1` for attempt `k`, the
    /// first 64), so the answer that wins can be told a hedge's.
    pub(crate) hedges: u64,
    /// What the engine scheduled last, kept until that attempt is sent (or
    /// the call ends): a retry is counted when it starts, not when it is
    /// scheduled, and an attempt that starts with nothing scheduled is a
    /// hedge.
    pub(crate) scheduled: Option<Scheduled>,
    pub(crate) rng: R,
}

/// The next attempt the engine scheduled, as the observers count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheduled {
    /// A retry of a failure of this class.
    Retry(Class),
    /// A transparent retry (the attempt before never left the client).
    Transparent,
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

impl From<FastRng> for LazyRng {
    /// A stream that is already seeded.
    fn from(rng: FastRng) -> Self {
        LazyRng(Some(rng))
    }
}

impl Default for Call<LazyRng> {
    fn default() -> Self {
        Self::new()
    }
}

impl Call<LazyRng> {
    /// A call with its own fresh random stream, idempotency unspecified, no
    /// deadline.
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
            idempotency: Idempotency::Unspecified,
            serving_retry: false,
            committed: None,
            not_retried: None,
            ticket: Ticket::new(),
            retry_in: None,
            transparent_left: 0,
            transparent: 0,
            hedged: false,
            paced: false,
            hedges: 0,
            scheduled: None,
            rng,
        }
    }

    /// Notes that the attempt just started (`attempt`, from 2 on) went out
    /// as a hedge, beside earlier attempts, with nothing scheduled.
    #[cold]
    pub(crate) fn mark_hedge(&mut self) {
        if self.attempt > 1 {
            self.hedges |= 1u64.checked_shl(self.attempt - 1).unwrap_or(0);
        }
    }

    /// Whether attempt `attempt` started as a hedge.
    pub(crate) fn started_as_hedge(&self, attempt: u32) -> bool {
        attempt > 1 && self.hedges & 1u64.checked_shl(attempt - 1).unwrap_or(0) != 0
    }

    /// Declares the call idempotent (`true`: [`Idempotency::Idempotent`])
    /// or leaves it undeclared (`false`: [`Idempotency::Unspecified`]):
    /// only idempotent calls are retried after a failure whose result is
    /// unknown (a timeout).
    #[inline]
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotency = if idempotent {
            Idempotency::Idempotent
        } else {
            Idempotency::Unspecified
        };
        self
    }

    /// Declares what repeating the request would do (see [`Idempotency`]).
    #[inline]
    pub const fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// States that the call is made while serving an inbound retry (the
    /// caller's request carried an attempt number above 1): the one-layer
    /// rule then fails fast and leaves retrying to the caller.
    #[inline]
    pub const fn serving_retry(mut self, serving_retry: bool) -> Self {
        self.serving_retry = serving_retry;
        self
    }

    /// Allows up to `n` transparent retries (gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)): an attempt that
    /// provably never left the client ([`Failure::not_sent`](crate::Failure::not_sent))
    /// is tried again with backoff, bounded by the deadline, without counting
    /// toward max attempts and without telling the guardrails (no budget or
    /// throttling token is spent on it). Default 0: a not-sent failure is an
    /// ordinary attempt.
    ///
    /// ```
    /// use stagger::{Call, Decision, Failure, Policy};
    /// use std::time::Instant;
    ///
    /// let policy = Policy::builder().max_attempts(1).build().unwrap();
    /// let mut call = Call::seeded(1).transparent_retries(10);
    /// let now = Instant::now();
    /// policy.start_attempt(&mut call, now).unwrap();
    /// let refused = Failure::transient().not_sent();
    /// assert!(matches!(policy.decide(&mut call, refused, now), Decision::Retry { .. }));
    /// assert_eq!(call.transparent_retries_made(), 1);
    /// ```
    #[inline]
    pub const fn transparent_retries(mut self, n: u32) -> Self {
        self.transparent_left = n;
        self
    }

    /// Transparent retries made so far (see
    /// [`transparent_retries`](Call::transparent_retries)).
    pub const fn transparent_retries_made(&self) -> u32 {
        self.transparent
    }

    /// States that the call can no longer be retried, and why (a request
    /// body too large to replay, a gRPC response whose headers arrived):
    /// later failures stop with `not_retryable` and this reason.
    #[inline]
    pub fn commit(&mut self, why: NotRetried) {
        self.committed.get_or_insert(why);
    }

    /// When a failure that could have cleared was not retried, why (the
    /// engine records it as it stops).
    pub const fn not_retried(&self) -> Option<NotRetried> {
        self.not_retried
    }

    /// The declared idempotency.
    pub(crate) const fn declared_idempotency(&self) -> Idempotency {
        self.idempotency
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
