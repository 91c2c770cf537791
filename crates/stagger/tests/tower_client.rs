//! The tower client layer against a real server on 127.0.0.1 that scripts
//! faults per request; attempts and waits are measured at the server.

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use common::{bounded, status, with_header, Fault, Server};
use http::{Method, Request, StatusCode};
use http_body::{Body, Frame};
use http_body_util::Full;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stagger::http::{CallOptions, NotRetried, RetryInfo};
use stagger::tower::{ErrorKind, ReplayBody, RetryLayer, RetryService};
use stagger::{Class, Failure, Guardrail, Hint, Outcome, Policy, Stats, StopReason, Ticket};
use tower::{Layer, Service, ServiceExt};

const LIMIT: Duration = Duration::from_secs(20);

fn fast_policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .base(Duration::from_millis(20))
        .cap(Duration::from_millis(100))
        .build()
        .unwrap()
}

type Hyper<B> = Client<HttpConnector, ReplayBody<B>>;

fn client<B>(layer: RetryLayer) -> RetryService<Hyper<B>>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    layer.layer(Client::builder(TokioExecutor::new()).build_http())
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).unwrap()
}

fn post(url: &str, body: &'static str) -> Request<Full<Bytes>> {
    Request::post(url)
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap()
}

fn info<B>(resp: &http::Response<B>) -> RetryInfo {
    *resp.extensions().get::<RetryInfo>().expect("RetryInfo")
}

async fn send<B>(
    svc: &mut RetryService<Hyper<B>>,
    req: Request<B>,
) -> Result<http::Response<hyper::body::Incoming>, stagger::tower::Error>
where
    B: Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    svc.ready().await?.call(req).await
}

#[tokio::test]
async fn a_503_then_200_is_retried_once_with_attempt_numbers() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
        let hits = server.hits();
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].attempt(), Some(1));
        assert_eq!(hits[1].attempt(), Some(2));
    })
    .await;
}

