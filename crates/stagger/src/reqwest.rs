//! A reqwest-middleware [`Middleware`] (feature `reqwest`; reqwest 0.13 and
//! reqwest-middleware 0.5, re-exported as [`client`] and [`middleware`]) with the tower
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
//! - a [`RetryInfo`] in the response's extensions; when the call ends in an
//!   error, [`SendReport::send_report`] (in place of `.send()`) still hands
//!   it back — `.send()` returns reqwest's error untouched, which has no
//!   room for it.
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
//!     .with(RetryMiddleware::new(Settings {
//!     policy: Policy::default(),
//!     idempotency_keys: true,
//!     ..Default::default()
//! }))
//!     .build();
//! let resp = client.get("http://127.0.0.1:8080/").send().await?;
//! let info = resp.extensions().get::<RetryInfo>().unwrap();
//! println!("{} after {} attempts", info.reason, info.attempts);
//!
//! // A call that may fail: the report comes back either way.
//! use stagger::reqwest::SendReport;
//! let sent = client.get("http://127.0.0.1:8080/").send_report().await;
//! if let (Err(e), Some(info)) = (&sent.result, sent.info) {
//!     println!("{e}: gave up after {} attempts ({})", info.attempts, info.reason);
//! }
//! # Ok(()) }
//! ```

use std::sync::Arc;

/// The reqwest-middleware crate this module is built on (0.5), so a
/// project can name the very version stagger speaks:
/// `stagger::reqwest::middleware::ClientBuilder`.
pub use ::reqwest_middleware as middleware;

/// The reqwest crate this module is built on (0.13): its `Client` is the
/// one a [`RetryMiddleware`] wraps.
pub use ::reqwest as client;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use std::future::Future;
use std::pin::Pin;

use crate::engine::drive::{drive, timed_out, Answer, Attempt, Attempts, Judged, Verdict};
use crate::http::{error_chain, error_failure, is_nested, AttemptTimedOut, Facts, Nested, Opened};
use crate::http::{RetryInfo, Settings, TokioClock};
use crate::outcome::{Class, Failure, NotRetried, Outcome};

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
            settings: Arc::new(settings.into().resolved()),
        }
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

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Response>> + Send + 'a>>;

/// The reqwest part of a call: attempt 1 is the request itself, every later
/// one a copy of the kept template, each sent down the rest of the chain.
struct Sends<'a> {
    next: Next<'a>,
    first: Option<Request>,
    template: Option<Request>,
    extensions: &'a Extensions,
    facts: Facts,
    settings: &'a Settings,
}

impl<'a> Attempts for Sends<'a> {
    type Answer = Result<Response>;
    type Future = Pending<'a>;

    fn start(&mut self, a: Attempt) -> Option<Self::Future> {
        let mut req = match self.first.take() {
            Some(r) => r,
            None => self.template.as_ref()?.try_clone()?,
        };
        self.facts.stamp(req.headers_mut(), a.number, a.timeout);
        #[cfg(feature = "opentelemetry")]
        if let Some(spans) = &mut self.facts.spans {
            let (method, url) = (req.method().clone(), req.url().to_string());
            spans.start(a.id, &method, &url, req.headers_mut());
        }
        let next = self.next.clone();
        let mut ext = self.extensions.clone();
        Some(Box::pin(async move { next.run(req, &mut ext).await }))
    }

    fn judge(&mut self, _: &Attempt, answer: &Answer<Self::Answer>) -> Verdict {
        match answer {
            Answer::Came(Ok(resp)) => {
                Verdict::Report(self.facts.outcome(resp.status(), resp.headers()))
            }
            Answer::Came(Err(e)) => {
                Verdict::Report(Outcome::Failure(self.facts.failure(classify(e))))
            }
            Answer::TimedOut => timed_out(),
        }
    }

