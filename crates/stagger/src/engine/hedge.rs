//! Hedged requests: cut the tail without starting a storm.
//!
//! A retry waits for a failure; a *hedge* does not. When an idempotent call
//! has not answered after a short delay, a second attempt goes out while the
//! first is still running, and whichever answers first wins. Most of a slow
//! tail is one unlucky attempt (a stall, a GC pause, a slow disk), so a
//! hedge sent at the client's 95th percentile cuts the 99.9th percentile for
//! a few percent more requests.
//!
//! Hedging is also a retry storm waiting to happen: near saturation every
//! answer is slow, every call hedges, and the hedges make every answer
//! slower. So a [`HedgePolicy`] caps the extra load with a budget (hedges at
//! most `max_extra_load`, default 5 %, of the requests in a sliding window),
//! which can be the very budget the retry policy spends, so hedges and
//! retries together stay under one cap.
//!
//! The rules (see `docs/behaviour.md`, "Hedging"):
//! - only [`Idempotency::Idempotent`] calls hedge; others make one attempt at
//!   a time, as the retry policy says;
//! - attempt k+1 goes out `delay` after attempt k while none has answered;
//!   `delay` is fixed or a percentile of this client's recent successful
//!   latencies ([`HedgeDelay`]), with a minimum sample count before any
//!   hedge and a floor;
//! - a non-fatal failure (one the retry policy would retry) sends the next
//!   attempt at once (or after the server's hint); a fatal one ends the
//!   call; the first success ends the call; the front-end then cancels every
//!   attempt still running;
//! - every attempt is admitted by the retry [`Policy`] (deadline, breaker,
//!   throttle) and its outcome told to it, so guardrails and observers see
//!   hedges like any attempt.
//!
//! Like [`Policy`], a [`HedgePolicy`] is sans-IO: a front-end drives a
//! [`HedgedCall`] with [`HedgePolicy::poll`] and [`HedgePolicy::report`]
//! and owns the sending, the timers and the cancelling.
//!
//! ```
//! use stagger::{Call, HedgeDelay, HedgePolicy, StopReason};
//! use stagger::hedging::HedgePolicyConfig;
//! use stagger::hedging::HedgeStep;
//! use std::time::{Duration, Instant};
//!
//! let hedging = HedgePolicy::new(HedgePolicyConfig {
//!     max_attempts: 2,
//!     delay: HedgeDelay::Fixed(Duration::from_millis(20)),
//!     ..Default::default()
//! })?;
//! let t0 = Instant::now();
//! let mut call = hedging.call(Call::seeded(7).idempotent(true));
//!
//! // Attempt 1 goes out at once; the hedge is due 20 ms later.
//! assert!(matches!(hedging.poll(&mut call, t0), HedgeStep::Send { attempt: 1, .. }));
//! assert_eq!(hedging.poll(&mut call, t0), HedgeStep::WaitUntil(t0 + Duration::from_millis(20)));
//! // No answer by then: attempt 2 goes out while 1 is still running.
//! let t20 = t0 + Duration::from_millis(20);
//! assert!(matches!(hedging.poll(&mut call, t20), HedgeStep::Send { attempt: 2, .. }));
//! // Attempt 2 answers first: the call is over, attempt 1 is cancelled.
//! hedging.report(&mut call, 2, stagger::Outcome::Success, t20 + Duration::from_millis(8));
//! assert_eq!(hedging.poll(&mut call, t20), HedgeStep::Stop(StopReason::Success));
//! assert_eq!(call.winner(), Some(2));
//! # Ok::<(), stagger::ConfigError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::engine::call::{Call, LazyRng};
use crate::engine::latency::LatencyWindow;
use crate::engine::policy::Policy;
use crate::guardrails::budget::{Budget, RatioBudget, RatioBudgetConfig};
use crate::outcome::error::ConfigError;
use crate::outcome::{Decision, Failure, Idempotency, NotRetried, Outcome, StopReason};
use crate::random::RandomSource;

/// The most attempts one hedged call may make (gRPC allows 5).
pub const MAX_HEDGE_ATTEMPTS: u32 = 8;

/// Attempts one hedged call can have sent: its counted attempts plus the
/// transparent retries of attempts that never left the client.
const SLOTS: usize = (MAX_HEDGE_ATTEMPTS + crate::backoff::a6::MAX_TRANSPARENT_RETRIES) as usize;

