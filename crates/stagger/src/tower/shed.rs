//! The server [`ShedLayer`]: bounded concurrency and queue; when full,
//! retries are turned away before first attempts.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use tokio::sync::Semaphore;
use tower_layer::Layer;
use tower_service::Service;

use crate::http::{inbound_attempt, is_grpc, GRPC_PUSHBACK, GRPC_STATUS};
use crate::rng::{FastRng, RandomSource};

/// Load shedding for a server: at most `max_concurrency` requests run at
/// once and at most `max_queue` wait. A first attempt may wait in the whole
/// queue; a retry (`x-retry-attempt` ≥ 2) only in its first
/// [`retry_queue`](ShedBuilder::retry_queue) places, so under load retries
/// are shed before first attempts. A shed request gets `503 Service
/// Unavailable` with `Retry-After` drawn uniformly from a range of whole
/// seconds, so the clients it turns away do not come back together.
///
/// A layer is configured once, through [`ShedLayer::builder`], and has no
/// settings of its own to change afterwards: clones of the layer, and every
/// service it makes, share one set of limits and counters.
///
/// ```
/// use stagger::tower::ShedLayer;
/// use std::time::Duration;
///
/// let shed = ShedLayer::builder(64, 128)
///     .retry_queue(16)
///     .retry_after(Duration::from_secs(1), Duration::from_secs(5))
///     .build();
/// let twin = shed.clone();
/// assert_eq!(shed.stats().shed_retries, 0);
/// assert_eq!(twin.stats(), shed.stats());
/// ```
#[derive(Debug, Clone)]
pub struct ShedLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    permits: Arc<Semaphore>,
    queued: AtomicUsize,
    max_queue: usize,
    retry_queue: usize,
    retry_after: (u64, u64),
    admitted: AtomicU64,
    shed_first: AtomicU64,
    shed_retries: AtomicU64,
}

/// What a [`ShedLayer`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShedStats {
    /// Requests let through to the service.
    pub admitted: u64,
    /// First attempts answered 503.
    pub shed_first: u64,
    /// Retries answered 503.
    pub shed_retries: u64,
}

/// Configures a [`ShedLayer`]: plain values until [`build`](Self::build)
/// makes the one shared set of limits and counters. Building twice makes
/// two independent layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShedBuilder {
    max_concurrency: usize,
    max_queue: usize,
    retry_queue: Option<usize>,
    retry_after: (u64, u64),
}

impl ShedBuilder {
    /// How many queue places retries may use (at most `max_queue`; 0 sheds
    /// every retry that would have to wait). Default: half the queue.
    pub fn retry_queue(mut self, places: usize) -> Self {
        self.retry_queue = Some(places);
        self
    }

    /// The range `Retry-After` is drawn from, rounded down to whole seconds
    /// (`max` below `min` is taken as `min`). Default: 1 to 5 s.
    pub fn retry_after(mut self, min: Duration, max: Duration) -> Self {
        let lo = min.as_secs();
        self.retry_after = (lo, max.as_secs().max(lo));
        self
    }

    /// The layer, with its limits and counters.
    pub fn build(self) -> ShedLayer {
        let max_queue = self.max_queue;
        ShedLayer {
            shared: Arc::new(Shared {
                permits: Arc::new(Semaphore::new(
                    self.max_concurrency.clamp(1, Semaphore::MAX_PERMITS),
                )),
                queued: AtomicUsize::new(0),
                max_queue,
                retry_queue: self.retry_queue.unwrap_or(max_queue / 2).min(max_queue),
                retry_after: self.retry_after,
                admitted: AtomicU64::new(0),
                shed_first: AtomicU64::new(0),
                shed_retries: AtomicU64::new(0),
            }),
        }
    }
}

impl ShedLayer {
    /// At most `max_concurrency` (at least 1) requests at once and `max_queue`
    /// waiting; retries may use half the queue; `Retry-After` of 1 to 5 s.
    /// Shorthand for `ShedLayer::builder(max_concurrency, max_queue).build()`.
    pub fn new(max_concurrency: usize, max_queue: usize) -> Self {
        Self::builder(max_concurrency, max_queue).build()
    }

    /// Starts configuring a layer of at most `max_concurrency` (at least 1)
    /// requests at once and `max_queue` waiting.
    pub const fn builder(max_concurrency: usize, max_queue: usize) -> ShedBuilder {
        ShedBuilder {
            max_concurrency,
            max_queue,
            retry_queue: None,
            retry_after: (1, 5),
        }
    }

