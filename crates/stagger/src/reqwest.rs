//! A reqwest-middleware [`Middleware`] (feature `reqwest`) with the tower
//! [`RetryLayer`](crate::tower::RetryLayer)'s behaviour and defaults.
//!
//! reqwest users asked for what its retry middleware does not do: honour
//! `Retry-After`, leave non-idempotent requests alone unless they carry a
//! key, say when a body could not be replayed, and tell how often a call
//! retried. [`RetryMiddleware`] runs the same driver as the tower layer:
//!
//! - statuses, methods and errors classified by [`crate::http`]; POST and
//!   PATCH retried only with an `Idempotency-Key` (generated, the same on
//!   every attempt, with [`idempotency_keys`](Settings::idempotency_keys));
//! - bodies replayed when reqwest can clone them and they are at most 1 MiB
//!   (configurable); a stream or a larger body is sent once;
//! - `x-retry-attempt`, `x-request-timeout-ms` (`grpc-timeout` for gRPC)
//!   on every attempt; attempt timeouts on tokio's timer;
//! - inside a [`DeadlineLayer`](crate::tower::DeadlineLayer) scope, the
//!   inbound deadline and the one-layer rule;
//! - per-request [`CallOptions`](crate::http::CallOptions) through
//!   `RequestBuilder::with_extension`;
//! - a [`RetryInfo`] in the response's extensions, and in the middleware
//!   extensions (see `ClientWithMiddleware::execute_with_extensions`) when
//!   the call ends in an error.
//!
//! ```no_run
//! use reqwest_middleware::ClientBuilder;
//! use stagger::http::RetryInfo;
//! use stagger::http::Settings;
//! use stagger::reqwest::RetryMiddleware;
//! use stagger::Policy;
//!
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(Settings::new(Policy::default()).idempotency_keys(true)))
//!     .build();
//! let resp = client.get("http://127.0.0.1:8080/").send().await?;
//! let info = resp.extensions().get::<RetryInfo>().unwrap();
//! println!("{} after {} attempts", info.reason, info.attempts);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use crate::http::{error_chain, error_failure, AttemptTimedOut, Driver, RetryInfo, Settings};
use crate::outcome::{Class, Decision, Failure};
use crate::outcome::{NotRetried, StopReason};

mod hedge;

pub use hedge::HedgeMiddleware;

/// Retries reqwest requests under a shared [`Policy`](crate::Policy); see the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    settings: Arc<Settings>,
}

impl RetryMiddleware {
    /// A middleware with these HTTP settings — or a [`Policy`](crate::Policy) with the
    /// default ones (see [`Settings`]).
    pub fn new(settings: impl Into<Settings>) -> Self {
        RetryMiddleware {
            settings: Arc::new(settings.into()),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }
}

/// Classifies a reqwest-middleware error: a connect error is transient and
/// surely unsent, a timeout is "result unknown", a redirect loop (or more
/// redirects than the client follows) is permanent — the same request meets
/// the same loop — and other errors go by their I/O cause.
fn classify(e: &reqwest_middleware::Error) -> Failure {
    match e {
        reqwest_middleware::Error::Reqwest(r) => {
            if r.is_connect() {
                // Never sent; its cause decides the class (a refused
                // connection is transient, a name that does not exist is not).
                error_failure(r).not_sent()
            } else if r.is_timeout() {
                Failure::timeout()
            } else if r.is_redirect() {
                Failure::new(Class::Permanent)
            } else {
                error_failure(r)
            }
        }
        reqwest_middleware::Error::Middleware(m) => error_failure(m.as_ref()),
    }
}

/// A copy of `req` to send again, or why it cannot be: a body larger than
/// the replay limit, or a stream reqwest cannot clone.
fn replayable(req: &Request, settings: &Settings) -> std::result::Result<Request, NotRetried> {
    let limit = settings.max_replay_bytes;
    let len = req.body().and_then(|b| b.as_bytes()).map(<[u8]>::len);
    if len.is_some_and(|n| n > limit) {
        return Err(NotRetried::BodyTooLarge { limit });
    }
    req.try_clone().ok_or(NotRetried::BodyStream)
}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let mut driver = Driver::new(
            self.settings.clone(),
            req.method(),
            req.headers(),
            extensions,
        );
        let template = match replayable(&req, &self.settings) {
            Ok(copy) => Some(copy),
            Err(why) => {
                driver.commit(why);
                None
            }
        };
        let mut once = Some(req);
        let mut last: Option<Result<Response>> = None;
        loop {
            let timeout = match driver.start() {
                Ok(t) => t,
                Err(reason) => return conclude(last, driver.finish(reason), extensions),
            };
            let attempt = match (&template, once.take()) {
                (_, Some(first)) => first,
                (Some(t), None) => match t.try_clone() {
                    Some(c) => c,
                    None => {
                        return conclude(last, driver.finish(StopReason::NotRetryable), extensions)
                    }
                },
                (None, None) => {
                    return conclude(last, driver.finish(StopReason::NotRetryable), extensions)
                }
            };
            let mut attempt = attempt;
            driver.stamp(attempt.headers_mut(), timeout);
            let run = next.clone().run(attempt, extensions);
            let result = match timeout {
                Some(t) => tokio::time::timeout(t, run).await.ok(),
                None => Some(run.await),
            };
            let step = match result {
                Some(Ok(resp)) => {
                    let step = driver.after_response(resp.status(), resp.headers());
                    last = Some(Ok(resp));
                    step
                }
                Some(Err(e)) => {
                    let step = driver.after_error(classify(&e), error_chain(&e));
                    last = Some(Err(e));
                    step
                }
                None => {
                    let step = driver.after_error(Failure::timeout(), AttemptTimedOut.to_string());
                    last = Some(Err(reqwest_middleware::Error::middleware(AttemptTimedOut)));
                    step
                }
            };
            match step {
                Decision::Retry { after } => tokio::time::sleep(after).await,
                Decision::Stop(reason) => return conclude(last, driver.finish(reason), extensions),
            }
        }
    }
}

fn conclude(
    last: Option<Result<Response>>,
    info: RetryInfo,
    ext: &mut Extensions,
) -> Result<Response> {
    ext.insert(info);
    match last {
        Some(Ok(mut resp)) => {
            resp.extensions_mut().insert(info);
            Ok(resp)
        }
        Some(Err(e)) => Err(e),
        None => Err(reqwest_middleware::Error::middleware(Refused(info))),
    }
}

/// No attempt was allowed: the deadline had passed, or a guardrail refused
/// the first attempt.
#[derive(Debug, Clone, Copy)]
pub struct Refused(pub RetryInfo);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no attempt was allowed ({})", self.0.reason)
    }
}

impl std::error::Error for Refused {}
