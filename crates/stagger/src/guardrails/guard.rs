//! The shared guardrails and the seam that wires them into the decision

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::guardrails::adaptive::AdaptiveLimiter;
use crate::guardrails::breaker::{Breaker, Permit};
use crate::guardrails::budget::{Budget, Withdrawal};
use crate::guardrails::event::Observer;
use crate::guardrails::throttle::Throttle;
use crate::outcome::{Failure, Outcome, StopReason};
use crate::random::RandomSource;

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
/// probe, what the last retry cost the budget). It lives in the [`Call`](crate::Call),
/// so the shared guardrails stay free of per-call memory; the engine never
/// reads it.
///
/// ```
/// use stagger::guardrails::Ticket;
/// let mut t = Ticket::default();
/// assert_eq!(t.get(), 0);
/// t.set(42);
/// assert_eq!(t.get(), 42);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// A new call's ticket: 0.
    pub const fn new() -> Self {
        Ticket(0)
    }

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
/// [`Guardrails`] is the ready implementation.
pub trait Guardrail: Send + Sync {
    /// Before attempt `attempt` (1-based) is admitted, first attempts
    /// included: how long it must wait to be sent, if it must (a client-side
    /// rate limiter's pacing); `None` means it may go now and whatever
    /// pacing it needed is taken. The engine waits the time when the call's
    /// deadline allows and asks again; when the wait would pass the
    /// deadline it stops the call as [`Throttled`](StopReason::Throttled).
    fn pace(&self, attempt: u32, now: Instant) -> Option<Duration> {
        let _ = (attempt, now);
        None
    }

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
    /// half-open probe slot. See [`Policy::abandon`](crate::Policy::abandon).
    fn abandon(&self, attempt: u32, ticket: &mut Ticket, now: Instant) {
        let _ = (attempt, ticket, now);
    }
}

// The ticket: [.. | has permit: 1 | permit: 16 | retried: 1 | cost: 31].
const COST_MASK: u64 = (1 << 31) - 1;
const RETRIED: u64 = 1 << 31;
const PERMIT_SHIFT: u32 = 32;
const HAS_PERMIT: u64 = 1 << 48;
const BREAKER_BITS: u64 = HAS_PERMIT | (0xffff << PERMIT_SHIFT);

/// The shared guardrails and the seam that wires them into the decision
/// engine: the [`Guardrail`] trait, its per-call [`Ticket`], a
/// [`Refusal`], and [`Guardrails`], the ready implementation.
///
/// [`Guardrails`] combines an optional retry budget, circuit breaker and
/// adaptive throttle into the engine's one [`Guardrail`] seam, in this
/// order:
///
/// - **before every attempt is admitted**: the adaptive limiter's pacing
///   ([`pacing`](Guardrails::pacing)): the attempt waits for its token, or
///   the call stops as `throttled` when that wait would pass its deadline.
/// - **before every attempt**: the breaker (an open breaker stops the call
///   with `breaker_open`), then the throttle (`throttled`, first attempts
///   included); a first attempt that passes counts as a request for the
///   budget. A first attempt is never blocked by a budget.
/// - **before every retry**: the breaker again (a retry that would wake up
///   while the breaker is still open stops now, so a dependency that is
///   plainly down gets zero retries), then the budget (`budget`). Both stop
///   the call at once, without sleeping.
/// - **after every attempt**: the breaker, the throttle, the adaptive
///   limiter (whether the server throttled it) and the budget are told the
///   outcome (a success refunds what the call's last retry cost,
///   for budgets that refund).
///
/// Per-call state (the breaker permit, the last retry's cost) rides in the
/// call's [`Ticket`], so the shared parts keep no per-call memory.
///
/// ```
/// use stagger::guardrails::budget::{RatioBudget, RatioBudgetConfig};
/// use stagger::{Breaker, Call, Class, Decision, Policy, StopReason};
/// use std::time::Instant;
///
/// let policy = Policy::builder()
///     .max_attempts(5)
///     .budget(RatioBudget::new(RatioBudgetConfig { ratio: 0.1, floor: 1, ..Default::default() })?)
///     .breaker(Breaker::default())
///     .build()?;
/// let now = Instant::now();
/// let mut call = Call::seeded(1);
/// policy.start_attempt(&mut call, now).unwrap();
/// assert!(matches!(policy.decide(&mut call, Class::Transient, now), Decision::Retry { .. }));
/// policy.start_attempt(&mut call, now).unwrap();
/// // The floor of one retry is spent and 10 % of one request is not a retry.
/// assert_eq!(policy.decide(&mut call, Class::Transient, now), Decision::Stop(StopReason::Budget));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
///
/// A budget, a breaker and a throttle (each optional) behind the engine's
/// [`Guardrail`] seam, checked in the order above.
///
/// ```
/// use stagger::{Breaker, Policy, Throttle};
/// use stagger::guardrails::Guardrails;
/// use stagger::guardrails::budget::TokenBucket;
/// use std::sync::Arc;
///
/// let guards = Guardrails::new()
///     .budget(TokenBucket::default())
///     .breaker(Breaker::default())
///     .throttle(Throttle::default());
/// let policy = Policy::builder().guardrail(Arc::new(guards)).build().unwrap();
/// # let _ = policy;
/// ```
#[derive(Clone, Default)]
pub struct Guardrails {
    budget: Option<Arc<dyn Budget>>,
    breaker: Option<Breaker>,
    throttle: Option<Throttle>,
    pacing: Option<AdaptiveLimiter>,
    observer: Option<Arc<dyn Observer>>,
}

