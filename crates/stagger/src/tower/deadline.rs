//! The server [`DeadlineLayer`]: the caller's deadline and attempt number
//! become the deadline and the "serving a retry" flag of the work.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::clock::Clock;
use crate::http::{Inbound, TokioClock, NO_RETRY};

/// Reads `x-request-timeout-ms` (or `grpc-timeout` for gRPC) and
/// `x-retry-attempt` from each request and runs the inner service inside
/// that [`Inbound`] scope (also put in the request's extensions), so a
/// client call made while serving the request inherits its deadline and
/// follows the one-layer rule.
///
/// It also:
/// - answers `504 Gateway Timeout` when the caller's deadline passes first
///   (the caller has given up; the work is dropped), unless
///   [`enforce(false)`](DeadlineLayer::enforce);
/// - marks a failure response (5xx, 429, 408) with [`NO_RETRY`] when a
///   client call made while serving the request already retried and gave
///   up, so the caller passes the failure up instead of retrying it again.
///
/// ```
/// use http::{Request, Response};
/// use stagger::http::Inbound;
/// use stagger::tower::DeadlineLayer;
/// use tower::{Layer, Service, ServiceExt};
///
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// # rt.block_on(async {
/// let handler = tower::service_fn(|_req: Request<()>| async {
///     // Client calls made here see the caller's deadline and attempt.
///     let inbound = Inbound::current().unwrap();
///     Ok::<_, std::convert::Infallible>(Response::new(format!("attempt {}", inbound.attempt())))
/// });
/// let mut svc = DeadlineLayer::new().layer(handler);
/// let req = Request::builder()
///     .header("x-retry-attempt", "2")
///     .header("x-request-timeout-ms", "500")
///     .body(())
///     .unwrap();
/// let resp = svc.ready().await.unwrap().call(req).await.unwrap();
/// assert_eq!(resp.body(), "attempt 2");
/// # });
/// ```
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    enforce: bool,
    one_layer: bool,
}

impl Default for DeadlineLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl DeadlineLayer {
    /// Enforces deadlines and marks given-up failures.
    pub const fn new() -> Self {
        DeadlineLayer {
            enforce: true,
            one_layer: true,
        }
    }

    /// Whether to cut the work off with 504 at the deadline (default on).
    pub const fn enforce(mut self, on: bool) -> Self {
        self.enforce = on;
        self
    }

    /// Whether to mark failures with [`NO_RETRY`] when a call below gave up
    /// (default on; off is for demonstrations).
    pub const fn one_layer(mut self, on: bool) -> Self {
        self.one_layer = on;
        self
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> DeadlineService<S> {
        DeadlineService {
            inner,
            layer: *self,
        }
    }
}

/// The service made by [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    inner: S,
    layer: DeadlineLayer,
}

impl<S> DeadlineService<S> {
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

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqB, ResB> Service<Request<ReqB>> for DeadlineService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    S::Future: Send + 'static,
    ResB: Default + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<Response<ResB>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let inbound = Inbound::from_headers(req.headers(), TokioClock.now());
        req.extensions_mut().insert(inbound.clone());
        let inner = &mut self.inner;
        let fut = inbound.clone().sync_scope(|| inner.call(req));
        let layer = self.layer;
        Box::pin(async move {
            let scoped = inbound.clone().scope(fut);
            let result = match inbound.deadline() {
                Some(d) if layer.enforce => match tokio::time::timeout_at(d.into(), scoped).await {
                    Ok(r) => r,
                    Err(_) => {
                        let mut resp = Response::new(ResB::default());
                        *resp.status_mut() = StatusCode::GATEWAY_TIMEOUT;
                        return Ok(resp);
                    }
                },
                _ => scoped.await,
            };
            let mut resp = result?;
            let s = resp.status();
            let retryable = s.is_server_error()
                || s == StatusCode::TOO_MANY_REQUESTS
                || s == StatusCode::REQUEST_TIMEOUT;
            if layer.one_layer && retryable && inbound.downstream_gave_up() {
                resp.headers_mut()
                    .insert(NO_RETRY, HeaderValue::from_static("1"));
            }
            Ok(resp)
        })
    }
}