/// When each running attempt of a hedged call went out, kept small (a call
/// carries it in place): microseconds after the call's first attempt, plus
/// one, with 0 for a slot whose attempt is not running.
#[derive(Debug, Clone, Copy)]
struct SentTimes {
    base: Option<Instant>,
    at: [u32; SLOTS],
}

impl SentTimes {
    const fn new() -> Self {
        SentTimes {
            base: None,
            at: [0; SLOTS],
        }
    }

    fn set(&mut self, slot: usize, now: Instant) {
        let base = *self.base.get_or_insert(now);
        let us = now.saturating_duration_since(base).as_micros();
        if let Some(s) = self.at.get_mut(slot) {
            *s = u32::try_from(us).unwrap_or(u32::MAX - 1).min(u32::MAX - 1) + 1;
        }
    }

    fn get(&self, slot: usize) -> Option<Instant> {
        let v = *self.at.get(slot)?;
        let base = self.base?;
        (v != 0).then(|| base + Duration::from_micros(u64::from(v - 1)))
    }

    fn take(&mut self, slot: usize) -> Option<Instant> {
        let t = self.get(slot);
        if let Some(s) = self.at.get_mut(slot) {
            *s = 0;
        }
        t
    }

    /// The send time of the first running attempt, in the order sent.
    fn first(&self) -> Option<Instant> {
        (0..SLOTS).find_map(|i| self.get(i))
    }
}

/// When the next hedge goes out after the previous attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HedgeDelay {
    /// A fixed delay.
    Fixed(Duration),
    /// A percentile (in `(0, 100]`, for example `95.0`) of this client's
    /// successful attempts' latencies over the window, never below the
    /// floor; no hedge until the window holds the minimum sample count.
    Percentile(f64),
}

impl Default for HedgeDelay {
    /// The 95th percentile.
    fn default() -> Self {
        HedgeDelay::Percentile(95.0)
    }
}

impl fmt::Display for HedgeDelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HedgeDelay::Fixed(d) => write!(f, "{}ms", d.as_secs_f64() * 1e3),
            HedgeDelay::Percentile(p) => write!(f, "p{p}"),
        }
    }
}

/// A hedging policy: how many attempts, when each hedge goes out, and how
/// much extra load hedges may add. Cheap to clone; clones share the latency
/// window and the budget, so build one per client (per dependency) and
/// share it by every call.
#[derive(Clone)]
pub struct HedgePolicy {
    policy: Policy,
    max_attempts: u32,
    delay: HedgeDelay,
    permille: u32,
    min_samples: u64,
    floor: Duration,
    window: Arc<LatencyWindow>,
    budget: Option<Arc<dyn Budget>>,
    counts_requests: bool,
}

impl fmt::Debug for HedgePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgePolicy")
            .field("max_attempts", &self.max_attempts)
            .field("delay", &self.delay)
            .field("min_samples", &self.min_samples)
            .field("floor", &self.floor)
            .field("budget", &self.budget)
            .field("policy", &self.policy)
            .finish()
    }
}

