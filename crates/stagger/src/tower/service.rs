//! The client [`RetryService`].

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::{prepare, Prepared, ReplayBody};
use super::error::{AttemptTimedOut, BoxError, Error, ErrorKind};
use super::future::ResponseFuture;
use crate::http::{error_chain, error_failure, Driver, RetryInfo, Settings};
use crate::outcome::StopReason;
use crate::outcome::{Decision, Failure};
use crate::policy::Policy;

/// A client service whose requests are retried; made by
/// [`RetryLayer`](super::RetryLayer).
///
/// The inner service receives [`ReplayBody<B>`] bodies: a buffered copy per
/// attempt, or the original stream once.
#[derive(Debug, Clone)]
pub struct RetryService<S> {
    inner: S,
    settings: Arc<Settings>,
}

impl<S> RetryService<S> {
    /// Wraps `inner` with `policy` and default HTTP settings.
    pub fn new(inner: S, policy: Policy) -> Self {
        Self::from_shared(inner, Arc::new(Settings::new(policy)))
    }

    pub(crate) fn from_shared(inner: S, settings: Arc<Settings>) -> Self {
        RetryService { inner, settings }
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
            let info = RetryInfo {
                attempts: 0,
                reason: StopReason::NotRetryable,
                not_retried: None,
                waited: std::time::Duration::ZERO,
            };
            Error::new(ErrorKind::Service, info, Some(e.into()))
        })
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // Take the service that was made ready; leave a clone in its place.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(Box::pin(run(inner, self.settings.clone(), req)))
    }
}

type Last<T> = Option<Result<T, (ErrorKind, BoxError)>>;

async fn run<S, B, ResB>(
    mut inner: S,
    settings: Arc<Settings>,
    req: Request<B>,
) -> Result<Response<ResB>, Error>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
{
    let limit = settings.max_replay_bytes;
    let mut driver = Driver::new(settings, req.method(), req.headers(), req.extensions());
    let (parts, body) = req.into_parts();
    let mut body = match prepare(body, limit).await {
        Ok(b) => b,
        Err(e) => {
            let info = driver.finish(StopReason::NotRetryable);
            return Err(Error::new(ErrorKind::Body, info, Some(e.into())));
        }
    };
    if let Prepared::Once(_, why) = &body {
        driver.commit(*why);
    }
    let mut first = true;
    let mut last: Last<Response<ResB>> = None;
    loop {
        let timeout = match driver.start() {
            Ok(t) => t,
            Err(reason) => return conclude(last, driver.finish(reason)),
        };
        let Some(b) = body.next() else {
            return conclude(last, driver.finish(StopReason::NotRetryable));
        };
        let mut attempt = Request::new(b);
        *attempt.method_mut() = parts.method.clone();
        *attempt.uri_mut() = parts.uri.clone();
        *attempt.version_mut() = parts.version;
        *attempt.headers_mut() = parts.headers.clone();
        *attempt.extensions_mut() = parts.extensions.clone();
        driver.stamp(attempt.headers_mut(), timeout);
        let outcome = if first {
            // `call` got a ready service.
            first = false;
            send(&mut inner, attempt, timeout).await
        } else {
            match poll_fn(|cx| inner.poll_ready(cx).map_err(Into::into)).await {
                Ok(()) => send(&mut inner, attempt, timeout).await,
                Err(e) => Some(Err(e)),
            }
        };
        let step = match outcome {
            Some(Ok(resp)) => {
                let step = driver.after_response(resp.status(), resp.headers());
                last = Some(Ok(resp));
                step
            }
            Some(Err(e)) => {
                let step = driver.after_error(error_failure(&*e), error_chain(&*e));
                last = Some(Err((ErrorKind::Service, e)));
                step
            }
            None => {
                let step = driver.after_error(Failure::timeout(), AttemptTimedOut.to_string());
                last = Some(Err((ErrorKind::Timeout, Box::new(AttemptTimedOut))));
                step
            }
        };
        match step {
            // Boxed: a timer is large, and keeping it out of this future's
            // state keeps every call (retried or not) cheap to move.
            Decision::Retry { after } => Box::pin(tokio::time::sleep(after)).await,
            Decision::Stop(reason) => return conclude(last, driver.finish(reason)),
        }
    }
}

/// Sends one attempt, bounded by its timeout; `None` when it timed out.
async fn send<S, Req>(
    inner: &mut S,
    req: Req,
    timeout: Option<std::time::Duration>,
) -> Option<Result<S::Response, BoxError>>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    let fut = inner.call(req);
    let result = match timeout {
        // Boxed for the same reason as the retry sleep.
        Some(t) => Box::pin(tokio::time::timeout(t, fut)).await.ok()?,
        None => fut.await,
    };
    Some(result.map_err(Into::into))
}

fn conclude<T>(last: Last<Response<T>>, info: RetryInfo) -> Result<Response<T>, Error> {
    match last {
        Some(Ok(mut resp)) => {
            resp.extensions_mut().insert(info);
            Ok(resp)
        }
        Some(Err((kind, e))) => Err(Error::new(kind, info, Some(e))),
        None => Err(Error::new(ErrorKind::Refused, info, None)),
    }
}
