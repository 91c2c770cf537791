//! One HTTP call under a policy: the settings a client shares, the
//! per-request overrides, what the caller is told at the end, and the driver
//! both front-ends (tower and reqwest) run, so every rule is written once.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode};

use super::inbound::Inbound;
use super::TokioClock;
use super::{
    attempt_value, is_grpc, is_idempotent, needs_key, new_idempotency_key, raw_response_failure,
    timeout_header, IDEMPOTENCY_KEY, NO_RETRY, RETRY_ATTEMPT,
};
use crate::call::Call;
use crate::clock::Clock;
use crate::hedge::driver::{drive, Answer, Attempts, End};
use crate::hedge::{HedgePolicy, HedgedCall};
use crate::outcome::{
    Class, Decision, Failure, Hint, Idempotency, NotRetried, Outcome, StopReason,
};
use crate::policy::Policy;

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
/// clone.
///
/// ```
/// use stagger::http::Settings;
/// use stagger::Policy;
/// use std::time::Duration;
///
/// let settings = Settings::new(Policy::default())
///     .retry_500(true)
///     .idempotency_keys(true)
///     .timeout(Duration::from_secs(5))
///     .max_replay_bytes(64 * 1024);
/// assert_eq!(settings.get_max_replay_bytes(), 64 * 1024);
/// ```
#[derive(Clone)]
pub struct Settings {
    pub(crate) policy: Policy,
    pub(crate) retry_500: bool,
    pub(crate) idempotency_keys: bool,
    pub(crate) max_replay_bytes: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) propagate_deadline: bool,
    pub(crate) one_layer: bool,
    pub(crate) on_attempt: Option<AttemptHook>,
    pub(crate) grpc_retryable: Option<Arc<[u32]>>,
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
            .field("grpc_retryable", &self.grpc_retryable)
            .finish()
    }
}

impl Settings {
    /// The default replay limit: 1 MiB.
    pub const DEFAULT_MAX_REPLAY_BYTES: usize = 1 << 20;

    /// Defaults: 500 not retried, no generated keys, bodies replayed up to
    /// 1 MiB, no deadline of its own, deadlines propagated, the one-layer
    /// rule on.
    pub fn new(policy: Policy) -> Self {
        Settings {
            policy,
            retry_500: false,
            idempotency_keys: false,
            max_replay_bytes: Self::DEFAULT_MAX_REPLAY_BYTES,
            timeout: None,
            propagate_deadline: true,
            one_layer: true,
            on_attempt: None,
            grpc_retryable: None,
        }
    }

    /// The gRPC status codes to retry, as a service config's
    /// `retryableStatusCodes` lists them (default: the table of docs/behaviour.md §2 —
    /// UNAVAILABLE, RESOURCE_EXHAUSTED with pushback, DEADLINE_EXCEEDED when
    /// idempotent).
    pub fn grpc_retryable_codes(mut self, codes: impl Into<Vec<u32>>) -> Self {
        let mut codes: Vec<u32> = codes.into();
        codes.sort_unstable();
        codes.dedup();
        self.grpc_retryable = Some(codes.into());
        self
    }

    /// Retries HTTP 500 (off by default: usually a bug).
    pub fn retry_500(mut self, on: bool) -> Self {
        self.retry_500 = on;
        self
    }

    /// Adds a generated `Idempotency-Key` to POST and PATCH requests that
    /// have none, the same on every attempt, which makes them retryable.
    pub fn idempotency_keys(mut self, on: bool) -> Self {
        self.idempotency_keys = on;
        self
    }

    /// The largest request body buffered so it can be sent again; a larger
    /// one is sent once and the call is not retried.
    pub fn max_replay_bytes(mut self, bytes: usize) -> Self {
        self.max_replay_bytes = bytes;
        self
    }

    /// The replay limit.
    pub fn get_max_replay_bytes(&self) -> usize {
        self.max_replay_bytes
    }

    /// A deadline `timeout` after each call starts, over every attempt and
    /// wait.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Whether to send the remaining time downstream (`x-request-timeout-ms`,
    /// `grpc-timeout` for gRPC). On by default.
    pub fn propagate_deadline(mut self, on: bool) -> Self {
        self.propagate_deadline = on;
        self
    }

