//! The layer, rule by rule, as the Idempotency-Key draft states them, in process and on a socket.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use http_body_util::BodyExt;
use stagger_idempotency::{
    Claim, Completion, Config, Fingerprint, IdempotencyLayer, MemoryStore, Store, StoreError,
    StoredResponse, Token,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The test's handler: counts its runs, then waits for the test to open its gate (so no test
/// depends on how fast the machine is), then answers.
#[derive(Clone)]
struct Counter {
    runs: Arc<AtomicUsize>,
    started: Arc<tokio::sync::Notify>,
    gate: Arc<tokio::sync::Semaphore>,
    status: Arc<std::sync::Mutex<Vec<StatusCode>>>,
}

impl Default for Counter {
    fn default() -> Self {
        Self {
            runs: Arc::default(),
            started: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(
                tokio::sync::Semaphore::MAX_PERMITS,
            )),
            status: Arc::default(),
        }
    }
}

impl Counter {
    /// A handler that waits for [`open`](Self::open) after it has counted its run.
    fn gated() -> Self {
        Self {
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
            ..Self::default()
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.gate.add_permits(1000);
    }
}

async fn handler(State(c): State<Counter>, body: String) -> Response {
    let n = c.runs.fetch_add(1, Ordering::SeqCst) + 1;
    c.started.notify_one();
    c.gate
        .acquire()
        .await
        .expect("the gate stays open")
        .forget();
    let status = c
        .status
        .lock()
        .unwrap()
        .pop()
        .unwrap_or(StatusCode::CREATED);
    let mut response = (status, format!("order {n}: {body}")).into_response();
    let h = response.headers_mut();
    h.insert("content-type", "text/plain; charset=utf-8".parse().unwrap());
    h.insert("location", format!("/orders/{n}").parse().unwrap());
    h.insert("set-cookie", "session=abc".parse().unwrap());
    h.insert("date", "Fri, 04 Dec 2026 20:00:00 GMT".parse().unwrap());
    h.insert("x-internal", "not on the list".parse().unwrap());
    response
}

fn app<St: Store>(counter: &Counter, store: St, config: Config) -> Router {
    Router::new()
        .route("/orders", post(handler).get(handler).put(handler))
        .with_state(counter.clone())
        .layer(IdempotencyLayer::new(store, config))
}

fn req(method: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut b = Request::builder().method(method).uri("/orders");
    if let Some(key) = key {
        b = b.header("idempotency-key", key);
    }
    b.body(Body::from(body.to_owned())).unwrap()
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn problem_type(body: &str) -> String {
    let doc: serde_json::Value = serde_json::from_str(body).expect("a problem+json body");
    assert!(
        doc["title"].is_string() && doc["detail"].is_string(),
        "{doc}"
    );
    doc["type"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_keyed_post_runs_once_and_its_retry_is_replayed() {
    let c = Counter::default();
    let app = app(&c, MemoryStore::default(), Config::default());
    let (s1, h1, b1) = send(&app, req("POST", Some("\"k-1\""), "sku=1")).await;
    assert_eq!((s1, b1.as_str()), (StatusCode::CREATED, "order 1: sku=1"));
    assert!(h1.get("idempotent-replayed").is_none());
    // A bare (unquoted) key names the same key.
    let (s2, h2, b2) = send(&app, req("POST", Some("k-1"), "sku=1")).await;
    assert_eq!(c.runs(), 1, "the retry did not run the handler");
    assert_eq!((s2, b2), (StatusCode::CREATED, "order 1: sku=1".to_owned()));
    assert_eq!(h2["idempotent-replayed"], "true");
    assert_eq!(h2["location"], "/orders/1");
    assert_eq!(h2["content-type"], "text/plain; charset=utf-8");
    for never in ["set-cookie", "date", "x-internal"] {
        assert!(h2.get(never).is_none(), "{never} was replayed");
    }
}

#[tokio::test]
async fn the_same_key_with_another_payload_is_422() {
    let c = Counter::default();
    let app = app(&c, MemoryStore::default(), Config::default());
    send(&app, req("POST", Some("\"k\""), "sku=1")).await;
    let (status, headers, body) = send(&app, req("POST", Some("\"k\""), "sku=2")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(problem_type(&body).ends_with("key-reused"));
    let (status, _, _) = send(&app, req("PATCH", Some("\"k\""), "sku=1")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "another method");
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn a_duplicate_while_the_first_runs_is_409_with_retry_after() {
    let c = Counter::gated();
    let app = app(&c, MemoryStore::default(), Config::default());
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, req("POST", Some("\"slow\""), "x")).await }
    });
    c.started.notified().await;
    let (status, headers, body) = send(&app, req("POST", Some("\"slow\""), "x")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(headers["retry-after"], "1");
    assert!(problem_type(&body).ends_with("key-in-use"));
    c.open();
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn malformed_keys_are_400_and_run_nothing() {
    let c = Counter::default();
    let app = app(&c, MemoryStore::default(), Config::default());
    let long = format!("\"{}\"", "k".repeat(256));
    for key in [
        "\"\"",
        long.as_str(),
        "\"a\", \"b\"",
        "a,b",
        "\"a b\"",
        "\"open",
        "\"k\";p=1",
    ] {
        let (status, headers, body) = send(&app, req("POST", Some(key), "x")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "key {key}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert!(problem_type(&body).ends_with("key-invalid"), "{body}");
    }
    // Two header lines are two keys.
    let mut two = req("POST", Some("\"a\""), "x");
    two.headers_mut()
        .append("idempotency-key", "\"b\"".parse().unwrap());
    assert_eq!(send(&app, two).await.0, StatusCode::BAD_REQUEST);
    // 255 characters is the longest key allowed.
    let longest = format!("\"{}\"", "k".repeat(255));
    assert_eq!(
        send(&app, req("POST", Some(&longest), "x")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn a_missing_key_is_400_only_where_required() {
    let c = Counter::default();
    let open = app(&c, MemoryStore::default(), Config::default());
    assert_eq!(
        send(&open, req("POST", None, "x")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&open, req("POST", None, "x")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(c.runs(), 2, "without a key nothing is deduplicated");
    let strict = app(
        &c,
        MemoryStore::default(),
        Config {
            require_key: true,
            ..Config::default()
        },
    );
    let (status, _, body) = send(&strict, req("POST", None, "x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(problem_type(&body).ends_with("key-missing"));
    // Methods the layer does not cover pass, key or not.
    assert_eq!(
        send(&strict, req("GET", None, "")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&strict, req("PUT", Some("\"k\""), "")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&strict, req("PUT", Some("\"k\""), "")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(c.runs(), 5);
}

#[tokio::test]
async fn a_5xx_releases_the_key_unless_configured_final() {
    let c = Counter::default();
    c.status
        .lock()
        .unwrap()
        .push(StatusCode::SERVICE_UNAVAILABLE);
    let app1 = app(&c, MemoryStore::default(), Config::default());
    assert_eq!(
        send(&app1, req("POST", Some("\"k\""), "x")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (status, headers, _) = send(&app1, req("POST", Some("\"k\""), "x")).await;
    assert_eq!(status, StatusCode::CREATED, "the retry ran again");
    assert!(headers.get("idempotent-replayed").is_none());
    assert_eq!(c.runs(), 2);

    let c = Counter::default();
    c.status
        .lock()
        .unwrap()
        .push(StatusCode::INTERNAL_SERVER_ERROR);
    let config = Config {
        store_server_errors: true,
        ..Config::default()
    };
    let app2 = app(&c, MemoryStore::default(), config);
    send(&app2, req("POST", Some("\"k\""), "x")).await;
    let (status, headers, _) = send(&app2, req("POST", Some("\"k\""), "x")).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn a_4xx_is_final_and_replayed() {
    let c = Counter::default();
    c.status.lock().unwrap().push(StatusCode::PAYMENT_REQUIRED);
    let app = app(&c, MemoryStore::default(), Config::default());
    send(&app, req("POST", Some("\"k\""), "x")).await;
    let (status, headers, _) = send(&app, req("POST", Some("\"k\""), "x")).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn keys_are_scoped_by_principal() {
    let c = Counter::default();
    let config = Config {
        principal: Some(Arc::new(|parts: &http::request::Parts| {
            parts
                .headers
                .get("x-tenant")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        })),
        ..Config::default()
    };
    let app = app(&c, MemoryStore::default(), config);
    for tenant in ["a", "b", "a"] {
        let mut r = req("POST", Some("\"shared\""), "x");
        r.headers_mut().insert("x-tenant", tenant.parse().unwrap());
        send(&app, r).await;
    }
    assert_eq!(
        c.runs(),
        2,
        "tenant a's retry replays; tenant b's key is its own"
    );
}

#[tokio::test]
async fn a_10_mb_body_is_413_and_runs_nothing() {
    let c = Counter::default();
    let app = app(&c, MemoryStore::default(), Config::default());
    let big = "x".repeat(10 << 20);
    let (status, _, body) = send(&app, req("POST", Some("\"big\""), &big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(problem_type(&body).ends_with("body-too-large"));
    assert_eq!(c.runs(), 0);
}

/// A store that fails every call, or only the calls after the claim.
#[derive(Clone)]
struct Failing {
    inner: MemoryStore,
    claims_work: bool,
}

impl Store for Failing {
    async fn claim(
        &self,
        key: &str,
        f: &Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        if self.claims_work {
            self.inner.claim(key, f, lease).await
        } else {
            Err(StoreError::new("connection refused"))
        }
    }
    async fn renew(&self, _: &str, _: Token, _: Duration) -> Result<bool, StoreError> {
        Err(StoreError::new("connection reset"))
    }
    async fn complete(
        &self,
        _: &str,
        _: Token,
        _: &Fingerprint,
        _: &StoredResponse,
        _: Duration,
    ) -> Result<Completion, StoreError> {
        Err(StoreError::new("connection reset"))
    }
    async fn release(&self, _: &str, _: Token) -> Result<bool, StoreError> {
        Err(StoreError::new("connection reset"))
    }
}

#[tokio::test]
async fn an_unreachable_store_is_503_and_runs_nothing_unless_failing_open() {
    let c = Counter::default();
    let down = Failing {
        inner: MemoryStore::default(),
        claims_work: false,
    };
    let closed = app(&c, down.clone(), Config::default());
    let (status, headers, body) = send(&closed, req("POST", Some("\"k\""), "x")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "1");
    assert!(problem_type(&body).ends_with("store-unavailable"));
    assert_eq!(c.runs(), 0);
    let open = app(
        &c,
        down,
        Config {
            fail_open: true,
            ..Config::default()
        },
    );
    assert_eq!(
        send(&open, req("POST", Some("\"k\""), "x")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn a_store_that_dies_mid_request_never_runs_the_handler_twice() {
    let c = Counter::default();
    let store = Failing {
        inner: MemoryStore::default(),
        claims_work: true,
    };
    let app = app(&c, store, Config::default());
    // The claim lands; the completion does not. The client still gets its answer.
    assert_eq!(
        send(&app, req("POST", Some("\"k\""), "x")).await.0,
        StatusCode::CREATED
    );
    // The key stays claimed (the claim's lease runs), so the retry is told to wait, not run.
    assert_eq!(
        send(&app, req("POST", Some("\"k\""), "x")).await.0,
        StatusCode::CONFLICT
    );
    assert_eq!(c.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_run_the_handler_once() {
    let c = Counter::default();
    let app = app(&c, MemoryStore::default(), Config::default());
    let tasks: Vec<_> = (0..24)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { send(&app, req("POST", Some("\"dup\""), "x")).await.0 })
        })
        .collect();
    for task in tasks {
        let status = task.await.unwrap();
        assert!(
            status == StatusCode::CREATED || status == StatusCode::CONFLICT,
            "{status}"
        );
    }
    assert_eq!(c.runs(), 1);
}

#[tokio::test]
async fn a_lease_shorter_than_the_handler_is_renewed_so_the_work_runs_once() {
    let c = Counter::gated();
    let app = app(&c, MemoryStore::default(), Config::default());
    // The caller's deadline (200 ms) is the lease; the handler runs until the test lets it end,
    // three leases later.
    let mut first = req("POST", Some("\"lease\""), "x");
    first
        .headers_mut()
        .insert("x-request-timeout-ms", "200".parse().unwrap());
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, first).await.0 }
    });
    c.started.notified().await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            send(&app, req("POST", Some("\"lease\""), "x")).await.0,
            StatusCode::CONFLICT
        );
    }
    c.open();
    assert_eq!(first.await.unwrap(), StatusCode::CREATED);
    let (status, headers, _) = send(&app, req("POST", Some("\"lease\""), "x")).await;
    assert_eq!(
        (status, &headers["idempotent-replayed"]),
        (StatusCode::CREATED, &"true".parse().unwrap())
    );
    assert_eq!(c.runs(), 1);
}

/// hyper drops a service's future when the client hangs up; the claimed work must finish anyway
/// and leave its answer for the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_gets_the_replay_on_its_retry() {
    let c = Counter::gated();
    let router = app(&c, MemoryStore::default(), Config::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let post = || async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = "POST /orders HTTP/1.1\r\nhost: t\r\nidempotency-key: \"hang\"\r\n\
                       content-length: 1\r\nconnection: close\r\n\r\nx";
        stream.write_all(request.as_bytes()).await.unwrap();
        stream
    };
    // The first client gives up while the handler runs: it closes its connection unanswered.
    let first = post().await;
    c.started.notified().await;
    drop(first);
    // Let hyper notice the hang-up (it drops the request's future), then let the handler end.
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.open();
    // The retry: 409 while the detached work finishes, then its stored answer.
    let mut retry = String::new();
    for _ in 0..100 {
        retry.clear();
        let mut stream = post().await;
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut retry))
            .await
            .expect("the retry is answered")
            .unwrap();
        if !retry.starts_with("HTTP/1.1 409") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(retry.starts_with("HTTP/1.1 201"), "{retry}");
    assert!(
        retry
            .to_ascii_lowercase()
            .contains("idempotent-replayed: true"),
        "{retry}"
    );
    assert!(retry.ends_with("order 1: x"), "{retry}");
    assert_eq!(c.runs(), 1);
    server.abort();
}
