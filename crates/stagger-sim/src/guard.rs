//! The policies of a run's client processes, with their guardrails.
//!
//! Each simulated client process owns its own policy objects, as a real
//! fleet would: one budget, one breaker and one throttle per process, built
//! from the library with its defaults. Strategies without guardrails share
//! one policy (it holds no mutable state: per-call state lives in `Call`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use stagger::guardrails::BreakerState;
use stagger::{Event, Observer, Policy};

use crate::params::Params;
use crate::strategy::{Schedule, Strategy};
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

/// The policy of every client process of one run.
pub(crate) struct ClientPolicies {
    policies: Vec<Policy>,
    counters: Option<Arc<Counters>>,
}

impl ClientPolicies {
    /// Policies for `clients` processes running `strategy` in the run
    /// seeded `seed`: one shared policy without guardrails, else one per
    /// process, each with its own guardrails ([`Strategy::guardrails`]).
    pub(crate) fn new(
        strategy: &Strategy,
        p: &Params,
        clients: usize,
        seed: u64,
    ) -> Result<Self, SimError> {
        let schedule = Schedule::from(p);
        if !strategy.has_guardrails() {
            return Ok(ClientPolicies {
                policies: vec![strategy.policy(&schedule, None, None)?],
                counters: None,
            });
        }
        let counters = Arc::new(Counters::default());
        let observer = || Some(counters.clone() as Arc<dyn Observer>);
        let policies = (0..clients.max(1))
            .map(|c| {
                let g = strategy.guardrails(seed, c as u64, observer())?;
                strategy.policy(&schedule, g.map(Arc::new), observer())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClientPolicies {
            policies,
            counters: Some(counters),
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