    /// The one-layer rule (on by default): no retries while serving an
    /// inbound retry, and a failure marked [`NO_RETRY`](super::NO_RETRY) is
    /// passed up, not retried. Turning it off is for demonstrations; with it
    /// off, `NO_RETRY` is ignored and the failure is retried as if it were
    /// not there, after any `Retry-After` or pushback it carries.
    pub fn one_layer(mut self, on: bool) -> Self {
        self.one_layer = on;
        self
    }

    /// Calls `hook` after every attempt with what happened and what comes
    /// next.
    pub fn on_attempt(mut self, hook: impl Fn(&AttemptLog) + Send + Sync + 'static) -> Self {
        self.on_attempt = Some(Arc::new(hook));
        self
    }

    /// The shared policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

impl From<Policy> for Settings {
    /// The policy with the default HTTP settings.
    fn from(policy: Policy) -> Self {
        Settings::new(policy)
    }
}

/// Per-request overrides: put one in a request's extensions.
///
/// ```
/// use stagger::http::CallOptions;
/// use stagger::Policy;
/// use std::time::Duration;
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(
///     CallOptions::new()
///         .policy(Policy::builder().max_attempts(5).build().unwrap())
///         .timeout(Duration::from_secs(2))
///         .idempotent(true),
/// );
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallOptions {
    policy: Option<Policy>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    idempotent: Option<bool>,
    retry_500: Option<bool>,
}

impl CallOptions {
    /// No overrides.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses this policy for the request instead of the client's.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// An absolute deadline for the request.
    pub fn deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// A deadline `timeout` after the request starts.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Declares the request idempotent (or not), whatever its method.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = Some(idempotent);
        self
    }

    /// Overrides whether 500 is retried.
    pub fn retry_500(mut self, on: bool) -> Self {
        self.retry_500 = Some(on);
        self
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
    inbound: Option<Inbound>,
    last_class: Option<Class>,
}

/// A call as its request opens it: the facts, the engine's per-call state,
/// and the request's own policy, if its [`CallOptions`] give one.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct Opened {
    pub(crate) facts: Facts,
    pub(crate) call: Call,
    pub(crate) policy: Option<Policy>,
}

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
        let inbound = if settings.one_layer || settings.propagate_deadline {
            extensions
                .get::<Inbound>()
                .cloned()
                .or_else(Inbound::current)
        } else {
            None
        };
        let policy = options.and_then(|o| o.policy.clone());
        let mut key = None;
        if settings.idempotency_keys && needs_key(method) && !headers.contains_key(IDEMPOTENCY_KEY)
        {
            key = Some(new_idempotency_key());
        }
        let grpc = is_grpc(headers);
        // A gRPC call is always a POST: its contract is the method's retry
        // policy, not the HTTP method rule.
        let idempotency = match options.and_then(|o| o.idempotent) {
            Some(true) => Idempotency::Idempotent,
            Some(false) if grpc => Idempotency::Unspecified,
            Some(false) => Idempotency::NotIdempotent,
            None if grpc && settings.grpc_retryable.is_some() => Idempotency::Idempotent,
            None if grpc => Idempotency::Unspecified,
            None if key.is_some() || is_idempotent(method, headers) => Idempotency::Idempotent,
            None => Idempotency::NotIdempotent,
        };
        let timeout = options.and_then(|o| o.timeout).or(settings.timeout);
        let mut deadline = options.and_then(|o| o.deadline);
        let inbound_deadline = inbound.as_ref().and_then(Inbound::deadline);
        if timeout.is_some() || deadline.is_some() || inbound_deadline.is_some() {
            let now = TokioClock.now();
            let candidates = [
                deadline,
                timeout.and_then(|t| now.checked_add(t)),
                inbound_deadline,
            ];
            deadline = candidates.into_iter().flatten().min();
        }
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
            grpc_retryable: settings.grpc_retryable.clone(),
            key,
            inbound,
            last_class: None,
        };
        Opened {
            facts,
            call,
            policy,
        }
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
        if self.propagate {
            if let Some(t) = timeout {
                let (name, value) = timeout_header(self.grpc, t);
                headers.insert(name, value);
            }
        }
    }

    /// The failure a response is, if it is one, with every fact it carries.
    pub(crate) fn response(&mut self, status: StatusCode, headers: &HeaderMap) -> Option<Failure> {
        let mut f = raw_response_failure(status, headers, self.retry_500, SystemTime::now())?;
        if let (Some(codes), Some(code)) = (&self.grpc_retryable, super::grpc_status(headers)) {
            f.class = crate::classify::grpc_code_listed(code, codes);
        }
        // `x-no-retry` belongs to the one-layer rule: with the rule off it is
        // not read, and the server's hint stays in force.
        if self.one_layer && headers.contains_key(NO_RETRY) {
            f = f.gave_up_below();
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
        if !self.one_layer || reason == StopReason::Success {
            return;
        }
        let retryable = self.last_class.is_some_and(Class::may_clear);
        let declined = matches!(
            call.not_retried(),
            Some(NotRetried::ServingRetry | NotRetried::ServerSaidNo)
        );
        // A layer that made one attempt and was not asked to hold back (say
        // it allows no retries) leaves retrying to its caller.
        if retryable && (call.attempts() > 1 || declined) {
            if let Some(i) = &self.inbound {
                i.mark_gave_up();
            }
        }
    }
}

