//! Events, observers and counters.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::outcome::StopReason;
use crate::outcome::{Class, Hint};
use crate::priority::Priority;

/// State of a circuit breaker, as reported in events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Calls flow; outcomes are counted.
    Closed,
    /// Calls fail fast.
    Open,
    /// A limited number of trial calls are let through.
    HalfOpen,
    /// Set by an operator: every call passes and nothing is recorded.
    Disabled,
    /// Set by an operator: every call passes; outcomes are still counted,
    /// so the breaker shows what it would do without refusing anything.
    MetricsOnly,
    /// Set by an operator: every call is refused until the breaker is
    /// released.
    ForcedOpen,
}

impl BreakerState {
    /// The lower-case name used in events and JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Disabled => "disabled",
            BreakerState::MetricsOnly => "metrics_only",
            BreakerState::ForcedOpen => "forced_open",
        }
    }
}

/// Why a server layer turned a request away without starting its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShedReason {
    /// A retry, shed first: retries may use only part of the capacity.
    Retry,
    /// A first attempt: not even the share kept for first attempts was free.
    FirstAttempt,
    /// Its caller's deadline had passed (on arrival or while queued):
    /// nobody waits for the answer.
    Deadline,
    /// The CPU trigger shed it: the process was above its CPU threshold
    /// and the controller's shed rate reached this request's level.
    Cpu,
}

impl ShedReason {
    /// Every reason, in a fixed order.
    pub const ALL: [ShedReason; 4] = [
        ShedReason::Retry,
        ShedReason::FirstAttempt,
        ShedReason::Deadline,
        ShedReason::Cpu,
    ];

    /// The snake_case name used in metrics and JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            ShedReason::Retry => "retry",
            ShedReason::FirstAttempt => "first_attempt",
            ShedReason::Deadline => "deadline",
            ShedReason::Cpu => "cpu",
        }
    }
}

/// Something the decision engine decided or saw.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// Attempt `attempt` (1-based) is about to run.
    AttemptStarted {
        /// Its number.
        attempt: u32,
    },
    /// Attempt `attempt` failed and a retry was scheduled after `delay`.
    RetryScheduled {
        /// The attempt that failed.
        attempt: u32,
        /// How long the front-end will wait.
        delay: Duration,
        /// Why it failed.
        cause: Class,
        /// Time since the call's first attempt started (or since its first
        /// failure, when nothing read the clock earlier).
        elapsed: Duration,
    },
    /// Attempt `attempt` (2 or later) started as the retry the engine
    /// scheduled after a failure of class `cause`. Emitted right after its
    /// [`AttemptStarted`](Event::AttemptStarted): a retry counts when it is
    /// sent, so one scheduled but never sent (the breaker opened, the
    /// throttle refused, the caller gave up during the wait) is not a retry
    /// the dependency received. Hedges and transparent retries are not
    /// retries and do not emit it.
    RetryStarted {
        /// Its number.
        attempt: u32,
        /// The class of the failure it retries.
        cause: Class,
    },
    /// Attempt `attempt` started as a hedge: sent while earlier attempts of
    /// the call still run, with no failure to retry (the hedge delay
    /// passed).
    HedgeStarted {
        /// Its number.
        attempt: u32,
    },
    /// A hedged call's answer came from attempt `attempt`, which started as
    /// a hedge: the hedge spared the caller the wait for the earlier
    /// attempts. With [`HedgeStarted`](Event::HedgeStarted) it tells what
    /// hedging buys (hedges won ÷ hedges sent) for the load it adds.
    HedgeWon {
        /// The hedge that answered.
        attempt: u32,
    },
    /// Attempt `attempt` started as a transparent retry: the attempt before
    /// it never left the client, so the dependency receives it as its
    /// first (gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)).
    TransparentRetryStarted {
        /// Its number.
        attempt: u32,
    },
    /// A server layer ([`ShedLayer`](crate::tower::ShedLayer)) turned a
    /// request away unstarted.
    Shed {
        /// Why.
        reason: ShedReason,
        /// The request's level, when the layer sheds by priority.
        priority: Option<Priority>,
    },
    /// The CPU trigger's reading (one per sample, off the request path).
    Overload {
        /// The process's CPU use as a share of its allowance, smoothed.
        utilisation: f64,
        /// The share of arriving work the controller sheds (0 to 1).
        shed_rate: f64,
    },
    /// Attempt `attempt` failed with `class` (reported whether or not a
    /// retry follows, so failures can be counted by class).
    AttemptFailed {
        /// The attempt that failed.
        attempt: u32,
        /// Its class.
        class: Class,
    },
    /// The call stopped (success included).
    Stopped {
        /// Why.
        reason: StopReason,
        /// Attempts made.
        attempts: u32,
    },
    /// A retry budget refused a retry.
    BudgetRefused {
        /// The attempt whose retry was refused.
        attempt: u32,
    },
    /// A circuit breaker changed state.
    BreakerStateChanged {
        /// Before.
        from: BreakerState,
        /// After.
        to: BreakerState,
    },
    /// A breaker in [`MetricsOnly`](BreakerState::MetricsOnly) met its
    /// rule to open: it would have opened here, had it been in charge. It
    /// lets every call through still, and judges afresh from this point.
    BreakerWouldOpen,
    /// A server hint set the wait.
    HintUsed {
        /// The hint.
        hint: Hint,
        /// The wait it led to (hint plus jitter).
        wait: Duration,
    },
    /// A server hint was malformed and ignored; the backoff was used.
    HintInvalid {
        /// The attempt that carried it.
        attempt: u32,
    },
}