/// The settings of a [`HedgePolicy`], checked by [`HedgePolicy::new`],
/// which names the first bad field. [`Default`] gives 2 attempts, the 95th
/// percentile over 10 s with at least 20 samples and a floor of 1 ms, extra
/// load at most 5 %.
///
/// ```
/// use stagger::guardrails::budget::{RatioBudget, RatioBudgetConfig};
/// use stagger::hedging::HedgePolicyConfig;
/// use stagger::{HedgeDelay, HedgePolicy, Policy};
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// // Hedges and retries share one 10 % budget (Finagle's rule): the retry
/// // policy counts the requests, both spend from it.
/// let shared = RatioBudget::new(RatioBudgetConfig { ratio: 0.1, ..Default::default() })?;
/// let retries = Policy::builder().max_attempts(3).budget(shared.clone()).build()?;
/// let hedging = HedgePolicy::new(HedgePolicyConfig {
///     max_attempts: 3,
///     delay: HedgeDelay::Percentile(99.0),
///     min_samples: 50,
///     floor: Duration::from_millis(2),
///     shared_budget: Some(Arc::new(shared)),
///     policy: Some(retries),
///     ..Default::default()
/// })?;
/// assert_eq!(hedging.max_attempts(), 3);
///
/// let bad = HedgePolicyConfig { max_extra_load: Some(-0.5), ..Default::default() };
/// assert_eq!(HedgePolicy::new(bad).unwrap_err().field(), "max_extra_load");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct HedgePolicyConfig {
    /// Attempts per call, the first included (`1..=8`; 1 never hedges).
    pub max_attempts: u32,
    /// When each hedge goes out.
    pub delay: HedgeDelay,
    /// Successful latencies the window must hold before an adaptive delay
    /// sends any hedge (default 20).
    pub min_samples: u32,
    /// The shortest adaptive delay (default 1 ms).
    pub floor: Duration,
    /// The sliding window of latencies and of the own budget (1 s to 1 hour,
    /// default 10 s).
    pub window: Duration,
    /// Hedges may be at most this share of the requests in the window (plus
    /// one per window, so a quiet client can hedge); `[0, 10]`, default
    /// 0.05. `None`, with no [`shared_budget`](Self::shared_budget), puts no
    /// cap on extra load (as tower's `hedge`): every slow call hedges.
    pub max_extra_load: Option<f64>,
    /// Hedges spend from this budget instead of their own, the budget the
    /// retry [`policy`](Self::policy) also holds: the policy counts the
    /// requests, and hedges and retries share one cap. When set,
    /// [`max_extra_load`](Self::max_extra_load) is not used.
    pub shared_budget: Option<Arc<dyn Budget>>,
    /// The retry policy that admits every attempt and judges every failure
    /// (fatal or not), with its deadline, guardrails and observers. `None`:
    /// the default policy with `max_attempts` set to this one's. Both
    /// attempt limits apply.
    pub policy: Option<Policy>,
}

impl fmt::Debug for HedgePolicyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HedgePolicyConfig")
            .field("max_attempts", &self.max_attempts)
            .field("delay", &self.delay)
            .field("min_samples", &self.min_samples)
            .field("floor", &self.floor)
            .field("window", &self.window)
            .field("max_extra_load", &self.max_extra_load)
            .field("shared_budget", &self.shared_budget)
            .field("policy", &self.policy)
            .finish()
    }
}

impl Default for HedgePolicyConfig {
    fn default() -> Self {
        HedgePolicyConfig {
            max_attempts: 2,
            delay: HedgeDelay::default(),
            min_samples: 20,
            floor: Duration::from_millis(1),
            window: Duration::from_secs(10),
            max_extra_load: Some(0.05),
            shared_budget: None,
            policy: None,
        }
    }
}

impl HedgePolicyConfig {
    fn build(self) -> Result<HedgePolicy, ConfigError> {
        if self.max_attempts == 0 || self.max_attempts > MAX_HEDGE_ATTEMPTS {
            return Err(ConfigError::new(
                "max_attempts",
                format!(
                    "must be between 1 and {MAX_HEDGE_ATTEMPTS}, got {}",
                    self.max_attempts
                ),
            ));
        }
        let permille = match self.delay {
            HedgeDelay::Fixed(_) => 0,
            HedgeDelay::Percentile(p) => {
                if !(p.is_finite() && p > 0.0 && p <= 100.0) {
                    return Err(ConfigError::new(
                        "delay",
                        format!("a percentile must be in (0, 100], got {p}"),
                    ));
                }
                ((p * 10.0).round() as u32).max(1)
            }
        };
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(3600) {
            return Err(ConfigError::new("window", "must be between 1 s and 1 hour"));
        }
        let (budget, counts_requests): (Option<Arc<dyn Budget>>, bool) =
            match (self.shared_budget, self.max_extra_load) {
                (Some(b), _) => (Some(b), false),
                (None, Some(share)) => {
                    if !(share.is_finite() && (0.0..=10.0).contains(&share)) {
                        return Err(ConfigError::new(
                            "max_extra_load",
                            format!("must be between 0 and 10, got {share}"),
                        ));
                    }
                    let b = RatioBudget::new(RatioBudgetConfig {
                        ratio: share,
                        floor: 1,
                        floor_per_request: Some(0.0),
                        window: self.window,
                    })?;
                    (Some(Arc::new(b)), true)
                }
                (None, None) => (None, false),
            };
        let policy = match self.policy {
            Some(p) => p,
            None => Policy::builder()
                .max_attempts(self.max_attempts)
                .backoff(Backoff {
                    base: Duration::ZERO,
                    ..Backoff::new()
                })
                .build()?,
        };
        Ok(HedgePolicy {
            policy,
            max_attempts: self.max_attempts,
            delay: self.delay,
            permille,
            min_samples: u64::from(self.min_samples),
            floor: self.floor,
            window: Arc::new(LatencyWindow::new(self.window)),
            budget,
            counts_requests,
        })
    }
}