#[tokio::test]
async fn retry_after_seconds_is_waited_at_least() {
    bounded(LIMIT, async {
        let server = Server::start(vec![with_header(429, "retry-after", "1")]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let gap = server.gaps()[0];
        // h + U(0, b_1): at least the hint, at most one backoff step more.
        assert!(gap >= Duration::from_secs(1), "{gap:?}");
        assert!(gap < Duration::from_millis(1000 + 20 + 400), "{gap:?}");
    })
    .await;
}

#[tokio::test]
async fn retry_after_http_date_is_waited_until() {
    bounded(LIMIT, async {
        let at = SystemTime::now() + Duration::from_secs(2);
        let date = httpdate::fmt_http_date(at);
        let server = Server::start(vec![with_header(429, "retry-after", date)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let gap = server.gaps()[0];
        // The date has whole seconds, so the wait is between 1 and 2 s (+ jitter).
        assert!(gap >= Duration::from_millis(990), "{gap:?}");
        assert!(gap < Duration::from_millis(2500), "{gap:?}");
    })
    .await;
}

#[tokio::test]
async fn a_refused_connection_is_retried_until_the_server_is_up() {
    bounded(LIMIT, async {
        let probe = common::free_port().await;
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let policy = Policy::builder()
            .max_attempts(8)
            .base(Duration::from_millis(50))
            .cap(Duration::from_millis(200))
            .jitter(stagger::Jitter::Equal)
            .build()
            .unwrap();
        let mut svc = client(RetryLayer::new(policy));
        let starter = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
            Server::serve(listener, vec![])
        });
        let started = Instant::now();
        let resp = send(&mut svc, get(&format!("http://{addr}/")))
            .await
            .unwrap();
        let server = starter.await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let i = info(&resp);
        assert!(i.attempts >= 2, "{i:?}");
        assert_eq!(
            server.hits().len(),
            1,
            "only the attempt after start-up arrives"
        );
        assert_eq!(server.hits()[0].attempt(), Some(i.attempts));
        assert!(started.elapsed() >= Duration::from_millis(150));
    })
    .await;
}

#[tokio::test]
async fn a_slow_reply_is_cut_off_and_retried_when_idempotent() {
    bounded(LIMIT, async {
        let server = Server::start(vec![Fault::Slow(Duration::from_secs(2), 200)]).await;
        let policy = Policy::builder()
            .base(Duration::from_millis(10))
            .attempt_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let mut svc = client(RetryLayer::new(policy));
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        assert!(started.elapsed() < Duration::from_millis(1500));
        let gap = server.gaps()[0];
        assert!(gap >= Duration::from_millis(200), "{gap:?}");
        // The attempt timeout travels as the remaining time.
        let t: u64 = server.hits()[0]
            .header("x-request-timeout-ms")
            .unwrap()
            .parse()
            .unwrap();
        assert!((150..=200).contains(&t), "{t}");
    })
    .await;
}

#[tokio::test]
async fn a_slow_post_is_not_retried_result_unknown() {
    bounded(LIMIT, async {
        let server = Server::start(vec![Fault::Slow(Duration::from_secs(2), 200)]).await;
        let policy = Policy::builder()
            .base(Duration::from_millis(10))
            .attempt_timeout(Duration::from_millis(200))
            .build()
            .unwrap();
        let mut svc = client(RetryLayer::new(policy));
        let err = send(&mut svc, post(&server.url("/"), "x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout);
        assert_eq!(err.info().attempts, 1);
        assert_eq!(err.reason(), StopReason::NotRetryable);
        assert_eq!(err.info().not_retried, Some(NotRetried::NotIdempotent));
    })
    .await;
}

#[tokio::test]
async fn a_400_is_never_retried() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(400), status(400)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(4)));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(server.hits().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_500_is_retried_only_when_asked() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(500), status(500)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(4)));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(info(&resp).attempts, 1);
        // Per request, through the extensions.
        let mut req = get(&server.url("/"));
        req.extensions_mut()
            .insert(CallOptions::new().retry_500(true));
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        assert_eq!(server.hits().len(), 3);
    })
    .await;
}

#[tokio::test]
async fn a_post_without_a_key_is_not_retried() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let resp = send(&mut svc, post(&server.url("/"), "charge"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::NotIdempotent));
        assert!(server.hits()[0].header("idempotency-key").is_none());
    })
    .await;
}

#[tokio::test]
async fn a_post_with_a_generated_key_sends_the_same_key_every_attempt() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503), status(502)]).await;
        let mut svc = client(RetryLayer::new(
            stagger::http::Settings::new(fast_policy(3)).idempotency_keys(true),
        ));
        let resp = send(&mut svc, post(&server.url("/"), "charge"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 3);
        let keys: Vec<String> = server
            .hits()
            .iter()
            .map(|h| h.header("idempotency-key").unwrap())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert!(keys[0].starts_with('"') && keys[0].ends_with('"') && keys[0].len() == 38);
        // Every attempt got the whole body.
        assert!(server.hits().iter().all(|h| h.body == b"charge"));
        // The next call gets a new key.
        let _ = send(&mut svc, post(&server.url("/"), "again"))
            .await
            .unwrap();
        assert_ne!(server.hits()[3].header("idempotency-key").unwrap(), keys[0]);
    })
    .await;
}

#[tokio::test]
async fn a_post_with_its_own_key_is_retried_with_that_key() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let mut req = post(&server.url("/"), "x");
        req.headers_mut()
            .insert("idempotency-key", "\"mine\"".parse().unwrap());
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(info(&resp).attempts, 2);
        let hits = server.hits();
        assert!(hits
            .iter()
            .all(|h| h.header("idempotency-key").as_deref() == Some("\"mine\"")));
    })
    .await;
}

/// A body of `left` bytes in 64 KiB chunks that does not say its length.
struct Chunks {
    left: usize,
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(64 * 1024);
        self.left -= n;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(vec![b'x'; n])))))
    }
}