/// Events, observers and counters.
///
/// Every decision the engine makes is reported as an [`Event`] to the
/// policy's [`Observer`], so a service can count, log or export what its
/// retries do. [`Stats`] is a ready observer that keeps the counters of
/// docs/behaviour.md §9 in atomics; closures are observers too.
///
/// ```
/// use stagger::{Call, Class, Decision, Policy};
/// use stagger::export::Stats;
/// use std::sync::Arc;
/// use std::time::Instant;
///
/// let stats = Arc::new(Stats::new());
/// let policy = Policy::builder().observer(stats.clone()).build().unwrap();
/// let mut call = Call::seeded(1);
/// let now = Instant::now();
/// policy.start_attempt(&mut call, now).unwrap();
/// assert!(matches!(policy.decide(&mut call, Class::Transient, now), Decision::Retry { .. }));
/// policy.start_attempt(&mut call, now).unwrap();
/// policy.decide(&mut call, stagger::Outcome::Success, now);
/// let s = stats.snapshot();
/// assert_eq!((s.logical_requests, s.attempts, s.retries), (1, 2, 1));
/// assert_eq!(s.amplification(), 2.0);
/// ```
///
/// Receives events. Must be cheap and must not block: it runs inline in the
/// decision.
pub trait Observer: Send + Sync {
    /// Called for every event.
    fn on_event(&self, event: &Event);

    /// Called when a policy or guardrails is built with this observer,
    /// before any event: an exporter registers here the series it knows in
    /// advance, so they are exported (at 0) from the first scrape rather
    /// than from the first event. May be called more than once (a policy
    /// and its guardrails share an observer); does nothing by default.
    fn on_attach(&self) {}
}

impl<F: Fn(&Event) + Send + Sync> Observer for F {
    fn on_event(&self, event: &Event) {
        self(event)
    }
}

impl<O: Observer + ?Sized> Observer for Arc<O> {
    fn on_event(&self, event: &Event) {
        (**self).on_event(event)
    }

    fn on_attach(&self) {
        (**self).on_attach()
    }
}

/// Sends every event to each observer in turn.
impl Observer for Vec<Arc<dyn Observer>> {
    fn on_event(&self, event: &Event) {
        for o in self {
            o.on_event(event);
        }
    }

    fn on_attach(&self) {
        for o in self {
            o.on_attach();
        }
    }
}

/// Every class of failure, in the order the counters and the exporters
/// list them.
pub(crate) const CLASSES: [Class; 5] = [
    Class::Transient,
    Class::Unknown,
    Class::OnlyWithHint,
    Class::Permanent,
    Class::Cancelled,
];

fn class_index(c: Class) -> usize {
    CLASSES.iter().position(|x| *x == c).unwrap_or(0)
}

