//! The reqwest [`HedgeMiddleware`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next, Result};

use super::{classify, replayable, Refused};
use crate::hedge::driver::{timed_out, Answer, Attempt, Attempts, Verdict};
use crate::hedge::HedgePolicy;
use crate::http::{AttemptTimedOut, Facts, HedgeRules, HttpAttempts, Settings};
use crate::outcome::Outcome;

/// Hedges idempotent reqwest requests under a shared [`HedgePolicy`], with
/// the rules of [`HedgeLayer`](crate::tower::HedgeLayer): only GET, HEAD,
/// OPTIONS, TRACE, PUT, DELETE or a request with an `Idempotency-Key` (which
/// the middleware can add) hedge; a retryable failure sends the next attempt
/// at once, a final one ends the call; the first success wins and the other
/// attempts are dropped. Requests are read by the HTTP [`Settings`] of the
/// [`RetryMiddleware`](super::RetryMiddleware) (see
/// [`settings`](HedgeMiddleware::settings)): per-request
/// [`CallOptions`](crate::http::CallOptions), `retry_500`, and the one-layer
/// rule. Each attempt carries `x-retry-attempt: N`, the call's one key and,
/// when it has a timeout, the time it has left as `x-request-timeout-ms`,
/// and is bounded by the retry policy's attempt timeout (a timed-out
/// attempt is a result unknown). A body that cannot be cloned (a stream)
/// or is larger than the replay limit is sent once.
/// The response and the request's extensions get a
/// [`RetryInfo`](crate::http::RetryInfo).
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
    rules: Arc<HedgeRules>,
}

impl HedgeMiddleware {
    /// A middleware hedging under `policy` (its window and budget are shared
    /// by every clone), with the default HTTP settings.
    pub fn new(policy: HedgePolicy) -> Self {
        HedgeMiddleware {
            rules: Arc::new(HedgeRules::new(policy)),
        }
    }

    /// Reads every request by these HTTP settings, as the
    /// [`RetryMiddleware`](super::RetryMiddleware) does; the settings'
    /// policy is the retry policy every attempt is judged by (in place of
    /// the hedging policy's own).
    /// The settings' `on_attempt` hook is not called for hedged attempts.
    pub fn settings(mut self, settings: Settings) -> Self {
        Arc::make_mut(&mut self.rules).set(settings);
        self
    }

    /// Adds an `Idempotency-Key` to POST and PATCH requests that lack one,
    /// the same on every attempt, which makes them hedgeable (default off).
    pub fn idempotency_keys(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.rules).settings.idempotency_keys = on;
        self
    }

    /// The hedging policy.
    pub fn policy(&self) -> &HedgePolicy {
        self.rules.hedging()
    }
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Response>> + Send + 'a>>;

/// The reqwest part of a hedged call: attempt k is a copy of the request
/// sent down the rest of the chain with its own copy of the extensions.
struct Sends<'a> {
    next: Next<'a>,
    first: Option<Request>,
    template: Option<Request>,
    extensions: &'a Extensions,
    facts: Facts,
}

impl HttpAttempts for Sends<'_> {
    fn facts(&self) -> &Facts {
        &self.facts
    }
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
        let next = self.next.clone();
        let mut ext = self.extensions.clone();
        Some(Box::pin(async move { next.run(req, &mut ext).await }))
    }

    fn judge(&mut self, answer: &Answer<Self::Answer>) -> Verdict {
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
}

#[async_trait::async_trait]
impl Middleware for HedgeMiddleware {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let (mut hc, facts) = self.rules.open(req.method(), req.headers(), extensions);
        let template = match replayable(&req, &self.rules.settings) {
            Ok(t) => Some(t),
            Err(why) => {
                hc.call.commit(why);
                None
            }
        };
        let mut sends = Sends {
            next,
            first: Some(req),
            template,
            extensions,
            facts,
        };
        let (info, last) = hc.run(&mut sends).await;
        extensions.insert(info);
        match last {
            Some(Answer::Came(Ok(mut resp))) => {
                resp.extensions_mut().insert(info);
                Ok(resp)
            }
            Some(Answer::Came(Err(e))) => Err(e),
            Some(Answer::TimedOut) => Err(reqwest_middleware::Error::middleware(AttemptTimedOut)),
            None => Err(reqwest_middleware::Error::middleware(Refused(info))),
        }
    }
}
