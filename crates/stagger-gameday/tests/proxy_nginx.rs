//! The fault proxy in front of a real nginx: what the proxy counts is what
//! nginx logged (nothing lost, nothing invented), over HTTP/1.1 and h2c,
//! and each fault does to a client what it says.

#[path = "support/nginx.rs"]
mod nginx;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use stagger_gameday::fault;
use stagger_gameday::proxy::{self, Config, Proxy};

fn config(upstream: &str, faults: &[&str]) -> Config {
    let mut c = Config::new(
        "127.0.0.1:0".parse().unwrap(),
        proxy::upstream("UPSTREAM", upstream).unwrap(),
    );
    c.faults = faults.iter().map(|f| fault::parse(f).unwrap()).collect();
    c.span = Duration::from_secs(30);
    c
}

fn h2_client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// Request `i`'s key: each key is used twice, so every odd request is a
/// retry by its key; every fifth also says so in `x-retry-attempt`.
fn key(i: usize) -> String {
    format!("k-{}", i / 2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_or_invented_between_the_proxy_and_nginx() {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    // 503 from 0.6 s to 1.2 s of a ~1.8 s run over HTTP/1.1, then h2c.
    let p = Proxy::start(config(&nginx.url(), &["503@600ms+600ms"]))
        .await
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("http://{}/work", p.addr);
    let (mut sent, mut retries, mut got_503, mut got_200) = (0u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    for i in 0..60 {
        let mut req = http
            .post(&url)
            .header("idempotency-key", key(i))
            .body("order");
        if i % 5 == 0 {
            req = req.header("x-retry-attempt", "2");
        }
        if i % 2 == 1 || i % 5 == 0 {
            retries += 1;
        }
        let resp = req.send().await.unwrap();
        sent += 1;
        match resp.status().as_u16() {
            200 => got_200 += 1,
            503 => {
                assert_eq!(resp.headers()["retry-after"], "1");
                got_503 += 1;
            }
            s => panic!("unexpected status {s}"),
        }
        tokio::time::sleep_until((start + Duration::from_millis(30 * (i as u64 + 1))).into()).await;
    }
    // h2c: 20 requests on one HTTP/2 connection, first attempts only, to
    // a second proxy in front of nginx's h2c port (nginx 1.22 serves h2c
    // and HTTP/1.1 on different ports; the proxy speaks to the upstream
    // in the client's version).
    let p2 = Proxy::start(config(&format!("http://{}", nginx.h2), &[]))
        .await
        .unwrap();
    let h2 = h2_client();
    for _ in 0..20 {
        let req = http::Request::post(format!("http://{}/h2", p2.addr))
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap();
        let resp = h2.request(req).await.unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"applied\n");
        sent += 1;
        got_200 += 1;
    }
    let r = p.report();
    let r2 = p2.report();
    p.stop();
    p2.stop();
    assert_eq!((r2.arrivals(), r2.forwarded, r2.upstream_ok), (20, 20, 20));
    assert!(got_503 > 5 && got_200 > 20, "503 {got_503}, 200 {got_200}");
    let log = nginx.log();
    assert_eq!(
        r.arrivals() + r2.arrivals(),
        sent,
        "every request counted once"
    );
    assert_eq!(r.retries, retries);
    assert_eq!(r.answered_503, got_503);
    assert_eq!(
        r.forwarded + r2.forwarded,
        got_200,
        "forwarded = answered by nginx"
    );
    assert_eq!(
        log.len() as u64,
        r.forwarded + r2.forwarded,
        "nginx served what was forwarded"
    );
    assert_eq!(
        r.upstream_ok + r2.upstream_ok,
        log.iter().filter(|l| l.status == 200).count() as u64
    );
    let h2_logged = log.iter().filter(|l| l.protocol == "HTTP/2.0").count();
    assert_eq!(h2_logged, 20, "h2c arrives at nginx as HTTP/2");
    // The headers arrived unchanged: every logged key is one we sent.
    let with_attempt = log
        .iter()
        .filter(|l| l.retry_attempt.as_deref() == Some("2"))
        .count() as u64;
    assert!(with_attempt > 0);
    assert!(log
        .iter()
        .filter(|l| l.protocol == "HTTP/1.1")
        .all(|l| l.method == "POST"
            && l.uri == "/work"
            && l.key.as_deref().is_some_and(|k| k.starts_with("k-"))));
    // The histogram holds the same arrivals, bin by bin.
    let binned: u32 = r
        .series
        .first_attempts
        .iter()
        .chain(&r.series.retries)
        .sum();
    assert_eq!(u64::from(binned), r.arrivals());
}

async fn status(
    http: &reqwest::Client,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<u16, String> {
    http.get(format!("http://{addr}/"))
        .timeout(timeout)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| {
            if e.is_timeout() {
                "timeout".to_string()
            } else if e.is_connect() {
                "connect".to_string()
            } else {
                "broken".to_string()
            }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_does_what_it_says_and_clears_on_time() {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    // One fault per 400 ms slot.
    let p = Proxy::start(config(
        &nginx.url(),
        &[
            "stall@0+400ms",
            "slow:200@400ms+400ms",
            "reset@800ms+400ms",
            "blackhole@1200ms+400ms",
            "failover@1600ms+400ms",
        ],
    ))
    .await
    .unwrap();
    let t0 = Instant::now();
    let at = |ms: u64| tokio::time::sleep_until((t0 + Duration::from_millis(ms)).into());
    // A fresh client per step: a pooled connection would hide a failover.
    let client = || {
        reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let long = Duration::from_secs(3);

    at(50).await;
    let sent = Instant::now();
    assert_eq!(status(&client(), p.addr, long).await, Ok(200));
    let held = sent.elapsed();
    assert!(
        held >= Duration::from_millis(300),
        "a stall holds until it ends: {held:?}"
    );

    at(450).await;
    let sent = Instant::now();
    assert_eq!(status(&client(), p.addr, long).await, Ok(200));
    assert!(
        sent.elapsed() >= Duration::from_millis(200),
        "slow:200 adds 200 ms"
    );

    at(850).await;
    assert_eq!(
        status(&client(), p.addr, long).await,
        Err("broken".into()),
        "reset: no answer"
    );

    at(1250).await;
    let e = status(&client(), p.addr, Duration::from_millis(250)).await;
    assert_eq!(e, Err("timeout".into()), "blackhole: never answered");

    at(1700).await;
    assert_eq!(
        status(&client(), p.addr, long).await,
        Err("connect".into()),
        "failover refuses"
    );

    at(2150).await;
    assert_eq!(
        status(&client(), p.addr, long).await,
        Ok(200),
        "listening again"
    );
    let r = p.report();
    p.stop();
    assert_eq!((r.stalled, r.slowed, r.reset, r.failovers), (1, 1, 1, 1));
    assert!(r.blackholed >= 1);
    // The reset request was the first of its fault: forwarded before the
    // reset, so nginx served it although the client got no answer.
    assert_eq!(nginx.log().len() as u64, r.forwarded);
    assert_eq!(r.forwarded, 4);
}

/// Under a blackhole the histogram showed 0 arrivals in the fault's second,
/// and a request whose first attempt went into it counted as "0 first
/// attempts, 1 retry": the proxy never read what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_first_attempt_is_an_arrival_of_its_second() {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let p = Proxy::start(config(&nginx.url(), &["blackhole@0+600ms"]))
        .await
        .unwrap();
    let http = || reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("http://{}/", p.addr);
    let t0 = Instant::now();
    let first = http()
        .get(&url)
        .header("x-retry-attempt", "1")
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(first.unwrap_err().is_timeout(), "blackhole: never answered");
    tokio::time::sleep_until((t0 + Duration::from_millis(800)).into()).await;
    let retry = http()
        .get(&url)
        .header("x-retry-attempt", "2")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 200);
    let r = p.report();
    p.stop();
    assert_eq!((r.first_attempts, r.retries), (1, 1), "one of each");
    let held = r.series.first_attempts.iter().position(|&n| n > 0).unwrap();
    assert!(
        (held as u64) * r.bin_ms < 300,
        "the first attempt arrived at {} ms",
        held as u64 * r.bin_ms
    );
    assert_eq!(nginx.log().len(), 1, "only the retry reached nginx");
}
