//! What an HTTP client shares between its calls ([`Settings`]) and what
//! one request overrides ([`CallOptions`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::info::AttemptHook;
use super::TokioClock;
use crate::engine::call::Call;
use crate::engine::drive::Plan;
use crate::engine::hedge::HedgePolicy;
use crate::engine::policy::Policy;
use crate::priority::Priority;

/// What an HTTP client shares between all its calls: the policy (and with
/// it any budget, breaker and observer) and the HTTP settings. Cheap to
/// clone. [`Default`] is the default policy with 500 not retried, no
/// generated keys, bodies replayed up to 1 MiB, no deadline of its own,
/// deadlines propagated and the one-layer rule on; a [`Policy`] or a
/// [`HedgePolicy`] converts into these defaults around it.
///
/// ```
/// use stagger::http::Settings;
/// use stagger::Policy;
/// use std::time::Duration;
///
/// let settings = Settings {
///     retry_500: true,
///     idempotency_keys: true,
///     timeout: Some(Duration::from_secs(5)),
///     max_replay_bytes: 64 * 1024,
///     ..Settings::from(Policy::default())
/// };
/// assert_eq!(settings.policy.max_attempts(), Policy::default().max_attempts());
/// ```
#[derive(Clone)]
pub struct Settings {
    /// The shared policy: every attempt is judged by it.
    pub policy: Policy,
    /// Retries HTTP 500 (off by default: usually a bug).
    pub retry_500: bool,
    /// Adds a generated `Idempotency-Key` to POST and PATCH requests that
    /// have none, the same on every attempt, which makes them retryable.
    pub idempotency_keys: bool,
    /// The largest request body buffered so it can be sent again; a larger
    /// one is sent once and the call is not retried (default 1 MiB).
    pub max_replay_bytes: usize,
    /// A deadline this long after each call starts, over every attempt and
    /// wait.
    pub timeout: Option<Duration>,
    /// Whether to send the remaining time downstream (`x-request-timeout-ms`,
    /// `grpc-timeout` for gRPC). On by default.
    pub propagate_deadline: bool,
    /// The one-layer rule (on by default): no retries while serving an
    /// inbound retry, and a failure marked `x-no-retry` is
    /// passed up, not retried. Turning it off is for demonstrations; with it
    /// off, `NO_RETRY` is ignored and the failure is retried as if it were
    /// not there, after any `Retry-After` or pushback it carries.
    pub one_layer: bool,
    /// Called after every attempt with what happened and what comes next.
    pub on_attempt: Option<AttemptHook>,
    /// The gRPC status codes to retry, as a service config's
    /// `retryableStatusCodes` lists them (default `None`: the table of
    /// docs/behaviour.md §2 — UNAVAILABLE, RESOURCE_EXHAUSTED with pushback,
    /// DEADLINE_EXCEEDED when idempotent).
    pub grpc_retryable_codes: Option<Arc<[u32]>>,
    /// Hedges the calls that can be hedged under this policy (idempotent
    /// ones, not made while serving an inbound retry): a further attempt
    /// goes out while the earlier ones still run, by the hedging policy's
    /// delay and within its extra-load budget, and the first success wins.
    /// Every attempt is still judged by [`policy`](Self::policy) (it
    /// replaces the hedging policy's own when the layer is built), so a
    /// retryable failure sends the next attempt at once and both attempt
    /// limits apply. A call that cannot hedge is retried as without this
    /// setting. Hedging is a setting of the one retry layer, so there is no
    /// second layer to stack.
    ///
    /// ```
    /// use stagger::hedging::HedgePolicyConfig;
    /// use stagger::http::Settings;
    /// use stagger::{HedgeDelay, HedgePolicy, Policy};
    /// use std::time::Duration;
    ///
    /// let hedging = HedgePolicy::new(HedgePolicyConfig {
    ///     delay: HedgeDelay::Fixed(Duration::from_millis(20)),
    ///     ..Default::default()
    /// })?;
    /// let settings = Settings { hedging: Some(hedging), ..Settings::from(Policy::default()) };
    /// # let _ = settings;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub hedging: Option<HedgePolicy>,
    /// Opens an OpenTelemetry client span for every attempt (feature
    /// `opentelemetry`; off by default): named after the method, under the
    /// HTTP semantic conventions, with `http.request.resend_count` on every
    /// request sent again (retries, hedges and transparent retries alike),
    /// each a child of the caller's current context, whose trace context
    /// the global propagator injects into the attempt's headers. The spans
    /// go to the global tracer provider the application installs.
    #[cfg(feature = "opentelemetry")]
    pub trace_attempts: bool,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("policy", &self.policy)
            .field("retry_500", &self.retry_500)
            .field("idempotency_keys", &self.idempotency_keys)
            .field("max_replay_bytes", &self.max_replay_bytes)
            .field("timeout", &self.timeout)
            .field("propagate_deadline", &self.propagate_deadline)
            .field("one_layer", &self.one_layer)
            .field("on_attempt", &self.on_attempt.is_some())
            .field("grpc_retryable_codes", &self.grpc_retryable_codes)
            .field("hedging", &self.hedging)
            .finish_non_exhaustive()
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(Policy::default())
    }
}

