//! Retry strategies of the game-day, named like the simulator's: a backoff
//! kind (`none`, `immediate`, `exponential`, `full`, `equal`,
//! `decorrelated`) plus optional guardrails (`+budget`, `+breaker`,
//! `+throttle`).
//!
//! A strategy only *chooses* library objects: a [`Policy`] with a backoff
//! and a [`Jitter`], and one [`Guardrails`] (budget, breaker, throttle with
//! the library's defaults) per simulated pod. It never computes a delay.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use stagger::budget::RatioBudget;
use stagger::{Backoff, Breaker, Guardrails, Jitter, Observer, Policy, Stats, Throttle};

use crate::args::UsageError;

/// How a client retries (the backoff half of a [`Strategy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One attempt, never a retry.
    None,
    /// Retry at once: a zero backoff, no jitter (lockstep).
    Immediate,
    /// Exponential backoff without jitter (lockstep waves).
    Exponential,
    /// Exponential backoff with full jitter `U(0, b_n)`.
    Full,
    /// Equal jitter `b_n/2 + U(0, b_n/2)`.
    Equal,
    /// Decorrelated jitter.
    Decorrelated,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::None,
        Kind::Immediate,
        Kind::Exponential,
        Kind::Full,
        Kind::Equal,
        Kind::Decorrelated,
    ];

    /// The command-line name.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::Immediate => "immediate",
            Kind::Exponential => "exponential",
            Kind::Full => "full",
            Kind::Equal => "equal",
            Kind::Decorrelated => "decorrelated",
        }
    }

    const fn jitter(&self) -> Jitter {
        match self {
            Kind::None | Kind::Immediate | Kind::Exponential => Jitter::None,
            Kind::Full => Jitter::Full,
            Kind::Equal => Jitter::Equal,
            Kind::Decorrelated => Jitter::Decorrelated,
        }
    }
}

/// A backoff kind plus guardrails, e.g. `full+budget+breaker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strategy {
    /// The backoff.
    pub kind: Kind,
    /// A ratio retry budget per pod (library defaults: 10 %, 10 s, floor 10).
    pub budget: bool,
    /// A circuit breaker per pod (library defaults: 50 % over 10 s, ≥ 20
    /// calls, open 5 s).
    pub breaker: bool,
    /// Adaptive throttling per pod (library defaults: K = 2 over 2 min).
    pub throttle: bool,
}

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

impl Strategy {
    /// Parses a comma-separated list (`immediate,full+budget+breaker`);
    /// `all` stands for every backoff kind, `all+budget` for every kind with
    /// a budget. Errors name `--strategy`.
    pub fn parse_list(s: &str) -> Result<Vec<Strategy>, UsageError> {
        let mut out = Vec::new();
        for item in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (head, _) = item.split_once('+').unwrap_or((item, ""));
            let kinds: Vec<Kind> = if head == "all" {
                Kind::ALL.to_vec()
            } else {
                vec![Strategy::parse_one(item)?.kind]
            };
            let guards = Strategy::parse_one(&item.replacen(head, "none", 1))?;
            for kind in kinds {
                let st = Strategy { kind, ..guards };
                if !out.contains(&st) {
                    out.push(st);
                }
            }
        }
        if out.is_empty() {
            return Err(UsageError("--strategy: no strategy given".into()));
        }
        Ok(out)
    }

    fn parse_one(s: &str) -> Result<Strategy, UsageError> {
        let mut parts = s.split('+').map(str::trim);
        let head = parts.next().unwrap_or("");
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == head)
            .ok_or_else(|| {
                UsageError(format!(
                    "--strategy: unknown strategy `{head}` (expected none, immediate, exponential, \
                     full, equal, decorrelated or all, optionally with +budget, +breaker, +throttle)"
                ))
            })?;
        let mut st = Strategy {
            kind,
            budget: false,
            breaker: false,
            throttle: false,
        };
        for g in parts {
            match g {
                "budget" => st.budget = true,
                "breaker" => st.breaker = true,
                "throttle" => st.throttle = true,
                other => {
                    return Err(UsageError(format!(
                        "--strategy: unknown guardrail `+{other}` in `{s}` \
                         (expected +budget, +breaker or +throttle)"
                    )))
                }
            }
        }
        Ok(st)
    }

    /// Whether any guardrail is on.
    pub fn guarded(&self) -> bool {
        self.budget || self.breaker || self.throttle
    }

    /// The shared guardrails of one pod (`None` without any), reporting
    /// breaker state changes to `stats`.
    pub fn pod_guardrails(&self, stats: Arc<Stats>) -> Option<Arc<Guardrails>> {
        if !self.guarded() {
            return None;
        }
        let mut g = Guardrails::new().observer(stats);
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

    /// One client's own policy: this strategy's schedule, the pod's shared
    /// guardrails, and the pod's counters as observer.
    pub fn client_policy(
        &self,
        schedule: &Schedule,
        guardrails: Option<&Arc<Guardrails>>,
        stats: &Arc<Stats>,
    ) -> Result<Policy, UsageError> {
        let base = match self.kind {
            Kind::Immediate => Duration::ZERO,
            _ => schedule.base,
        };
        let attempts = match self.kind {
            Kind::None => 1,
            _ => schedule.attempts,
        };
        let backoff = Backoff::new()
            .base(base)
            .multiplier(2.0)
            .cap(schedule.cap.max(base))
            .jitter(self.kind.jitter());
        let observer: Arc<dyn Observer> = stats.clone();
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

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.as_str())?;
        for (on, name) in [
            (self.budget, "+budget"),
            (self.breaker, "+breaker"),
            (self.throttle, "+throttle"),
        ] {
            if on {
                f.write_str(name)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in ["none", "immediate", "full+budget+breaker", "equal+throttle"] {
            let list = Strategy::parse_list(s).unwrap();
            assert_eq!(list.len(), 1);
            assert_eq!(list[0].to_string(), s);
        }
    }

    #[test]
    fn lists_and_all() {
        let l = Strategy::parse_list("immediate, full+budget+breaker,immediate").unwrap();
        assert_eq!(l.len(), 2);
        let all = Strategy::parse_list("all+budget").unwrap();
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|s| s.budget && !s.breaker));
    }

    #[test]
    fn bad_names_say_which_flag() {
        for bad in ["", "fast", "full+cache", ","] {
            let e = Strategy::parse_list(bad).unwrap_err();
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
        let p = Strategy::parse_list("immediate").unwrap()[0]
            .client_policy(&sched, None, &stats)
            .unwrap();
        assert_eq!(p.backoff().backoff(1), Duration::ZERO);
        assert_eq!(p.max_attempts(), 5);
        let p = Strategy::parse_list("none").unwrap()[0]
            .client_policy(&sched, None, &stats)
            .unwrap();
        assert_eq!(p.max_attempts(), 1);
    }
}
