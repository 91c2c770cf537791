//! The gRPC client [`RetryService`]: the driver of one call. It builds each
//! attempt, sends it, reports what happened to the engine as facts
//! (status class, pushback, not sent, committed) and waits as told.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::GrpcBody;
use super::call::{committed, conclude, Driver, Last};
use super::shared::{MakeBody, Shared};
use super::wire::GRPC_TIMEOUT;
use super::{attempt_status, never_sent, status_failure, AttemptHook, AttemptRecord};
use crate::engine::drive::{
    drive, Answer, Attempt, Attempts, End, Judged, Overflow, Plan, Verdict,
};
use crate::http::TokioClock;
use crate::http::{error_chain, error_class, rebuild, AttemptTimedOut};
use crate::outcome::deadline::format_grpc_timeout;
use crate::outcome::{Class, Decision, Failure, NotRetried, Outcome, StopReason};
use crate::time::Clock;
use crate::tower::{
    nested, BoxError, Error, ErrorKind, Replay, ReplayBody, ResponseFuture, Sending,
};

/// A gRPC client service whose calls are retried as [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) says; made by
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
                crate::http::RetryInfo::stopped(0, StopReason::NotRetryable),
                Some(e.into()),
            )
        })
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if nested() {
            // A stagger layer above runs the attempts: send this one as it
            // is, and pass its answer up for that layer to judge.
            let sent = inner.call(req.map(|b| self.make.make(ReplayBody::once(b))));
            return ResponseFuture::new(Box::pin(async move {
                match sent.await {
                    Ok(resp) => Ok(resp.map(|b| GrpcBody::new(b, None))),
                    Err(e) => Err(Error::new(
                        ErrorKind::Service,
                        crate::http::RetryInfo::stopped(1, StopReason::NotRetryable),
                        Some(e.into()),
                    )),
                }
            }));
        }
        let fut = run(inner, self.shared.clone(), self.make.clone(), req);
        ResponseFuture::new(Box::pin(fut))
    }
}

/// The gRPC part of a call: attempt k is the request's head with its own
/// view of the replay buffer, stamped with the attempt headers; an answer's
/// facts are the status (from the head, or the trailers once committed), the
/// pushback, and whether the attempt never left.
struct Sends<'a, S, M, B> {
    /// The service the caller made ready, for the first attempt; every later
    /// attempt is sent on a clone of it.
    inner: &'a mut S,
    first: bool,
    parts: &'a Parts,
    body: &'a Replay<B>,
    make: &'a M,
    codes: Option<&'a [u32]>,
    limit: usize,
    /// When each attempt with a time limit went out (the inner service's own
    /// timer may end it first: that is the attempt timing out).
    timed: Vec<(u32, Instant, Duration)>,
    hook: Option<&'a AttemptHook>,
    last_class: Option<Class>,
    /// The gRPC status of the answer judged last (the answer the loop
    /// ends with, when it ends with one), read once.
    last_status: Option<u32>,
    /// The call's and its attempts' spans (feature `opentelemetry`).
    #[cfg(feature = "opentelemetry")]
    spans: Option<crate::observe::otel::GrpcSpans>,
}

impl<S, M, B, ResB> Attempts for Sends<'_, S, M, B>
where
    B: Body,
    M: MakeBody<B>,
    S: Service<Request<M::Output>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
{
    type Answer = Result<S::Response, BoxError>;
    type Future = Sending<S, Request<M::Output>>;

    fn start(&mut self, a: Attempt) -> Option<Self::Future> {
        let b = self.make.make(self.body.next()?);
        let mut req = rebuild(self.parts, b);
        stamp(req.headers_mut(), a);
        #[cfg(feature = "opentelemetry")]
        if let Some(spans) = &mut self.spans {
            spans.start(a.id, a.number, req.headers_mut());
        }
        if let Some(t) = a.timeout {
            self.timed.push((a.id, TokioClock.now(), t));
        }
        Some(if std::mem::take(&mut self.first) {
            Sending::now(self.inner, req)
        } else {
            Sending::on_clone(self.inner, req)
        })
    }

    fn judge(&mut self, a: &Attempt, answer: &Answer<Self::Answer>) -> Verdict {
        self.last_status = match answer {
            Answer::Came(Ok(resp)) => attempt_status(resp.status(), resp.headers()),
            _ => None,
        };
        let f = match answer {
            Answer::Came(Ok(resp)) => match self.last_status {
                Some(0) => return Verdict::Report(Outcome::Success),
                Some(code) => status_failure(code, resp.headers(), self.codes).0,
                // Headers without a status: this attempt commits the call;
                // its trailers' status is told to the engine when they come.
                None => return Verdict::Take,
            },
            // The inner service's own timer (tonic enforces the
            // `grpc-timeout` it was given) ended the attempt when its time
            // was up: that is this attempt timing out.
            Answer::Came(Err(_)) if self.ran_out(a.id) => Failure::timeout(),
            Answer::Came(Err(e)) => {
                let f = Failure::new(error_class(&**e));
                if never_sent(&**e) {
                    f.not_sent()
                } else {
                    f
                }
            }
            Answer::TimedOut => Failure::timeout(),
        };
        self.last_class = Some(f.class);
        Verdict::Report(Outcome::Failure(f))
    }

    fn judged(&mut self, a: &Attempt, j: Judged<'_, Self::Answer>) {
        #[cfg(feature = "opentelemetry")]
        if let Some(spans) = &mut self.spans {
            let code = match j.answer {
                Answer::Came(Ok(resp)) => attempt_status(resp.status(), resp.headers()),
                _ => None,
            };
            spans.end(a.id, code);
        }
        let Some(hook) = self.hook else { return };
        let (status, error, pushback_ms) = match j.answer {
            Answer::Came(Ok(resp)) => {
                // Told right after `judge` read this answer's status.
                let code = self.last_status;
                let pushback = code
                    .filter(|c| *c != 0)
                    .and_then(|c| status_failure(c, resp.headers(), self.codes).1);
                (code, None, pushback)
            }
            Answer::Came(Err(e)) => (None, Some(error_chain(&**e)), None),
            Answer::TimedOut => (None, Some(AttemptTimedOut.to_string()), None),
        };
        let (delay, stop) = match j.decision {
            Decision::Retry { after } => (Some(after), None),
            Decision::Stop(r) => (None, Some(r)),
        };
        hook(&AttemptRecord {
            attempt: a.id,
            status,
            error,
            pushback_ms,
            transparent: j.transparent,
            delay,
            stop,
        });
    }

    fn poll_overflow(&mut self, cx: &mut Context<'_>) -> Poll<Overflow> {
        // The n-th body the buffer gave is attempt n's.
        self.body.poll_outgrown(cx).map(|leader| Overflow {
            leader: leader.and_then(|g| u32::try_from(g).ok()),
            why: NotRetried::BodyTooLarge { limit: self.limit },
        })
    }
}

