//! The policies of a run's client processes, with their guardrails.
//!
//! Each simulated client process owns its own policy objects, as a real
//! fleet would: one budget, one breaker and one throttle per process, built
//! from the library with its defaults. Strategies without guardrails share
//! one policy (it holds no mutable state: per-call state lives in `Call`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use stagger::{BreakerState, Event, Observer, Policy};

use crate::engine::VirtualTime;
use crate::params::Params;
use crate::strategy::Strategy;
use crate::SimError;

/// Counts the guardrail events of one run.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    budget_refusals: AtomicU64,
    breaker_opens: AtomicU64,
}

impl Observer for Counters {
    fn on_event(&self, event: &Event) {
        match event {
            Event::BudgetRefused { .. } => {
                self.budget_refusals.fetch_add(1, Relaxed);
            }
            Event::BreakerStateChanged {
                to: BreakerState::Open,
                ..
            } => {
                self.breaker_opens.fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }
}

/// Fails when a strategy asks for guardrails this build cannot provide.
pub(crate) fn check_available(s: &Strategy) -> Result<(), SimError> {
    if s.has_guardrails() {
        return Err(SimError::new(
            "strategy",
            format!(
                "`{s}`: budgets, breakers and throttles are not available yet in this build \
                 (the guardrails are still being built); use a strategy without `+…`"
            ),
        ));
    }
    Ok(())
}

/// The policy of every client process of one run.
pub(crate) struct ClientPolicies {
    policies: Vec<Policy>,
    counters: Option<Arc<Counters>>,
}

impl ClientPolicies {
    /// Policies for `clients` processes running `strategy`.
    pub(crate) fn new(
        strategy: &Strategy,
        p: &Params,
        clients: usize,
        _vt: VirtualTime,
    ) -> Result<Self, SimError> {
        check_available(strategy)?;
        let builder = strategy.policy_builder(p)?;
        let _ = clients;
        Ok(ClientPolicies {
            policies: vec![builder.build_checked()?],
            counters: None,
        })
    }

    /// The policy of client process `client`.
    #[inline]
    pub(crate) fn get(&self, client: usize) -> &Policy {
        if self.policies.len() == 1 {
            &self.policies[0]
        } else {
            &self.policies[client % self.policies.len()]
        }
    }

    /// Budget refusals so far.
    pub(crate) fn budget_refusals(&self) -> u64 {
        self.counters
            .as_ref()
            .map_or(0, |c| c.budget_refusals.load(Relaxed))
    }

    /// Breaker openings so far.
    pub(crate) fn breaker_opens(&self) -> u64 {
        self.counters
            .as_ref()
            .map_or(0, |c| c.breaker_opens.load(Relaxed))
    }
}

trait BuildChecked {
    fn build_checked(self) -> Result<Policy, SimError>;
}

impl BuildChecked for stagger::PolicyBuilder {
    fn build_checked(self) -> Result<Policy, SimError> {
        self.build()
            .map_err(|e| SimError::new("strategy", e.to_string()))
    }
}
