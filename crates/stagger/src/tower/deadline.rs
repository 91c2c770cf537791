//! The server [`DeadlineLayer`]: the caller's deadline and attempt number
//! become the deadline and the "serving a retry" flag of the work.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode};
use tower_layer::Layer;
use tower_service::Service;

use crate::grpc::is_grpc;
use crate::grpc::wire::{is_grpc_failure, GRPC_PUSHBACK, GRPC_STATUS};
use crate::http::{Inbound, TokioClock, NO_RETRY};
use crate::time::Clock;

/// Reads `x-request-timeout-ms` (or `grpc-timeout` for gRPC) and
/// `x-retry-attempt` from each request and runs the inner service inside
/// that [`Inbound`] scope (also put in the request's extensions), so a
/// client call made while serving the request inherits its deadline and
/// follows the one-layer rule.
///
/// It also:
/// - answers `504 Gateway Timeout` (gRPC: `DEADLINE_EXCEEDED`) when the
///   caller's deadline passes first (the caller has given up; the work is
///   dropped), and without calling the service at all when it has already
///   passed on arrival (`x-request-timeout-ms: 0`), unless
///   [`enforce(false)`](DeadlineLayer::enforce);
/// - marks a failure response with `x-no-retry` when a client call made
///   while serving the request already retried and gave up, so the caller
///   passes the failure up instead of retrying it again: an HTTP failure
///   (5xx, 429, 408) gets `x-no-retry: 1`, a failed gRPC call (a
///   `grpc-status` other than 0 in the headers) gets
///   `grpc-retry-pushback-ms: -1`, which every gRPC client that follows [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)
///   reads as "do not retry".
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

    /// Whether to mark failures with `x-no-retry` when a call below gave up
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
        let now = TokioClock.now();
        let inbound = Inbound::from_headers(req.headers(), now);
        let grpc = is_grpc(req.headers());
        if self.layer.enforce && inbound.deadline().is_some_and(|d| d <= now) {
            // The caller has no time left: the work is dropped unstarted.
            return Box::pin(async move { Ok(deadline_response(grpc)) });
        }
        req.extensions_mut().insert(inbound.clone());
        let inner = &mut self.inner;
        let fut = inbound
            .clone()
            .sync_scope(|| super::as_new_hop(|| inner.call(req)));
        let layer = self.layer;
        Box::pin(async move {
            let scoped = inbound.clone().scope(fut);
            let result = match inbound.deadline() {
                Some(d) if layer.enforce => match tokio::time::timeout_at(d.into(), scoped).await {
                    Ok(r) => r,
                    Err(_) => return Ok(deadline_response(grpc)),
                },
                _ => scoped.await,
            };
            let mut resp = result?;
            if layer.one_layer && inbound.downstream_gave_up() {
                mark_gave_up(&mut resp);
            }
            Ok(resp)
        })
    }
}

/// Marks a failure so the callers above fail fast (the one-layer rule), in
/// the spelling of its protocol.
fn mark_gave_up<B>(resp: &mut Response<B>) {
    if is_grpc_failure(resp.headers()) {
        resp.headers_mut()
            .insert(GRPC_PUSHBACK, HeaderValue::from_static("-1"));
        return;
    }
    let s = resp.status();
    if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT
    {
        resp.headers_mut()
            .insert(NO_RETRY, HeaderValue::from_static("1"));
    }
}

/// The answer for work whose caller's deadline passed: 504, or for gRPC a
/// trailers-only `DEADLINE_EXCEEDED`.
pub(super) fn deadline_response<B: Default>(grpc: bool) -> Response<B> {
    let mut resp = Response::new(B::default());
    if grpc {
        let h = resp.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        h.insert(GRPC_STATUS, HeaderValue::from_static("4"));
    } else {
        *resp.status_mut() = StatusCode::GATEWAY_TIMEOUT;
    }
    resp
}