    /// Counters so far (shared by every clone and service).
    pub fn stats(&self) -> ShedStats {
        ShedStats {
            admitted: self.shared.admitted.load(Ordering::Relaxed),
            shed_first: self.shared.shed_first.load(Ordering::Relaxed),
            shed_retries: self.shared.shed_retries.load(Ordering::Relaxed),
        }
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = ShedService<S>;

    fn layer(&self, inner: S) -> ShedService<S> {
        ShedService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`ShedLayer`].
#[derive(Debug, Clone)]
pub struct ShedService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> ShedService<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqB, ResB> Service<Request<ReqB>> for ShedService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<Response<ResB>, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness of the inner service is awaited inside the future, once
        // a place is granted; shedding must answer at once.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = self.shared.clone();
        // Both spellings of a retry: `x-retry-attempt` and gRPC's
        // `grpc-previous-rpc-attempts`.
        let retry = inbound_attempt(req.headers()) > 1;
        let grpc = is_grpc(req.headers());
        let permit = shared.permits.clone().try_acquire_owned().ok();
        let queued = permit.is_none();
        if queued {
            let limit = if retry {
                shared.retry_queue
            } else {
                shared.max_queue
            };
            let got = shared
                .queued
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                    (q < limit).then_some(q + 1)
                })
                .is_ok();
            if !got {
                let counter = if retry {
                    &shared.shed_retries
                } else {
                    &shared.shed_first
                };
                counter.fetch_add(1, Ordering::Relaxed);
                let resp = shed_response(shared.retry_after, grpc);
                return Box::pin(async move { Ok(resp) });
            }
        }
        let mut inner = self.inner.clone();
        let slot = queued.then(|| QueueSlot(shared.clone()));
        Box::pin(async move {
            let _permit = match permit {
                Some(p) => p,
                None => {
                    let p = shared.permits.clone().acquire_owned().await;
                    drop(slot);
                    match p {
                        Ok(p) => p,
                        // The semaphore is never closed.
                        Err(_) => return Ok(shed_response(shared.retry_after, grpc)),
                    }
                }
            };
            shared.admitted.fetch_add(1, Ordering::Relaxed);
            poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(req).await
        })
    }
}

/// A place in the queue, given back when the request leaves it (admitted
/// or dropped by its caller).
struct QueueSlot(Arc<Shared>);

impl Drop for QueueSlot {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A shed answer that says when to come back, jittered within the
/// configured range so shed clients do not return together: 503 with
/// `Retry-After` in seconds, or for gRPC a trailers-only UNAVAILABLE with
/// `grpc-retry-pushback-ms`.
fn shed_response<B: Default>((lo, hi): (u64, u64), grpc: bool) -> Response<B> {
    let mut resp = Response::new(B::default());
    let h = resp.headers_mut();
    if grpc {
        let (lo, hi) = (lo.saturating_mul(1000), hi.saturating_mul(1000));
        let span = hi.saturating_sub(lo).saturating_add(1);
        // Never 0: grpcio (1.85) waits out the whole deadline after a
        // pushback of 0 instead of retrying at once.
        let ms = lo.saturating_add(FastRng::fresh().next_u64() % span).max(1);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert(GRPC_STATUS, HeaderValue::from_static("14"));
        h.insert(GRPC_PUSHBACK, HeaderValue::from(ms));
    } else {
        let span = hi.saturating_sub(lo).saturating_add(1);
        let secs = lo.saturating_add(FastRng::fresh().next_u64() % span);
        h.insert(RETRY_AFTER, HeaderValue::from(secs));
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_settles_the_limits_whatever_the_order() {
        let a = ShedLayer::builder(0, 4).retry_queue(10).build();
        assert_eq!(a.shared.permits.available_permits(), 1);
        assert_eq!((a.shared.max_queue, a.shared.retry_queue), (4, 4));
        let b = ShedLayer::new(8, 5);
        assert_eq!((b.shared.retry_queue, b.shared.retry_after), (2, (1, 5)));
        let c = ShedLayer::builder(2, 2)
            .retry_after(Duration::from_millis(3900), Duration::from_secs(1))
            .build();
        assert_eq!(c.shared.retry_after, (3, 3));
        // Clones share the one state; a second build does not.
        let builder = ShedLayer::builder(2, 2);
        let (x, y) = (builder.build(), builder.build());
        assert!(Arc::ptr_eq(&x.shared, &x.clone().shared));
        assert!(!Arc::ptr_eq(&x.shared, &y.shared));
    }
}
