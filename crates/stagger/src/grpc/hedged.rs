//! The driver of a method with a `hedgingPolicy`: it sends the attempts the
//! hedging engine asks for, side by side, and reports how each ended; the
//! engine decides when the next goes out and when the call is over
//! (docs/behaviour.md §12).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::GrpcBody;
use super::layer::MakeBody;
use super::service::{committed, conclude, Driver, Last};
use super::{attempt_status, never_sent, status_failure};
use crate::clock::Clock;
use crate::deadline::format_grpc_timeout;
use crate::hedge::{HedgePolicy, HedgeStep};
use crate::http::{error_class, TokioClock, GRPC_PREVIOUS_ATTEMPTS, GRPC_TIMEOUT};
use crate::outcome::{Failure, Idempotency, NotRetried, Outcome, StopReason};
use crate::tower::{AttemptTimedOut, BoxError, Error, ErrorKind, Replay};

type Attempt<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;
type Running<T> = Option<(Attempt<T>, Option<Pin<Box<tokio::time::Sleep>>>)>;

/// How the call ended: a response that commits it (headers without a
/// status), or the engine's stop.
enum End<T> {
    Committed(Response<T>),
    Stop(StopReason),
}

pub(super) async fn run<S, M, B, ResB>(
    mut inner: S,
    mut d: Driver,
    hedging: HedgePolicy,
    make: M,
    req: Request<B>,
) -> Result<Response<GrpcBody<ResB>>, Error>
where
    M: MakeBody<B> + Sync,
    M::Output: Send + 'static,
    S: Service<Request<M::Output>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResB: Body + Unpin + Send + 'static,
{
    let limit = d.shared.max_replay_bytes;
    let (parts, body) = req.into_parts();
    let body = Replay::side_by_side(body, limit);
    // A hedging policy declares the method safe to send more than once.
    let call = std::mem::take(&mut d.call).idempotency(Idempotency::Idempotent);
    let mut h = hedging.call(call);
    let inner = &mut inner;
    let mut running: Vec<Running<Response<ResB>>> = Vec::new();
    let mut timer: Option<(Instant, Pin<Box<tokio::time::Sleep>>)> = None;
    let mut last: Last<ResB> = Last::None;
    let mut spent = false;
    let codes = d.method.retryable.clone();
    let end = poll_fn(|cx| loop {
        let now = TokioClock.now();
        if !spent && body.outgrown() {
            // Past the replay buffer: no further hedge can carry the body.
            spent = true;
            h.commit(NotRetried::BodyTooLarge { limit });
        }
        match hedging.poll(&mut h, now) {
            HedgeStep::Send { attempt, timeout } => {
                let Some(b) = body.next() else {
                    // Checked above, so not reached; end the call rather
                    // than wait for an attempt never sent.
                    hedging.cancel(&mut h, now);
                    return Poll::Ready(End::Stop(StopReason::NotRetryable));
                };
                let mut req = Request::new(make.make(b));
                *req.method_mut() = parts.method.clone();
                *req.uri_mut() = parts.uri.clone();
                *req.version_mut() = parts.version;
                *req.headers_mut() = parts.headers.clone();
                *req.extensions_mut() = parts.extensions.clone();
                let counted = h.call().attempts() - h.call().transparent_retries_made();
                stamp(req.headers_mut(), counted, timeout);
                // Borrowed mutably, so the future needs `S: Send` only.
                let source: &mut S = &mut *inner;
                let mut svc = source.clone();
                let fut: Attempt<Response<ResB>> = Box::pin(async move {
                    poll_fn(|cx| svc.poll_ready(cx)).await.map_err(Into::into)?;
                    svc.call(req).await.map_err(Into::into)
                });
                let limit = timeout.map(|t| Box::pin(tokio::time::sleep(t)));
                let i = attempt as usize - 1;
                if running.len() <= i {
                    running.resize_with(i + 1, || None);
                }
                running[i] = Some((fut, limit));
                continue;
            }
            HedgeStep::Stop(r) => return Poll::Ready(End::Stop(r)),
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
                    Ok(resp) => match attempt_status(resp.status(), resp.headers()) {
                        Some(0) => {
                            hedging.report(&mut h, attempt, Outcome::Success, now);
                            last = Last::Response(resp, Some(0));
                        }
                        Some(code) => {
                            let (f, _) = status_failure(code, resp.headers(), codes.as_deref());
                            hedging.report(&mut h, attempt, f, now);
                            last = Last::Response(resp, Some(code));
                        }
                        // Headers without a status: this attempt commits the
                        // call; the others are cancelled.
                        // Its trailers' status is told to the engine later,
                        // as for a committed retried call.
                        None => {
                            hedging.cancel(&mut h, now);
                            return Poll::Ready(End::Committed(resp));
                        }
                    },
                    Err(e) => {
                        let f = Failure::new(error_class(&*e));
                        let f = if never_sent(&*e) { f.not_sent() } else { f };
                        hedging.report(&mut h, attempt, f, now);
                        last = Last::Error(ErrorKind::Service, e);
                    }
                }
            } else if limit
                .as_mut()
                .is_some_and(|l| l.as_mut().poll(cx).is_ready())
            {
                *slot = None;
                answered = true;
                hedging.report(&mut h, attempt, Failure::timeout(), TokioClock.now());
                last = Last::Error(ErrorKind::Timeout, Box::new(AttemptTimedOut));
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
    d.call = h.into_call();
    match end {
        End::Committed(resp) => Ok(committed(d, resp)),
        End::Stop(reason) => conclude(&d, last, reason),
    }
}

/// One hedge's headers: the time left, and from the second attempt on the
/// count of earlier ones.
fn stamp(headers: &mut HeaderMap, attempt: u32, timeout: Option<Duration>) {
    if attempt > 1 {
        headers.insert(GRPC_PREVIOUS_ATTEMPTS, HeaderValue::from(attempt - 1));
    }
    if let Some(t) = timeout {
        if let Ok(v) = HeaderValue::from_str(&format_grpc_timeout(t)) {
            headers.insert(GRPC_TIMEOUT, v);
        }
    }
}
