//! Retry strategies: which of the library's policies a simulated client runs.
//!
//! A strategy is a backoff kind (`none`, `immediate`, `exponential`, `full`,
//! `equal`, `decorrelated`) plus optional guardrails (`+budget`, `+breaker`,
//! `+throttle`). It only *chooses* library objects — a [`Policy`] built by
//! [`PolicyBuilder`] with a [`Jitter`] — and never computes a delay itself.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use stagger::{Backoff, Jitter, Policy, PolicyBuilder};

use crate::params::{Model, Params};
use crate::SimError;

/// How a client retries (the backoff half of a [`Strategy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryKind {
    /// One attempt, never a retry.
    None,
    /// Retry at once (a zero backoff).
    Immediate,
    /// Exponential backoff without jitter: lockstep.
    Exponential,
    /// Exponential backoff with full jitter `U(0, b_n)`.
    Full,
    /// Equal jitter `b_n/2 + U(0, b_n/2)`.
    Equal,
    /// Decorrelated jitter `min(cap, U(base, 3·d_{n-1}))`.
    Decorrelated,
}

impl RetryKind {
    /// Every kind, in the order `all` expands to.
    pub const ALL: [RetryKind; 6] = [
        RetryKind::None,
        RetryKind::Immediate,
        RetryKind::Exponential,
        RetryKind::Full,
        RetryKind::Equal,
        RetryKind::Decorrelated,
    ];

    /// The command-line name.
    pub const fn as_str(&self) -> &'static str {
        match self {
            RetryKind::None => "none",
            RetryKind::Immediate => "immediate",
            RetryKind::Exponential => "exponential",
            RetryKind::Full => "full",
            RetryKind::Equal => "equal",
            RetryKind::Decorrelated => "decorrelated",
        }
    }

    /// The library jitter this kind uses.
    pub const fn jitter(&self) -> Jitter {
        match self {
            RetryKind::None | RetryKind::Immediate | RetryKind::Exponential => Jitter::None,
            RetryKind::Full => Jitter::Full,
            RetryKind::Equal => Jitter::Equal,
            RetryKind::Decorrelated => Jitter::Decorrelated,
        }
    }
}

/// A backoff kind plus guardrails, e.g. `full+budget+breaker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Strategy {
    /// The backoff.
    pub retry: RetryKind,
    /// A retry budget per client process (library defaults).
    pub budget: bool,
    /// A circuit breaker per client process (library defaults).
    pub breaker: bool,
    /// Adaptive throttling per client process (library defaults).
    pub throttle: bool,
}

impl Strategy {
    /// A strategy without guardrails.
    pub const fn plain(retry: RetryKind) -> Self {
        Strategy {
            retry,
            budget: false,
            breaker: false,
            throttle: false,
        }
    }

    /// The same backoff with a budget and a breaker.
    pub const fn guarded(self) -> Self {
        Strategy {
            budget: true,
            breaker: true,
            ..self
        }
    }

    /// Whether any guardrail is on.
    pub const fn has_guardrails(&self) -> bool {
        self.budget || self.breaker || self.throttle
    }

    /// The default comparison of each model.
    pub fn defaults(model: Model) -> Vec<Strategy> {
        use RetryKind::*;
        let seed4 = [None, Immediate, Exponential, Full].map(Strategy::plain);
        match model {
            Model::Failover => seed4
                .iter()
                .copied()
                .chain(seed4.iter().map(|s| s.guarded()))
                .collect(),
            Model::Contention => [Immediate, Exponential, Full, Equal, Decorrelated]
                .map(Strategy::plain)
                .to_vec(),
            Model::Metastable => seed4.to_vec(),
            Model::Layers => vec![
                Strategy::plain(Full),
                Strategy {
                    budget: true,
                    ..Strategy::plain(Full)
                },
            ],
        }
    }