#[tokio::test]
async fn a_2_mib_stream_is_sent_once_and_not_retried() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503), status(503)]).await;
        let mut svc = client::<Chunks>(RetryLayer::new(fast_policy(3)));
        let req = Request::put(server.url("/"))
            .body(Chunks { left: 2 << 20 })
            .unwrap();
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::BodyStream));
        assert_eq!(server.hits()[0].body_len, 2 << 20);
    })
    .await;
}

#[tokio::test]
async fn a_2_mib_buffer_is_over_the_limit_and_a_small_one_replays() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503), status(503)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let big = Request::put(server.url("/"))
            .body(Full::new(Bytes::from(vec![b'y'; 2 << 20])))
            .unwrap();
        let resp = send(&mut svc, big).await.unwrap();
        let i = info(&resp);
        assert_eq!(i.attempts, 1);
        assert_eq!(
            i.not_retried,
            Some(NotRetried::BodyTooLarge { limit: 1 << 20 })
        );
        assert_eq!(server.hits()[0].body_len, 2 << 20);
        let small = Request::put(server.url("/"))
            .body(Full::new(Bytes::from(vec![b'z'; 1000])))
            .unwrap();
        let resp = send(&mut svc, small).await.unwrap();
        assert_eq!(info(&resp).attempts, 2);
        assert!(server.hits()[1..].iter().all(|h| h.body_len == 1000));
    })
    .await;
}

#[tokio::test]
async fn a_hint_past_the_deadline_stops_at_once() {
    bounded(LIMIT, async {
        let server = Server::start(vec![with_header(503, "retry-after", "30")]).await;
        let mut svc = client(RetryLayer::new(
            stagger::http::Settings::new(fast_policy(3)).timeout(Duration::from_secs(2)),
        ));
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::Deadline));
        let t: u64 = server.hits()[0]
            .header("x-request-timeout-ms")
            .unwrap()
            .parse()
            .unwrap();
        assert!((1500..=2000).contains(&t), "{t}");
    })
    .await;
}

#[tokio::test]
async fn a_hint_over_max_retry_after_stops_at_once() {
    bounded(LIMIT, async {
        let server = Server::start(vec![with_header(429, "retry-after", "120")]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let started = Instant::now();
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(info(&resp).reason, StopReason::HintTooLong);
    })
    .await;
}

#[tokio::test]
async fn per_request_policy_and_shared_observer_across_clones() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503), status(503), status(503)]).await;
        let stats = Arc::new(Stats::new());
        let policy = Policy::builder()
            .base(Duration::from_millis(5))
            .observer(stats.clone())
            .build()
            .unwrap();
        let mut a = client(RetryLayer::new(policy));
        let mut b = a.clone();
        let mut req = get(&server.url("/"));
        req.extensions_mut()
            .insert(CallOptions::new().policy(fast_policy(1)));
        let resp = send(&mut a, req).await.unwrap();
        assert_eq!(info(&resp).reason, StopReason::AttemptsExhausted);
        // The overriding policy had no observer; the shared one sees b's call.
        let resp = send(&mut b, get(&server.url("/"))).await.unwrap();
        assert_eq!(info(&resp).attempts, 3);
        let resp = send(&mut a, get(&server.url("/"))).await.unwrap();
        assert_eq!(info(&resp).attempts, 1);
        let s = stats.snapshot();
        assert_eq!((s.logical_requests, s.attempts, s.retries), (2, 4, 2));
    })
    .await;
}

#[tokio::test]
async fn methods_other_than_post_and_patch_are_retried() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503), status(504)]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let req = Request::builder()
            .method(Method::DELETE)
            .uri(server.url("/x"))
            .body(Full::<Bytes>::default())
            .unwrap();
        let resp = send(&mut svc, req).await.unwrap();
        assert_eq!(info(&resp).attempts, 3);
    })
    .await;
}