impl fmt::Debug for Guardrails {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guardrails")
            .field("budget", &self.budget)
            .field("breaker", &self.breaker)
            .field("throttle", &self.throttle)
            .field("pacing", &self.pacing)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Guardrails {
    /// No guardrails yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the retry budget.
    pub fn budget(mut self, budget: impl Budget + 'static) -> Self {
        self.budget = Some(Arc::new(budget));
        self
    }

    /// Sets the circuit breaker.
    pub fn breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Sets adaptive throttling.
    pub fn throttle(mut self, throttle: Throttle) -> Self {
        self.throttle = Some(throttle);
        self
    }

    /// Paces every attempt, first attempts included, by `limiter` (the AWS
    /// SDKs' adaptive mode), and tells it every outcome: after the first
    /// throttle, attempts wait for the rate the server accepts. Share one
    /// limiter (clones share it) across a client's calls.
    pub fn pacing(mut self, limiter: AdaptiveLimiter) -> Self {
        self.pacing = Some(limiter);
        self
    }

    /// Also sends the breaker's state changes to `observer` (a policy built
    /// with [`PolicyBuilder::breaker`](crate::PolicyBuilder::breaker) passes its own observer here).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        observer.on_attach();
        self.observer = Some(observer);
        self
    }

    fn take_permit(ticket: &mut Ticket) -> Option<Permit> {
        let t = ticket.get();
        if t & HAS_PERMIT == 0 {
            return None;
        }
        ticket.set(t & !BREAKER_BITS);
        Some(Permit::from_bits((t >> PERMIT_SHIFT) as u16))
    }
}

impl Guardrail for Guardrails {
    #[inline]
    fn pace(&self, _attempt: u32, now: Instant) -> Option<Duration> {
        self.pacing.as_ref()?.acquire(now).err()
    }