/// Counters of docs/behaviour.md §9, updated with relaxed atomics. Printed
/// with `{:?}` it shows its [`snapshot`](Stats::snapshot), each count by
/// name; `{}` on the snapshot is one line of the counts that are not zero.
///
/// ```
/// let stats = stagger::export::Stats::new();
/// let said = format!("{:?}", stats);
/// assert!(said.contains("failed_by_class: [(Transient, 0)"), "{said}");
/// assert_eq!(stats.snapshot().to_string(), "0 requests, 0 attempts (0.00×), 0 retries");
/// ```
#[derive(Default)]
pub struct Stats {
    logical_requests: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    slept_ns: AtomicU64,
    failures: [AtomicU64; 5],
    failed: [AtomicU64; 5],
    stops: [AtomicU64; StopReason::ALL.len()],
    hints_used: AtomicU64,
    hints_invalid: AtomicU64,
    budget_refusals: AtomicU64,
    breaker_opens: AtomicU64,
    hedges: AtomicU64,
    hedges_won: AtomicU64,
    transparent_retries: AtomicU64,
}

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    /// Logical requests: calls made, whether their first attempt started
    /// or a guardrail (breaker, throttle) or the deadline refused it.
    pub logical_requests: u64,
    /// Attempts started.
    pub attempts: u64,
    /// Retries sent: attempts 2 and later that started as a scheduled
    /// retry (one scheduled but never sent is not counted).
    pub retries: u64,
    /// Total wait scheduled between attempts.
    pub slept: Duration,
    /// Failed attempts whose retry was sent, by class.
    pub retried_by_class: Vec<(Class, u64)>,
    /// Every failed attempt, by class (retried or not).
    pub failed_by_class: Vec<(Class, u64)>,
    /// Calls stopped, by reason.
    pub stops: Vec<(StopReason, u64)>,
    /// Hints that set a wait.
    pub hints_used: u64,
    /// Hints ignored as malformed.
    pub hints_invalid: u64,
    /// Retries refused by a budget.
    pub budget_refusals: u64,
    /// Times a breaker opened.
    pub breaker_opens: u64,
    /// Hedges sent (attempts started while earlier ones still ran).
    pub hedges: u64,
    /// Hedged calls a hedge won (its answer was the call's).
    pub hedges_won: u64,
    /// Transparent retries sent (after an attempt that never left).
    pub transparent_retries: u64,
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The counters by name and label, not as bare arrays.
        let s = self.snapshot();
        f.debug_struct("Stats")
            .field("logical_requests", &s.logical_requests)
            .field("attempts", &s.attempts)
            .field("retries", &s.retries)
            .field("slept", &s.slept)
            .field("retried_by_class", &s.retried_by_class)
            .field("failed_by_class", &s.failed_by_class)
            .field("stops", &s.stops)
            .field("hints_used", &s.hints_used)
            .field("hints_invalid", &s.hints_invalid)
            .field("budget_refusals", &s.budget_refusals)
            .field("breaker_opens", &s.breaker_opens)
            .field("hedges", &s.hedges)
            .field("transparent_retries", &s.transparent_retries)
            .finish()
    }
}

/// One line, each count named, zeros after the first three left out:
/// `12 requests, 20 attempts (1.67×), 8 retries, slept 1.2s, failed:
/// transient 9, stops: success 10 attempts_exhausted 2`.
impl fmt::Display for StatsSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, {} attempts ({:.2}×), {} retries",
            self.logical_requests,
            self.attempts,
            self.amplification(),
            self.retries
        )?;
        if !self.slept.is_zero() {
            write!(f, ", slept {:?}", self.slept)?;
        }
        let mut list = |name: &str, items: Vec<(&str, u64)>| -> fmt::Result {
            let items: Vec<String> = items
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            if items.is_empty() {
                Ok(())
            } else {
                write!(f, ", {name}: {}", items.join(" "))
            }
        };
        let classes = |v: &[(Class, u64)]| v.iter().map(|(c, n)| (c.as_str(), *n)).collect();
        list("retried", classes(&self.retried_by_class))?;
        list("failed", classes(&self.failed_by_class))?;
        list(
            "stops",
            self.stops.iter().map(|(r, n)| (r.as_str(), *n)).collect(),
        )?;
        list(
            "other",
            vec![
                ("hints_used", self.hints_used),
                ("hints_invalid", self.hints_invalid),
                ("budget_refusals", self.budget_refusals),
                ("breaker_opens", self.breaker_opens),
                ("hedges", self.hedges),
                ("transparent_retries", self.transparent_retries),
            ],
        )
    }
}

impl StatsSnapshot {
    /// Attempts ÷ logical requests (0 with no requests).
    pub fn amplification(&self) -> f64 {
        ratio(self.attempts, self.logical_requests)
    }

    /// Retries ÷ logical requests (0 with no requests).
    pub fn retry_ratio(&self) -> f64 {
        ratio(self.retries, self.logical_requests)
    }

