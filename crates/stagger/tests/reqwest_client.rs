//! The reqwest middleware against the scripted server: the same rules as
//! the tower layer, through reqwest.

use crate::common;

use stagger::Backoff;
use std::time::{Duration, Instant};

use common::{bounded, status, with_header, Server};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::http::{CallOptions, RetryInfo};
use stagger::reqwest::RetryMiddleware;
use stagger::NotRetried;
use stagger::{Policy, StopReason};

const LIMIT: Duration = Duration::from_secs(20);

fn policy(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

fn client(m: RetryMiddleware) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new()).with(m).build()
}

fn info(resp: &reqwest::Response) -> RetryInfo {
    *resp.extensions().get::<RetryInfo>().unwrap()
}

#[tokio::test]
async fn retries_503_and_honours_retry_after() {
    bounded(LIMIT, async {
        let s = Server::start(vec![status(503), with_header(429, "retry-after", "1")]).await;
        let c = client(RetryMiddleware::new(policy(4)));
        let resp = c.get(s.url("/")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(info(&resp).attempts, 3);
        let gaps = s.gaps();
        assert!(gaps[1] >= Duration::from_secs(1), "{gaps:?}");
        let attempts: Vec<_> = s.hits().iter().map(|h| h.attempt().unwrap()).collect();
        assert_eq!(attempts, [1, 2, 3]);
    })
    .await;
}

#[tokio::test]
async fn post_needs_a_key_and_gets_the_same_one_each_attempt() {
    bounded(LIMIT, async {
        let s = Server::start(vec![status(503), status(503), status(503)]).await;
        let plain = client(RetryMiddleware::new(policy(3)));
        let resp = plain.post(s.url("/")).body("a").send().await.unwrap();
        assert_eq!(info(&resp).not_retried, Some(NotRetried::NotIdempotent));
        let keyed = client(RetryMiddleware::new(stagger::http::Settings {
            policy: policy(3),
            idempotency_keys: true,
            ..Default::default()
        }));
        let resp = keyed.post(s.url("/")).body("b").send().await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(info(&resp).attempts, 3);
        let hits = s.hits();
        let k1 = hits[1].header("idempotency-key").unwrap();
        assert_eq!(hits[2].header("idempotency-key").unwrap(), k1);
        assert_eq!(hits[3].header("idempotency-key").unwrap(), k1);
        assert!(hits[1..].iter().all(|h| h.body == b"b"));
    })
    .await;
}

#[tokio::test]
async fn a_body_over_the_limit_is_sent_once() {
    bounded(LIMIT, async {
        let s = Server::start(vec![status(503), status(503)]).await;
        let c = client(RetryMiddleware::new(policy(3)));
        let resp = c
            .put(s.url("/"))
            .body(vec![b'x'; 2 << 20])
            .send()
            .await
            .unwrap();
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(
            i.not_retried,
            Some(NotRetried::BodyTooLarge { limit: 1 << 20 })
        );
        assert_eq!(s.hits()[0].body_len, 2 << 20);
    })
    .await;
}

#[tokio::test]
async fn per_request_options_and_attempt_timeouts() {
    bounded(LIMIT, async {
        let s = Server::start(vec![
            common::Fault::Slow(Duration::from_secs(3), 200),
            status(503),
            status(200),
            status(503),
        ])
        .await;
        let p = Policy::builder()
            .backoff(Backoff {
                base: Duration::from_millis(5),
                ..Backoff::new()
            })
            .attempt_timeout(Duration::from_millis(150))
            .build()
            .unwrap();
        let c = client(RetryMiddleware::new(p));
        let started = Instant::now();
        let resp = c.get(s.url("/")).send().await.unwrap();
        // Cut off at 150 ms, then 503, then 200.
        assert_eq!(resp.status(), 200);
        assert_eq!(info(&resp).attempts, 3);
        assert!(started.elapsed() < Duration::from_secs(1));
        // This request allows only one attempt.
        let resp = c
            .get(s.url("/"))
            .with_extension(CallOptions {
                policy: Some(policy(1)),
                ..Default::default()
            })
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(info(&resp).attempts, 1);
    })
    .await;
}

#[tokio::test]
async fn a_refused_connection_is_retried_and_reported() {
    bounded(LIMIT, async {
        let l = common::free_port().await;
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = client(RetryMiddleware::new(policy(3)));
        let req = c.get(format!("http://{addr}/")).build().unwrap();
        let mut ext = http::Extensions::new();
        let err = c.execute_with_extensions(req, &mut ext).await.unwrap_err();
        assert!(err.is_connect());
        let i = ext.get::<RetryInfo>().unwrap();
        assert_eq!((i.attempts, i.reason), (3, StopReason::AttemptsExhausted));
    })
    .await;
}

/// With `.send()` a failed call lost its report: the error is reqwest's
/// own and the attempt count lived only in extensions `.send()` keeps to
/// itself. `.send_report()` hands it back on failure and on success.
#[tokio::test]
async fn a_failed_send_still_reports_its_attempts() {
    use stagger::reqwest::SendReport;
    bounded(LIMIT, async {
        let l = common::free_port().await;
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = client(RetryMiddleware::new(policy(3)));
        let sent = c.get(format!("http://{addr}/")).send_report().await;
        assert!(sent.result.as_ref().unwrap_err().is_connect());
        let i = sent.info.expect("the report of a failed call");
        assert_eq!((i.attempts, i.reason), (3, StopReason::AttemptsExhausted));

        let server = Server::start(vec![status(503), status(200)]).await;
        let sent = c.get(server.url("/")).send_report().await;
        assert_eq!(sent.result.unwrap().status(), 200);
        assert_eq!(sent.info.map(|i| i.attempts), Some(2));

        // Without the middleware there is nothing to report.
        let plain = ClientBuilder::new(reqwest::Client::new()).build();
        let sent = plain.get(server.url("/")).send_report().await;
        assert!(sent.info.is_none());
    })
    .await;
}

#[tokio::test]
async fn a_keyed_409_with_retry_after_is_retried_and_its_replay_reported() {
    bounded(LIMIT, async {
        let s = Server::start(vec![
            with_header(409, "retry-after", "1"),
            with_header(200, "idempotent-replayed", "true"),
        ])
        .await;
        let c = client(RetryMiddleware::new(policy(3)));
        let resp = c
            .post(s.url("/api"))
            .header("idempotency-key", "\"k-1\"")
            .body("order")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (2, StopReason::Success));
        assert!(i.replayed, "{i:?}");
        // Never sooner than the server asked.
        assert!(i.waited >= Duration::from_secs(1), "{i:?}");
        assert!(s.gaps()[0] >= Duration::from_secs(1), "{:?}", s.gaps());
    })
    .await;
}

#[tokio::test]
async fn an_unkeyed_409_with_retry_after_is_not_retried_by_reqwest() {
    bounded(LIMIT, async {
        let s = Server::start(vec![with_header(409, "retry-after", "1")]).await;
        let c = client(RetryMiddleware::new(policy(3)));
        let resp = c.put(s.url("/api")).body("order").send().await.unwrap();
        assert_eq!(resp.status(), 409);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert!(!i.replayed);
        assert_eq!(s.hits().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_keyed_409_without_a_hint_is_not_retried_by_reqwest() {
    bounded(LIMIT, async {
        let s = Server::start(vec![status(409)]).await;
        let c = client(RetryMiddleware::new(policy(3)));
        let resp = c
            .post(s.url("/api"))
            .header("idempotency-key", "k-2")
            .body("order")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 409);
        let i = info(&resp);
        assert_eq!((i.attempts, i.reason), (1, StopReason::NotRetryable));
        assert_eq!(s.hits().len(), 1);
    })
    .await;
}