impl<S, M, B> Sends<'_, S, M, B> {
    /// Whether attempt `id`'s time limit had passed when it failed.
    fn ran_out(&self, id: u32) -> bool {
        self.timed
            .iter()
            .find(|(a, ..)| *a == id)
            .is_some_and(|(_, at, t)| TokioClock.now() >= *at + *t)
    }
}

async fn run<S, M, B, ResB>(
    mut inner: S,
    shared: Arc<Shared>,
    make: M,
    req: Request<B>,
) -> Result<Response<GrpcBody<ResB>>, Error>
where
    M: MakeBody<B>,
    S: Service<Request<M::Output>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    ResB: Body + Unpin,
{
    let limit = shared.max_replay_bytes;
    let (mut d, call) = Driver::new(shared, req.headers(), req.extensions(), req.uri().path());
    let method = d.method.clone();
    let mut plan = Plan::new(&method.engine, method.hedge.as_ref(), call, &TokioClock);
    let (mut parts, body) = req.into_parts();
    crate::http::propagate_priority(&mut parts.headers, &parts.extensions);
    let body = if plan.side_by_side() {
        Replay::side_by_side(body, limit)
    } else {
        Replay::new(body, limit)
    };
    let mut sends = Sends {
        inner: &mut inner,
        first: true,
        parts: &parts,
        body: &body,
        make: &make,
        codes: method.retryable.as_deref(),
        limit,
        timed: Vec::new(),
        hook: d.shared.hook.as_ref(),
        last_class: None,
        last_status: None,
        #[cfg(feature = "opentelemetry")]
        spans: d
            .shared
            .trace_attempts
            .then(|| crate::observe::otel::GrpcSpans::open(parts.uri.path())),
    };
    let finish = drive(&mut plan, &mut sends, &TokioClock, tokio::time::sleep).await;
    #[cfg(feature = "opentelemetry")]
    if let Some(spans) = sends.spans.take() {
        let code = match &finish.last {
            Some(Answer::Came(Ok(resp))) => attempt_status(resp.status(), resp.headers()),
            _ => None,
        };
        spans.close(code);
    }
    d.last_class = sends.last_class;
    d.waited = plan.waited();
    d.call = plan.take_call();
    #[cfg(feature = "opentelemetry")]
    crate::observe::otel::record_grpc_call(&parts.uri, &d.call, d.waited);
    let last = match finish.last {
        Some(Answer::Came(Ok(resp))) => {
            if finish.end == End::Taken {
                return Ok(committed(d, resp));
            }
            // The last answer is the one judged last: its status is read.
            Last::Response(resp, sends.last_status)
        }
        Some(Answer::Came(Err(e))) => {
            let kind = match d.last_class {
                Some(Class::Unknown) => ErrorKind::Timeout,
                _ => ErrorKind::Service,
            };
            Last::Error(kind, e)
        }
        Some(Answer::TimedOut) => Last::Error(ErrorKind::Timeout, Box::new(AttemptTimedOut)),
        None => Last::None,
    };
    conclude(&d, last, finish.end.reason())
}

/// Writes attempt `a`'s headers: `grpc-previous-rpc-attempts` from the
/// second attempt on, and the time it has left as `grpc-timeout`.
fn stamp(headers: &mut HeaderMap, a: Attempt) {
    super::wire::mark_attempt(headers, a.number);
    if let Some(t) = a.timeout {
        if let Ok(v) = HeaderValue::from_str(&format_grpc_timeout(t)) {
            headers.insert(GRPC_TIMEOUT, v);
        }
    }
}
