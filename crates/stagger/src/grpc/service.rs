//! The gRPC client [`RetryService`]: the driver of one call. It builds each
//! attempt, sends it, reports what happened to the engine as facts
//! (status class, pushback, not sent, committed) and waits as told.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::{CallReport, GrpcBody, Watch};
use super::layer::{MakeBody, Shared};
use super::method::Resolved;
use super::{attempt_status, never_sent, status_failure, AttemptRecord};
use crate::call::Call;
use crate::clock::Clock;
use crate::deadline::{format_grpc_timeout, parse_grpc_timeout};
use crate::http::{
    error_chain, error_class, Inbound, TokioClock, GRPC_PREVIOUS_ATTEMPTS, GRPC_STATUS,
    GRPC_TIMEOUT,
};
use crate::outcome::{Class, Decision, Failure, Idempotency, NotRetried, Outcome, StopReason};
use crate::tower::{AttemptTimedOut, BoxError, Error, ErrorKind, Replay, ResponseFuture};

/// A gRPC client service whose calls are retried as A6 says; made by
/// [`RetryLayer`](super::RetryLayer).
#[derive(Debug, Clone)]
pub struct RetryService<S, M> {
    inner: S,
    shared: Arc<Shared>,
    make: M,
}

impl<S, M> RetryService<S, M> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>, make: M) -> Self {
        RetryService {
            inner,
            shared,
            make,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, M, B, ResB> Service<Request<B>> for RetryService<S, M>
where
    M: MakeBody<B> + Clone + Send + Sync + 'static,
    M::Output: Send + 'static,
    S: Service<Request<M::Output>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Body + Unpin + Send + 'static,
{
    type Response = Response<GrpcBody<ResB>>;
    type Error = Error;
    type Future = ResponseFuture<Response<GrpcBody<ResB>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(|e| {
            Error::new(
                ErrorKind::Service,
                info(0, StopReason::NotRetryable),
                Some(e.into()),
            )
        })
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let fut = run(inner, self.shared.clone(), self.make.clone(), req);
        ResponseFuture::new(Box::pin(fut))
    }
}

fn info(attempts: u32, reason: StopReason) -> crate::http::RetryInfo {
    crate::http::RetryInfo {
        attempts,
        reason,
        not_retried: None,
        waited: Duration::ZERO,
    }
}

/// One call's state between attempts. Dropped mid-attempt (the caller gave
/// up), it gives back what the attempt holds.
pub(super) struct Driver {
    pub(super) method: Arc<Resolved>,
    pub(super) call: Call,
    pub(super) shared: Arc<Shared>,
    inbound: Option<Inbound>,
    report: CallReport,
    waited: Duration,
    last_class: Option<Class>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let policy = &self.method.engine;
        policy.abandon(&mut self.call, TokioClock);
    }
}

