//! The client [`RetryService`]: the HTTP part of a call (how attempt k's
//! request is built and what its answer says), run by the one attempt loop.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::{prepare, Prepared, ReplayBody};
use super::error::{AttemptTimedOut, BoxError, Error, ErrorKind};
use super::future::{ResponseFuture, Sending};
use crate::engine::drive::{drive, timed_out, Answer, Attempt, Attempts, Judged, Verdict};
use crate::http::{error_chain, error_failure, rebuild, Facts, RetryInfo, Settings};
use crate::http::{Opened, TokioClock};
use crate::outcome::{Outcome, StopReason};

/// A client service whose requests are retried (and hedged, when its
/// [`Settings`] hedge); made by [`RetryLayer`](super::RetryLayer).
///
/// The inner service receives [`ReplayBody<B>`] bodies: a buffered copy per
/// attempt, or the original stream once. The first attempt goes to the
/// service `poll_ready` made ready; each later one to its own clone.
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> RetryService<S> {
    /// Wraps `inner` with these settings — or a [`Policy`](crate::Policy)
    /// with the default ones.
    pub fn new(inner: S, settings: impl Into<Settings>) -> Self {
        Self::from_shared(inner, Arc::new(settings.into().resolved()))
    }

    pub(crate) fn from_shared(inner: S, settings: Arc<Settings>) -> Self {
        RetryService { inner, settings }
    }
}

impl<S, B, ResB> Service<Request<B>> for RetryService<S>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Send + 'static,
{
    type Response = Response<ResB>;
    type Error = Error;
    type Future = ResponseFuture<Response<ResB>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx).map_err(|e| {
            let info = RetryInfo::stopped(0, StopReason::NotRetryable);
            Error::new(ErrorKind::Service, info, Some(e.into()))
        })
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // Take the service that was made ready; leave a clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        if super::nested() {
            // A stagger layer above runs the attempts: send this one as it
            // is, and pass its answer up for that layer to judge.
            return ResponseFuture::new(Box::pin(pass_through(
                inner.call(req.map(ReplayBody::once)),
            )));
        }
        // Nothing else is read before the first poll: the request's facts
        // (the inbound request it serves, among them) belong to the task
        // that awaits the call.
        ResponseFuture::new(Box::pin(run(inner, self.settings.clone(), req)))
    }
}

/// The tower part of a call: attempt k is the request's head with its own
/// copy of the body.
struct Sends<'a, S, B> {
    /// The service the caller made ready, for the first attempt; every
    /// later attempt is sent on a clone of it.
    inner: &'a mut S,
    first: bool,
    parts: &'a Parts,
    body: Prepared<B>,
    facts: Facts,
    settings: &'a Settings,
}

impl<S, B, ResB> Attempts for Sends<'_, S, B>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
{
    type Answer = Result<Response<ResB>, BoxError>;
    type Future = Sending<S, Request<ReplayBody<B>>>;

    fn start(&mut self, a: Attempt) -> Option<Self::Future> {
        let mut req = rebuild(self.parts, self.body.next()?);
        self.facts.stamp(req.headers_mut(), a.number, a.timeout);
        #[cfg(feature = "opentelemetry")]
        if let Some(spans) = &mut self.facts.spans {
            let (method, url) = (req.method().clone(), req.uri().to_string());
            spans.start(a.id, &method, &url, req.headers_mut());
        }
        Some(if std::mem::take(&mut self.first) {
            Sending::now(self.inner, req)
        } else {
            Sending::on_clone(self.inner, req)
        })
    }

    fn judge(&mut self, _: &Attempt, answer: &Answer<Self::Answer>) -> Verdict {
        match answer {
            Answer::Came(Ok(resp)) => {
                Verdict::Report(self.facts.outcome(resp.status(), resp.headers()))
            }
            Answer::Came(Err(e)) => {
                Verdict::Report(Outcome::Failure(self.facts.failure(error_failure(&**e))))
            }
            Answer::TimedOut => timed_out(),
        }
    }

    fn judged(&mut self, a: &Attempt, j: Judged<'_, Self::Answer>) {
        #[cfg(feature = "opentelemetry")]
        if let Some(spans) = &mut self.facts.spans {
            let answer = crate::observe::otel::span_answer(j.answer, |r| r.status().as_u16());
            spans.end(a.id, answer, j.outcome);
        }
        let answer = match j.answer {
            Answer::Came(Ok(resp)) => Ok(resp.status().as_u16()),
            Answer::Came(Err(e)) => Err(error_chain(&**e)),
            Answer::TimedOut => Err(AttemptTimedOut.to_string()),
        };
        self.facts
            .log(self.settings, a.number, answer, j.outcome, j.decision);
    }
}

/// The call, as a future that reads nothing before its first poll. (An
/// `async move` block rather than an `async fn`: the arguments are kept once,
/// not once as arguments and again as locals, so the future is smaller.)
#[allow(clippy::manual_async_fn)]
fn run<S, B, ResB>(
    mut inner: S,
    settings: Arc<Settings>,
    req: Request<B>,
) -> impl Future<Output = Result<Response<ResB>, Error>>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
{
    async move {
        let Opened { facts, call, own } =
            Facts::open(&settings, req.method(), req.headers(), req.extensions());
        let mut plan = settings.plan(&own, call);
        let (mut parts, body) = req.into_parts();
        let body = match prepare(body, settings.max_replay_bytes).await {
            Ok(b) => b,
            Err(e) => {
                let stopped = crate::engine::drive::End::Stopped(StopReason::NotRetryable);
                let info = facts.summary(&plan, stopped, None);
                return Err(Error::new(ErrorKind::Body, info, Some(e.into())));
            }
        };
        if let Prepared::Once(_, why) = &body {
            crate::engine::drive::Engine::commit(&mut plan, *why);
        }
        facts.prepare(&mut parts.headers);
        let mut sends = Sends {
            inner: &mut inner,
            first: true,
            parts: &parts,
            body,
            facts,
            settings: &settings,
        };
        let finish = drive(&mut plan, &mut sends, &TokioClock, tokio::time::sleep).await;
        let answer = match &finish.last {
            Some(Answer::Came(Ok(resp))) => Some(resp.headers()),
            _ => None,
        };
        let info = sends.facts.summary(&plan, finish.end, answer);
        match finish.last {
            Some(Answer::Came(Ok(mut resp))) => {
                resp.extensions_mut().insert(info);
                Ok(resp)
            }
            Some(Answer::Came(Err(e))) => Err(Error::new(ErrorKind::Service, info, Some(e))),
            Some(Answer::TimedOut) => Err(Error::new(
                ErrorKind::Timeout,
                info,
                Some(Box::new(AttemptTimedOut)),
            )),
            None => Err(Error::new(ErrorKind::Refused, info, None)),
        }
    }
}

/// The answer to a request a stagger layer above runs the attempts of.
async fn pass_through<T, E: Into<BoxError>>(
    sent: impl Future<Output = Result<T, E>>,
) -> Result<T, Error> {
    sent.await.map_err(|e| {
        let info = RetryInfo::stopped(1, StopReason::NotRetryable);
        Error::new(ErrorKind::Service, info, Some(e.into()))
    })
}
