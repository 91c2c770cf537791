//! The driver of a method with a `hedgingPolicy`: it sends the attempts the
//! hedging engine asks for, side by side, and reports how each ended; the
//! engine decides when the next goes out and when the call is over
//! (docs/behaviour.md §12). The loop is the one every hedging front-end
//! runs; this module keeps what is gRPC's: the attempt headers, the facts
//! of an answer (status from the head, commitment, never sent) and the
//! replay buffer, whose overflow leaves the leading attempt alone.

use std::task::{Context, Poll};

use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::Body;
use tower_service::Service;

use super::body::GrpcBody;
use super::call::{committed, conclude, Driver, Last};
use super::shared::MakeBody;
use super::{attempt_status, never_sent, status_failure};
use crate::deadline::format_grpc_timeout;
use crate::hedge::driver::{drive, timed_out, Answer, Attempt, Attempts, End, Overflow, Verdict};
use crate::hedge::HedgePolicy;
use crate::http::{
    error_class, rebuild, AttemptTimedOut, TokioClock, GRPC_PREVIOUS_ATTEMPTS, GRPC_TIMEOUT,
};
use crate::outcome::{Failure, Idempotency, NotRetried, Outcome};
use crate::tower::{send_clone, BoxError, Channel, Error, ErrorKind, Replay, Sent};

/// The gRPC part of a hedged call: attempt k is the request's head with its
/// view of the one replayed body, sent to its own clone of the channel.
struct Sends<'a, S, M, B> {
    inner: &'a mut S,
    parts: &'a Parts,
    body: &'a Replay<B>,
    make: &'a M,
    codes: Option<&'a [u32]>,
    limit: usize,
    /// The attempt each body went to, in the order the bodies were made.
    bodies: Vec<u32>,
}

impl<S, M, B, ResB> Attempts for Sends<'_, S, M, B>
where
    B: Body,
    M: MakeBody<B>,
    M::Output: Send + 'static,
    S: Channel<Request<M::Output>, Response = Response<ResB>>,
{
    type Future = Sent<S::Response>;
    type Answer = Result<S::Response, BoxError>;

    /// Each attempt gets its own view of the one replayed body; which
    /// attempt got which body tells the leader when it overflows.
    fn start(&mut self, a: Attempt) -> Option<Self::Future> {
        let b = self.make.make(self.body.next()?);
        self.bodies.push(a.id);
        let mut req = rebuild(self.parts, b);
        stamp(req.headers_mut(), a);
        Some(send_clone(self.inner, req))
    }

    fn judge(&mut self, answer: &Answer<Self::Answer>) -> Verdict {
        let f = match answer {
            Answer::Came(Ok(resp)) => match attempt_status(resp.status(), resp.headers()) {
                Some(0) => return Verdict::Report(Outcome::Success),
                Some(code) => status_failure(code, resp.headers(), self.codes).0,
                // Headers without a status: this attempt commits the call;
                // its trailers' status is told to the engine later, as for a
                // committed retried call.
                None => return Verdict::Take,
            },
            Answer::Came(Err(e)) => {
                let f = Failure::new(error_class(&**e));
                if never_sent(&**e) {
                    f.not_sent()
                } else {
                    f
                }
            }
            Answer::TimedOut => return timed_out(),
        };
        Verdict::Report(Outcome::Failure(f))
    }

    fn poll_overflow(&mut self, cx: &mut Context<'_>) -> Poll<Overflow> {
        self.body.poll_outgrown(cx).map(|leader| Overflow {
            leader: leader.and_then(|g| self.bodies.get(usize::try_from(g).ok()? - 1).copied()),
            why: NotRetried::BodyTooLarge { limit: self.limit },
        })
    }
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
    let (parts, body) = req.into_parts();
    let body = Replay::side_by_side(body, d.shared.max_replay_bytes);
    // A hedging policy declares the method safe to send more than once.
    let call = std::mem::take(&mut d.call).idempotency(Idempotency::Idempotent);
    let mut h = hedging.call(call);
    let method = d.method.clone();
    let mut sends = Sends {
        // Borrowed mutably, so the future needs `S: Send` only.
        inner: &mut inner,
        parts: &parts,
        body: &body,
        make: &make,
        codes: method.retryable.as_deref(),
        limit: d.shared.max_replay_bytes,
        bodies: Vec::new(),
    };
    let finish = drive(
        &hedging,
        &mut h,
        &mut sends,
        &TokioClock,
        tokio::time::sleep,
    )
    .await;
    d.call = h.into_call();
    let last = match finish.last {
        Some(Answer::Came(Ok(resp))) => {
            if finish.end == End::Taken {
                return Ok(committed(d, resp));
            }
            let status = attempt_status(resp.status(), resp.headers());
            Last::Response(resp, status)
        }
        Some(Answer::Came(Err(e))) => Last::Error(ErrorKind::Service, e),
        Some(Answer::TimedOut) => Last::Error(ErrorKind::Timeout, Box::new(AttemptTimedOut)),
        None => Last::None,
    };
    let reason = match finish.end {
        End::Stopped(r) => r,
        // Only a response is ever taken.
        End::Taken => crate::outcome::StopReason::Success,
    };
    conclude(&d, last, reason)
}

/// One hedge's headers: the time left, and the count of earlier attempts
/// that left the client (none on the first).
fn stamp(headers: &mut HeaderMap, a: Attempt) {
    if a.number > 1 {
        headers.insert(GRPC_PREVIOUS_ATTEMPTS, HeaderValue::from(a.number - 1));
    }
    if let Some(t) = a.timeout {
        if let Ok(v) = HeaderValue::from_str(&format_grpc_timeout(t)) {
            headers.insert(GRPC_TIMEOUT, v);
        }
    }
}