impl Drop for Driver {
    /// A call dropped mid-attempt (its future was cancelled) gives back what
    /// the attempt holds, such as a half-open breaker's probe slot.
    fn drop(&mut self) {
        let (policy, call) = self.engine();
        policy.abandon(call, TokioClock);
    }
}

/// The per-call state machine of the retrying front-ends.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct Driver {
    /// The client's settings, shared: nothing of them is copied per call.
    settings: Arc<Settings>,
    /// A per-request policy from [`CallOptions`], if any.
    policy: Option<Policy>,
    call: Call,
    facts: Facts,
    waited: Duration,
}

#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
impl Driver {
    pub(crate) fn new(
        shared: Arc<Settings>,
        method: &Method,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Self {
        let Opened {
            facts,
            call,
            policy,
        } = Facts::open(&shared, method, headers, extensions);
        Driver {
            settings: shared,
            policy,
            call,
            facts,
            waited: Duration::ZERO,
        }
    }

    /// The engine and the call's state, borrowed together.
    fn engine(&mut self) -> (&Policy, &mut Call) {
        let policy = self.policy.as_ref().unwrap_or(&self.settings.policy);
        (policy, &mut self.call)
    }

    /// Tells the engine the call cannot be repeated (its body cannot be
    /// replayed).
    pub(crate) fn commit(&mut self, why: NotRetried) {
        self.call.commit(why);
    }

    /// Admits the next attempt: its timeout, or why the call stops.
    pub(crate) fn start(&mut self) -> Result<Option<Duration>, StopReason> {
        let (policy, call) = self.engine();
        policy.start_attempt(call, TokioClock)
    }

    /// Writes this attempt's headers: `x-retry-attempt`, the idempotency
    /// key, and the remaining time.
    pub(crate) fn stamp(&self, headers: &mut HeaderMap, timeout: Option<Duration>) {
        self.facts.stamp(headers, self.call.attempts(), timeout);
    }

    /// After a response: its failure, if it is one, with every fact the
    /// response carries.
    pub(crate) fn after_response(&mut self, status: StatusCode, headers: &HeaderMap) -> Decision {
        match self.facts.response(status, headers) {
            None => self.success(Some(status.as_u16())),
            Some(f) => self.failure(f, Some(status.as_u16()), None),
        }
    }

    /// After a transport error or a timeout (the failure says whether the
    /// request surely never reached the server).
    pub(crate) fn after_error(&mut self, failure: Failure, error: String) -> Decision {
        let f = self.facts.failure(failure);
        self.failure(f, None, Some(error))
    }

    fn success(&mut self, status: Option<u16>) -> Decision {
        let (policy, call) = self.engine();
        policy.decide(call, Outcome::Success, TokioClock);
        self.log(status, None, None, None, Some(StopReason::Success));
        Decision::Stop(StopReason::Success)
    }

    fn failure(&mut self, f: Failure, status: Option<u16>, error: Option<String>) -> Decision {
        let hint = match f.hint {
            Some(Hint::RetryAfter(h) | Hint::Pushback(h)) => Some(h),
            _ => None,
        };
        let (policy, call) = self.engine();
        let decision = policy.decide(call, f, TokioClock);
        match decision {
            Decision::Retry { after } => {
                self.waited = self.waited.saturating_add(after);
                self.log(status, error, hint, Some(after), None);
            }
            Decision::Stop(reason) => self.log(status, error, hint, None, Some(reason)),
        }
        decision
    }

    fn log(
        &self,
        status: Option<u16>,
        error: Option<String>,
        hint: Option<Duration>,
        delay: Option<Duration>,
        stop: Option<StopReason>,
    ) {
        if let Some(hook) = &self.settings.on_attempt {
            hook(&AttemptLog {
                attempt: self.call.attempts(),
                status,
                error,
                hint,
                delay,
                stop,
            });
        }
    }

    /// Ends the call: the one-layer rule's word to the inbound request, and
    /// the summary.
    pub(crate) fn finish(&self, reason: StopReason) -> RetryInfo {
        self.facts.finish(&self.call, reason);
        RetryInfo {
            attempts: self.call.attempts(),
            reason,
            not_retried: self.call.not_retried(),
            waited: self.waited,
        }
    }
}

/// What an HTTP hedging front-end shares between its calls: the hedging
/// policy, and the HTTP settings every call is read by (the retry layer's).
/// The settings' policy is the retry policy the hedging policy judges every
/// attempt with.
#[derive(Debug, Clone)]
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct HedgeRules {
    hedging: HedgePolicy,
    pub(crate) settings: Settings,
}

/// One hedged HTTP call as its request opens it (its [`Facts`] go to the
/// front-end's [`Attempts`], which reads every answer with them).
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) struct HttpHedge<'a> {
    /// The layer's hedging, or the same over the request's own policy.
    hedging: Cow<'a, HedgePolicy>,
    pub(crate) call: HedgedCall,
}

