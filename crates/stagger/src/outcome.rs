//! The words every part of stagger speaks, in one leaf module: how an
//! attempt ended ([`Outcome`], [`Failure`], [`Class`], [`Hint`]), what the
//! caller declared about the request ([`Idempotency`]), what the engine
//! answers ([`Decision`]) and why a call stopped ([`StopReason`],
//! [`NotRetried`]). It imports nothing from the rest of the crate, so every
//! other module can use it without a cycle. Beside it: the errors
//! (`error`), the server hints' parsers ([`hint`]) and deadline propagation
//! ([`deadline`]).

pub mod deadline;
pub(crate) mod describe;
pub(crate) mod error;
pub mod hint;

use std::fmt;
use std::time::Duration;

/// How a failure bears on retrying (see `docs/behaviour.md`, "What is worth retrying").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Class {
    /// Likely to clear: connection refused or reset, 502/503/504, 429,
    /// gRPC UNAVAILABLE. Retried with backoff.
    Transient,
    /// The result is unknown (a timeout, HTTP 408, gRPC DEADLINE_EXCEEDED):
    /// the work may have happened, so it is retried only for idempotent calls.
    Unknown,
    /// Retried only when the server sent a usable hint (gRPC
    /// RESOURCE_EXHAUSTED with pushback).
    OnlyWithHint,
    /// The request itself is wrong, or the failure is a bug: never retried.
    Permanent,
    /// The caller gave up: never retried.
    Cancelled,
}

impl Class {
    /// Whether a later attempt could turn out differently: transient,
    /// unknown and hint-only failures. The one table every rule about
    /// "worth retrying" reads.
    #[inline]
    pub(crate) const fn may_clear(self) -> bool {
        matches!(
            self,
            Class::Transient | Class::Unknown | Class::OnlyWithHint
        )
    }

    /// The lower-case name used in events, metrics and JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Class::Transient => "transient",
            Class::Unknown => "unknown",
            Class::OnlyWithHint => "only_with_hint",
            Class::Permanent => "permanent",
            Class::Cancelled => "cancelled",
        }
    }
}

/// What a server said about when to come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Hint {
    /// `Retry-After`: wait at least this long (the engine adds up to one
    /// backoff step of jitter on top).
    RetryAfter(Duration),
    /// `grpc-retry-pushback-ms`: wait exactly this long, then restart the
    /// backoff from its first step.
    Pushback(Duration),
    /// The server asked not to be retried (negative or malformed pushback).
    DoNotRetry,
    /// A hint was present but malformed: it is ignored (the backoff is used)
    /// and reported as an invalid hint.
    Invalid,
}