#[tokio::test]
async fn clones_share_the_budget() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503); 20]).await;
        let bucket = stagger::budget::TokenBucket::builder()
            .max_tokens(4.0)
            .token_ratio(0.1)
            .build()
            .unwrap();
        let policy = Policy::builder()
            .max_attempts(5)
            .base(Duration::from_millis(5))
            .budget(bucket.clone())
            .build()
            .unwrap();
        let mut a = client(RetryLayer::new(policy));
        let mut b = a.clone();
        let resp = send(&mut a, get(&server.url("/"))).await.unwrap();
        let first = info(&resp);
        assert_eq!(first.reason, StopReason::Budget, "{first:?}");
        // The clone finds the bucket already drained: no retry at all.
        let resp = send(&mut b, get(&server.url("/"))).await.unwrap();
        let second = info(&resp);
        assert_eq!((second.attempts, second.reason), (1, StopReason::Budget));
        assert_eq!(server.hits().len() as u32, first.attempts + 1);
    })
    .await;
}

#[tokio::test]
async fn clones_share_the_breaker() {
    bounded(LIMIT, async {
        let server = Server::start(vec![status(503); 20]).await;
        let breaker = stagger::Breaker::builder()
            .consecutive_failures(3)
            .open_for(Duration::from_secs(30))
            .build()
            .unwrap();
        let policy = Policy::builder()
            .max_attempts(3)
            .base(Duration::from_millis(5))
            .breaker(breaker.clone())
            .build()
            .unwrap();
        let mut a = client(RetryLayer::new(policy));
        let mut b = a.clone();
        let resp = send(&mut a, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(breaker.state(), stagger::BreakerState::Open);
        // The dependency is plainly down: the clone's call fails fast.
        let err = send(&mut b, get(&server.url("/"))).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Refused);
        assert_eq!(err.reason(), StopReason::BreakerOpen);
        assert_eq!(err.info().attempts, 0);
        assert_eq!(server.hits().len(), 3);
    })
    .await;
}

/// A gRPC-shaped service: trailers-only answers with `grpc-status`, and it
/// records the `grpc-timeout` it was sent.
fn grpc_service(
    statuses: Vec<&'static str>,
    seen: Arc<std::sync::Mutex<Vec<Option<String>>>>,
) -> impl Service<
    Request<ReplayBody<Full<Bytes>>>,
    Response = http::Response<()>,
    Error = Infallible,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let statuses = Arc::new(std::sync::Mutex::new(statuses));
    tower::service_fn(move |req: Request<ReplayBody<Full<Bytes>>>| {
        let t = req
            .headers()
            .get("grpc-timeout")
            .map(|v| v.to_str().unwrap().to_string());
        let attempt: u32 = req.headers()["x-retry-attempt"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let previous = req
            .headers()
            .get("grpc-previous-rpc-attempts")
            .map(|v| v.to_str().unwrap().parse::<u32>().unwrap());
        assert_eq!(previous, (attempt > 1).then(|| attempt - 1));
        seen.lock().unwrap().push(t);
        let code = {
            let mut s = statuses.lock().unwrap();
            if s.is_empty() {
                "0"
            } else {
                s.remove(0)
            }
        };
        async move {
            let mut resp = http::Response::new(());
            resp.headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            resp.headers_mut()
                .insert("grpc-status", code.parse().unwrap());
            Ok::<_, Infallible>(resp)
        }
    })
}

fn grpc_request() -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1/shop.Cart/Add")
        .header("content-type", "application/grpc")
        .body(Full::default())
        .unwrap()
}