    fn judged(&mut self, a: &Attempt, j: Judged<'_, Self::Answer>) {
        #[cfg(feature = "opentelemetry")]
        if let Some(spans) = &mut self.facts.spans {
            let answer = crate::observe::otel::span_answer(j.answer, |r| r.status().as_u16());
            spans.end(a.id, answer, j.outcome);
        }
        let answer = match j.answer {
            Answer::Came(Ok(resp)) => Ok(resp.status().as_u16()),
            Answer::Came(Err(e)) => Err(error_chain(e)),
            Answer::TimedOut => Err(AttemptTimedOut.to_string()),
        };
        self.facts
            .log(self.settings, a.number, answer, j.outcome, j.decision);
    }
}

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        if is_nested(extensions) {
            // A stagger middleware earlier in the chain runs the attempts.
            return next.run(req, extensions).await;
        }
        let settings = &*self.settings;
        let Opened { facts, call, own } =
            Facts::open(settings, req.method(), req.headers(), extensions);
        let mut plan = settings.plan(&own, call);
        let template = match replayable(&req, settings) {
            Ok(copy) => Some(copy),
            Err(why) => {
                plan.commit(why);
                None
            }
        };
        let mut marked = extensions.clone();
        marked.insert(Nested);
        let mut sends = Sends {
            next,
            first: Some(req),
            template,
            extensions: &marked,
            facts,
            settings,
        };
        let finish = drive(&mut plan, &mut sends, &TokioClock, tokio::time::sleep).await;
        let answer = match &finish.last {
            Some(Answer::Came(Ok(resp))) => Some(resp.headers()),
            _ => None,
        };
        let info = sends.facts.summary(&plan, finish.end, answer);
        let last = finish.last.map(|a| match a {
            Answer::Came(r) => r,
            Answer::TimedOut => Err(reqwest_middleware::Error::middleware(AttemptTimedOut)),
        });
        conclude(last, info, extensions)
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

/// What [`SendReport::send_report`] hands back: the call's result, and its
/// [`RetryInfo`] whether it succeeded or failed.
#[derive(Debug)]
#[non_exhaustive]
pub struct Sent {
    /// The response, or the last attempt's error.
    pub result: Result<Response>,
    /// Attempts, stop reason, why not retried, time waited; `None` when no
    /// [`RetryMiddleware`] ran (none in the chain, or the request could not
    /// be built).
    pub info: Option<RetryInfo>,
}

/// `.send_report()` on a reqwest-middleware request: `.send()` that keeps
/// the [`RetryInfo`] of a call that failed (`.send()` returns reqwest's
/// error as it came, and with it the attempt count is gone).
///
/// ```no_run
/// use stagger::reqwest::{RetryMiddleware, SendReport};
/// use stagger::Policy;
///
/// # async fn f() {
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(Policy::default()))
///     .build();
/// let sent = client.get("http://127.0.0.1:9/").send_report().await;
/// let info = sent.info.expect("the middleware ran");
/// assert!(sent.result.is_err());
/// println!("gave up after {} attempts: {}", info.attempts, info.reason);
/// # }
/// ```
pub trait SendReport {
    /// Sends the request like `.send()`, and returns the result with the
    /// call's [`RetryInfo`].
    fn send_report(self) -> impl Future<Output = Sent> + Send;
}

impl SendReport for reqwest_middleware::RequestBuilder {
    async fn send_report(mut self) -> Sent {
        // What `.send()` does, with the extensions kept to read afterwards.
        let mut ext = std::mem::take(self.extensions());
        let (client, req) = self.build_split();
        let result = match req {
            Ok(req) => client.execute_with_extensions(req, &mut ext).await,
            Err(e) => Err(e.into()),
        };
        let info = match &result {
            Ok(resp) => resp.extensions().get::<RetryInfo>().copied(),
            Err(_) => None,
        }
        .or_else(|| ext.get::<RetryInfo>().copied());
        Sent { result, info }
    }
}