    #[inline]
    fn before_attempt(
        &self,
        attempt: u32,
        ticket: &mut Ticket,
        rng: &mut dyn RandomSource,
        now: Instant,
    ) -> Result<(), Refusal> {
        let obs = self.observer.as_deref();
        let mut t = ticket.get() & !BREAKER_BITS;
        if let Some(b) = &self.breaker {
            match b.admit_with(now, obs) {
                Ok(p) => t |= HAS_PERMIT | u64::from(p.to_bits()) << PERMIT_SHIFT,
                Err(open) => {
                    ticket.set(t);
                    return Err(Refusal {
                        reason: StopReason::BreakerOpen,
                        retry_in: Some(open.retry_in),
                    });
                }
            }
        }
        ticket.set(t);
        if let Some(th) = &self.throttle {
            if !th.admit(rng, now) {
                if let (Some(b), Some(p)) = (&self.breaker, Self::take_permit(ticket)) {
                    b.release_with(p, now, obs);
                }
                return Err(Refusal {
                    reason: StopReason::Throttled,
                    retry_in: None,
                });
            }
        }
        if attempt <= 1 {
            if let Some(budget) = &self.budget {
                budget.on_request(now);
            }
        }
        Ok(())
    }

    #[inline]
    fn before_retry(
        &self,
        _attempt: u32,
        ticket: &mut Ticket,
        failure: &Failure,
        delay: Duration,
        now: Instant,
    ) -> Result<(), Refusal> {
        if let Some(b) = &self.breaker {
            let wake = now.checked_add(delay).unwrap_or(now);
            if let Some(left) = b.open_at(wake) {
                return Err(Refusal {
                    reason: StopReason::BreakerOpen,
                    retry_in: Some(left.saturating_add(delay)),
                });
            }
        }
        if let Some(budget) = &self.budget {
            match budget.try_withdraw(failure, now) {
                Some(w) => {
                    let cost = u64::from(w.cost()) & COST_MASK;
                    ticket.set((ticket.get() & !(RETRIED | COST_MASK)) | RETRIED | cost);
                }
                None => {
                    return Err(Refusal {
                        reason: StopReason::Budget,
                        retry_in: None,
                    })
                }
            }
        }
        Ok(())
    }

    #[inline]
    fn record(
        &self,
        _attempt: u32,
        ticket: &mut Ticket,
        outcome: &Outcome,
        latency: Option<Duration>,
        now: Instant,
    ) {
        if let Some(b) = &self.breaker {
            if let Some(p) = Self::take_permit(ticket) {
                b.record_with(p, outcome, latency, now, self.observer.as_deref());
            }
        }
        if let Some(th) = &self.throttle {
            th.record(outcome, now);
        }
        if let Some(limiter) = &self.pacing {
            limiter.record(matches!(outcome, Outcome::Failure(f) if f.throttled), now);
        }
        if let Some(budget) = &self.budget {
            match outcome {
                Outcome::Success => {
                    let t = ticket.get();
                    let spent = (t & RETRIED != 0).then(|| Withdrawal::new((t & COST_MASK) as u32));
                    budget.on_success(spent, now);
                }
                Outcome::Failure(f) => budget.on_failure(f, now),
            }
        }
    }

    fn abandon(&self, _attempt: u32, ticket: &mut Ticket, now: Instant) {
        if let (Some(b), Some(p)) = (&self.breaker, Self::take_permit(ticket)) {
            b.release_with(p, now, self.observer.as_deref());
        }
    }
}

/// The guardrail parts a [`PolicyBuilder`] collects.
#[derive(Clone, Default)]
pub(crate) struct Parts {
    pub(crate) budget: Option<Arc<dyn Budget>>,
    pub(crate) breaker: Option<Breaker>,
    pub(crate) throttle: Option<Throttle>,
    pub(crate) pacing: Option<AdaptiveLimiter>,
}

impl Parts {
    pub(crate) fn is_empty(&self) -> bool {
        self.budget.is_none()
            && self.breaker.is_none()
            && self.throttle.is_none()
            && self.pacing.is_none()
    }

    pub(crate) fn into_guardrail(
        self,
        observer: Option<Arc<dyn Observer>>,
    ) -> Option<Arc<dyn Guardrail>> {
        if self.is_empty() {
            return None;
        }
        Some(Arc::new(Guardrails {
            budget: self.budget,
            breaker: self.breaker,
            throttle: self.throttle,
            pacing: self.pacing,
            observer,
        }))
    }
}
