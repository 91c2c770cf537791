//! The response side of a retried gRPC call: the body handed to the
//! caller, which reads the status a streamed response carries in its
//! trailers, and the report of the call.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::method::Resolved;
use super::{grpc_status, status_failure, AttemptHook, AttemptRecord};
use crate::engine::call::Call;
use crate::http::TokioClock;
use crate::outcome::{Decision, Failure, NotRetried, Outcome, StopReason};

/// How a call went, as far as the layer knows it. A committed response
/// streams on after the layer hands it over, so its final status and stop
/// reason are filled in when its trailers arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Summary {
    /// Attempts made, transparent retries included.
    pub attempts: u32,
    /// Transparent retries among them (attempts that never left the client).
    pub transparent_retries: u32,
    /// Why the call stopped; `None` while a committed response is still
    /// streaming.
    pub reason: Option<StopReason>,
    /// When a failure that could have cleared was not retried, why.
    pub not_retried: Option<NotRetried>,
    /// Time slept between attempts.
    pub waited: Duration,
    /// The call's gRPC status, once known (from the headers of a
    /// trailers-only answer, a proxy's HTTP status, or the trailers).
    pub status: Option<u32>,
}

/// The report of one call, in its response's extensions (tonic keeps them
/// in `Response::extensions`). Clones share it; it is complete once the
/// response body has been read to its end.
///
/// tonic turns a failed call into a `Status`, which keeps no extensions:
/// to read the report of a call that may fail, put a `CallReport` in the
/// request's extensions (`tonic::Request::extensions_mut`) and keep a
/// clone; the layer fills that one, whatever the call returns.
///
/// ```
/// use stagger::tower::grpc::CallReport;
/// let report = CallReport::default();
/// assert_eq!(report.get().attempts, 0);
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallReport(Arc<Mutex<Summary>>);

impl CallReport {
    /// The call's summary so far.
    pub fn get(&self) -> Summary {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut Summary)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// A committed call: its state travels with the response body so that the
/// status in the trailers reaches the engine (and with it the channel's
/// throttling) and the report.
pub(crate) struct Watch {
    pub(crate) method: Arc<Resolved>,
    pub(crate) call: Call,
    pub(crate) report: CallReport,
    pub(crate) hook: Option<AttemptHook>,
}

impl Watch {
    fn finish(&mut self, outcome: Outcome, status: Option<u32>, pushback: Option<i64>) {
        let decision = self
            .method
            .engine
            .decide(&mut self.call, outcome, TokioClock);
        // The call is committed, so the engine can only stop it.
        let reason = match decision {
            Decision::Stop(r) => r,
            Decision::Retry { .. } => StopReason::NotRetryable,
        };
        let (attempts, not_retried) = (self.call.attempts(), self.call.not_retried());
        self.report.update(|s| {
            s.reason = Some(reason);
            s.status = status;
            s.not_retried = not_retried;
        });
        if let Some(hook) = &self.hook {
            hook(&AttemptRecord {
                attempt: attempts,
                status,
                error: None,
                pushback_ms: pushback,
                transparent: false,
                delay: None,
                stop: Some(reason),
            });
        }
    }

    fn trailers(&mut self, trailers: &HeaderMap) {
        let (outcome, status, pushback) = match grpc_status(trailers) {
            Some(0) => (Outcome::Success, Some(0), None),
            Some(code) => {
                let codes = self.method.retryable.clone();
                let (f, pushback) = status_failure(code, trailers, codes.as_deref());
                (Outcome::Failure(f), Some(code), pushback)
            }
            // Trailers without a status: gRPC reads that as UNKNOWN.
            None => (Outcome::Failure(Failure::permanent()), Some(2), None),
        };
        self.finish(outcome, status, pushback);
    }
}

impl Drop for Watch {
    /// A response dropped before its end gives back what its attempt holds
    /// (a half-open breaker's probe slot).
    fn drop(&mut self) {
        let policy = &self.method.engine;
        policy.abandon(&mut self.call, TokioClock);
    }
}

/// The response body of a call made through the gRPC
/// [`RetryLayer`](super::RetryLayer): the server's body as it is, watched
/// for the status in its trailers, or an empty body for an answer the layer
/// wrote itself (a trailers-only `DEADLINE_EXCEEDED`).
pub struct GrpcBody<B> {
    inner: Option<B>,
    watch: Option<Box<Watch>>,
}

impl<B> fmt::Debug for GrpcBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcBody")
            .field("empty", &self.inner.is_none())
            .field("watched", &self.watch.is_some())
            .finish()
    }
}

impl<B> GrpcBody<B> {
    pub(crate) fn new(inner: B, watch: Option<Box<Watch>>) -> Self {
        GrpcBody {
            inner: Some(inner),
            watch,
        }
    }

    pub(crate) fn empty() -> Self {
        GrpcBody {
            inner: None,
            watch: None,
        }
    }
}

impl<B> Body for GrpcBody<B>
where
    B: Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if polled.is_ready() {
            if let Some(mut watch) = this.watch.take() {
                match &polled {
                    Poll::Ready(Some(Ok(frame))) => match frame.trailers_ref() {
                        Some(t) => watch.trailers(t),
                        None => this.watch = Some(watch),
                    },
                    // The stream broke mid-way: the result is unknown.
                    Poll::Ready(Some(Err(_))) => {
                        watch.finish(Outcome::Failure(Failure::timeout()), None, None)
                    }
                    // The end without trailers: gRPC reads a missing status
                    // as UNKNOWN.
                    Poll::Ready(None) => {
                        watch.finish(Outcome::Failure(Failure::permanent()), Some(2), None)
                    }
                    Poll::Pending => this.watch = Some(watch),
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // A watched body is read to its end, where the status is.
        self.watch.is_none() && self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint)
    }
}