/// One failed attempt, as the decision engine sees it: its class, what the
/// server said, and the facts about the attempt that only the front-end
/// knows. A front-end reports facts and never decides; the engine turns
/// them into a [`Decision`].
///
/// ```
/// use stagger::{Call, Decision, Failure, Idempotency, Policy, StopReason};
/// use std::time::Instant;
///
/// let policy = Policy::default();
/// let now = Instant::now();
/// // An HTTP POST without an Idempotency-Key: never repeated once sent…
/// let mut call = Call::seeded(1).idempotency(Idempotency::NotIdempotent);
/// policy.start_attempt(&mut call, now).unwrap();
/// assert_eq!(policy.decide(&mut call, Failure::transient(), now), Decision::Stop(StopReason::NotRetryable));
/// // …but a refused connection never reached the server, so it may be retried.
/// let mut call = Call::seeded(1).idempotency(Idempotency::NotIdempotent);
/// policy.start_attempt(&mut call, now).unwrap();
/// let refused = Failure::transient().not_sent();
/// assert!(matches!(policy.decide(&mut call, refused, now), Decision::Retry { .. }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
// `repr(C)` with the hint first keeps the class and the flags in one word
// after it. Left to the compiler, the retry loop copied a `Failure` with
// overlapping loads across the flags' byte-wide stores, and the stalled
// store forwarding doubled the cost of a retry (16 ns against 8 ns per
// retry, `cargo bench -p stagger --bench core -- retries_no_sleep`).
#[repr(C)]
pub struct Failure {
    /// What the server said, if anything.
    pub hint: Option<Hint>,
    /// Its class.
    pub class: Class,
    /// The request provably never reached the server (connection refused,
    /// a failed name lookup, HTTP/2 REFUSED_STREAM, a GOAWAY for a stream the
    /// server never processed): it cannot have had an effect, so it may be
    /// retried whatever the call's idempotency.
    pub not_sent: bool,
    /// A layer below already retried this failure and gave up (HTTP
    /// `x-no-retry: 1`), so this layer passes it up instead of multiplying
    /// the attempts (the one-layer rule).
    pub gave_up_below: bool,
    /// The server's own verdict on retrying (`x-should-retry: true|false`,
    /// the header the OpenAI and Anthropic APIs send): `Some(false)` stops
    /// the call, `Some(true)` makes a failure retryable that its class
    /// alone would not retry (a 409, a 500 without `retry_500`). It never
    /// lifts idempotency, the budget, the breaker, the deadline or max
    /// attempts.
    pub should_retry: Option<bool>,
    /// A proxy answered on its own because it is shedding load (Envoy's
    /// `x-envoy-overloaded` on a 503): retrying it feeds the overload, so
    /// this layer does not.
    pub overloaded: bool,
    /// A hint header was malformed and ignored (a wait hint, or
    /// `x-should-retry`). [`Hint::Invalid`] says the same when no usable
    /// wait came instead; this fact also covers a malformed hint skipped
    /// for a later one. Counted as an invalid hint; never fails the call.
    pub invalid_hint: bool,
    /// The server throttled the request: HTTP 429, gRPC
    /// `RESOURCE_EXHAUSTED`, or a throttling error code (AWS's
    /// `x-amzn-errortype`, see
    /// [`is_throttling_error_code`](crate::guardrails::is_throttling_error_code)).
    /// A custom classifier sets it for whatever else its API throttles with.
    /// An [`AdaptiveLimiter`](crate::guardrails::AdaptiveLimiter) on the
    /// policy lowers its send rate on it.
    pub throttled: bool,
    /// The caller's own deadline ended the attempt (set by the engine, not
    /// by front-ends): the dependency is not to blame, so gRPC's throttling
    /// takes no token for it.
    pub(crate) past_deadline: bool,
}

impl Failure {
    /// A failure of `class` with no hint, sent, not marked.
    pub const fn new(class: Class) -> Self {
        Failure {
            class,
            hint: None,
            not_sent: false,
            gave_up_below: false,
            should_retry: None,
            overloaded: false,
            invalid_hint: false,
            throttled: false,
            past_deadline: false,
        }
    }

    /// Attaches a server hint.
    pub const fn with_hint(mut self, hint: Hint) -> Self {
        self.hint = Some(hint);
        self
    }

    /// States that the attempt never left the client (see
    /// [`not_sent`](Failure::not_sent)).
    pub const fn not_sent(mut self) -> Self {
        self.not_sent = true;
        self
    }

    /// States that the server throttled the request (see
    /// [`throttled`](Failure::throttled)).
    pub const fn throttled(mut self) -> Self {
        self.throttled = true;
        self
    }

    /// Whether the failure carried a malformed hint, whatever replaced it.
    #[inline]
    pub(crate) const fn has_invalid_hint(&self) -> bool {
        self.invalid_hint || matches!(self.hint, Some(Hint::Invalid))
    }

    /// Shorthand for a transient failure.
    pub const fn transient() -> Self {
        Failure::new(Class::Transient)
    }

    /// Shorthand for a permanent failure.
    pub const fn permanent() -> Self {
        Failure::new(Class::Permanent)
    }

    /// Shorthand for a timeout: result unknown.
    pub const fn timeout() -> Self {
        Failure::new(Class::Unknown)
    }