    /// Calls that stopped for `reason`.
    pub fn stopped(&self, reason: StopReason) -> u64 {
        self.stops
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Stats {
    /// All counters at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads every counter (each one atomically; the set is not a single
    /// atomic snapshot).
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            logical_requests: self.logical_requests.load(Relaxed),
            attempts: self.attempts.load(Relaxed),
            retries: self.retries.load(Relaxed),
            slept: Duration::from_nanos(self.slept_ns.load(Relaxed)),
            retried_by_class: CLASSES
                .iter()
                .zip(&self.failures)
                .map(|(c, n)| (*c, n.load(Relaxed)))
                .collect(),
            failed_by_class: CLASSES
                .iter()
                .zip(&self.failed)
                .map(|(c, n)| (*c, n.load(Relaxed)))
                .collect(),
            stops: StopReason::ALL
                .iter()
                .zip(&self.stops)
                .map(|(r, n)| (*r, n.load(Relaxed)))
                .collect(),
            hints_used: self.hints_used.load(Relaxed),
            hints_invalid: self.hints_invalid.load(Relaxed),
            budget_refusals: self.budget_refusals.load(Relaxed),
            breaker_opens: self.breaker_opens.load(Relaxed),
            hedges: self.hedges.load(Relaxed),
            hedges_won: self.hedges_won.load(Relaxed),
            transparent_retries: self.transparent_retries.load(Relaxed),
        }
    }
}

/// Adds `n` to a counter, stopping at `u64::MAX` instead of wrapping: a
/// counter that wrapped would report a tiny number after a huge one.
#[inline]
fn bump(counter: &AtomicU64, n: u64) {
    let _ = counter.fetch_update(Relaxed, Relaxed, |c| Some(c.saturating_add(n)));
}

impl Observer for Stats {
    fn on_event(&self, event: &Event) {
        match *event {
            Event::AttemptStarted { attempt } => {
                if attempt == 1 {
                    bump(&self.logical_requests, 1);
                }
                bump(&self.attempts, 1);
            }
            Event::RetryScheduled { delay, .. } => {
                let ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
                bump(&self.slept_ns, ns);
            }
            Event::RetryStarted { cause, .. } => {
                bump(&self.retries, 1);
                bump(&self.failures[class_index(cause)], 1);
            }
            Event::AttemptFailed { class, .. } => {
                bump(&self.failed[class_index(class)], 1);
            }
            Event::HedgeStarted { .. } => bump(&self.hedges, 1),
            Event::HedgeWon { .. } => bump(&self.hedges_won, 1),
            Event::TransparentRetryStarted { .. } => bump(&self.transparent_retries, 1),
            // A server layer's event: not a client's count.
            Event::Shed { .. } | Event::Overload { .. } | Event::BreakerWouldOpen => {}
            Event::Stopped { reason, attempts } => {
                // A call refused before its first attempt (an open breaker,
                // throttling) is still a logical request.
                if attempts == 0 {
                    bump(&self.logical_requests, 1);
                }
                bump(&self.stops[reason.index()], 1);
            }
            Event::BudgetRefused { .. } => {
                bump(&self.budget_refusals, 1);
            }
            Event::BreakerStateChanged { to, .. } => {
                if to == BreakerState::Open {
                    bump(&self.breaker_opens, 1);
                }
            }
            Event::HintUsed { .. } => {
                bump(&self.hints_used, 1);
            }
            Event::HintInvalid { .. } => {
                bump(&self.hints_invalid, 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{:?}` on `Stats` printed `failures: [0, 1, 0, 0, 0]` and
    /// `stops: [3, 0, …]`: arrays nobody could read without the source.
    #[test]
    fn stats_print_each_count_by_name_not_as_bare_arrays() {
        let stats = Stats::new();
        stats.on_event(&Event::AttemptStarted { attempt: 1 });
        stats.on_event(&Event::AttemptFailed {
            attempt: 1,
            class: Class::Unknown,
        });
        stats.on_event(&Event::Stopped {
            reason: StopReason::AttemptsExhausted,
            attempts: 1,
        });
        let debug = format!("{stats:?}");
        assert!(debug.contains("(Unknown, 1)"), "{debug}");
        assert!(debug.contains("(AttemptsExhausted, 1)"), "{debug}");
        assert!(!debug.contains("[0, 1, 0"), "{debug}");
        let line = stats.snapshot().to_string();
        assert_eq!(
            line,
            "1 requests, 1 attempts (1.00×), 0 retries, failed: unknown 1, stops: attempts_exhausted 1"
        );
    }
}
