//! Exporting events: the `metrics` facade (feature `metrics`) and `tracing`
//! (feature `tracing`), and the in-process observers: running counts
//! ([`Stats`]) and the retry-ratio SLI window ([`SliWindow`]).
//!
//! Both are [`Observer`](crate::Observer)s: attach one to a policy with
//! [`PolicyBuilder::observer`](crate::PolicyBuilder::observer), or several
//! with a `Vec<Arc<dyn Observer>>`. Neither dependency is in the default
//! build.
//!
//! # The metrics contract
//!
//! The names, labels and units below are a stable contract: the Prometheus
//! rules and the Grafana dashboard shipped in `deploy/` query exactly these
//! names, and a test renders a Prometheus exposition of a policy's metrics
//! and checks that it holds exactly this set (`docs/metrics.md` in the
//! repository is the same table with examples). Every metric carries the
//! observer's constant labels; [`MetricsObserver::for_dependency`] sets the
//! one the rules group by, `dependency`. Which *service* and *instance* a
//! series comes from is left to the scraper (Prometheus's `job` and
//! `instance` target labels).
//!
//! | name | kind | unit | labels besides `dependency` |
//! |---|---|---|---|
//! | `stagger_logical_requests_total` | counter | calls (one per call, refused before its first attempt or not) | |
//! | `stagger_attempts_total` | counter | attempts | |
//! | `stagger_retries_total` | counter | retries sent (attempt 2 and later, counted when it starts) | `cause` (class of the failure retried) |
//! | `stagger_failures_total` | counter | failed attempts | `class` (`transient`, `unknown`, `only_with_hint`, `permanent`, `cancelled`) |
//! | `stagger_stops_total` | counter | calls | `reason` (stop reason: `success`, `not_retryable`, `attempts_exhausted`, `deadline`, `budget`, `breaker_open`, `throttled`, `hint_too_long`, `cancelled`) |
//! | `stagger_budget_refusals_total` | counter | retries refused | |
//! | `stagger_breaker_transitions_total` | counter | transitions | `from`, `to` (`closed`, `open`, `half_open`; set by an operator: `disabled`, `metrics_only`, `forced_open`) |
//! | `stagger_breaker_state` | gauge | 0 closed, 1 open, 2 half-open, 3 forced open; −1 disabled, −2 metrics-only (positive: some calls refused) | |
//! | `stagger_hints_total` | counter | hints | `outcome` (`used`, `invalid`) |
//! | `stagger_hedges_total` | counter | hedges sent | |
//! | `stagger_hedges_won_total` | counter | hedged calls a hedge answered | |
//! | `stagger_transparent_retries_total` | counter | transparent retries sent | |
//! | `stagger_breaker_refused_calls_total` | counter | calls refused before their first attempt | |
//! | `stagger_shed_total` | counter | requests shed by a server layer | `reason` (`retry`, `first_attempt`, `deadline`, `cpu`) |
//! | `stagger_shed_by_priority_total` | counter | requests shed by a layer that sheds by priority | `priority` (`critical_plus` … `sheddable`, `4` … `7`), `reason` |
//! | `stagger_cpu_utilisation` | gauge | the CPU trigger's smoothed CPU use ÷ allowance | |
//! | `stagger_shed_rate` | gauge | the share of arriving work the CPU trigger sheds | |
//! | `stagger_retry_delay_seconds` | histogram | seconds | |
//! | `stagger_retry_ratio` | gauge | retries ÷ logical requests | (from [`MetricsObserver::record_sli`]) |
//! | `stagger_sli_alarm` | gauge | 0 healthy, 1 elevated, 2 alarm | (from [`MetricsObserver::record_sli`]) |
//!
//! Time slept between attempts is the histogram's sum
//! (`stagger_retry_delay_seconds_sum` in a Prometheus exposition, which
//! renders the histogram as a summary unless buckets are configured).
//!
//! Every series known in advance exists from the first scrape, at 0: when
//! a policy, guardrails or breaker is built with the observer
//! ([`Observer::on_attach`](crate::Observer::on_attach)), it registers each
//! counter for each label value it can take (`stagger_retries_total` for
//! the classes a retry can have, every stop reason, every breaker
//! transition…), and `stagger_breaker_state` at 0, closed. Rules that
//! divide one counter by another then see data before the first retry,
//! refusal or breaker change. The two SLI gauges appear at the first
//! [`MetricsObserver::record_sli`]. [`MetricsObserver::describe`]
//! registers a help text and unit for each name with the installed
//! recorder.

pub use crate::guardrails::event::{ShedReason, Stats, StatsSnapshot};
pub use crate::observe::sli::{SliSnapshot, SliState, SliWindow};

#[cfg(feature = "metrics")]
pub use self::metrics_export::MetricsObserver;
#[cfg(feature = "tracing")]
pub use self::tracing_export::TracingObserver;

#[cfg(feature = "metrics")]
mod metrics_export;
#[cfg(feature = "tracing")]
mod tracing_export;