impl Settings {
    /// The default replay limit: 1 MiB.
    pub const DEFAULT_MAX_REPLAY_BYTES: usize = 1 << 20;

    /// These settings as a layer keeps them: the hedging policy judged by
    /// [`policy`](Self::policy).
    #[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
    pub(crate) fn resolved(mut self) -> Self {
        self.hedging = self.hedging.map(|h| h.with_policy(self.policy.clone()));
        self
    }
}

impl From<Policy> for Settings {
    /// The policy with the default HTTP settings.
    fn from(policy: Policy) -> Self {
        Settings {
            policy,
            retry_500: false,
            idempotency_keys: false,
            max_replay_bytes: Settings::DEFAULT_MAX_REPLAY_BYTES,
            timeout: None,
            propagate_deadline: true,
            one_layer: true,
            on_attempt: None,
            grpc_retryable_codes: None,
            hedging: None,
            #[cfg(feature = "opentelemetry")]
            trace_attempts: false,
        }
    }
}

impl From<HedgePolicy> for Settings {
    /// Hedging under the policy, its attempts judged by its own retry
    /// policy, with the default HTTP settings.
    fn from(hedging: HedgePolicy) -> Self {
        let policy = hedging.policy().clone();
        Settings {
            hedging: Some(hedging),
            ..Settings::from(policy)
        }
    }
}

/// Per-request overrides: put one in a request's extensions. Every field
/// left `None` keeps the client's [`Settings`].
///
/// ```
/// use stagger::http::CallOptions;
/// use stagger::Policy;
/// use std::time::Duration;
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(CallOptions {
///     policy: Some(Policy::builder().max_attempts(5).build().unwrap()),
///     timeout: Some(Duration::from_secs(2)),
///     idempotent: Some(true),
///     priority: Some(stagger::priority::Priority::SHEDDABLE),
///     ..Default::default()
/// });
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    /// A policy for the request instead of the client's.
    pub policy: Option<Policy>,
    /// An absolute deadline for the request.
    pub deadline: Option<Instant>,
    /// A deadline this long after the request starts.
    pub timeout: Option<Duration>,
    /// Declares the request idempotent (or not), whatever its method.
    pub idempotent: Option<bool>,
    /// Whether 500 is retried.
    pub retry_500: Option<bool>,
    /// Sends the request with this priority (`x-criticality`), whatever
    /// the request it serves had or the request's own header says. Read
    /// by the tower, reqwest and gRPC layers alike.
    pub priority: Option<Priority>,
}

impl CallOptions {
    /// The priority these options name, if any.
    pub(crate) fn get_priority(&self) -> Option<Priority> {
        self.priority
    }
}

/// A request's own retry policy (from its [`CallOptions`]) and the
/// settings' hedging over it: what the call's engine borrows instead of the
/// shared settings.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct Own(pub(super) Option<Box<(Policy, Option<HedgePolicy>)>>);

impl Settings {
    /// The engine of a call opened under these settings: the request's own
    /// policies if it has them, the shared ones otherwise. Read by the
    /// tower and reqwest layers; `http` alone builds it unused.
    #[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
    pub(crate) fn plan<'a>(&'a self, own: &'a Own, call: Call) -> Plan<'a> {
        match own.0.as_deref() {
            Some((policy, hedging)) => Plan::new(policy, hedging.as_ref(), call, &TokioClock),
            None => Plan::new(&self.policy, self.hedging.as_ref(), call, &TokioClock),
        }
    }
}
