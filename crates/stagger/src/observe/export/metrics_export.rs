//! The `metrics` facade exporter: [`MetricsObserver`] and the contract
//! table it registers.

use metrics::{Label, Unit};

use crate::guardrails::event::{BreakerState, Event, Observer, ShedReason, CLASSES};
use crate::observe::sli::{SliSnapshot, SliState};
use crate::outcome::{Class, StopReason};
use crate::priority::Priority;

/// Sends every event to the `metrics` facade under the names of the
/// [metrics contract](super#the-metrics-contract).
///
/// Give it the dependency the policy guards, so a fleet's rules can
/// compute the retry ratio per service and dependency:
///
/// ```
/// use stagger::export::MetricsObserver;
/// use stagger::Policy;
/// use std::sync::Arc;
///
/// // After installing a recorder (a Prometheus exporter, say):
/// MetricsObserver::describe();
/// let observer = MetricsObserver::for_dependency("payments");
/// let policy = Policy::builder().observer(Arc::new(observer)).build().unwrap();
/// # let _ = policy;
/// ```
///
/// A policy's [`Guardrails`](crate::guardrails::Guardrails) report budget refusals
/// and breaker transitions to their own observer: give them the same
/// one (`Guardrails::new().observer(...)`).
#[derive(Debug, Clone, Default)]
pub struct MetricsObserver {
    labels: Vec<Label>,
}

/// Every metric name of the contract, its kind, unit and help text.
const CONTRACT: [(&str, Kind, Unit, &str); 20] = [
    (
        "stagger_logical_requests_total",
        Kind::Counter,
        Unit::Count,
        "Logical requests: calls made, refused before their first attempt or not.",
    ),
    (
        "stagger_attempts_total",
        Kind::Counter,
        Unit::Count,
        "Attempts started, first attempts included.",
    ),
    (
        "stagger_retries_total",
        Kind::Counter,
        Unit::Count,
        "Retries sent (attempts 2 and later), by the class of the failure retried.",
    ),
    (
        "stagger_failures_total",
        Kind::Counter,
        Unit::Count,
        "Failed attempts, by class, whether or not a retry followed.",
    ),
    (
        "stagger_stops_total",
        Kind::Counter,
        Unit::Count,
        "Calls ended, by stop reason (success included).",
    ),
    (
        "stagger_budget_refusals_total",
        Kind::Counter,
        Unit::Count,
        "Retries a retry budget refused.",
    ),
    (
        "stagger_breaker_transitions_total",
        Kind::Counter,
        Unit::Count,
        "Circuit breaker state changes.",
    ),
    (
        "stagger_breaker_state",
        Kind::Gauge,
        Unit::Count,
        "Circuit breaker state: 0 closed, 1 open, 2 half-open, 3 forced open, -1 disabled, -2 metrics-only.",
    ),
    (
        "stagger_hints_total",
        Kind::Counter,
        Unit::Count,
        "Server hints used to set a wait, or ignored as invalid.",
    ),
    (
        "stagger_retry_delay_seconds",
        Kind::Histogram,
        Unit::Seconds,
        "Wait before each retry; its sum is the time slept.",
    ),
    (
        "stagger_hedges_total",
        Kind::Counter,
        Unit::Count,
        "Hedges sent: attempts started while earlier ones of the call still ran.",
    ),
    (
        "stagger_hedges_won_total",
        Kind::Counter,
        Unit::Count,
        "Hedged calls whose answer came from a hedge.",
    ),
    (
        "stagger_transparent_retries_total",
        Kind::Counter,
        Unit::Count,
        "Transparent retries sent: attempts after one that never left the client.",
    ),
    (
        "stagger_breaker_refused_calls_total",
        Kind::Counter,
        Unit::Count,
        "Calls an open circuit breaker refused before their first attempt.",
    ),
    (
        "stagger_shed_total",
        Kind::Counter,
        Unit::Count,
        "Requests a server layer turned away unstarted, by reason.",
    ),
    (
        "stagger_shed_by_priority_total",
        Kind::Counter,
        Unit::Count,
        "Requests a server layer shedding by priority turned away, by level and reason.",
    ),
    (
        "stagger_cpu_utilisation",
        Kind::Gauge,
        Unit::Count,
        "The CPU trigger's smoothed CPU use, as a share of the process's allowance.",
    ),
    (
        "stagger_shed_rate",
        Kind::Gauge,
        Unit::Count,
        "The share of arriving work the CPU trigger's controller sheds.",
    ),
    (
        "stagger_retry_ratio",
        Kind::Gauge,
        Unit::Count,
        "Retries per logical request over the last minute (this process).",
    ),
    (
        "stagger_sli_alarm",
        Kind::Gauge,
        Unit::Count,
        "Retry-ratio SLI: 0 healthy, 1 elevated, 2 alarm.",
    ),
];

