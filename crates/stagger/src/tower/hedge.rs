//! The client [`HedgeLayer`]: hedged HTTP requests under a [`HedgePolicy`].

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderValue, Request, Response};
use http_body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::body::{prepare, Prepared, ReplayBody};
use super::error::{AttemptTimedOut, BoxError, Error, ErrorKind};
use super::future::ResponseFuture;
use crate::call::Call;
use crate::clock::Clock;
use crate::hedge::{HedgePolicy, HedgeStep, MAX_HEDGE_ATTEMPTS};
use crate::http::{
    attempt_value, error_failure, is_idempotent, needs_key, new_idempotency_key, response_failure,
    timeout_header, RetryInfo, TokioClock, IDEMPOTENCY_KEY, RETRY_ATTEMPT,
};
use crate::outcome::{Failure, Idempotency, Outcome, StopReason};

/// The largest body buffered so a request can be hedged (1 MiB).
const MAX_REPLAY_BYTES: usize = 1 << 20;

/// Wraps a client service so idempotent requests are hedged under one
/// shared [`HedgePolicy`] (its latency window and budget are shared by every
/// clone).
///
/// tower's own `hedge` sends one backup at a latency percentile with no cap
/// on the extra load, for any request. This layer hedges only idempotent
/// requests (GET, HEAD, OPTIONS, TRACE, PUT, DELETE, or a request carrying
/// an `Idempotency-Key`, which the layer can add), caps extra load with the
/// policy's budget, and treats answers by the same rules as the
/// [`RetryLayer`](super::RetryLayer): a retryable status (503, a reset
/// connection) sends the next attempt at once, a final one (404) ends the
/// call, the first success wins and the other attempts are dropped.
///
/// Every attempt carries `x-retry-attempt: N`, the call's one
/// `Idempotency-Key` and, when the attempt has a timeout, the time it has
/// left as `x-request-timeout-ms`. The body is buffered (up to 1 MiB) so it
/// can be sent more than once; a larger body or a stream is sent once and
/// the request is not hedged. The final response carries a
/// [`RetryInfo`] in its extensions.
///
/// ```
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::Full;
/// use stagger::http::RetryInfo;
/// use stagger::tower::HedgeLayer;
/// use stagger::{HedgeDelay, HedgePolicy};
/// use std::time::Duration;
/// use tower::{Layer, Service, ServiceExt};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
/// # rt.block_on(async {
/// // The first attempt stalls; the hedge sent 20 ms later answers at once.
/// let svc = tower::service_fn(|req: Request<_>| async move {
///     let attempt = req.headers()["x-retry-attempt"].to_str().unwrap().to_owned();
///     if attempt == "1" {
///         tokio::time::sleep(Duration::from_secs(1)).await;
///     }
///     Ok::<_, std::convert::Infallible>(Response::new(attempt))
/// });
/// let hedging = HedgePolicy::builder().delay(HedgeDelay::Fixed(Duration::from_millis(20))).build().unwrap();
/// let mut client = HedgeLayer::new(hedging).layer(svc);
/// let req = Request::get("http://example.invalid/").body(Full::<Bytes>::default()).unwrap();
/// let resp = client.ready().await.unwrap().call(req).await.unwrap();
/// assert_eq!(resp.body(), "2");
/// assert_eq!(resp.extensions().get::<RetryInfo>().unwrap().attempts, 2);
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct HedgeLayer {
    policy: HedgePolicy,
    keys: bool,
}

impl HedgeLayer {
    /// A layer hedging under `policy`.
    pub fn new(policy: HedgePolicy) -> Self {
        HedgeLayer {
            policy,
            keys: false,
        }
    }

    /// Adds an `Idempotency-Key` to POST and PATCH requests that lack one,
    /// the same on every attempt, which makes them idempotent and so
    /// hedgeable (default off).
    pub fn idempotency_keys(mut self, on: bool) -> Self {
        self.keys = on;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &HedgePolicy {
        &self.policy
    }
}

impl<S> Layer<S> for HedgeLayer {
    type Service = HedgeService<S>;

