//! One HTTP call under a policy: the settings a client shares, the
//! per-request overrides, what the caller is told at the end, and the driver
//! both front-ends (tower and reqwest) run, so every rule is written once.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};

use super::inbound::{outbound_priority, Inbound};
use super::TokioClock;
use super::{
    attempt_value, is_grpc, is_idempotent, needs_key, new_idempotency_key, raw_response_failure,
    timeout_header, IDEMPOTENCY_KEY, PRIORITY, RETRY_ATTEMPT,
};
use crate::engine::call::Call;
use crate::engine::drive::{End, Plan};
use crate::engine::hedge::HedgePolicy;
use crate::engine::policy::Policy;
use crate::outcome::{
    Class, Decision, Failure, Hint, Idempotency, NotRetried, Outcome, StopReason,
};
use crate::priority::Priority;
use crate::time::Clock;

/// How a call ended, put in the final response's extensions (and carried by
/// the error when there is no response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryInfo {
    /// Attempts made.
    pub attempts: u32,
    /// Why the call stopped.
    pub reason: StopReason,
    /// When a retryable failure was not retried, why.
    pub not_retried: Option<NotRetried>,
    /// Total time slept between attempts.
    pub waited: Duration,
    /// The final answer was a replay: the server had already run a request
    /// with the call's `Idempotency-Key` and sent back the stored answer
    /// (`Idempotent-Replayed: true`) instead of running it again.
    pub replayed: bool,
}

impl RetryInfo {
    /// A call that stopped for `reason` after `attempts` attempts, having
    /// waited nothing.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) const fn stopped(attempts: u32, reason: StopReason) -> Self {
        RetryInfo {
            attempts,
            reason,
            not_retried: None,
            waited: Duration::ZERO,
            replayed: false,
        }
    }
}

/// One attempt as reported to an [`on_attempt`](Settings::on_attempt) hook.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AttemptLog {
    /// The attempt (1-based).
    pub attempt: u32,
    /// Its response status, if it got a response.
    pub status: Option<u16>,
    /// Its transport error or timeout, if it got no response.
    pub error: Option<String>,
    /// The server's hint, if it gave a usable one.
    pub hint: Option<Duration>,
    /// The wait before the next attempt; `None` when the call stops here.
    pub delay: Option<Duration>,
    /// Why the call stopped, when it stops here.
    pub stop: Option<StopReason>,
}

/// A hook shown every attempt.
pub type AttemptHook = Arc<dyn Fn(&AttemptLog) + Send + Sync>;

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

/// The HTTP fact reader of one call, shared by every HTTP front-end (the
/// retry layer, the hedging layer, both reqwest middlewares): what the
/// request, its [`CallOptions`] and the inbound request it serves say
/// (idempotency, deadline, the one-layer rule), the headers every attempt
/// carries, and the failure an answer is, with every fact it carries
/// (`Retry-After`, `x-no-retry`, `retry_500`, gRPC codes a config lists).
/// It reads; the engine decides.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct Facts {
    retry_500: bool,
    propagate: bool,
    one_layer: bool,
    grpc: bool,
    grpc_retryable: Option<Arc<[u32]>>,
    key: Option<HeaderValue>,
    /// Every attempt carries an `Idempotency-Key` (the request's own or
    /// [`key`](Self::key)), so a 409 may be the server's "still in flight".
    keyed: bool,
    /// The priority every attempt sends, when the call must write one.
    priority: Option<HeaderValue>,
    inbound: Option<Inbound>,
    last_class: Option<Class>,
    /// The attempts' client spans (feature `opentelemetry`).
    #[cfg(feature = "opentelemetry")]
    pub(crate) spans: Option<crate::observe::otel::AttemptSpans>,
}

/// A call as its request opens it: the facts, the engine's per-call state,
/// and the request's own policies, if its [`CallOptions`] give one.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct Opened {
    pub(crate) facts: Facts,
    pub(crate) call: Call,
    pub(crate) own: Own,
}

