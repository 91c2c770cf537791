//! The futures of the client layers: the call's, and one attempt's.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{BoxError, Error};

type Boxed<T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;

/// The future of a retried (or hedged) call: resolves to the final response
/// (with a [`RetryInfo`](crate::http::RetryInfo) in its extensions) or an
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

thread_local! {
    /// Set while a stagger attempt hands its request to the service below:
    /// a stagger layer whose `call` sees it runs under another one's loop.
    static SENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Calls `svc` with `req` as a stagger attempt: a stagger layer below reads
/// [`nested`] in its `call` and sends the request once instead of running
/// a second loop of attempts.
fn call_as_attempt<S: Service<Req>, Req>(svc: &mut S, req: Req) -> S::Future {
    with_sending(true, || svc.call(req))
}

/// Runs `f` (a server layer's call of the service it wraps) as the start of
/// a new hop: a stagger client layer below serves an inbound request of its
/// own, so it runs its own attempts, whoever called the server layer.
pub(crate) fn as_new_hop<R>(f: impl FnOnce() -> R) -> R {
    with_sending(false, f)
}

fn with_sending<R>(sending: bool, f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SENDING.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(SENDING.with(|c| c.replace(sending)));
    f()
}

/// Whether the current `call` is made by a stagger attempt (a stagger layer
/// above runs the attempts). Read it in `call`, before anything else calls
/// a service.
pub(crate) fn nested() -> bool {
    SENDING.with(|c| c.get())
}

pin_project! {
    /// One attempt: the request sent on a service once it is ready. The
    /// call's first attempt goes to the service the caller made ready (in
    /// place, nothing boxed); every later one to its own clone, so attempts
    /// can run side by side.
    #[project = SendingProj]
    pub(crate) enum Sending<S, Req>
    where
        S: Service<Req>,
    {
        /// Sent: the service's future.
        Sent {
            #[pin]
            fut: S::Future,
        },
        /// Waiting for its own service to be ready (the request is boxed:
        /// only attempts after the first wait, and a request is large).
        Ready {
            svc: S,
            req: Option<Box<Req>>,
        },
    }
}

impl<S: Service<Req>, Req> Sending<S, Req> {
    /// Sends `req` on `ready`, a service whose `poll_ready` said yes.
    pub(crate) fn now(ready: &mut S, req: Req) -> Self {
        Sending::Sent {
            fut: call_as_attempt(ready, req),
        }
    }

    /// Sends `req` on a clone of `svc`, once the clone is ready.
    pub(crate) fn on_clone(svc: &S, req: Req) -> Self
    where
        S: Clone,
    {
        Sending::Ready {
            svc: svc.clone(),
            req: Some(Box::new(req)),
        }
    }
}

impl<S, Req> Future for Sending<S, Req>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let fut = match self.as_mut().project() {
                SendingProj::Sent { fut } => return fut.poll(cx).map_err(Into::into),
                SendingProj::Ready { svc, req } => {
                    ready!(svc.poll_ready(cx)).map_err(Into::into)?;
                    let Some(req) = req.take() else {
                        return Poll::Ready(Err("attempt polled after it ended".into()));
                    };
                    call_as_attempt(svc, *req)
                }
            };
            self.set(Sending::Sent { fut });
        }
    }
}