impl Driver {
    fn new(shared: Arc<Shared>, headers: &HeaderMap, ext: &http::Extensions, path: &str) -> Self {
        let method = shared.methods.find(path).clone();
        let inbound = if shared.one_layer {
            ext.get::<Inbound>().cloned().or_else(Inbound::current)
        } else {
            None
        };
        // A method whose policy lists codes is declared safe to repeat for
        // them (DEADLINE_EXCEEDED included); without one, the table applies.
        let idempotency = if method.retryable.is_some() {
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
        if method.timeout.is_some() || caller.is_some() || inbound_deadline.is_some() {
            let now = TokioClock.now();
            let candidates = [
                method.timeout.and_then(|t| now.checked_add(t)),
                caller.and_then(|t| now.checked_add(t)),
                inbound_deadline,
            ];
            if let Some(d) = candidates.into_iter().flatten().min() {
                call = call.deadline(d);
            }
        }
        Driver {
            method,
            call,
            shared,
            inbound,
            report: CallReport::default(),
            waited: Duration::ZERO,
            last_class: None,
        }
    }

    /// Writes this attempt's headers: the time left, and from the second
    /// attempt on the count of earlier ones (a transparent retry is not one:
    /// the attempt before it never reached a server).
    fn stamp(&self, headers: &mut HeaderMap, timeout: Option<Duration>) {
        let attempt = self.call.attempts() - self.call.transparent_retries_made();
        if attempt > 1 {
            headers.insert(GRPC_PREVIOUS_ATTEMPTS, HeaderValue::from(attempt - 1));
        }
        if let Some(t) = timeout {
            if let Ok(v) = HeaderValue::from_str(&format_grpc_timeout(t)) {
                headers.insert(GRPC_TIMEOUT, v);
            }
        }
    }

    fn decide(
        &mut self,
        outcome: Outcome,
        status: Option<u32>,
        error: Option<String>,
        pushback_ms: Option<i64>,
    ) -> Decision {
        let transparent_before = self.call.transparent_retries_made();
        if let Outcome::Failure(f) = &outcome {
            self.last_class = Some(f.class);
        }
        let decision = self
            .method
            .engine
            .decide(&mut self.call, outcome, TokioClock);
        if let Decision::Retry { after } = decision {
            self.waited = self.waited.saturating_add(after);
        }
        if let Some(hook) = &self.shared.hook {
            let (delay, stop) = match decision {
                Decision::Retry { after } => (Some(after), None),
                Decision::Stop(r) => (None, Some(r)),
            };
            hook(&AttemptRecord {
                attempt: self.call.attempts(),
                status,
                error,
                pushback_ms,
                transparent: self.call.transparent_retries_made() > transparent_before,
                delay,
                stop,
            });
        }
        decision
    }

    /// Ends the call: fills in the report and, under the one-layer rule,
    /// tells the inbound request when a failure that could have cleared was
    /// given up on here.
    fn finish(&self, reason: Option<StopReason>, status: Option<u32>) -> CallReport {
        if let (Some(r), Some(i)) = (reason, &self.inbound) {
            let retryable = self.last_class.is_some_and(Class::may_clear);
            let declined = matches!(
                self.call.not_retried(),
                Some(NotRetried::ServingRetry | NotRetried::ServerSaidNo)
            );
            if r != StopReason::Success && retryable && (self.call.attempts() > 1 || declined) {
                i.mark_gave_up();
            }
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

async fn run<S, M, B, ResB>(
    mut inner: S,
    shared: Arc<Shared>,
    make: M,
    req: Request<B>,
) -> Result<Response<GrpcBody<ResB>>, Error>
where
    M: MakeBody<B> + Sync,
    M::Output: Send + 'static,
    S: Service<Request<M::Output>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Body + Unpin + Send + 'static,
{
    let limit = shared.max_replay_bytes;
    let mut d = Driver::new(shared, req.headers(), req.extensions(), req.uri().path());
    if let Some(hedging) = d.method.hedge.clone() {
        return super::hedged::run(inner, d, hedging, make, req).await;
    }
    let (parts, body) = req.into_parts();
    let body = Replay::new(body, limit);
    let mut first = true;
    let mut last: Last<ResB> = Last::None;
    loop {
        let policy = &d.method.engine;
        let timeout = match policy.start_attempt(&mut d.call, TokioClock) {
            Ok(t) => t,
            Err(reason) => return conclude(&d, last, reason),
        };
        let Some(b) = body.next() else {
            return conclude(&d, last, StopReason::NotRetryable);
        };
        let mut attempt = Request::new(make.make(b));
        *attempt.method_mut() = parts.method.clone();
        *attempt.uri_mut() = parts.uri.clone();
        *attempt.version_mut() = parts.version;
        *attempt.headers_mut() = parts.headers.clone();
        *attempt.extensions_mut() = parts.extensions.clone();
        d.stamp(attempt.headers_mut(), timeout);
        let sent_at = TokioClock.now();
        let sent = if first {
            first = false;
            send(&mut inner, attempt, timeout).await
        } else {
            match poll_fn(|cx| inner.poll_ready(cx).map_err(Into::into)).await {
                Ok(()) => send(&mut inner, attempt, timeout).await,
                Err(e) => Some(Err(e)),
            }
        };
        if body.outgrown() {
            // The request outgrew the replay buffer: it cannot be sent again.
            d.call.commit(NotRetried::BodyTooLarge { limit });
        }
        let decision = match sent {
            Some(Ok(resp)) => match attempt_status(resp.status(), resp.headers()) {
                Some(0) => {
                    d.decide(Outcome::Success, Some(0), None, None);
                    last = Last::Response(resp, Some(0));
                    Decision::Stop(StopReason::Success)
                }
                Some(code) => {
                    let codes = d.method.retryable.clone();
                    let (f, pushback) = status_failure(code, resp.headers(), codes.as_deref());
                    last = Last::Response(resp, Some(code));
                    d.decide(Outcome::Failure(f), Some(code), None, pushback)
                }
                None => return Ok(committed(d, resp)),
            },
            // The inner service's own timer (tonic enforces the
            // `grpc-timeout` it was given) ended the attempt when its time was
            // up: that is this attempt timing out.
            Some(Err(e)) if timeout.is_some_and(|t| TokioClock.now() >= sent_at + t) => {
                let decision = d.decide(
                    Outcome::Failure(Failure::timeout()),
                    None,
                    Some(error_chain(&*e)),
                    None,
                );
                last = Last::Error(ErrorKind::Timeout, e);
                decision
            }
            Some(Err(e)) => {
                let f = Failure::new(error_class(&*e));
                let f = if never_sent(&*e) { f.not_sent() } else { f };
                let decision = d.decide(Outcome::Failure(f), None, Some(error_chain(&*e)), None);
                last = Last::Error(ErrorKind::Service, e);
                decision
            }
            None => {
                let text = AttemptTimedOut.to_string();
                let decision =
                    d.decide(Outcome::Failure(Failure::timeout()), None, Some(text), None);
                last = Last::Error(ErrorKind::Timeout, Box::new(AttemptTimedOut));
                decision
            }
        };
        match decision {
            Decision::Retry { after } => Box::pin(tokio::time::sleep(after)).await,
            Decision::Stop(reason) => return conclude(&d, last, reason),
        }
    }
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

/// Sends one attempt, bounded by its timeout; `None` when it timed out.
async fn send<S, Req>(
    inner: &mut S,
    req: Req,
    timeout: Option<Duration>,
) -> Option<Result<S::Response, BoxError>>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    let fut = inner.call(req);
    let result = match timeout {
        Some(t) => Box::pin(tokio::time::timeout(t, fut)).await.ok()?,
        None => fut.await,
    };
    Some(result.map_err(Into::into))
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