/// The state changes a breaker makes.
const TRANSITIONS: [(BreakerState, BreakerState); 4] = [
    (BreakerState::Closed, BreakerState::Open),
    (BreakerState::Open, BreakerState::HalfOpen),
    (BreakerState::HalfOpen, BreakerState::Closed),
    (BreakerState::HalfOpen, BreakerState::Open),
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricsObserver {
    /// No constant labels. Prefer [`for_dependency`](Self::for_dependency):
    /// the shipped rules group by the `dependency` label.
    pub fn new() -> Self {
        Self::default()
    }

    /// Labels every metric `dependency="<name>"`: the dependency the
    /// policy guards (`"payments"`, `"postgres"`).
    pub fn for_dependency(name: impl Into<String>) -> Self {
        Self::new().label("dependency", name)
    }

    /// Adds a label carried by every metric (for example the simulated
    /// process a series comes from, when several share one exporter).
    pub fn label(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.labels.push(Label::new(key, value.into()));
        self
    }

    /// Every metric name of the contract, in the order of the table.
    pub fn metric_names() -> impl Iterator<Item = &'static str> {
        CONTRACT.iter().map(|(name, ..)| *name)
    }

    /// Registers the help text and unit of every metric with the
    /// installed recorder (a Prometheus exporter prints them as
    /// `# HELP`). Call it once, after installing the recorder.
    pub fn describe() {
        for (name, kind, unit, help) in CONTRACT {
            match kind {
                Kind::Counter => metrics::describe_counter!(name, unit, help),
                Kind::Gauge => metrics::describe_gauge!(name, unit, help),
                Kind::Histogram => metrics::describe_histogram!(name, unit, help),
            }
        }
    }

    /// Registers every series of the contract that is known in
    /// advance, with this observer's labels, at 0 (the breaker closed),
    /// without changing one that already counts. A policy built with
    /// the observer does it ([`Observer::on_attach`]); call it yourself
    /// when you feed the observer events by hand.
    pub fn register_series(&self) {
        let zero = |name: &'static str, extra: &[(&'static str, &'static str)]| {
            metrics::counter!(name, self.with(extra)).increment(0);
        };
        zero("stagger_logical_requests_total", &[]);
        zero("stagger_attempts_total", &[]);
        zero("stagger_budget_refusals_total", &[]);
        // A retry follows only a failure that may clear.
        for class in [Class::Transient, Class::Unknown, Class::OnlyWithHint] {
            zero("stagger_retries_total", &[("cause", class.as_str())]);
        }
        for class in CLASSES {
            zero("stagger_failures_total", &[("class", class.as_str())]);
        }
        for reason in StopReason::ALL {
            zero("stagger_stops_total", &[("reason", reason.as_str())]);
        }
        for (from, to) in TRANSITIONS {
            zero(
                "stagger_breaker_transitions_total",
                &[("from", from.as_str()), ("to", to.as_str())],
            );
        }
        for outcome in ["used", "invalid"] {
            zero("stagger_hints_total", &[("outcome", outcome)]);
        }
        zero("stagger_hedges_total", &[]);
        zero("stagger_hedges_won_total", &[]);
        zero("stagger_transparent_retries_total", &[]);
        zero("stagger_breaker_refused_calls_total", &[]);
        for reason in ShedReason::ALL {
            zero("stagger_shed_total", &[("reason", reason.as_str())]);
        }
        // The named levels from the first scrape; a numbered one appears
        // when it is first shed.
        for p in Priority::all().take(4) {
            for reason in [ShedReason::Retry, ShedReason::FirstAttempt, ShedReason::Cpu] {
                zero(
                    "stagger_shed_by_priority_total",
                    &[("priority", p.as_str()), ("reason", reason.as_str())],
                );
            }
        }
        metrics::gauge!("stagger_cpu_utilisation", self.with(&[])).increment(0.0);
        metrics::gauge!("stagger_shed_rate", self.with(&[])).increment(0.0);
        // Adding 0 registers the gauge at 0 (closed) and leaves a state
        // already set alone.
        metrics::gauge!("stagger_breaker_state", self.with(&[])).increment(0.0);
        let _ = metrics::histogram!("stagger_retry_delay_seconds", self.with(&[]));
    }

    fn with(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
        let mut labels = self.labels.clone();
        labels.extend(extra.iter().map(|(k, v)| Label::new(*k, *v)));
        labels
    }

    fn count(&self, name: &'static str, extra: &[(&'static str, &'static str)]) {
        metrics::counter!(name, self.with(extra)).increment(1);
    }

    fn logical_request(&self) {
        metrics::counter!("stagger_logical_requests_total", self.with(&[])).increment(1);
    }

    /// Exports an SLI reading as the `stagger_retry_ratio` and
    /// `stagger_sli_alarm` gauges.
    pub fn record_sli(&self, snapshot: &SliSnapshot) {
        metrics::gauge!("stagger_retry_ratio", self.labels.clone()).set(snapshot.ratio);
        let level = match snapshot.state {
            SliState::Healthy => 0.0,
            SliState::Elevated => 1.0,
            SliState::Alarm => 2.0,
        };
        metrics::gauge!("stagger_sli_alarm", self.labels.clone()).set(level);
    }
}

