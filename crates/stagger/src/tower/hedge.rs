//! The client [`HedgeLayer`]: hedged HTTP requests under a [`HedgePolicy`].

use std::sync::Arc;
use std::task::{Context, Poll};

use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::body::{prepare, Prepared, ReplayBody};
use super::error::{AttemptTimedOut, BoxError, Error, ErrorKind};
use super::future::{send_clone, Channel, ResponseFuture, Sent};
use crate::hedge::driver::{timed_out, Answer, Attempt, Attempts, End, Verdict};
use crate::hedge::HedgePolicy;
use crate::http::{error_failure, rebuild, Facts, HedgeRules, HttpAttempts, Settings};
use crate::outcome::{Outcome, StopReason};

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
/// Requests are read by the same HTTP rules as the retry layer's
/// ([`Settings`], see [`settings`](HedgeLayer::settings)): per-request
/// [`CallOptions`](crate::http::CallOptions), `retry_500`, and the one-layer
/// rule (no hedge while serving an inbound retry; an `x-no-retry` answer
/// stops further attempts and is passed up, and a given-up failure marks
/// the inbound request).
///
/// Every attempt carries `x-retry-attempt: N`, the call's one
/// `Idempotency-Key` and, when the attempt has a timeout, the time it has
/// left as `x-request-timeout-ms`. The body is buffered (up to 1 MiB by
/// default) so it can be sent more than once; a larger body or a stream is
/// sent once and the request is not hedged. The final response carries a
/// [`RetryInfo`](crate::http::RetryInfo) in its extensions.
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
    rules: Arc<HedgeRules>,
}

impl HedgeLayer {
    /// A layer hedging under `policy`, with the default HTTP settings.
    pub fn new(policy: HedgePolicy) -> Self {
        HedgeLayer {
            rules: Arc::new(HedgeRules::new(policy)),
        }
    }

    /// Reads every request by these HTTP settings, as the
    /// [`RetryLayer`](super::RetryLayer) does: `retry_500`, generated keys,
    /// the call's deadline and whether it travels downstream, the one-layer
    /// rule, the replay limit. The settings' policy is the retry policy
    /// every attempt is judged by (in place of the hedging policy's own).
    /// The settings' `on_attempt` hook is not called for hedged attempts.
    ///
    /// ```
    /// use stagger::http::Settings;
    /// use stagger::tower::HedgeLayer;
    /// use stagger::HedgePolicy;
    ///
    /// let hedging = HedgePolicy::builder().build()?;
    /// let retries = hedging.policy().clone();
    /// let layer = HedgeLayer::new(hedging).settings(Settings::new(retries).retry_500(true));
    /// # let _ = layer;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn settings(mut self, settings: Settings) -> Self {
        Arc::make_mut(&mut self.rules).set(settings);
        self
    }

    /// Adds an `Idempotency-Key` to POST and PATCH requests that lack one,
    /// the same on every attempt, which makes them idempotent and so
    /// hedgeable (default off).
    pub fn idempotency_keys(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.rules).settings.idempotency_keys = on;
        self
    }

    /// The policy.
    pub fn policy(&self) -> &HedgePolicy {
        self.rules.hedging()
    }
}

impl<S> Layer<S> for HedgeLayer {
    type Service = HedgeService<S>;

    fn layer(&self, inner: S) -> HedgeService<S> {
        HedgeService {
            inner,
            rules: self.rules.clone(),
        }
    }
}

/// A client service whose idempotent requests are hedged; made by
/// [`HedgeLayer`]. Each attempt goes to its own clone of the inner service.
#[derive(Debug, Clone)]
pub struct HedgeService<S> {
    inner: S,
    rules: Arc<HedgeRules>,
}

impl<S> HedgeService<S> {
    /// Wraps `inner` to hedge under `policy` (no `Idempotency-Key` added).
    pub fn new(inner: S, policy: HedgePolicy) -> Self {
        HedgeLayer::new(policy).layer(inner)
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
        ResponseFuture::new(Box::pin(run(self.inner.clone(), self.rules.clone(), req)))
    }
}

/// The tower part of a hedged call: attempt k is the request's head with
/// its own copy of the body, sent to its own clone of the inner service.
struct Sends<'a, S, B> {
    inner: &'a mut S,
    parts: &'a Parts,
    body: Prepared<B>,
    facts: Facts,
}

impl<S, B> HttpAttempts for Sends<'_, S, B>
where
    Self: Attempts,
{
    fn facts(&self) -> &Facts {
        &self.facts
    }
}

impl<S, B, ResB> Attempts for Sends<'_, S, B>
where
    S: Channel<Request<ReplayBody<B>>, Response = Response<ResB>>,
    B: Body + Send + 'static,
{
    type Answer = Result<Response<ResB>, BoxError>;
    type Future = Sent<Response<ResB>>;

    fn start(&mut self, a: Attempt) -> Option<Self::Future> {
        let mut req = rebuild(self.parts, self.body.next()?);
        self.facts.stamp(req.headers_mut(), a.number, a.timeout);
        Some(send_clone(self.inner, req))
    }

    fn judge(&mut self, answer: &Answer<Self::Answer>) -> Verdict {
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
}

async fn run<S, B, ResB>(
    mut inner: S,
    rules: Arc<HedgeRules>,
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
    let (mut hc, facts) = rules.open(req.method(), req.headers(), req.extensions());
    let (parts, body) = req.into_parts();
    let body = match prepare(body, rules.settings.get_max_replay_bytes()).await {
        Ok(b) => b,
        Err(e) => {
            let info = hc.finish(&facts, End::Stopped(StopReason::NotRetryable));
            return Err(Error::new(ErrorKind::Body, info, Some(e.into())));
        }
    };
    if let Prepared::Once(_, why) = &body {
        hc.call.commit(*why);
    }
    let mut sends = Sends {
        // Borrowed mutably, so the future needs `S: Send` only, not `Sync`.
        inner: &mut inner,
        parts: &parts,
        body,
        facts,
    };
    let (info, last) = hc.run(&mut sends).await;
    match last {
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
