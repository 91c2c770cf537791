//! An operator's hand on the breakers: one handle that isolates, releases
//! or quiets every breaker attached to it.
//!
//! During an incident an on-call engineer wants a dependency isolated now,
//! not after twenty failures; after the fix, the breaker closed with its
//! history forgotten; and a new breaker watched in metrics-only mode before
//! anyone trusts it to refuse calls. [`Breaker::transition`] does it for
//! one breaker; [`BreakerControl`] does it for all of a service's breakers
//! at once, and is what an admin endpoint holds.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Breaker;
use crate::guardrails::event::BreakerState;

/// What an operator does to a breaker (see [`Breaker::transition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transition {
    /// Every call passes and nothing is recorded, until released.
    Disable,
    /// Every call passes; outcomes are counted, and when the breaker's rule
    /// would open it a [`BreakerWouldOpen`](crate::Event::BreakerWouldOpen)
    /// event says so, until released.
    MetricsOnly,
    /// Every call is refused, until released.
    ForceOpen,
    /// Closed, with clean counts: automatic behaviour again. This is also
    /// the release from every forced state.
    CloseAndReset,
    /// Open for this long (no jitter), then half-open as usual.
    OpenFor(Duration),
}

impl Transition {
    /// The lower-case name the admin endpoint accepts (`disable`,
    /// `metrics_only`, `force_open`, `close_and_reset`, `open_for`).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Transition::Disable => "disable",
            Transition::MetricsOnly => "metrics_only",
            Transition::ForceOpen => "force_open",
            Transition::CloseAndReset => "close_and_reset",
            Transition::OpenFor(_) => "open_for",
        }
    }

    /// Whether the transition holds until released (so a breaker attached
    /// later is put in it too).
    const fn holds(&self) -> bool {
        matches!(
            self,
            Transition::Disable | Transition::MetricsOnly | Transition::ForceOpen
        )
    }
}

/// One switch for many breakers, cheap to clone (clones share it), in the
/// manner of Polly's `CircuitBreakerManualControl`.
///
/// Attach each breaker under a name; a transition then applies to every one
/// of them (or to one by name). A state that holds until released
/// (disabled, metrics-only, forced open) is also applied to breakers
/// attached afterwards, so a service isolating a dependency does not race
/// its own start-up. Each breaker's observer sees the change; with the
/// `tracing` feature the control also logs who asked and why.
///
/// ```
/// use stagger::guardrails::{BreakerControl, BreakerState, Transition};
/// use stagger::Breaker;
/// use std::time::Instant;
///
/// let control = BreakerControl::new();
/// let (payments, ledger) = (Breaker::default(), Breaker::default());
/// control.attach("payments", &payments);
/// control.attach("ledger", &ledger);
///
/// let now = Instant::now();
/// control.transition(Transition::ForceOpen, "isolating during INC-123", now);
/// assert!(payments.acquire(now).is_err() && ledger.acquire(now).is_err());
///
/// let late = Breaker::default();
/// control.attach("late", &late);
/// assert_eq!(late.state_at(now), BreakerState::ForcedOpen, "joins the held state");
///
/// control.transition(Transition::CloseAndReset, "fixed", now);
/// assert!(control.states(now).iter().all(|(_, s)| *s == BreakerState::Closed));
/// ```
#[derive(Clone, Default)]
pub struct BreakerControl {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Default)]
struct Shared {
    breakers: Vec<(String, Breaker)>,
    /// The state every attached breaker is held in, if any.
    held: Option<Transition>,
}

impl fmt::Debug for BreakerControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.lock();
        f.debug_struct("BreakerControl")
            .field(
                "breakers",
                &shared.breakers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("held", &shared.held)
            .finish()
    }
}

impl BreakerControl {
    /// A control with no breakers yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Nothing below can leave the list half-written: a poisoned lock
        // holds a consistent list.
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `breaker` under `name` (a later breaker under the same name
    /// replaces it). If the control holds a state, the breaker is put in it.
    pub fn attach(&self, name: impl Into<String>, breaker: &Breaker) {
        let name = name.into();
        let mut shared = self.lock();
        if let Some(t) = shared.held {
            breaker.transition(t, Instant::now());
        }
        match shared.breakers.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = breaker.clone(),
            None => shared.breakers.push((name, breaker.clone())),
        }
    }

    /// Applies `to` to every attached breaker; `reason` says who asked and
    /// why (logged with the `tracing` feature). A held state (disabled,
    /// metrics-only, forced open) is applied to breakers attached later
    /// too; closing or opening for a while ends the hold.
    pub fn transition(&self, to: Transition, reason: &str, now: Instant) {
        let mut shared = self.lock();
        shared.held = to.holds().then_some(to);
        for (name, breaker) in &shared.breakers {
            apply(name, breaker, to, reason, now);
        }
    }

    /// Applies `to` to the breaker attached as `name` alone, and returns
    /// the state it is left in; `None` if no breaker has that name.
    pub fn transition_one(
        &self,
        name: &str,
        to: Transition,
        reason: &str,
        now: Instant,
    ) -> Option<BreakerState> {
        let shared = self.lock();
        let (name, breaker) = shared.breakers.iter().find(|(n, _)| n == name)?;
        Some(apply(name, breaker, to, reason, now))
    }

    /// Every attached breaker's name and state at `now`, in attach order.
    pub fn states(&self, now: Instant) -> Vec<(String, BreakerState)> {
        self.lock()
            .breakers
            .iter()
            .map(|(n, b)| (n.clone(), b.state_at(now)))
            .collect()
    }
}

fn apply(
    name: &str,
    breaker: &Breaker,
    to: Transition,
    reason: &str,
    now: Instant,
) -> BreakerState {
    let (from, after) = breaker.inner.force(to, now);
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "stagger",
        breaker = name,
        from = from.as_str(),
        to = after.as_str(),
        transition = to.as_str(),
        reason,
        "circuit breaker set by an operator"
    );
    #[cfg(not(feature = "tracing"))]
    let _ = (name, reason, from);
    after
}