impl MetricsObserver {
    /// A call stopped after `attempts` attempts, for `reason`.
    fn stopped(&self, reason: StopReason, attempts: u32) {
        // Refused before its first attempt: still one call.
        if attempts == 0 {
            self.logical_request();
            if reason == StopReason::BreakerOpen {
                self.count("stagger_breaker_refused_calls_total", &[]);
            }
        }
        metrics::counter!(
            "stagger_stops_total",
            self.with(&[("reason", reason.as_str())])
        )
        .increment(1);
    }

    /// The breaker moved from `from` to `to`.
    fn breaker_changed(&self, from: BreakerState, to: BreakerState) {
        metrics::counter!(
            "stagger_breaker_transitions_total",
            self.with(&[("from", from.as_str()), ("to", to.as_str())])
        )
        .increment(1);
        let level = match to {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
            // Positive levels refuse some calls, so rules that alert on
            // `> 0` see a forced-open breaker and not a switched-off one.
            BreakerState::ForcedOpen => 3.0,
            BreakerState::Disabled => -1.0,
            BreakerState::MetricsOnly => -2.0,
        };
        metrics::gauge!("stagger_breaker_state", self.with(&[])).set(level);
    }
}

impl Observer for MetricsObserver {
    fn on_attach(&self) {
        self.register_series();
    }