#[tokio::test]
async fn grpc_codes_follow_the_service_config_and_the_deadline_travels_as_grpc_timeout() {
    bounded(LIMIT, async {
        let json = r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],"timeout":"2s",
            "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s",
            "backoffMultiplier":2,"retryableStatusCodes":["INTERNAL"]}}]}"#;
        let config = stagger::config::ServiceConfig::from_json(json).unwrap();
        let settings = config.settings("shop.Cart", "Add").unwrap().unwrap();
        let seen = Arc::default();
        let mut svc =
            RetryLayer::new(settings).layer(grpc_service(vec!["13", "13"], Arc::clone(&seen)));
        // gRPC calls are POSTs: declare this one idempotent.
        let mut req = grpc_request();
        req.extensions_mut()
            .insert(CallOptions::new().idempotent(true));
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(resp.headers()["grpc-status"], "0");
        assert_eq!(info(&resp).attempts, 3);
        let timeouts = seen.lock().unwrap().clone();
        assert!(
            timeouts.iter().all(|t| t
                .as_deref()
                .is_some_and(|t| t.ends_with('u') || t.ends_with('m'))),
            "{timeouts:?}"
        );
        // UNAVAILABLE is not in this config's list.
        let seen = Arc::default();
        let settings = config.settings("shop.Cart", "Add").unwrap().unwrap();
        let mut svc = RetryLayer::new(settings).layer(grpc_service(vec!["14"], seen));
        let mut req = grpc_request();
        req.extensions_mut()
            .insert(CallOptions::new().idempotent(true));
        let resp = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(
            (info(&resp).attempts, info(&resp).reason),
            (1, StopReason::NotRetryable)
        );
    })
    .await;
}

/// A resolver that fails its first `failures` lookups with `message` (the
/// text std gives a getaddrinfo failure), then answers with `addr`.
#[derive(Clone)]
struct FlakyDns {
    failures: Arc<std::sync::atomic::AtomicU32>,
    message: &'static str,
    addr: std::net::SocketAddr,
}

impl FlakyDns {
    fn new(failures: u32, message: &'static str, addr: std::net::SocketAddr) -> Self {
        FlakyDns {
            failures: Arc::new(failures.into()),
            message,
            addr,
        }
    }
}

impl Service<Name> for FlakyDns {
    type Response = std::vec::IntoIter<std::net::SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, std::io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _name: Name) -> Self::Future {
        use std::sync::atomic::Ordering::SeqCst;
        let fail = self
            .failures
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        std::future::ready(if fail {
            Err(std::io::Error::other(self.message))
        } else {
            Ok(vec![self.addr].into_iter())
        })
    }
}

fn dns_client(
    dns: FlakyDns,
) -> RetryService<Client<HttpConnector<FlakyDns>, ReplayBody<Full<Bytes>>>> {
    let connector = HttpConnector::new_with_resolver(dns);
    RetryLayer::new(fast_policy(3)).layer(Client::builder(TokioExecutor::new()).build(connector))
}

const EAI_AGAIN: &str =
    "failed to lookup address information: Temporary failure in name resolution";

