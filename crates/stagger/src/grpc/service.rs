//! The gRPC client [`RetryService`]: the driver of one call. It builds each
//! attempt, sends it, reports what happened to the engine as facts
//! (status class, pushback, not sent, committed) and waits as told.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::GrpcBody;
use super::call::{committed, conclude, Driver, Last};
use super::shared::{MakeBody, Shared};
use super::{attempt_status, never_sent, status_failure};
use crate::clock::Clock;
use crate::http::AttemptTimedOut;
use crate::http::{error_chain, error_class, TokioClock};
use crate::outcome::{Decision, Failure, NotRetried, Outcome, StopReason};
use crate::tower::{BoxError, Error, ErrorKind, Replay, ResponseFuture};

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
