//! Retry strategies: which of the library's policies a client runs.
//!
//! A strategy is a backoff kind (`none`, `immediate`, `exponential`, `full`,
//! `equal`, `decorrelated`) plus optional guardrails (`+budget`, `+breaker`,
//! `+throttle`). This is the one place a strategy name becomes library
//! objects — the simulator's clients and the game-day's pods both build
//! theirs here, so the two cannot drift. A strategy only *chooses* library
//! objects (a [`Policy`] with a [`Jitter`], one [`Guardrails`] per client
//! process) and never computes a delay itself.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use stagger::guardrails::budget::RatioBudget;
use stagger::guardrails::BreakerConfig;
use stagger::guardrails::Guardrails;
use stagger::{Backoff, Breaker, Jitter, Observer, Policy, Throttle};

use crate::engine::mix;
use crate::params::{Model, Params};
use crate::SimError;

/// The knobs every strategy of one comparison shares; only the backoff
/// kind and the guardrails differ between strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Max attempts, the first included; `None` is unlimited. `none`
    /// always makes one.
    pub attempts: Option<u32>,
    /// First backoff (`immediate` uses zero).
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
    /// Timeout of one attempt, if the front-end enforces one.
    pub attempt_timeout: Option<Duration>,
    /// Whether the policy learns a typical attempt from the attempts it
    /// sees end (its deadline rule). Off in virtual time, where the simulator reports
    /// what the policy does rather than what it would learn.
    pub measure_latency: bool,
}

