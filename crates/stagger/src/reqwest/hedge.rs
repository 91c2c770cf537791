//! The reqwest [`HedgeMiddleware`].

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use super::classify;
use crate::call::Call;
use crate::clock::Clock;
use crate::hedge::{HedgePolicy, HedgeStep, MAX_HEDGE_ATTEMPTS};
use crate::http::{
    attempt_value, is_idempotent, needs_key, new_idempotency_key, response_failure,
    AttemptTimedOut, RetryInfo, TokioClock, IDEMPOTENCY_KEY, RETRY_ATTEMPT,
};
use crate::outcome::{Idempotency, NotRetried, Outcome, StopReason};

/// Hedges idempotent reqwest requests under a shared [`HedgePolicy`], with
/// the rules of [`HedgeLayer`](crate::tower::HedgeLayer): only GET, HEAD,
/// OPTIONS, TRACE, PUT, DELETE or a request with an `Idempotency-Key` (which
/// the middleware can add) hedge; a retryable failure sends the next attempt
/// at once, a final one ends the call; the first success wins and the other
/// attempts are dropped. Each attempt carries `x-retry-attempt: N` and the
/// call's one key, and is bounded by the retry policy's attempt timeout
/// (a timed-out attempt is a result unknown). A body that cannot be cloned
/// (a stream) is sent once.
/// The response and the request's extensions get a [`RetryInfo`].
///
/// ```no_run
/// use stagger::reqwest::HedgeMiddleware;
/// use stagger::HedgePolicy;
///
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(HedgeMiddleware::new(HedgePolicy::builder().build().unwrap()))
///     .build();
/// # let _ = client;
/// ```
#[derive(Debug, Clone)]
pub struct HedgeMiddleware {
    policy: HedgePolicy,
    keys: bool,
}

impl HedgeMiddleware {
    /// A middleware hedging under `policy` (its window and budget are shared
    /// by every clone).
    pub fn new(policy: HedgePolicy) -> Self {
        HedgeMiddleware {
            policy,
            keys: false,
        }
    }

    /// Adds an `Idempotency-Key` to POST and PATCH requests that lack one,
    /// the same on every attempt, which makes them hedgeable (default off).
    pub fn idempotency_keys(mut self, on: bool) -> Self {
        self.keys = on;
        self
    }
}

type Attempt<'a> = Pin<Box<dyn Future<Output = Result<Response>> + Send + 'a>>;

#[async_trait::async_trait]
impl Middleware for HedgeMiddleware {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let policy = &self.policy;
        if self.keys && needs_key(req.method()) && !req.headers().contains_key(IDEMPOTENCY_KEY) {
            req.headers_mut()
                .insert(IDEMPOTENCY_KEY, new_idempotency_key());
        }
        let mut call = Call::new();
        let template = req.try_clone();
        let idempotency = if template.is_none() {
            call.commit(NotRetried::BodyStream);
            Idempotency::Unspecified
        } else if is_idempotent(req.method(), req.headers()) {
            Idempotency::Idempotent
        } else {
            Idempotency::NotIdempotent
        };
        let mut h = policy.call(call.idempotency(idempotency));
        // Each attempt runs with its own copy of the extensions.
        let mut copies: [Extensions; MAX_HEDGE_ATTEMPTS as usize] =
            std::array::from_fn(|_| extensions.clone());
        let mut copies = copies.iter_mut();
        let mut first = Some(req);
        let mut running: [Option<Attempt<'_>>; MAX_HEDGE_ATTEMPTS as usize] =
            std::array::from_fn(|_| None);
        let mut timer: Option<(Instant, Pin<Box<tokio::time::Sleep>>)> = None;
        let mut last: Option<Result<Response>> = None;
        let mut winner: Option<Response> = None;
        let reason = poll_fn(|cx| loop {
            let now = TokioClock.now();
            match policy.poll(&mut h, now) {
                HedgeStep::Send { attempt, timeout } => {
                    let req = first
                        .take()
                        .or_else(|| template.as_ref().and_then(Request::try_clone));
                    let (Some(mut req), Some(ext)) = (req, copies.next()) else {
                        policy.cancel(&mut h, now);
                        return Poll::Ready(StopReason::NotRetryable);
                    };
                    req.headers_mut()
                        .insert(RETRY_ATTEMPT, attempt_value(attempt));
                    let run = next.clone().run(req, ext);
                    running[attempt as usize - 1] = Some(match timeout {
                        None => Box::pin(run),
                        Some(t) => Box::pin(async move {
                            tokio::time::timeout(t, run).await.unwrap_or_else(|_| {
                                Err(reqwest_middleware::Error::middleware(AttemptTimedOut))
                            })
                        }),
                    });
                    continue;
                }
                HedgeStep::Stop(r) => return Poll::Ready(r),
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
                let Some(fut) = slot else { continue };
                if let Poll::Ready(result) = fut.as_mut().poll(cx) {
                    *slot = None;
                    answered = true;
                    let (attempt, now) = (i as u32 + 1, TokioClock.now());
                    match result {
                        Ok(resp) => match response_failure(
                            resp.status(),
                            resp.headers(),
                            false,
                            SystemTime::now(),
                        ) {
                            None => {
                                policy.report(&mut h, attempt, Outcome::Success, now);
                                winner = Some(resp);
                            }
                            Some(f) => {
                                policy.report(&mut h, attempt, f, now);
                                last = Some(Ok(resp));
                            }
                        },
                        Err(e) => {
                            policy.report(&mut h, attempt, classify(&e), now);
                            last = Some(Err(e));
                        }
                    }
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
        let info = RetryInfo {
            attempts: h.call().attempts(),
            reason,
            not_retried: h.call().not_retried(),
            waited: Duration::ZERO,
        };
        extensions.insert(info);
        match winner.map(Ok).or(last) {
            Some(Ok(mut resp)) => {
                resp.extensions_mut().insert(info);
                Ok(resp)
            }
            Some(Err(e)) => Err(e),
            None => Err(reqwest_middleware::Error::middleware(super::Refused(info))),
        }
    }
}
