//! The HTTP fact reader of one call, shared by both front-ends (tower and
//! reqwest): what the request says, the headers every attempt carries, and
//! the failure each answer is, so every rule is written once.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Extensions, HeaderMap, HeaderValue, Method, StatusCode};

use super::inbound::{outbound_priority, Inbound};
use super::info::{is_replay, mark_if_gave_up, AttemptLog, RetryInfo};
use super::settings::{CallOptions, Own, Settings};
use super::TokioClock;
use super::{
    attempt_value, is_idempotent, needs_key, new_idempotency_key, raw_response_failure,
    timeout_header, IDEMPOTENCY_KEY, PRIORITY, RETRY_ATTEMPT,
};
use crate::engine::call::Call;
use crate::engine::drive::{End, Plan};
use crate::grpc::is_grpc;
use crate::outcome::{Class, Decision, Failure, Hint, Idempotency, Outcome, StopReason};
use crate::time::Clock;

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
    pub(super) propagate: bool,
    pub(super) one_layer: bool,
    pub(super) grpc: bool,
    pub(super) grpc_retryable: Option<Arc<[u32]>>,
    pub(super) key: Option<HeaderValue>,
    /// Every attempt carries an `Idempotency-Key` (the request's own or
    /// [`key`](Self::key)), so a 409 may be the server's "still in flight".
    pub(super) keyed: bool,
    /// The priority every attempt sends, when the call must write one.
    pub(super) priority: Option<HeaderValue>,
    pub(super) inbound: Option<Inbound>,
    pub(super) last_class: Option<Class>,
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
        if self.grpc {
            // gRPC's own spelling of the same fact (A6).
            crate::grpc::wire::mark_attempt(headers, attempt);
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
        if status.is_success() && !headers.contains_key(crate::grpc::wire::GRPC_STATUS) {
            return None;
        }
        let now = SystemTime::now();
        let mut f = raw_response_failure(status, headers, self.retry_500, self.keyed, now)?;
        if let (Some(codes), Some(code)) = (&self.grpc_retryable, crate::grpc::grpc_status(headers))
        {
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

/// Whether a stagger middleware earlier in the chain already runs the
/// attempts of this request (see [`Nested`]).
#[cfg(feature = "reqwest")]
pub(crate) fn is_nested(extensions: &Extensions) -> bool {
    extensions.get::<Nested>().is_some()
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

#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
impl Facts {
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
}