impl From<&Params> for Schedule {
    /// The simulator's schedule: no attempt timeout, no learned latency.
    fn from(p: &Params) -> Self {
        Schedule {
            attempts: p.attempts,
            base: p.base,
            cap: p.cap,
            attempt_timeout: None,
            measure_latency: false,
        }
    }
}

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
            // The four backoff kinds, then full jitter with a budget and
            // with a budget and a breaker. The other kinds with a breaker
            // print the same numbers as full+budget+breaker (the breakers
            // refuse every retry, so the backoff never runs), so they are
            // left out.
            Model::Failover => seed4
                .iter()
                .copied()
                .chain([
                    Strategy {
                        budget: true,
                        ..Strategy::plain(Full)
                    },
                    Strategy::plain(Full).guarded(),
                ])
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
        let items: Vec<&str> = s.split(',').map(str::trim).collect();
        if items.len() > 1 && items.iter().any(|t| t.is_empty()) {
            return Err(SimError::new(
                "strategy",
                format!("`{s}` has an empty entry; separate strategies with single commas"),
            ));
        }
        for item in items.into_iter().filter(|t| !t.is_empty()) {
            let (head, tail) = item.split_once('+').unwrap_or((item, ""));
            // The guardrails are checked on their own; an error names the
            // entry as written.
            let guards: Strategy = format!("none+{tail}")
                .trim_end_matches('+')
                .parse()
                .map_err(|e: SimError| {
                    SimError::new(
                        "strategy",
                        e.problem().replace("`none+", &format!("`{head}+")),
                    )
                })?;
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

    /// The backoff of this strategy under `s` (`none` and `immediate`
    /// keep `s`'s cap; `immediate` has a zero base).
    pub fn backoff(&self, s: &Schedule) -> Backoff {
        let base = match self.retry {
            RetryKind::Immediate => Duration::ZERO,
            _ => s.base,
        };
        Backoff {
            base,
            multiplier: 2.0,
            cap: s.cap,
            jitter: self.retry.jitter(),
        }
    }

    /// Max attempts under `s` (1 for `none`; `u32::MAX` for unlimited).
    pub fn max_attempts(&self, s: &Schedule) -> u32 {
        match self.retry {
            RetryKind::None => 1,
            _ => s.attempts.unwrap_or(u32::MAX),
        }
    }

    /// The guardrails of one client process, `None` for a strategy without
    /// any: the library's defaults (see [`guardrail_settings`] for them in
    /// words). The
    /// breaker's open-period jitter is seeded from `seed` and the process
    /// number, so a run replays exactly while processes still differ.
    /// Breaker state changes go to `observer`.
    pub fn guardrails(
        &self,
        seed: u64,
        process: u64,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Option<Guardrails>, SimError> {
        if !self.has_guardrails() {
            return Ok(None);
        }
        let mut g = Guardrails::new();
        if let Some(o) = observer {
            g = g.observer(o);
        }
        if self.budget {
            g = g.budget(budget());
        }
        if self.breaker {
            g = g.breaker(seeded_breaker(seed, process)?);
        }
        if self.throttle {
            g = g.throttle(throttle());
        }
        Ok(Some(g))
    }

    /// One client's policy: this strategy's backoff and attempts under `s`,
    /// the client process's `guardrails` (see [`Strategy::guardrails`]), and
    /// `observer` for its events.
    pub fn policy(
        &self,
        s: &Schedule,
        guardrails: Option<Arc<Guardrails>>,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Policy, SimError> {
        let mut b = Policy::builder()
            .backoff(self.backoff(s))
            .max_attempts(self.max_attempts(s))
            .measure_latency(s.measure_latency);
        if let Some(t) = s.attempt_timeout {
            b = b.attempt_timeout(t);
        }
        if let Some(g) = guardrails {
            b = b.guardrail(g);
        }
        if let Some(o) = observer {
            b = b.observer(o);
        }
        b.build()
            .map_err(|e| SimError::new("strategy", format!("{self}: {e}")))
    }

    /// Checks that this strategy builds a policy under `s`.
    pub fn check(&self, s: &Schedule) -> Result<(), SimError> {
        self.policy(s, None, None).map(drop)
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

/// The budget every `+budget` strategy gets.
fn budget() -> RatioBudget {
    RatioBudget::default()
}

/// Client process `process`'s breaker in the run seeded `seed`: its open
/// periods replay with the run and differ between processes.
fn seeded_breaker(seed: u64, process: u64) -> Result<Breaker, SimError> {
    Breaker::new(BreakerConfig {
        seed: Some(mix(seed, 0xB4EA_0000 + process)),
        ..Default::default()
    })
    .map_err(|e| SimError::new("strategy", e.to_string()))
}

/// The throttle every `+throttle` strategy gets.
fn throttle() -> Throttle {
    Throttle::default()
}

/// What `+budget`, `+breaker` and `+throttle` are, in words read from the
/// library objects a strategy is given: `(guardrail, settings)`.
///
/// ```
/// let s = stagger_sim::guardrail_settings();
/// assert_eq!(s[0].0, "+budget");
/// assert!(s[0].1.contains("10 % of requests"));
/// ```
pub fn guardrail_settings() -> [(&'static str, String); 3] {
    [
        ("+budget", budget().to_string()),
        ("+breaker", Breaker::default().to_string()),
        ("+throttle", throttle().to_string()),
    ]
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

    fn schedule() -> Schedule {
        Schedule {
            attempts: Some(5),
            base: Duration::from_millis(100),
            cap: Duration::from_secs(10),
            attempt_timeout: Some(Duration::from_millis(500)),
            measure_latency: true,
        }
    }

    #[test]
    fn immediate_never_waits_and_none_never_retries() {
        let s = schedule();
        let p = "immediate"
            .parse::<Strategy>()
            .unwrap()
            .policy(&s, None, None);
        let p = p.unwrap();
        assert_eq!(p.backoff().backoff(1), Duration::ZERO);
        assert_eq!(p.max_attempts(), 5);
        assert_eq!(p.attempt_timeout(), Some(Duration::from_millis(500)));
        let p = "none".parse::<Strategy>().unwrap().policy(&s, None, None);
        assert_eq!(p.unwrap().max_attempts(), 1);
    }

    #[test]
    fn guardrails_are_built_only_when_asked_for() {
        let full: Strategy = "full".parse().unwrap();
        assert!(full.guardrails(1, 0, None).unwrap().is_none());
        let g = "full+budget+breaker".parse::<Strategy>().unwrap();
        let g = g.guardrails(1, 0, None).unwrap().unwrap();
        let parts = format!("{g:?}");
        assert!(parts.contains("budget: Some"), "{parts}");
        assert!(parts.contains("breaker: Some"), "{parts}");
        assert!(parts.contains("throttle: None"), "{parts}");
    }

    /// The game-day's copy of this constructor once built its pods'
    /// breakers unseeded, so the same game-day opened them for different
    /// times on every run. Seeded from the run and the process, they replay
    /// and still differ between processes.
    #[test]
    fn breakers_are_seeded_from_the_run_and_the_process() {
        use stagger::{Class, Outcome};
        let s: Strategy = "full+breaker".parse().unwrap();
        let open_for = |seed: u64, process: u64| {
            assert!(s.guardrails(seed, process, None).unwrap().is_some());
            let b = seeded_breaker(seed, process).unwrap();
            let t0 = std::time::Instant::now();
            let failed = Outcome::Failure(Class::Transient.into());
            // Fail calls until it opens (a run of failures or the rate).
            for _ in 0..20 {
                let Ok(permit) = b.acquire(t0) else { break };
                b.record(permit, &failed, None, t0);
            }
            b.acquire(t0).unwrap_err().retry_in
        };
        assert_eq!(open_for(7, 3), open_for(7, 3));
        assert_ne!(open_for(7, 3), open_for(7, 4));
        assert_ne!(open_for(7, 3), open_for(8, 3));
    }

    #[test]
    fn a_misspelt_guardrail_names_the_entry_as_written() {
        let e = Strategy::parse_list("none,full+budgett").unwrap_err();
        assert!(e.problem().contains("`full+budgett`"), "{}", e.problem());
    }

    #[test]
    fn bad_names_name_the_flag() {
        for s in [
            "",
            "fast",
            "full+cache",
            "full,,+",
            "full,,none",
            ",full",
            "full,",
        ] {
            assert_eq!(
                Strategy::parse_list(s).unwrap_err().flag(),
                "strategy",
                "{s}"
            );
        }
    }
}
