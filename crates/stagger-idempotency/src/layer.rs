//! The tower layer: claim, run once (detached from the connection), store, replay.

use crate::key::{self, KeyError};
use crate::problem::Rule;
use crate::store::{Claim, Completion, Fingerprint, Store, StoredResponse, Token};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request, Response};
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, Limited};
use sha2::{Digest, Sha256};
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The header that marks a replayed answer.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Who is asking: the part of a key's scope the application knows (a tenant, a user, an API
/// key's account). Two principals never share a key.
pub type PrincipalFn = Arc<dyn Fn(&http::request::Parts) -> String + Send + Sync>;

/// The layer's settings. Build one with struct update syntax from [`Config::default()`].
///
/// ```
/// use stagger_idempotency::Config;
/// use std::{sync::Arc, time::Duration};
///
/// let config = Config {
///     require_key: true,
///     retention: Duration::from_secs(3600),
///     principal: Some(Arc::new(|parts: &http::request::Parts| {
///         parts.headers.get("x-tenant").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()
///     })),
///     ..Config::default()
/// };
/// assert_eq!(config.max_body, 1 << 20);
/// ```
#[derive(Clone)]
pub struct Config {
    /// The methods the layer covers (default POST and PATCH, the two that are not idempotent by
    /// definition). Others pass through untouched.
    pub methods: Vec<Method>,
    /// Whether a covered request without a key is refused with 400 (default `false`: it runs
    /// unprotected, as before the layer).
    pub require_key: bool,
    /// A claim's lease when the request names no deadline (`x-request-timeout-ms`,
    /// `grpc-timeout`); with one, the lease is that deadline (at least 100 ms). Default 30 s.
    /// While the handler runs, the layer renews the lease every half lease, so it lapses only
    /// when the replica holding it stops (a crash), after which a retry may take the key over.
    pub lease: Duration,
    /// How long the layer keeps renewing one claim (default 10 min). A handler still running
    /// after this loses its claim to the next retry, and its own answer is then fenced.
    pub max_run: Duration,
    /// How long a completed answer is kept and replayed (default 24 h, as Stripe keeps keys).
    pub retention: Duration,
    /// The largest request body the layer reads to fingerprint (default 1 MiB); a larger one is
    /// refused with 413 before anything runs.
    pub max_body: usize,
    /// Response headers stored and replayed. `Set-Cookie`, `Date` and hop-by-hop headers are
    /// never replayed, whatever this lists.
    pub replay_headers: Vec<HeaderName>,
    /// Whether a 5xx answer is stored and replayed (default `false`: a 5xx releases the key, so a
    /// retry runs the handler again; see the crate docs for why).
    pub store_server_errors: bool,
    /// Whether a request runs without protection when the store cannot be reached (default
    /// `false`: it is refused with 503 and nothing runs).
    pub fail_open: bool,
    /// Scopes keys by principal; `None` puts every caller in one scope (one tenant).
    pub principal: Option<PrincipalFn>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            methods: vec![Method::POST, Method::PATCH],
            require_key: false,
            lease: Duration::from_secs(30),
            max_run: Duration::from_secs(600),
            retention: Duration::from_secs(24 * 3600),
            max_body: 1 << 20,
            replay_headers: [
                "content-type",
                "content-encoding",
                "content-language",
                "content-location",
                "location",
                "etag",
                "last-modified",
                "cache-control",
                "link",
            ]
            .into_iter()
            .map(HeaderName::from_static)
            .collect(),
            store_server_errors: false,
            fail_open: false,
            principal: None,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("methods", &self.methods)
            .field("require_key", &self.require_key)
            .field("lease", &self.lease)
            .field("max_run", &self.max_run)
            .field("retention", &self.retention)
            .field("max_body", &self.max_body)
            .field("replay_headers", &self.replay_headers)
            .field("store_server_errors", &self.store_server_errors)
            .field("fail_open", &self.fail_open)
            .field("principal", &self.principal.as_ref().map(|_| "fn"))
            .finish()
    }
}

/// Headers a replay never carries: per-response or per-connection.
const NEVER_REPLAYED: [&str; 8] = [
    "set-cookie",
    "date",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "idempotent-replayed",
    "upgrade",
];

/// Makes POST and PATCH requests with an `Idempotency-Key` take effect once.
///
/// ```
/// use axum::{routing::post, Router};
/// use stagger_idempotency::{Config, IdempotencyLayer, MemoryStore};
///
/// let app: Router = Router::new()
///     .route("/orders", post(|| async { "created" }))
///     .layer(IdempotencyLayer::new(MemoryStore::default(), Config::default()));
/// ```
#[derive(Clone)]
pub struct IdempotencyLayer<St> {
    store: St,
    config: Arc<Config>,
}

impl<St: Store> IdempotencyLayer<St> {
    /// A layer over `store` with `config`.
    pub fn new(store: St, config: Config) -> Self {
        Self {
            store,
            config: Arc::new(config),
        }
    }
}

impl<S, St: Clone> tower_layer::Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotency {
            inner,
            store: self.store.clone(),
            config: self.config.clone(),
        }
    }
}