    fn on_event(&self, event: &Event) {
        match *event {
            Event::AttemptStarted { attempt } => {
                if attempt == 1 {
                    self.logical_request();
                }
                metrics::counter!("stagger_attempts_total", self.with(&[])).increment(1);
            }
            Event::RetryStarted { cause, .. } => {
                metrics::counter!(
                    "stagger_retries_total",
                    self.with(&[("cause", cause.as_str())])
                )
                .increment(1);
            }
            Event::RetryScheduled { delay, .. } => {
                metrics::histogram!("stagger_retry_delay_seconds", self.with(&[]))
                    .record(delay.as_secs_f64());
            }
            Event::HedgeStarted { .. } => self.count("stagger_hedges_total", &[]),
            Event::HedgeWon { .. } => self.count("stagger_hedges_won_total", &[]),
            Event::TransparentRetryStarted { .. } => {
                self.count("stagger_transparent_retries_total", &[]);
            }
            Event::Shed { reason, priority } => {
                self.count("stagger_shed_total", &[("reason", reason.as_str())]);
                if let Some(p) = priority {
                    self.count(
                        "stagger_shed_by_priority_total",
                        &[("priority", p.as_str()), ("reason", reason.as_str())],
                    );
                }
            }
            Event::Overload {
                utilisation,
                shed_rate,
            } => {
                metrics::gauge!("stagger_cpu_utilisation", self.with(&[])).set(utilisation);
                metrics::gauge!("stagger_shed_rate", self.with(&[])).set(shed_rate);
            }
            Event::AttemptFailed { class, .. } => {
                metrics::counter!(
                    "stagger_failures_total",
                    self.with(&[("class", class.as_str())])
                )
                .increment(1);
            }
            Event::Stopped { reason, attempts } => self.stopped(reason, attempts),
            Event::BudgetRefused { .. } => {
                metrics::counter!("stagger_budget_refusals_total", self.with(&[])).increment(1);
            }
            Event::BreakerStateChanged { from, to } => self.breaker_changed(from, to),
            // Told by tracing; the counts behind it are the policy's own.
            Event::BreakerWouldOpen => {}
            Event::HintUsed { .. } => {
                metrics::counter!("stagger_hints_total", self.with(&[("outcome", "used")]))
                    .increment(1);
            }
            Event::HintInvalid { .. } => {
                metrics::counter!("stagger_hints_total", self.with(&[("outcome", "invalid")]))
                    .increment(1);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::MetricsObserver;
    use crate::guardrails::event::{BreakerState, Event, Observer};
    use crate::outcome::StopReason;

    /// Remembers every counter increment as `name{labels} += n`.
    #[derive(Default)]
    struct Log(Arc<Mutex<Vec<String>>>);

    struct Entry(String, Arc<Mutex<Vec<String>>>);

    impl CounterFn for Entry {
        fn increment(&self, n: u64) {
            self.1.lock().unwrap().push(format!("{} += {n}", self.0));
        }
        fn absolute(&self, _: u64) {}
    }

    impl Recorder for Log {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            Counter::from_arc(Arc::new(Entry(
                format!("{}{{{}}}", key.name(), labels.join(",")),
                self.0.clone(),
            )))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn events_become_counters_with_their_labels() {
        let log = Log::default();
        let lines = log.0.clone();
        let o = MetricsObserver::new().label("dependency", "db");
        metrics::with_local_recorder(&log, || {
            o.on_event(&Event::AttemptStarted { attempt: 1 });
            o.on_event(&Event::RetryScheduled {
                attempt: 1,
                delay: Duration::from_millis(5),
                cause: crate::Class::Transient,
                elapsed: Duration::ZERO,
            });
            o.on_event(&Event::RetryStarted {
                attempt: 2,
                cause: crate::Class::Transient,
            });
            o.on_event(&Event::Stopped {
                reason: StopReason::Budget,
                attempts: 2,
            });
            o.on_event(&Event::Stopped {
                reason: StopReason::BreakerOpen,
                attempts: 0,
            });
            o.on_event(&Event::BreakerStateChanged {
                from: BreakerState::Closed,
                to: BreakerState::Open,
            });
        });
        let lines = lines.lock().unwrap().clone();
        assert_eq!(
            lines,
            [
                "stagger_logical_requests_total{dependency=db} += 1",
                "stagger_attempts_total{dependency=db} += 1",
                "stagger_retries_total{dependency=db,cause=transient} += 1",
                "stagger_stops_total{dependency=db,reason=budget} += 1",
                "stagger_logical_requests_total{dependency=db} += 1",
                "stagger_breaker_refused_calls_total{dependency=db} += 1",
                "stagger_stops_total{dependency=db,reason=breaker_open} += 1",
                "stagger_breaker_transitions_total{dependency=db,from=closed,to=open} += 1",
            ]
        );
    }
}