/// An HTTP front-end's attempts, which read answers with the call's facts.
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(crate) trait HttpAttempts: Attempts {
    /// The call's facts.
    fn facts(&self) -> &Facts;
}

#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
impl HedgeRules {
    /// Hedging under `hedging`, read by the default HTTP settings.
    pub(crate) fn new(hedging: HedgePolicy) -> Self {
        let settings = Settings::new(hedging.policy().clone());
        HedgeRules { hedging, settings }
    }

    /// The hedging policy.
    pub(crate) fn hedging(&self) -> &HedgePolicy {
        &self.hedging
    }

    /// Reads every call by `settings`, whose policy judges the attempts.
    pub(crate) fn set(&mut self, settings: Settings) {
        self.hedging = self.hedging.with_policy(settings.policy.clone());
        self.settings = settings;
    }

    /// Opens a call for a request.
    pub(crate) fn open(
        &self,
        method: &Method,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> (HttpHedge<'_>, Facts) {
        let o = Facts::open(&self.settings, method, headers, extensions);
        let hedging = match o.policy {
            Some(p) => Cow::Owned(self.hedging.with_policy(p)),
            None => Cow::Borrowed(&self.hedging),
        };
        let call = hedging.call(o.call);
        (HttpHedge { hedging, call }, o.facts)
    }
}

#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
impl HttpHedge<'_> {
    /// Runs the call to its end on tokio's clock and timer: its summary and
    /// the last answer.
    pub(crate) async fn run<A: HttpAttempts>(
        &mut self,
        attempts: &mut A,
    ) -> (RetryInfo, Option<Answer<A::Answer>>) {
        let finish = drive(
            &self.hedging,
            &mut self.call,
            attempts,
            &TokioClock,
            tokio::time::sleep,
        )
        .await;
        (self.finish(attempts.facts(), finish.end), finish.last)
    }

    /// Ends the call: the one-layer rule's word to the inbound request, and
    /// the summary.
    pub(crate) fn finish(&self, facts: &Facts, end: End) -> RetryInfo {
        let reason = match end {
            End::Stopped(r) => r,
            End::Taken => StopReason::Success,
        };
        let call = self.call.call();
        facts.finish(call, reason);
        RetryInfo {
            attempts: call.attempts(),
            reason,
            not_retried: call.not_retried(),
            waited: Duration::ZERO,
        }
    }
}