/// The service [`IdempotencyLayer`] makes.
#[derive(Clone)]
pub struct Idempotency<S, St> {
    inner: S,
    store: St,
    config: Arc<Config>,
}

/// The request body the inner service sees: the buffered body of a covered request, or the
/// original body of any other.
pub type InnerBody<B> = Either<Full<Bytes>, B>;

/// The response body the layer answers with: a stored or replayed answer, or the inner
/// service's own body when the layer stood aside.
pub type OuterBody<B> = Either<Full<Bytes>, B>;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, St, B, RB> tower_service::Service<Request<B>> for Idempotency<S, St>
where
    S: tower_service::Service<Request<InnerBody<B>>, Response = Response<RB>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: Store,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: std::fmt::Display,
{
    type Response = Response<OuterBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone that was not polled ready stays; the ready one serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let store = self.store.clone();
        let config = self.config.clone();
        Box::pin(serve(inner, store, config, request))
    }
}

fn ours<RB>(response: Response<Bytes>) -> Response<OuterBody<RB>> {
    response.map(|b| Either::Left(Full::new(b)))
}

async fn serve<S, St, B, RB>(
    mut inner: S,
    store: St,
    config: Arc<Config>,
    request: Request<B>,
) -> Result<Response<OuterBody<RB>>, S::Error>
where
    S: tower_service::Service<Request<InnerBody<B>>, Response = Response<RB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    St: Store,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: std::fmt::Display,
{
    let pass = |inner: &mut S, request: Request<B>| {
        let future = inner.call(request.map(Either::Right));
        async move { Ok(future.await?.map(Either::Right)) }
    };
    if !config.methods.contains(request.method()) {
        return pass(&mut inner, request).await;
    }
    let key = match key::key(request.headers()) {
        Ok(Some(key)) => key,
        Ok(None) if !config.require_key => return pass(&mut inner, request).await,
        Ok(None) => {
            return Ok(ours(
                Rule::KeyMissing.answer(&KeyError::Missing.to_string(), None),
            ))
        }
        Err(e) => return Ok(ours(Rule::KeyInvalid.answer(&e.to_string(), None))),
    };
    let arrived = Instant::now();
    let (parts, body) = request.into_parts();
    let body = match read_body(body, config.max_body).await {
        Ok(body) => body,
        Err(refusal) => return Ok(ours(refusal)),
    };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let fingerprint = Fingerprint::of(parts.method.as_str(), target, &body);
    let principal = config
        .principal
        .as_ref()
        .map(|f| f(&parts))
        .unwrap_or_default();
    let scoped = scope(&principal, parts.uri.path(), &key);
    let lease = lease(&config, &parts.headers, arrived);

    let token = match store.claim(&scoped, &fingerprint, lease).await {
        Ok(claim) => match won(claim, &fingerprint, &key) {
            ControlFlow::Continue(token) => token,
            ControlFlow::Break(answer) => return Ok(ours(answer)),
        },
        Err(_) if config.fail_open => {
            let request = Request::from_parts(parts, Either::Left(Full::new(body)));
            let future = inner.call(request);
            return Ok(future.await?.map(Either::Right));
        }
        Err(e) => {
            let detail = format!("{e}; nothing was executed");
            return Ok(ours(
                Rule::StoreUnavailable.answer(&detail, Some(Duration::from_secs(1))),
            ));
        }
    };

    // Claimed: from here the work runs to its end even if the client hangs up, so its answer is
    // stored for the retry.
    let request = Request::from_parts(parts, Either::Left(Full::new(body)));
    let run = Run {
        store,
        config,
        key: scoped,
        token,
        fingerprint,
        lease,
    };
    run.detached(inner.call(request)).await.map(ours)
}

/// The request body, whole, or the refusal that names why it cannot be fingerprinted.
async fn read_body<B>(body: B, max: usize) -> Result<Bytes, Response<Bytes>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let detail = format!(
                "the body is over {max} bytes, the most this service fingerprints; nothing was executed"
            );
            Err(Rule::BodyTooLarge.answer(&detail, None))
        }
        Err(e) => {
            let detail = format!("reading the body failed ({e}); nothing was executed");
            Err(Rule::BodyUnreadable.answer(&detail, None))
        }
    }
}

/// A claim's lease: the caller's deadline when it sent one (at least 100 ms), else the
/// configured bound.
fn lease(config: &Config, headers: &http::HeaderMap, arrived: Instant) -> Duration {
    stagger::http::Inbound::from_headers(headers, arrived)
        .deadline()
        .map_or(config.lease, |deadline| {
            deadline
                .saturating_duration_since(arrived)
                .max(Duration::from_millis(100))
        })
}