#[tokio::test]
async fn a_temporary_dns_failure_is_retried() {
    bounded(LIMIT, async {
        let server = Server::start(vec![]).await;
        let mut svc = dns_client(FlakyDns::new(1, EAI_AGAIN, server.addr));
        // A name, not an address, so the connector asks the resolver.
        let url = format!("http://stagger.test:{}/", server.addr.port());
        let resp = svc.ready().await.unwrap().call(get(&url)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        let hits = server.hits();
        assert_eq!(hits.len(), 1, "the failed lookup sent nothing");
        assert_eq!(hits[0].attempt(), Some(2));
        // The request never left, so even a POST without a key is repeated
        // (on a new client: the first one would reuse its connection).
        let mut svc = dns_client(FlakyDns::new(1, EAI_AGAIN, server.addr));
        let resp = svc
            .ready()
            .await
            .unwrap()
            .call(post(&url, "x"))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        let hits = server.hits();
        assert_eq!((hits.len(), hits[1].method.as_str()), (2, "POST"));
        assert_eq!(hits[1].attempt(), Some(2));
    })
    .await;
}

#[tokio::test]
async fn a_name_that_does_not_exist_is_not_retried() {
    bounded(LIMIT, async {
        let server = Server::start(vec![]).await;
        let dns = FlakyDns::new(
            1,
            "failed to lookup address information: Name or service not known",
            server.addr,
        );
        let mut svc = dns_client(dns);
        let url = format!("http://stagger.test:{}/", server.addr.port());
        let err = svc
            .ready()
            .await
            .unwrap()
            .call(get(&url))
            .await
            .unwrap_err();
        assert_eq!(
            (err.info().attempts, err.reason()),
            (1, StopReason::NotRetryable)
        );
        assert!(server.hits().is_empty());
    })
    .await;
}

#[tokio::test]
async fn with_the_one_layer_rule_off_x_no_retry_keeps_the_retry_after() {
    bounded(LIMIT, async {
        let answer = Fault::Status(
            429,
            vec![("retry-after", "1".into()), ("x-no-retry", "1".into())],
        );
        let server = Server::start(vec![answer.clone()]).await;
        let mut svc = client(RetryLayer::new(
            stagger::http::Settings::new(fast_policy(3)).one_layer(false),
        ));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        let gap = server.gaps()[0];
        assert!(gap >= Duration::from_secs(1), "{gap:?}");
        assert!(gap < Duration::from_millis(1000 + 20 + 400), "{gap:?}");
        // With the rule on, the same answer is passed up at once.
        let server = Server::start(vec![answer]).await;
        let mut svc = client(RetryLayer::new(fast_policy(3)));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::ServerSaidNo));
    })
    .await;
}

#[tokio::test]
async fn a_malformed_retry_after_is_counted_as_an_invalid_hint() {
    bounded(LIMIT, async {
        let server = Server::start(vec![with_header(503, "retry-after", "soon")]).await;
        let stats = Arc::new(Stats::new());
        let policy = Policy::builder()
            .base(Duration::from_millis(5))
            .observer(stats.clone())
            .build()
            .unwrap();
        let mut svc = client(RetryLayer::new(policy));
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(info(&resp).attempts, 2);
        let s = stats.snapshot();
        assert_eq!((s.hints_invalid, s.hints_used, s.retries), (1, 0, 1));
    })
    .await;
}

/// A guardrail that writes down every failure the engine is told about.
#[derive(Default)]
struct Witness(std::sync::Mutex<Vec<Failure>>);

impl Guardrail for Witness {
    fn record(
        &self,
        _attempt: u32,
        _ticket: &mut Ticket,
        outcome: &Outcome,
        _latency: Option<Duration>,
        _now: Instant,
    ) {
        if let Outcome::Failure(f) = outcome {
            self.0.lock().unwrap().push(*f);
        }
    }
}

#[tokio::test]
async fn an_invalid_hint_reaches_the_engine_when_the_front_end_holds_back() {
    bounded(LIMIT, async {
        let server = Server::start(vec![
            with_header(503, "retry-after", "soon"),
            Fault::Status(
                503,
                vec![("retry-after", "soon".into()), ("x-no-retry", "1".into())],
            ),
        ])
        .await;
        let witness = Arc::new(Witness::default());
        let policy = Policy::builder()
            .base(Duration::from_millis(5))
            .guardrail(witness.clone())
            .build()
            .unwrap();
        let mut svc = client(RetryLayer::new(policy));
        // Not retried: a POST without a key.
        let resp = send(&mut svc, post(&server.url("/"), "x")).await.unwrap();
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::NotIdempotent));
        // Not retried: the server said so.
        let resp = send(&mut svc, get(&server.url("/"))).await.unwrap();
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(i.not_retried, Some(NotRetried::ServerSaidNo));
        let seen = witness.0.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        for f in seen {
            // The engine sees the hint as it was, so it can count it, and a
            // failure a breaker or budget still counts against the server.
            assert_eq!(f.hint, Some(Hint::Invalid), "{f:?}");
            assert_ne!(f.class, Class::Permanent, "{f:?}");
        }
    })
    .await;
}
