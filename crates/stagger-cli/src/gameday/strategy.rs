//! Retry strategies of the game-day: the simulator's own [`Strategy`]
//! (a backoff kind — `none`, `immediate`, `exponential`, `full`, `equal`,
//! `decorrelated` — plus optional `+budget`, `+breaker`, `+throttle`), so
//! both tools parse and name strategies the same way.
//!
//! A strategy only *chooses* library objects: a [`Policy`] with a backoff
//! and a jitter, and one [`Guardrails`] (budget, breaker, throttle with the
//! library's defaults) per simulated pod. It never computes a delay.

use std::sync::Arc;
use std::time::Duration;

use stagger::budget::RatioBudget;
use stagger::{Backoff, Breaker, Guardrails, Observer, Policy, Throttle};
use stagger_sim::RetryKind;
pub use stagger_sim::Strategy;

use crate::args::UsageError;

/// The schedule every retrying strategy shares; only the jitter differs
/// (and `immediate` has no wait at all).
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Max attempts, the first included.
    pub attempts: u32,
    /// First backoff.
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
    /// Timeout of one attempt (further bounded by the request's deadline).
    pub attempt_timeout: Duration,
}

/// Parses `--strategy`: a comma-separated list (`immediate,full+budget+breaker`);
/// `all` stands for every backoff kind, `all+budget` for every kind with a
/// budget. Errors name `--strategy`.
pub fn parse_list(s: &str) -> Result<Vec<Strategy>, UsageError> {
    Strategy::parse_list(s).map_err(|e| UsageError(format!("--strategy: {}", e.problem())))
}

/// What the game-day builds from a strategy.
pub trait GamedayStrategy {
    /// The shared guardrails of one pod (`None` without any), reporting
    /// budget refusals and breaker state changes to `observer`.
    fn pod_guardrails(&self, observer: Arc<dyn Observer>) -> Option<Arc<Guardrails>>;

    /// One client's own policy: this strategy's schedule, the pod's shared
    /// guardrails, and the pod's observer (its counters, its metrics).
    fn client_policy(
        &self,
        schedule: &Schedule,
        guardrails: Option<&Arc<Guardrails>>,
        observer: Arc<dyn Observer>,
    ) -> Result<Policy, UsageError>;
}

impl GamedayStrategy for Strategy {
    fn pod_guardrails(&self, observer: Arc<dyn Observer>) -> Option<Arc<Guardrails>> {
        if !self.has_guardrails() {
            return None;
        }
        let mut g = Guardrails::new().observer(observer);
        if self.budget {
            g = g.budget(RatioBudget::default());
        }
        if self.breaker {
            g = g.breaker(Breaker::default());
        }
        if self.throttle {
            g = g.throttle(Throttle::default());
        }
        Some(Arc::new(g))
    }

    fn client_policy(
        &self,
        schedule: &Schedule,
        guardrails: Option<&Arc<Guardrails>>,
        observer: Arc<dyn Observer>,
    ) -> Result<Policy, UsageError> {
        let base = match self.retry {
            RetryKind::Immediate => Duration::ZERO,
            _ => schedule.base,
        };
        let attempts = match self.retry {
            RetryKind::None => 1,
            _ => schedule.attempts,
        };
        let backoff = Backoff::new()
            .base(base)
            .multiplier(2.0)
            .cap(schedule.cap.max(base))
            .jitter(self.retry.jitter());
        let mut b = Policy::builder()
            .backoff(backoff)
            .max_attempts(attempts)
            .attempt_timeout(schedule.attempt_timeout)
            .observer(observer);
        if let Some(g) = guardrails {
            b = b.guardrail(g.clone());
        }
        b.build().map_err(|e| {
            UsageError(format!(
                "--{}: {}",
                e.field().replace('_', "-"),
                e.problem()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger::Stats;

    #[test]
    fn names_round_trip() {
        for s in ["none", "immediate", "full+budget+breaker", "equal+throttle"] {
            let list = parse_list(s).unwrap();
            assert_eq!(list.len(), 1);
            assert_eq!(list[0].to_string(), s);
        }
    }

    #[test]
    fn lists_and_all() {
        let l = parse_list("immediate, full+budget+breaker,immediate").unwrap();
        assert_eq!(l.len(), 2);
        let all = parse_list("all+budget").unwrap();
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|s| s.budget && !s.breaker));
    }

    #[test]
    fn bad_names_say_which_flag() {
        for bad in ["", "fast", "full+cache", ","] {
            let e = parse_list(bad).unwrap_err();
            assert!(e.0.starts_with("--strategy"), "{bad}: {}", e.0);
        }
    }

    #[test]
    fn immediate_never_waits_and_none_never_retries() {
        let stats = Arc::new(Stats::new());
        let sched = Schedule {
            attempts: 5,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            attempt_timeout: Duration::from_millis(500),
        };
        let p = parse_list("immediate").unwrap()[0]
            .client_policy(&sched, None, stats.clone())
            .unwrap();
        assert_eq!(p.backoff().backoff(1), Duration::ZERO);
        assert_eq!(p.max_attempts(), 5);
        let p = parse_list("none").unwrap()[0]
            .client_policy(&sched, None, stats.clone())
            .unwrap();
        assert_eq!(p.max_attempts(), 1);
    }
}