    fn layer(&self, inner: S) -> HedgeService<S> {
        HedgeService {
            inner,
            layer: self.clone(),
        }
    }
}

/// A client service whose idempotent requests are hedged; made by
/// [`HedgeLayer`]. Each attempt goes to its own clone of the inner service.
#[derive(Debug, Clone)]
pub struct HedgeService<S> {
    inner: S,
    layer: HedgeLayer,
}

impl<S> HedgeService<S> {
    /// Wraps `inner` to hedge under `policy` (no `Idempotency-Key` added).
    pub fn new(inner: S, policy: HedgePolicy) -> Self {
        HedgeService {
            inner,
            layer: HedgeLayer::new(policy),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResB> Service<Request<B>> for HedgeService<S>
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

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // Each attempt readies its own clone.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        ResponseFuture::new(Box::pin(run(self.inner.clone(), self.layer.clone(), req)))
    }
}

type Attempt<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;
type Running<T> = Option<(Attempt<T>, Option<Pin<Box<tokio::time::Sleep>>>)>;

async fn run<S, B, ResB>(
    mut inner: S,
    layer: HedgeLayer,
    req: Request<B>,
) -> Result<Response<ResB>, Error>
where
    S: Service<Request<ReplayBody<B>>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Send + 'static,
{
    let policy = &layer.policy;
    // Borrowed mutably, so the future needs `S: Send` only, not `Sync`.
    let inner = &mut inner;
    let (parts, body) = req.into_parts();
    let mut key = None;
    if layer.keys && needs_key(&parts.method) && !parts.headers.contains_key(IDEMPOTENCY_KEY) {
        key = Some(new_idempotency_key());
    }
    let mut idempotency = if key.is_some() || is_idempotent(&parts.method, &parts.headers) {
        Idempotency::Idempotent
    } else {
        Idempotency::NotIdempotent
    };
    let mut body = match prepare(body, MAX_REPLAY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return Err(Error::new(
                ErrorKind::Body,
                info(0, StopReason::NotRetryable, None),
                Some(e.into()),
            ))
        }
    };
    let mut call = Call::new();
    if let Prepared::Once(_, why) = &body {
        call.commit(*why);
        idempotency = Idempotency::Unspecified;
    }
    let mut h = policy.call(call.idempotency(idempotency));
    let mut running: [Running<Response<ResB>>; MAX_HEDGE_ATTEMPTS as usize] =
        std::array::from_fn(|_| None);
    let mut timer: Option<(Instant, Pin<Box<tokio::time::Sleep>>)> = None;
    let mut last: Option<Result<Response<ResB>, (ErrorKind, BoxError)>> = None;
    let mut winner: Option<Response<ResB>> = None;
    let reason = poll_fn(|cx| loop {
        let now = TokioClock.now();
        match policy.poll(&mut h, now) {
            HedgeStep::Send { attempt, timeout } => {
                let Some(b) = body.next() else {
                    // A one-shot body is spent: no further attempt.
                    policy.cancel(&mut h, now);
                    return Poll::Ready(StopReason::NotRetryable);
                };
                let mut req = Request::new(b);
                *req.method_mut() = parts.method.clone();
                *req.uri_mut() = parts.uri.clone();
                *req.version_mut() = parts.version;
                *req.headers_mut() = parts.headers.clone();
                *req.extensions_mut() = parts.extensions.clone();
                stamp(req.headers_mut(), attempt, key.as_ref(), timeout);
                let source: &mut S = &mut *inner;
                let mut svc = source.clone();
                let fut: Attempt<Response<ResB>> = Box::pin(async move {
                    poll_fn(|cx| svc.poll_ready(cx)).await.map_err(Into::into)?;
                    svc.call(req).await.map_err(Into::into)
                });
                let limit = timeout.map(|t| Box::pin(tokio::time::sleep(t)));
                running[attempt as usize - 1] = Some((fut, limit));
                continue;
            }
            HedgeStep::Stop(r) => return Poll::Ready(r),
            HedgeStep::WaitUntil(at) => {
                if timer.as_ref().is_none_or(|(t, _)| *t != at) {
                    let wait = at.saturating_duration_since(now);
                    timer = Some((at, Box::pin(tokio::time::sleep(wait))));
                }
            }
            HedgeStep::Wait => timer = None,
        }
        let mut answered = false;
        for (i, slot) in running.iter_mut().enumerate() {
            let Some((fut, limit)) = slot else { continue };
            let attempt = i as u32 + 1;
            if let Poll::Ready(result) = fut.as_mut().poll(cx) {
                *slot = None;
                answered = true;
                let now = TokioClock.now();
                match result {
                    Ok(resp) => {
                        match response_failure(
                            resp.status(),
                            resp.headers(),
                            false,
                            SystemTime::now(),
                        ) {
                            None => {
                                policy.report(&mut h, attempt, Outcome::Success, now);
                                winner = Some(resp);
                            }
                            Some(f) => {
                                policy.report(&mut h, attempt, f, now);
                                last = Some(Ok(resp));
                            }
                        }
                    }
                    Err(e) => {
                        policy.report(&mut h, attempt, error_failure(&*e), now);
                        last = Some(Err((ErrorKind::Service, e)));
                    }
                }
            } else if limit
                .as_mut()
                .is_some_and(|l| l.as_mut().poll(cx).is_ready())
            {
                *slot = None;
                answered = true;
                policy.report(&mut h, attempt, Failure::timeout(), TokioClock.now());
                last = Some(Err((ErrorKind::Timeout, Box::new(AttemptTimedOut))));
            }
            if answered {
                break;
            }
        }
        if answered {
            continue;
        }
        if let Some((_, t)) = &mut timer {
            if t.as_mut().poll(cx).is_ready() {
                timer = None;
                continue;
            }
        }
        return Poll::Pending;
    })
    .await;
    // The attempts still running are cancelled here.
    drop(running);
    let info = info(h.call().attempts(), reason, h.call().not_retried());
    match (winner, last) {
        (Some(mut resp), _) => {
            resp.extensions_mut().insert(info);
            Ok(resp)
        }
        (None, Some(Ok(mut resp))) => {
            resp.extensions_mut().insert(info);
            Ok(resp)
        }
        (None, Some(Err((kind, e)))) => Err(Error::new(kind, info, Some(e))),
        (None, None) => Err(Error::new(ErrorKind::Refused, info, None)),
    }
}

fn info(
    attempts: u32,
    reason: StopReason,
    not_retried: Option<crate::outcome::NotRetried>,
) -> RetryInfo {
    RetryInfo {
        attempts,
        reason,
        not_retried,
        waited: Duration::ZERO,
    }
}

fn stamp(
    headers: &mut http::HeaderMap,
    attempt: u32,
    key: Option<&HeaderValue>,
    timeout: Option<Duration>,
) {
    headers.insert(RETRY_ATTEMPT, attempt_value(attempt));
    if let Some(k) = key {
        headers.insert(IDEMPOTENCY_KEY, k.clone());
    }
    if let Some(t) = timeout {
        let (name, value) = timeout_header(false, t);
        headers.insert(name, value);
    }
}