    /// Parses a comma-separated list; `all` expands to every backoff kind,
    /// and `all+budget` to every kind with a budget.
    pub fn parse_list(s: &str) -> Result<Vec<Strategy>, SimError> {
        let mut out = Vec::new();
        for item in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (head, tail) = item.split_once('+').unwrap_or((item, ""));
            let guards: Strategy = format!("none+{tail}").trim_end_matches('+').parse()?;
            let kinds: Vec<RetryKind> = if head == "all" {
                RetryKind::ALL.to_vec()
            } else {
                vec![head.parse::<Strategy>()?.retry]
            };
            for retry in kinds {
                let s = Strategy { retry, ..guards };
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        if out.is_empty() {
            return Err(SimError::new("strategy", "no strategy given".into()));
        }
        Ok(out)
    }

    /// The backoff schedule of this strategy under `p` (`none` and
    /// `immediate` keep `p`'s cap; `immediate` has a zero base).
    pub fn backoff(&self, p: &Params) -> Backoff {
        let base = match self.retry {
            RetryKind::Immediate => Duration::ZERO,
            _ => p.base,
        };
        Backoff::new()
            .base(base)
            .multiplier(2.0)
            .cap(p.cap)
            .jitter(self.retry.jitter())
    }

    /// Max attempts under `p` (1 for `none`; `u32::MAX` for unlimited).
    pub fn max_attempts(&self, p: &Params) -> u32 {
        match self.retry {
            RetryKind::None => 1,
            _ => p.attempts.unwrap_or(u32::MAX),
        }
    }

    /// The library policy builder for this strategy, guardrails not yet
    /// attached.
    pub fn policy_builder(&self, p: &Params) -> Result<PolicyBuilder, SimError> {
        let b = Policy::builder()
            .backoff(self.backoff(p))
            .max_attempts(self.max_attempts(p))
            // The simulator reports what the policy does, not a latency
            // estimate it would learn.
            .measure_latency(false);
        b.clone()
            .build()
            .map_err(|e| SimError::new("strategy", format!("{self}: {}", e)))?;
        Ok(b)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.retry.as_str())?;
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

impl FromStr for Strategy {
    type Err = SimError;

    /// Parses one strategy, e.g. `full`, `exponential+breaker`,
    /// `full+budget+breaker+throttle`.
    fn from_str(s: &str) -> Result<Self, SimError> {
        let mut parts = s.trim().split('+').map(str::trim);
        let head = parts.next().unwrap_or("");
        let retry = RetryKind::ALL
            .into_iter()
            .find(|k| k.as_str() == head)
            .ok_or_else(|| {
                SimError::new(
                    "strategy",
                    format!(
                        "unknown strategy `{head}` (expected none, immediate, exponential, full, equal, decorrelated or all, optionally with +budget, +breaker, +throttle)"
                    ),
                )
            })?;
        let mut st = Strategy::plain(retry);
        for g in parts {
            match g {
                "budget" => st.budget = true,
                "breaker" => st.breaker = true,
                "throttle" => st.throttle = true,
                other => {
                    return Err(SimError::new(
                        "strategy",
                        format!("unknown guardrail `+{other}` in `{s}` (expected +budget, +breaker or +throttle)"),
                    ))
                }
            }
        }
        Ok(st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            "none",
            "full+budget",
            "exponential+budget+breaker",
            "equal+throttle",
        ] {
            assert_eq!(s.parse::<Strategy>().unwrap().to_string(), s);
        }
        assert_eq!(
            "full+breaker+budget"
                .parse::<Strategy>()
                .unwrap()
                .to_string(),
            "full+budget+breaker"
        );
    }

    #[test]
    fn lists_expand_all_and_deduplicate() {
        let l = Strategy::parse_list("all").unwrap();
        assert_eq!(l.len(), 6);
        let l = Strategy::parse_list("full, full, all+budget").unwrap();
        assert_eq!(l.len(), 7);
        assert!(l[1..].iter().all(|s| s.budget && !s.breaker));
    }

    #[test]
    fn bad_names_name_the_flag() {
        for s in ["", "fast", "full+cache", "full,,+"] {
            assert_eq!(
                Strategy::parse_list(s).unwrap_err().flag(),
                "strategy",
                "{s}"
            );
        }
    }
}