    /// Whether the dependency is to blame in a way a later attempt could
    /// clear: the one rule every failure-driven guardrail counts by —
    /// budgets, the breaker and adaptive throttling alike (a transient or
    /// unknown result, a hint-only failure, or a server's explicit "do not
    /// retry", which gRPC's throttling charges too). Other permanent errors
    /// and cancellations say nothing about the dependency's health.
    ///
    /// ```
    /// use stagger::{Class, Failure, Hint};
    /// assert!(Failure::transient().counts_against_dependency());
    /// assert!(!Failure::permanent().counts_against_dependency());
    /// assert!(Failure::permanent().with_hint(Hint::DoNotRetry).counts_against_dependency());
    /// assert!(!Failure::new(Class::Cancelled).with_hint(Hint::DoNotRetry).counts_against_dependency());
    /// ```
    #[inline]
    pub const fn counts_against_dependency(&self) -> bool {
        match self.class {
            Class::Cancelled => false,
            c => c.may_clear() || matches!(self.hint, Some(Hint::DoNotRetry)),
        }
    }
}

impl From<Class> for Failure {
    fn from(class: Class) -> Self {
        Failure::new(class)
    }
}

/// The result of one attempt, fed to [`Policy::decide`](crate::Policy::decide).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The attempt succeeded.
    Success,
    /// The attempt failed.
    Failure(Failure),
}

impl From<Failure> for Outcome {
    fn from(f: Failure) -> Self {
        Outcome::Failure(f)
    }
}

impl From<Class> for Outcome {
    fn from(c: Class) -> Self {
        Outcome::Failure(Failure::new(c))
    }
}

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

    /// The snake_case name used in errors, events, JSON and docs.
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
#[must_use = "the front-end must retry or stop as the decision says"]
pub enum Decision {
    /// Wait `after`, then start the next attempt.
    Retry {
        /// The delay to sleep.
        after: Duration,
    },
    /// Stop; the call is over.
    Stop(StopReason),
}

/// What the caller declares about repeating a request. The engine reads it
/// together with the failure's class and whether the attempt was sent.
///
/// ```
/// use stagger::{Call, Idempotency};
/// let call = Call::new().idempotency(Idempotency::Idempotent);
/// assert_eq!(Idempotency::default(), Idempotency::Unspecified);
/// # let _ = call;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Idempotency {
    /// Nothing declared (the default for closures): failures that say the
    /// work was not done (transient ones) are retried; an unknown result (a
    /// timeout) is not, since the work may have happened.
    #[default]
    Unspecified,
    /// Repeating is safe (GET, PUT, a POST with an `Idempotency-Key`, a gRPC
    /// method whose retry policy lists the status): unknown results are
    /// retried too.
    Idempotent,
    /// Repeating a request that reached the server is unsafe (an HTTP POST or
    /// PATCH without an `Idempotency-Key`): only a failure whose attempt was
    /// never sent is retried.
    NotIdempotent,
}

/// Why a failure that could have cleared was still not retried; the engine
/// records it in the call ([`Call::not_retried`](crate::Call::not_retried)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotRetried {
    /// The request body was larger than the replay limit, so it could not
    /// be sent twice.
    BodyTooLarge {
        /// The replay limit in bytes.
        limit: usize,
    },
    /// The request body is a stream of unknown length: it is sent once.
    BodyStream,
    /// A request that is not idempotent (a POST or PATCH without an
    /// `Idempotency-Key`) reached the server: repeating it could do the work
    /// twice.
    NotIdempotent,
    /// The call was made while serving an inbound retry: the one-layer rule
    /// fails fast and leaves retrying to the caller.
    ServingRetry,
    /// A layer below already retried (`x-no-retry`), or the server asked
    /// not to be retried.
    ServerSaidNo,
    /// A gRPC call whose response headers arrived: its messages are on their
    /// way to the caller, so it is committed and never sent again ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)).
    Committed,
    /// A proxy shed the request because it is overloaded (Envoy's
    /// `x-envoy-overloaded`): retrying would feed the overload.
    Overloaded,
}

impl NotRetried {
    /// A snake_case name for logs and JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            NotRetried::BodyTooLarge { .. } => "body_too_large",
            NotRetried::BodyStream => "body_stream",
            NotRetried::NotIdempotent => "not_idempotent",
            NotRetried::ServingRetry => "serving_retry",
            NotRetried::ServerSaidNo => "server_said_no",
            NotRetried::Committed => "committed",
            NotRetried::Overloaded => "overloaded",
        }
    }
}

impl fmt::Display for NotRetried {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
