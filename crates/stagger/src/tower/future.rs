//! The response future of [`RetryService`](super::RetryService).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Error;

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
