//! The response future of [`RetryService`](super::RetryService).

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use tower_service::Service;

use super::{BoxError, Error};

type Boxed<T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;

/// The future of a retried call: resolves to the final response (with a
/// [`RetryInfo`](crate::http::RetryInfo) in its extensions) or an
/// [`Error`].
pub struct ResponseFuture<T> {
    inner: Boxed<T>,
}

impl<T> ResponseFuture<T> {
    pub(crate) fn new(inner: Boxed<T>) -> Self {
        ResponseFuture { inner }
    }
}

impl<T> fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<T> Future for ResponseFuture<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// One attempt of a hedged call, sent on its own clone of the inner
/// service so attempts can run side by side.
pub(crate) type Sent<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// A client service a hedged call clones for each attempt.
pub(crate) trait Channel<Req>:
    Service<Req, Future: Send, Error: Into<BoxError>> + Clone + Send + 'static
{
}

impl<S, Req> Channel<Req> for S where
    S: Service<Req, Future: Send, Error: Into<BoxError>> + Clone + Send + 'static
{
}

/// Sends `req` on a clone of `inner`, once the clone is ready.
pub(crate) fn send_clone<S, Req>(inner: &S, req: Req) -> Sent<S::Response>
where
    S: Channel<Req>,
    Req: Send + 'static,
{
    let mut svc = inner.clone();
    Box::pin(async move {
        poll_fn(|cx| svc.poll_ready(cx)).await.map_err(Into::into)?;
        svc.call(req).await.map_err(Into::into)
    })
}