/// What the front-end of a hedged call must do next; see [`HedgePolicy::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a hedged call does nothing until the front-end does what the step says"]
pub enum HedgeStep {
    /// Send attempt `attempt` now (with its attempt headers), bounded by
    /// `timeout` when there is one; then poll again.
    Send {
        /// The attempt's number, from 1.
        attempt: u32,
        /// `min(attempt_timeout, remaining)`, if bounded.
        timeout: Option<Duration>,
    },
    /// Wait for an answer or for this instant, whichever comes first, then
    /// poll again.
    WaitUntil(Instant),
    /// Wait for an answer (no hedge is due), then poll again.
    Wait,
    /// The call is over: cancel every attempt still running.
    Stop(StopReason),
}

/// The per-call state of a hedged call, owned by the front-end: the
/// [`Call`] plus when each attempt went out and which are still running.
#[derive(Debug)]
pub struct HedgedCall<R = LazyRng> {
    pub(crate) call: Call<R>,
    sent: SentTimes,
    in_flight: u32,
    next_at: Option<Instant>,
    /// The next attempt answers a non-fatal failure (the retry policy has
    /// admitted it), not a timer: the hedge budget is not asked.
    follow_up: bool,
    no_more: bool,
    done: Option<StopReason>,
    last_stop: Option<StopReason>,
    winner: Option<u32>,
    hedges: u32,
    waited: Duration,
}

impl<R> HedgedCall<R> {
    /// The underlying call (attempts started, idempotency, deadline).
    pub fn call(&self) -> &Call<R> {
        &self.call
    }

    /// Attempts still running.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The attempt whose success ended the call, if one did.
    pub fn winner(&self) -> Option<u32> {
        self.winner
    }

    /// Attempts sent because a delay passed (not the first, not follow-ups
    /// to a failure).
    pub fn hedges(&self) -> u32 {
        self.hedges
    }

    /// Time the call waited on the engine's word before follow-up attempts
    /// (a server's `Retry-After` or pushback, or a backoff for a call that
    /// cannot hedge); the delays between timed hedges are not waits.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// No further attempt may be sent (the request cannot be repeated, for
    /// `why`): the call ends with the attempts already running.
    pub fn commit(&mut self, why: NotRetried) {
        self.call.commit(why);
        self.no_more = true;
        self.next_at = None;
        self.last_stop.get_or_insert(StopReason::NotRetryable);
    }

    /// Attempts that count toward max attempts (and the attempt headers):
    /// those sent, less the transparent retries of attempts that never left
    /// the client.
    fn counted(&self) -> u32 {
        self.call
            .attempts()
            .saturating_sub(self.call.transparent_retries_made())
    }

    /// Whether attempt `attempt` was sent and has not reported.
    pub fn is_running(&self, attempt: u32) -> bool {
        attempt >= 1 && self.sent.get(attempt as usize - 1).is_some()
    }
}

impl HedgePolicy {
    /// Validates `config` and builds the policy; the error names the first
    /// bad field (see [`HedgePolicyConfig`] for an example).
    pub fn new(config: HedgePolicyConfig) -> Result<Self, ConfigError> {
        config.build()
    }

    /// Attempts per call, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The retry policy every attempt goes through.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Whether `call` can ever send a timed hedge under this policy: it is
    /// [`Idempotency::Idempotent`], not made while serving an inbound retry
    /// (the one-layer rule makes one attempt at a time), and the policy
    /// allows more than one attempt. A call that cannot hedge is a plain
    /// retried call: its follow-ups wait the retry policy's backoff.
    pub fn can_hedge<R>(&self, call: &Call<R>) -> bool {
        call.declared_idempotency() == Idempotency::Idempotent
            && !call.serving_retry
            && self.max_attempts > 1
    }

