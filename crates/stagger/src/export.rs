//! Exporting events: the `metrics` facade (feature `metrics`) and `tracing`
//! (feature `tracing`).
//!
//! Both are [`Observer`](crate::Observer)s: attach one to a policy with
//! [`PolicyBuilder::observer`](crate::PolicyBuilder::observer), or several
//! with a `Vec<Arc<dyn Observer>>`. Neither dependency is in the default
//! build.
//!
//! Metric names (every one carries the observer's constant labels):
//!
//! | name | kind | labels |
//! |---|---|---|
//! | `stagger_logical_requests_total` | counter | |
//! | `stagger_attempts_total` | counter | |
//! | `stagger_retries_total` | counter | `cause` |
//! | `stagger_retry_delay_seconds` | histogram | |
//! | `stagger_stops_total` | counter | `reason` (SPEC §10 names) |
//! | `stagger_budget_refusals_total` | counter | |
//! | `stagger_breaker_transitions_total` | counter | `from`, `to` |
//! | `stagger_breaker_state` | gauge (0 closed, 1 open, 2 half-open) | |
//! | `stagger_hints_total` | counter | `outcome` (`used`, `invalid`) |
//! | `stagger_retry_ratio` | gauge | (from `MetricsObserver::record_sli`) |
//! | `stagger_sli_alarm` | gauge (0 healthy, 1 elevated, 2 alarm) | |

#[cfg(feature = "metrics")]
pub use self::metrics_export::MetricsObserver;
#[cfg(feature = "tracing")]
pub use self::tracing_export::TracingObserver;

#[cfg(feature = "metrics")]
mod metrics_export {
    use metrics::Label;

    use crate::event::{BreakerState, Event, Observer};
    use crate::sli::{SliSnapshot, SliState};

    /// Sends every event to the `metrics` facade (see the
    /// [module docs](super) for the names).
    ///
    /// ```
    /// use stagger::export::MetricsObserver;
    /// use stagger::Policy;
    /// use std::sync::Arc;
    ///
    /// let observer = MetricsObserver::new().label("dependency", "payments");
    /// let policy = Policy::builder().observer(Arc::new(observer)).build().unwrap();
    /// # let _ = policy;
    /// ```
    #[derive(Debug, Clone, Default)]
    pub struct MetricsObserver {
        labels: Vec<Label>,
    }

    impl MetricsObserver {
        /// No constant labels.
        pub fn new() -> Self {
            Self::default()
        }

        /// Adds a label carried by every metric (for example which
        /// dependency the policy guards).
        pub fn label(mut self, key: &'static str, value: impl Into<String>) -> Self {
            self.labels.push(Label::new(key, value.into()));
            self
        }

        fn with(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
            let mut labels = self.labels.clone();
            labels.extend(extra.iter().map(|(k, v)| Label::new(*k, *v)));
            labels
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

    impl Observer for MetricsObserver {
        fn on_event(&self, event: &Event) {
            match *event {
                Event::AttemptStarted { attempt } => {
                    if attempt == 1 {
                        metrics::counter!("stagger_logical_requests_total", self.with(&[]))
                            .increment(1);
                    }
                    metrics::counter!("stagger_attempts_total", self.with(&[])).increment(1);
                }
                Event::RetryScheduled { delay, cause, .. } => {
                    metrics::counter!(
                        "stagger_retries_total",
                        self.with(&[("cause", cause.as_str())])
                    )
                    .increment(1);
                    metrics::histogram!("stagger_retry_delay_seconds", self.with(&[]))
                        .record(delay.as_secs_f64());
                }
                Event::AttemptFailed { class, .. } => {
                    metrics::counter!(
                        "stagger_failures_total",
                        self.with(&[("class", class.as_str())])
                    )
                    .increment(1);
                }
                Event::Stopped { reason, .. } => {
                    metrics::counter!(
                        "stagger_stops_total",
                        self.with(&[("reason", reason.as_str())])
                    )
                    .increment(1);
                }
                Event::BudgetRefused { .. } => {
                    metrics::counter!("stagger_budget_refusals_total", self.with(&[])).increment(1);
                }
                Event::BreakerStateChanged { from, to } => {
                    metrics::counter!(
                        "stagger_breaker_transitions_total",
                        self.with(&[("from", from.as_str()), ("to", to.as_str())])
                    )
                    .increment(1);
                    let level = match to {
                        BreakerState::Closed => 0.0,
                        BreakerState::Open => 1.0,
                        BreakerState::HalfOpen => 2.0,
                    };
                    metrics::gauge!("stagger_breaker_state", self.with(&[])).set(level);
                }
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
}

#[cfg(feature = "tracing")]
mod tracing_export {
    use crate::event::{BreakerState, Event, Observer};
    use crate::outcome::StopReason;

    /// Emits every event as a `tracing` event with target `stagger`:
    /// attempts at TRACE, scheduled retries and hints at DEBUG, budget
    /// refusals and non-success stops at INFO, a breaker opening at WARN.
    ///
    /// ```
    /// use stagger::export::TracingObserver;
    /// use stagger::Policy;
    /// use std::sync::Arc;
    ///
    /// let policy = Policy::builder().observer(Arc::new(TracingObserver)).build().unwrap();
    /// # let _ = policy;
    /// ```
    #[derive(Debug, Clone, Copy, Default)]
    pub struct TracingObserver;

    impl Observer for TracingObserver {
        fn on_event(&self, event: &Event) {
            match *event {
                Event::AttemptStarted { attempt } => {
                    tracing::trace!(target: "stagger", attempt, "attempt started");
                }
                Event::RetryScheduled {
                    attempt,
                    delay,
                    cause,
                    elapsed,
                } => {
                    tracing::debug!(
                        target: "stagger",
                        attempt,
                        delay_ms = delay.as_secs_f64() * 1e3,
                        cause = cause.as_str(),
                        elapsed_ms = elapsed.as_secs_f64() * 1e3,
                        "retry scheduled"
                    );
                }
                Event::AttemptFailed { attempt, class } => {
                    tracing::debug!(target: "stagger", attempt, class = class.as_str(), "attempt failed");
                }
                Event::Stopped { reason, attempts } => {
                    if reason == StopReason::Success {
                        tracing::trace!(target: "stagger", reason = reason.as_str(), attempts, "stopped");
                    } else {
                        tracing::info!(target: "stagger", reason = reason.as_str(), attempts, "gave up");
                    }
                }
                Event::BudgetRefused { attempt } => {
                    tracing::info!(target: "stagger", attempt, "retry budget refused a retry");
                }
                Event::BreakerStateChanged { from, to } => {
                    if to == BreakerState::Open {
                        tracing::warn!(target: "stagger", from = from.as_str(), to = to.as_str(), "circuit breaker opened");
                    } else {
                        tracing::info!(target: "stagger", from = from.as_str(), to = to.as_str(), "circuit breaker state changed");
                    }
                }
                Event::HintUsed { hint, wait } => {
                    tracing::debug!(target: "stagger", hint = ?hint, wait_ms = wait.as_secs_f64() * 1e3, "server hint used");
                }
                Event::HintInvalid { attempt } => {
                    tracing::debug!(target: "stagger", attempt, "invalid server hint ignored");
                }
            }
        }
    }
}

#[cfg(all(test, feature = "metrics", not(loom)))]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use metrics::{
        Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use super::MetricsObserver;
    use crate::event::{BreakerState, Event, Observer};
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
            o.on_event(&Event::Stopped {
                reason: StopReason::Budget,
                attempts: 2,
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
                "stagger_breaker_transitions_total{dependency=db,from=closed,to=open} += 1",
            ]
        );
    }
}
