//! The policies of a run's client processes, with their guardrails.
//!
//! Each simulated client process owns its own policy objects, as a real
//! fleet would: one budget, one breaker and one throttle per process, built
//! from the library with its defaults. Strategies without guardrails share
//! one policy (it holds no mutable state: per-call state lives in `Call`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use stagger::budget::RatioBudget;
use stagger::{Breaker, BreakerState, Event, Observer, Policy, Throttle};

use crate::engine::mix;
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

/// The policy of every client process of one run.
pub(crate) struct ClientPolicies {
    policies: Vec<Policy>,
    counters: Option<Arc<Counters>>,
}

impl ClientPolicies {
    /// Policies for `clients` processes running `strategy` in the run
    /// seeded `seed`: one shared policy without guardrails, else one per
    /// process, each with its own library-default budget (10 % ratio, 10 s
    /// window, floor 10), breaker (50 % of at least 20 calls over 10 s, open
    /// 5 s + up to 20 %, its jitter seeded from the run) and throttle (K = 2,
    /// 2 min).
    pub(crate) fn new(
        strategy: &Strategy,
        p: &Params,
        clients: usize,
        seed: u64,
    ) -> Result<Self, SimError> {
        let builder = strategy.policy_builder(p)?;
        if !strategy.has_guardrails() {
            return Ok(ClientPolicies {
                policies: vec![builder.build_checked()?],
                counters: None,
            });
        }
        let counters = Arc::new(Counters::default());
        let policies = (0..clients.max(1))
            .map(|c| {
                let mut b = builder.clone().observer(counters.clone());
                if strategy.budget {
                    b = b.budget(RatioBudget::default());
                }
                if strategy.breaker {
                    let breaker = Breaker::builder()
                        .seed(mix(seed, 0xB4EA_0000 + c as u64))
                        .build()
                        .map_err(|e| SimError::new("strategy", e.to_string()))?;
                    b = b.breaker(breaker);
                }
                if strategy.throttle {
                    b = b.throttle(Throttle::default());
                }
                b.build_checked()
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

trait BuildChecked {
    fn build_checked(self) -> Result<Policy, SimError>;
}

impl BuildChecked for stagger::PolicyBuilder {
    fn build_checked(self) -> Result<Policy, SimError> {
        self.build()
            .map_err(|e| SimError::new("strategy", e.to_string()))
    }
}