/// The token of a claim this request won, or the answer to a key another request holds: its
/// replay, 409 while it runs, or 422 when it was made for another payload.
fn won(claim: Claim, fingerprint: &Fingerprint, key: &str) -> ControlFlow<Response<Bytes>, Token> {
    match claim {
        Claim::Won(token) => ControlFlow::Continue(token),
        Claim::Completed {
            fingerprint: stored,
            ..
        }
        | Claim::InFlight {
            fingerprint: stored,
            ..
        } if stored != *fingerprint => ControlFlow::Break(reused(key)),
        Claim::Completed { response, .. } => ControlFlow::Break(replay(response)),
        Claim::InFlight { expires_in, .. } => {
            let wait = expires_in.min(Duration::from_secs(1));
            let detail = "the first request with this key has not finished; retry after the \
                          Retry-After interval to receive its answer";
            ControlFlow::Break(Rule::KeyInUse.answer(detail, Some(wait)))
        }
    }
}

fn reused(key: &str) -> Response<Bytes> {
    let detail = format!(
        "the key {key:?} was first used with a different method, path or body; use a new key \
         for a new request"
    );
    Rule::KeyReused.answer(&detail, None)
}

/// The key's identity in the store: principal, route and key, hashed so that any principal and
/// any path are safe store keys.
fn scope(principal: &str, path: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    for part in [principal, path, key] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in hash.finalize().iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

fn replay(stored: StoredResponse) -> Response<Bytes> {
    let mut response = Response::new(stored.body);
    *response.status_mut() =
        http::StatusCode::from_u16(stored.status).unwrap_or(http::StatusCode::OK);
    for (name, value) in stored.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_maybe_shared(value),
        ) {
            response.headers_mut().append(name, value);
        }
    }
    response
        .headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    response
}

/// One claimed request's work, detached from the connection.
struct Run<St> {
    store: St,
    config: Arc<Config>,
    key: String,
    token: Token,
    fingerprint: Fingerprint,
    lease: Duration,
}

impl<St: Store> Run<St> {
    /// Runs `handler` to its end in a task of its own, so a client that hangs up does not stop
    /// it, and waits for its answer.
    async fn detached<F, RB, E>(self, handler: F) -> Result<Response<Bytes>, E>
    where
        F: Future<Output = Result<Response<RB>, E>> + Send + 'static,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: std::fmt::Display,
        E: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = tx.send(self.finish(handler).await);
        });
        match rx.await {
            Ok(answer) => answer,
            // The handler panicked: its task is gone and so are its renewals; the lease lapses.
            Err(_) => Ok(Rule::HandlerFailed.answer(
                "the handler stopped without an answer; the key is released when its lease ends",
                None,
            )),
        }
    }

    async fn finish<F, RB, E>(self, handler: F) -> Result<Response<Bytes>, E>
    where
        F: Future<Output = Result<Response<RB>, E>> + Send,
        RB: Body<Data = Bytes> + Send,
        RB::Error: std::fmt::Display,
    {
        let renewals = renew(
            self.store.clone(),
            self.key.clone(),
            self.token,
            self.lease,
            self.config.max_run,
        );
        tokio::pin!(handler, renewals);
        // The lease is renewed while the handler runs, in this same task.
        let result = tokio::select! {
            result = &mut handler => result,
            () = &mut renewals => handler.await,
        };
        let response = match result {
            Ok(response) => {
                let (parts, body) = response.into_parts();
                match body.collect().await {
                    Ok(body) => Ok(Response::from_parts(parts, body.to_bytes())),
                    Err(e) => Err(Some(format!("{e}"))),
                }
            }
            Err(e) => {
                let _ = self.store.release(&self.key, self.token).await;
                return Err(e);
            }
        };
        let response = match response {
            Ok(response) => response,
            Err(why) => {
                let _ = self.store.release(&self.key, self.token).await;
                let detail = format!(
                    "the handler's body failed ({}); the key was released",
                    why.unwrap_or_default()
                );
                return Ok(Rule::HandlerFailed.answer(&detail, None));
            }
        };
        let final_answer = !response.status().is_server_error() || self.config.store_server_errors;
        if final_answer {
            let stored = self.stored(&response);
            match self
                .store
                .complete(
                    &self.key,
                    self.token,
                    &self.fingerprint,
                    &stored,
                    self.config.retention,
                )
                .await
            {
                Ok(Completion::Stored) | Ok(Completion::Fenced) | Err(_) => {}
            }
        } else {
            let _ = self.store.release(&self.key, self.token).await;
        }
        Ok(response)
    }

    fn stored(&self, response: &Response<Bytes>) -> StoredResponse {
        let headers = response
            .headers()
            .iter()
            .filter(|(name, _)| {
                self.config.replay_headers.contains(name)
                    && !NEVER_REPLAYED.contains(&name.as_str())
            })
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    Bytes::copy_from_slice(value.as_bytes()),
                )
            })
            .collect();
        StoredResponse {
            status: response.status().as_u16(),
            headers,
            // A reference-counted handle on the body the client also gets: no copy.
            body: response.body().clone(),
        }
    }
}

/// Keeps a claim's lease alive while its handler runs, for at most `max_run`.
async fn renew<St: Store>(
    store: St,
    key: String,
    token: Token,
    lease: Duration,
    max_run: Duration,
) {
    let every = (lease / 2).max(Duration::from_millis(50));
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(started + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while started.elapsed() < max_run {
        tick.tick().await;
        if let Ok(false) = store.renew(&key, token, lease).await {
            return; // taken over or completed: nothing left to keep
        }
    }
}
