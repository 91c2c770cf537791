//! The `tracing` exporter: [`TracingObserver`].

use crate::guardrails::event::{BreakerState, Event, Observer};
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
            Event::RetryStarted { attempt, cause } => {
                tracing::trace!(target: "stagger", attempt, cause = cause.as_str(), "retry sent");
            }
            Event::HedgeStarted { attempt } => {
                tracing::trace!(target: "stagger", attempt, "hedge sent");
            }
            Event::HedgeWon { attempt } => {
                tracing::trace!(target: "stagger", attempt, "hedge won");
            }
            Event::TransparentRetryStarted { attempt } => {
                tracing::trace!(target: "stagger", attempt, "transparent retry sent");
            }
            Event::Shed { reason, priority } => {
                let priority = priority.map_or("", |p| p.as_str());
                tracing::debug!(target: "stagger", reason = reason.as_str(), priority, "request shed");
            }
            Event::Overload {
                utilisation,
                shed_rate,
            } => {
                tracing::trace!(target: "stagger", utilisation, shed_rate, "cpu trigger sample");
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
            Event::BreakerWouldOpen => {
                tracing::warn!(target: "stagger", state = "metrics_only", "circuit breaker would have opened");
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
