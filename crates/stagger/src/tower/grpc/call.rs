//! One gRPC call's state between its attempts, and the caller's answer at
//! the end: shared by the retrying and the hedging drivers.

use std::sync::Arc;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response};

use super::body::{CallReport, GrpcBody, Watch};
use super::method::Resolved;
use super::shared::Shared;
use super::wire::{GRPC_STATUS, GRPC_TIMEOUT};
use crate::engine::call::Call;
use crate::http::{mark_if_gave_up, Inbound, TokioClock};
use crate::outcome::deadline::parse_grpc_timeout;
use crate::outcome::{Class, Idempotency, NotRetried, StopReason};
use crate::time::Clock;
use crate::tower::{BoxError, Error, ErrorKind};

/// One call's state between attempts. Dropped mid-attempt (the caller gave
/// up), it gives back what the attempt holds.
pub(super) struct Driver {
    pub(super) method: Arc<Resolved>,
    pub(super) call: Call,
    pub(super) shared: Arc<Shared>,
    inbound: Option<Inbound>,
    report: CallReport,
    pub(super) waited: Duration,
    pub(super) last_class: Option<Class>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let policy = &self.method.engine;
        policy.abandon(&mut self.call, TokioClock);
    }
}

impl Driver {
    pub(super) fn new(
        shared: Arc<Shared>,
        headers: &HeaderMap,
        ext: &http::Extensions,
        path: &str,
    ) -> (Self, Call) {
        let method = shared.methods.find(path).clone();
        let inbound = if shared.one_layer {
            ext.get::<Inbound>().cloned().or_else(Inbound::current)
        } else {
            None
        };
        // A method whose policy lists codes is declared safe to repeat for
        // them (DEADLINE_EXCEEDED included), as a hedging policy declares
        // the method safe to send more than once; without one, the table
        // applies.
        let idempotency = if method.retryable.is_some() || method.hedge.is_some() {
            Idempotency::Idempotent
        } else {
            Idempotency::Unspecified
        };
        let mut call = Call::new()
            .idempotency(idempotency)
            .serving_retry(inbound.as_ref().is_some_and(Inbound::is_retry))
            .transparent_retries(shared.transparent_retries);
        // The deadline: the method's timeout, the caller's own `grpc-timeout`
        // and the inbound request's, whichever ends first.
        let caller = headers
            .get(GRPC_TIMEOUT)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let inbound_deadline = inbound.as_ref().and_then(Inbound::deadline);
        let deadline = crate::outcome::deadline::earliest(
            &[inbound_deadline],
            &[method.timeout, caller],
            || TokioClock.now(),
        );
        if let Some(d) = deadline {
            call = call.deadline(d);
        }
        let d = Driver {
            method,
            call: Call::new(),
            shared,
            inbound,
            // The caller's own report when it put one in the request (the
            // only way to read it when tonic turns a failed call into a
            // `Status`), else a new one.
            report: ext.get::<CallReport>().cloned().unwrap_or_default(),
            waited: Duration::ZERO,
            last_class: None,
        };
        (d, call)
    }

    /// Ends the call: the one-layer rule's word to the inbound request, and
    /// the report the caller reads.
    fn finish(&self, reason: Option<StopReason>, status: Option<u32>) -> CallReport {
        if let Some(r) = reason {
            mark_if_gave_up(self.inbound.as_ref(), self.last_class, &self.call, r);
        }
        let (call, waited) = (&self.call, self.waited);
        self.report.update(|s| {
            s.attempts = call.attempts();
            s.transparent_retries = call.transparent_retries_made();
            s.reason = reason;
            s.not_retried = call.not_retried();
            s.waited = waited;
            s.status = status;
        });
        self.report.clone()
    }
}

/// How the last attempt ended, for the answer the caller gets.
pub(super) enum Last<T> {
    None,
    Response(Response<T>, Option<u32>),
    Error(ErrorKind, BoxError),
}

/// Response headers arrived without a status: the call is committed and the
/// response goes to the caller, its body watched for the trailers' status.
pub(super) fn committed<T>(mut d: Driver, resp: Response<T>) -> Response<GrpcBody<T>> {
    d.call.commit(NotRetried::Committed);
    let report = d.finish(None, None);
    let watch = Box::new(Watch {
        method: d.method.clone(),
        call: std::mem::take(&mut d.call),
        report: report.clone(),
        hook: d.shared.hook.clone(),
    });
    let (mut parts, body) = resp.into_parts();
    parts.extensions.insert(report);
    Response::from_parts(parts, GrpcBody::new(body, Some(watch)))
}

/// The caller's answer once the engine stopped the call: the last response,
/// a trailers-only `DEADLINE_EXCEEDED` when time ran out without one, or
/// the error.
pub(super) fn conclude<T>(
    d: &Driver,
    last: Last<T>,
    reason: StopReason,
) -> Result<Response<GrpcBody<T>>, Error> {
    let retry_info = |report: &CallReport| {
        let s = report.get();
        crate::http::RetryInfo {
            attempts: s.attempts,
            reason,
            not_retried: s.not_retried,
            waited: s.waited,
            replayed: false,
        }
    };
    match last {
        Last::Response(resp, status) => {
            let report = d.finish(Some(reason), status);
            let (mut parts, body) = resp.into_parts();
            parts.extensions.insert(report);
            Ok(Response::from_parts(parts, GrpcBody::new(body, None)))
        }
        Last::Error(ErrorKind::Timeout, _) | Last::None if reason == StopReason::Deadline => {
            let report = d.finish(Some(reason), Some(4));
            let mut resp = Response::new(GrpcBody::empty());
            let h = resp.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
            h.insert(GRPC_STATUS, HeaderValue::from_static("4"));
            h.insert(
                "grpc-message",
                HeaderValue::from_static("deadline exceeded (stagger)"),
            );
            resp.extensions_mut().insert(report);
            Ok(resp)
        }
        Last::Error(kind, e) => {
            let report = d.finish(Some(reason), None);
            Err(Error::new(kind, retry_info(&report), Some(e)))
        }
        Last::None => {
            let report = d.finish(Some(reason), None);
            Err(Error::new(ErrorKind::Refused, retry_info(&report), None))
        }
    }
}