    /// Starts a hedged call. Only a call that [can hedge](Self::can_hedge)
    /// sends its follow-up attempts at once after a non-fatal failure (its
    /// other attempts are the spacing); any other waits the backoff.
    pub fn call<R>(&self, mut call: Call<R>) -> HedgedCall<R> {
        call.hedged = self.can_hedge(&call);
        HedgedCall {
            call,
            sent: SentTimes::new(),
            in_flight: 0,
            next_at: None,
            follow_up: false,
            no_more: false,
            done: None,
            last_stop: None,
            winner: None,
            hedges: 0,
            waited: Duration::ZERO,
        }
    }

    /// The delay a hedge would wait at `now`: the fixed delay, or the
    /// percentile of the window (at least the floor), or `None` while the
    /// window holds fewer than the minimum sample count.
    pub(crate) fn current_delay(&self, now: Instant) -> Option<Duration> {
        match self.delay {
            HedgeDelay::Fixed(d) => Some(d),
            HedgeDelay::Percentile(_) => self
                .window
                .percentile(self.permille, self.min_samples, now)
                .map(|d| d.max(self.floor)),
        }
    }

    /// Records a successful latency in the window without a call (a
    /// simulator or a front-end that measures elsewhere).
    pub fn observe(&self, latency: Duration, now: Instant) {
        self.window.observe(latency, now);
    }

    /// What the front-end must do next, at `now`.
    ///
    /// The first poll sends attempt 1. While attempts run, a timed hedge is
    /// sent when its delay has passed, the call is idempotent, attempts are
    /// left and the budget grants it; a refused hedge is not asked again in
    /// this call. After a non-fatal failure the next attempt is sent at once
    /// (or once the server's hint has passed). The call stops with the first
    /// success, a fatal failure, or the last attempt's failure.
    pub fn poll<R: RandomSource>(&self, h: &mut HedgedCall<R>, now: Instant) -> HedgeStep {
        if let Some(r) = h.done {
            return HedgeStep::Stop(r);
        }
        if h.call.attempts() == 0 {
            if self.counts_requests {
                if let Some(b) = &self.budget {
                    b.on_request(now);
                }
            }
            return self.send(h, now);
        }
        if let Some(at) = h.next_at {
            if at <= now && !h.no_more {
                h.next_at = None;
                if h.counted() >= self.max_attempts || h.call.attempts() as usize >= SLOTS {
                    h.no_more = true;
                } else if h.follow_up {
                    h.follow_up = false;
                    return self.send(h, now);
                } else if self.grant_hedge(now) {
                    h.hedges += 1;
                    return self.send(h, now);
                } else {
                    h.no_more = true;
                }
            }
        }
        if h.in_flight == 0 && (h.no_more || h.next_at.is_none()) {
            // Nothing running and nothing due: the call is over.
            let r = h.last_stop.unwrap_or(StopReason::AttemptsExhausted);
            h.done = Some(r);
            return HedgeStep::Stop(r);
        }
        match h.next_at {
            Some(at) if !h.no_more => HedgeStep::WaitUntil(at),
            _ => HedgeStep::Wait,
        }
    }

    fn grant_hedge(&self, now: Instant) -> bool {
        match &self.budget {
            None => true,
            Some(b) => b.try_withdraw(&Failure::transient(), now).is_some(),
        }
    }

    fn send<R: RandomSource>(&self, h: &mut HedgedCall<R>, now: Instant) -> HedgeStep {
        match self.policy.start_attempt(&mut h.call, now) {
            Ok(timeout) => {
                let attempt = h.call.attempts();
                h.sent.set(attempt as usize - 1, now);
                h.in_flight += 1;
                h.next_at = None;
                // Serving an inbound retry, a call makes one attempt at a
                // time (the one-layer rule): no timed hedge.
                if h.call.declared_idempotency() == Idempotency::Idempotent
                    && !h.call.serving_retry
                    && h.counted() < self.max_attempts
                    && !h.no_more
                {
                    h.next_at = self.current_delay(now).and_then(|d| now.checked_add(d));
                }
                HedgeStep::Send { attempt, timeout }
            }
            Err(r) => {
                h.last_stop = Some(r);
                h.no_more = true;
                if h.in_flight == 0 {
                    h.done = Some(r);
                    HedgeStep::Stop(r)
                } else {
                    HedgeStep::Wait
                }
            }
        }
    }