/// A request's own retry policy (from its [`CallOptions`]) and the
/// settings' hedging over it: what the call's engine borrows instead of the
/// shared settings.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct Own(Option<Box<(Policy, Option<HedgePolicy>)>>);

/// Marks the middleware extensions a stagger middleware sends its attempts
/// with, so a stagger middleware after it in the chain sends each once
/// instead of starting a second loop of attempts (stacked middlewares would
/// multiply them). The tower layers learn the same from the attempt that
/// calls them.
#[derive(Debug, Clone, Copy)]
#[cfg(feature = "reqwest")]
pub(crate) struct Nested;

#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
impl Facts {
    /// Reads a request under `settings`.
    pub(crate) fn open(
        settings: &Settings,
        method: &Method,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Opened {
        let options = extensions.get::<CallOptions>();
        // The inbound request is read for the one-layer rule, the deadline
        // and the priority, so always: a priority travels whatever the
        // settings say of the other two.
        let found = extensions
            .get::<Inbound>()
            .cloned()
            .or_else(Inbound::current);
        let named = options.and_then(CallOptions::get_priority);
        // The request's own key, priority and content type, found in one
        // pass over its names: a name compared is cheaper than one hashed
        // and looked up, and most requests carry none of them.
        let (mut has_key, mut has_priority, mut has_type) = (false, false, false);
        for name in headers.keys() {
            has_key |= *name == IDEMPOTENCY_KEY;
            has_priority |= *name == PRIORITY;
            has_type |= *name == http::header::CONTENT_TYPE;
        }
        // Nothing to write when the call names no priority and serves no
        // inbound request (nor one the request already carries).
        let priority = if named.is_some() || (found.is_some() && !has_priority) {
            outbound_priority(named, headers, found.as_ref())
        } else {
            None
        };
        let inbound = found.filter(|_| settings.one_layer || settings.propagate_deadline);
        let policy = options.and_then(|o| o.policy.clone());
        // Boxed: rare, and large next to everything else a call keeps.
        let own = Own(policy.map(|p| {
            let hedging = settings.hedging.as_ref().map(|h| h.with_policy(p.clone()));
            Box::new((p, hedging))
        }));
        let mut key = None;
        if settings.idempotency_keys && needs_key(method) && !has_key {
            key = Some(new_idempotency_key());
        }
        let grpc = has_type && is_grpc(headers);
        // A gRPC call is always a POST: its contract is the method's retry
        // policy, not the HTTP method rule.
        let idempotency = match options.and_then(|o| o.idempotent) {
            Some(true) => Idempotency::Idempotent,
            Some(false) if grpc => Idempotency::Unspecified,
            Some(false) => Idempotency::NotIdempotent,
            None if grpc && settings.grpc_retryable_codes.is_some() => Idempotency::Idempotent,
            None if grpc => Idempotency::Unspecified,
            None if key.is_some() || is_idempotent(method, headers) => Idempotency::Idempotent,
            None => Idempotency::NotIdempotent,
        };
        let timeout = options.and_then(|o| o.timeout).or(settings.timeout);
        let deadline = crate::outcome::deadline::earliest(
            &[
                options.and_then(|o| o.deadline),
                inbound.as_ref().and_then(Inbound::deadline),
            ],
            &[timeout],
            || TokioClock.now(),
        );
        let serving_retry = settings.one_layer && inbound.as_ref().is_some_and(Inbound::is_retry);
        let mut call = Call::new()
            .idempotency(idempotency)
            .serving_retry(serving_retry);
        if let Some(d) = deadline {
            call = call.deadline(d);
        }
        let retry_500 = options
            .and_then(|o| o.retry_500)
            .unwrap_or(settings.retry_500);
        let facts = Facts {
            retry_500,
            propagate: settings.propagate_deadline,
            one_layer: settings.one_layer,
            grpc,
            grpc_retryable: settings.grpc_retryable_codes.clone(),
            keyed: key.is_some() || has_key,
            key,
            priority,
            inbound,
            last_class: None,
            #[cfg(feature = "opentelemetry")]
            spans: settings
                .trace_attempts
                .then(crate::observe::otel::AttemptSpans::default),
        };
        Opened { facts, call, own }
    }

    /// Writes the headers of the attempt sent as number `attempt`:
    /// `x-retry-attempt` (and gRPC's `grpc-previous-rpc-attempts`), the
    /// call's one idempotency key, and the remaining time.
    pub(crate) fn stamp(&self, headers: &mut HeaderMap, attempt: u32, timeout: Option<Duration>) {
        headers.insert(RETRY_ATTEMPT, attempt_value(attempt));
        if self.grpc && attempt > 1 {
            // gRPC's own spelling of the same fact (A6).
            headers.insert(super::GRPC_PREVIOUS_ATTEMPTS, attempt_value(attempt - 1));
        }
        if let Some(k) = &self.key {
            headers.insert(IDEMPOTENCY_KEY, k.clone());
        }
        if let Some(p) = &self.priority {
            headers.insert(PRIORITY, p.clone());
        }
        if self.propagate {
            if let Some(t) = timeout {
                let (name, value) = timeout_header(self.grpc, t);
                headers.insert(name, value);
            }
        }
    }

    /// The failure a response is, if it is one, with every fact it carries.
    pub(crate) fn response(&mut self, status: StatusCode, headers: &HeaderMap) -> Option<Failure> {
        // A 2xx without a gRPC status is a success: nothing to read, and no
        // wall clock (only a `Retry-After` date needs it).
        if status.is_success() && !headers.contains_key(super::GRPC_STATUS) {
            return None;
        }
        let now = SystemTime::now();
        let mut f = raw_response_failure(status, headers, self.retry_500, self.keyed, now)?;
        if let (Some(codes), Some(code)) = (&self.grpc_retryable, super::grpc_status(headers)) {
            f.class = crate::classify::grpc_code_listed(code, codes);
        }
        // `x-no-retry` belongs to the one-layer rule: with the rule off it is
        // not read, and the server's hint stays in force.
        if self.one_layer {
            f = super::no_retry(f, headers);
        }
        Some(self.failure(f))
    }

    /// A transport error or a timeout as it goes to the engine (noted for
    /// the one-layer rule).
    pub(crate) fn failure(&mut self, f: Failure) -> Failure {
        self.last_class = Some(f.class);
        f
    }

    /// The answer's outcome: a success, or the failure a response or a
    /// transport error is.
    pub(crate) fn outcome(&mut self, status: StatusCode, headers: &HeaderMap) -> Outcome {
        match self.response(status, headers) {
            None => Outcome::Success,
            Some(f) => Outcome::Failure(f),
        }
    }

    /// Ends the call: under the one-layer rule, tells the inbound request
    /// when a failure that could have cleared was given up on here.
    pub(crate) fn finish<R>(&self, call: &Call<R>, reason: StopReason) {
        if self.one_layer {
            mark_if_gave_up(self.inbound.as_ref(), self.last_class, call, reason);
        }
    }

    /// Ends the call: the one-layer rule's word to the inbound request, and
    /// what the caller is told. `answer` holds the headers of the response
    /// the caller gets, if it gets one.
    pub(crate) fn summary(
        &self,
        plan: &Plan<'_>,
        end: End,
        answer: Option<&HeaderMap>,
    ) -> RetryInfo {
        let reason = end.reason();
        let call = plan.call();
        self.finish(call, reason);
        RetryInfo {
            attempts: call.attempts(),
            reason,
            not_retried: call.not_retried(),
            waited: plan.waited(),
            replayed: answer.is_some_and(is_replay),
        }
    }

    /// Tells the settings' [`on_attempt`](Settings::on_attempt) hook how
    /// attempt `attempt` ended and what the engine said.
    pub(crate) fn log(
        &self,
        settings: &Settings,
        attempt: u32,
        answer: Result<u16, String>,
        outcome: &Outcome,
        decision: Decision,
    ) {
        let Some(hook) = &settings.on_attempt else {
            return;
        };
        let hint = match outcome {
            Outcome::Failure(f) => match f.hint {
                Some(Hint::RetryAfter(h) | Hint::Pushback(h)) => Some(h),
                _ => None,
            },
            Outcome::Success => None,
        };
        let (delay, stop) = match decision {
            Decision::Retry { after } => (Some(after), None),
            Decision::Stop(r) => (None, Some(r)),
        };
        let (status, error) = match answer {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        hook(&AttemptLog {
            attempt,
            status,
            error,
            hint,
            delay,
            stop,
        });
    }

    /// Writes the headers every attempt carries into the head kept for
    /// them, once, so each attempt's copy has room for its own values: the
    /// attempt header, the call's idempotency key and its priority.
    #[cfg(feature = "tower")]
    pub(crate) fn prepare(&self, headers: &mut HeaderMap) {
        headers.insert(RETRY_ATTEMPT, attempt_value(1));
        if let Some(k) = &self.key {
            headers.insert(IDEMPOTENCY_KEY, k.clone());
        }
        if let Some(p) = &self.priority {
            headers.insert(PRIORITY, p.clone());
        }
    }
}

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

/// `Idempotent-Replayed`: the server's mark on a stored answer it sent again
/// (a `HeaderName`, so reading it on every answer parses no name).
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Whether an answer is a replay (`Idempotent-Replayed: true`, the value
/// read without regard to case).
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
fn is_replay(headers: &HeaderMap) -> bool {
    headers
        .get(IDEMPOTENT_REPLAYED)
        .is_some_and(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"true"))
}

/// Whether a stagger middleware earlier in the chain already runs the
/// attempts of this request (see [`Nested`]).
#[cfg(feature = "reqwest")]
pub(crate) fn is_nested(extensions: &Extensions) -> bool {
    extensions.get::<Nested>().is_some()
}

/// The one-layer rule's word up, for every transport: a call that stopped on
/// a failure that could have cleared, after retrying it here (or declining
/// to, serving an inbound retry or told no by the layer below), marks the
/// inbound request it serves as given up, so the server layer answers with
/// the "do not retry" mark and the layers above fail fast. A layer that made
/// one attempt and was not asked to hold back (say it allows no retries)
/// leaves retrying to its caller.
pub(crate) fn mark_if_gave_up<R>(
    inbound: Option<&Inbound>,
    last_class: Option<Class>,
    call: &Call<R>,
    reason: StopReason,
) {
    let Some(inbound) = inbound else { return };
    if reason == StopReason::Success || !last_class.is_some_and(Class::may_clear) {
        return;
    }
    let declined = matches!(
        call.not_retried(),
        Some(NotRetried::ServingRetry | NotRetried::ServerSaidNo)
    );
    if call.attempts() > 1 || declined {
        inbound.mark_gave_up();
    }
}

/// Writes the priority a call made with `headers` and `extensions` sends
/// (see `outbound_priority`), reading the inbound request from the
/// extensions or the task.
#[cfg(feature = "grpc")]
pub(crate) fn propagate_priority(headers: &mut HeaderMap, extensions: &Extensions) {
    let inbound = extensions
        .get::<Inbound>()
        .cloned()
        .or_else(Inbound::current);
    let named = extensions
        .get::<CallOptions>()
        .and_then(CallOptions::get_priority);
    if named.is_none() && inbound.is_none() {
        // No priority to send: the request's headers need not be read.
        return;
    }
    if let Some(v) = outbound_priority(named, headers, inbound.as_ref()) {
        headers.insert(PRIORITY, v);
    }
}