    /// Reports how attempt `attempt` ended, at `now`. A success records the
    /// attempt's latency in the window; every outcome is told to the retry
    /// policy, which judges a failure fatal (the call stops) or not (the next
    /// attempt goes out at once). Reports for attempts not running (already
    /// reported or cancelled) are ignored.
    pub fn report<R: RandomSource>(
        &self,
        h: &mut HedgedCall<R>,
        attempt: u32,
        outcome: impl Into<Outcome>,
        now: Instant,
    ) {
        let _ = self.judge(h, attempt, outcome.into(), now);
    }

    /// [`report`](Self::report), returning the retry policy's word on the
    /// attempt (`None` for an attempt that was not running).
    pub(crate) fn judge<R: RandomSource>(
        &self,
        h: &mut HedgedCall<R>,
        attempt: u32,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Decision> {
        if h.done.is_some() || !h.is_running(attempt) {
            return None;
        }
        let sent = h.sent.take(attempt as usize - 1);
        h.in_flight -= 1;
        // The guardrails measure this attempt, not the latest one.
        h.call.attempt_started = sent;
        match outcome {
            Outcome::Success => {
                if let Some(s) = sent {
                    self.window.observe(now.saturating_duration_since(s), now);
                }
                // A success stops the call; the guardrails hear of it here.
                let _ = self.policy.decide(&mut h.call, Outcome::Success, now);
                h.winner = Some(attempt);
                if h.call.started_as_hedge(attempt) {
                    self.policy
                        .emit(crate::guardrails::event::Event::HedgeWon { attempt });
                }
                self.finish(h, StopReason::Success, now);
                Some(Decision::Stop(StopReason::Success))
            }
            Outcome::Failure(f) => {
                let decision = self.policy.decide(&mut h.call, f, now);
                self.after_failure(h, f, decision, now);
                Some(decision)
            }
        }
    }

    /// What a failed attempt means for the call. A fatal failure (one no
    /// attempt could clear: a status the policy does not list, a
    /// cancellation) or the deadline ends the call, whatever came before.
    /// A non-fatal one never ends a call whose other attempts still run:
    /// the next attempt goes out at once (or after the server's hint), or,
    /// when the retry policy holds it back (a "do not retry" pushback, a
    /// hint longer than the deadline or `max_retry_after`, a spent budget,
    /// max attempts), no further attempt is sent and the call ends when
    /// the last one running has answered.
    fn after_failure<R: RandomSource>(
        &self,
        h: &mut HedgedCall<R>,
        f: Failure,
        decision: Decision,
        now: Instant,
    ) {
        let expired = h.call.deadline.is_some_and(|d| now >= d);
        match decision {
            Decision::Retry { after } => {
                // Non-fatal: the next attempt goes out when the engine says
                // (at once, or after the server's hint).
                h.next_at = now.checked_add(after);
                h.waited = h.waited.saturating_add(after);
                h.follow_up = true;
            }
            Decision::Stop(r) if f.class.may_clear() && !expired => {
                h.last_stop = Some(r);
                h.no_more = true;
                h.next_at = None;
                if h.in_flight == 0 {
                    self.finish(h, r, now);
                }
            }
            Decision::Stop(r) => self.finish(h, r, now),
        }
    }

    /// Ends the call; attempts still running will be cancelled by the
    /// front-end, so the guardrails get back what they hold.
    fn finish<R>(&self, h: &mut HedgedCall<R>, reason: StopReason, now: Instant) {
        h.done = Some(reason);
        if h.in_flight > 0 {
            h.call.attempt_started = h.sent.first();
            self.policy.abandon(&mut h.call, now);
        }
    }

    /// Forgets running attempt `attempt` without an outcome: the front-end
    /// cancelled it on its own (its request could not be completed), so its
    /// answer, if any, is not the call's.
    pub(crate) fn withdraw<R>(&self, h: &mut HedgedCall<R>, attempt: u32) {
        if h.done.is_none() && h.is_running(attempt) {
            h.sent.take(attempt as usize - 1);
            h.in_flight -= 1;
        }
    }

    /// The same hedging (window, budget, limits) over another retry policy:
    /// a request's own policy.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn with_policy(&self, policy: Policy) -> HedgePolicy {
        HedgePolicy {
            policy,
            ..self.clone()
        }
    }

    /// The caller cancelled the call (or gave up waiting): it stops with
    /// `cancelled`, and every running attempt is to be cancelled.
    pub fn cancel<R>(&self, h: &mut HedgedCall<R>, now: Instant) {
        if h.done.is_none() {
            self.finish(h, StopReason::Cancelled, now);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
