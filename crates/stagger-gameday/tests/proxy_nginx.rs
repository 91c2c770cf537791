//! The fault proxy in front of a real nginx: what the proxy counts is what
//! nginx logged (nothing lost, nothing invented), over HTTP/1.1 and h2c,
//! and each fault does to a client what it says.

use crate::nginx;

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
    let log = nginx.log_of(got_200 as usize);
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

/// Each fault in a proxy of its own, so no check depends on a request
/// arriving inside a slot of a shared schedule (with 400 ms slots, a busy
/// machine sent the blackhole's request late enough to meet the fault's
/// end). The faults that must clear have an end; the others hold for the
/// whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_does_what_it_says_and_clears_on_time() {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    // A fresh client per request: a pooled connection would hide a failover.
    let client = || {
        reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let long = Duration::from_secs(3);
    let mut forwarded = 0;

    // A stall holds a request until it ends: not answered before the
    // stall's end, counted from before the proxy started.
    let before = Instant::now();
    let p = Proxy::start(config(&nginx.url(), &["stall@0+1s"]))
        .await
        .unwrap();
    assert_eq!(status(&client(), p.addr, long).await, Ok(200));
    assert!(
        before.elapsed() >= Duration::from_secs(1),
        "held to the end"
    );
    let r = p.report();
    p.stop();
    assert_eq!((r.stalled, r.forwarded), (1, 1), "{r:?}");
    forwarded += r.forwarded;

    let p = Proxy::start(config(&nginx.url(), &["slow:200"]))
        .await
        .unwrap();
    let sent = Instant::now();
    assert_eq!(status(&client(), p.addr, long).await, Ok(200));
    assert!(
        sent.elapsed() >= Duration::from_millis(200),
        "slow:200 adds 200 ms"
    );
    let r = p.report();
    p.stop();
    assert_eq!((r.slowed, r.forwarded), (1, 1), "{r:?}");
    forwarded += r.forwarded;

    // The first request of a reset is forwarded before the reset: nginx
    // serves it although the client gets no answer.
    let p = Proxy::start(config(&nginx.url(), &["reset"]))
        .await
        .unwrap();
    assert_eq!(
        status(&client(), p.addr, long).await,
        Err("broken".into()),
        "reset: no answer"
    );
    let r = p.report();
    p.stop();
    assert_eq!((r.reset, r.forwarded), (1, 1), "{r:?}");
    forwarded += r.forwarded;

    let p = Proxy::start(config(&nginx.url(), &["blackhole"]))
        .await
        .unwrap();
    let e = status(&client(), p.addr, Duration::from_millis(250)).await;
    assert_eq!(e, Err("timeout".into()), "blackhole: never answered");
    let r = p.report();
    p.stop();
    assert!(r.blackholed >= 1, "{r:?}");
    assert_eq!(r.forwarded, 0);

    // A failover closes the listener (the report counts it once it has)
    // and opens it again when it ends, not before.
    let before = Instant::now();
    let p = Proxy::start(config(&nginx.url(), &["failover@0+1s"]))
        .await
        .unwrap();
    let waiting = Instant::now();
    while p.report().failovers == 0 {
        assert!(waiting.elapsed() < long, "the failover never began");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        status(&client(), p.addr, long).await,
        Err("connect".into()),
        "failover refuses"
    );
    // Refused until the listener is back (each try a fresh connection),
    // then served: never before the failover's end.
    let back = loop {
        match status(&client(), p.addr, long).await {
            Err(e) if e == "connect" => {
                assert!(before.elapsed() < long * 3, "the listener never came back");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => break other,
        }
    };
    assert_eq!(back, Ok(200), "listening again");
    assert!(
        before.elapsed() >= Duration::from_secs(1),
        "not before its end"
    );
    let r = p.report();
    p.stop();
    assert_eq!((r.failovers, r.forwarded), (1, 1), "{r:?}");
    forwarded += r.forwarded;

    // What the proxies forwarded is what nginx served.
    assert_eq!(nginx.log_of(forwarded as usize).len() as u64, forwarded);
    assert_eq!(forwarded, 4);
}

/// Under a blackhole the histogram showed 0 arrivals in the fault's second,
/// and a request whose first attempt went into it counted as "0 first
/// attempts, 1 retry": the proxy never read what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_first_attempt_is_an_arrival_of_its_second() {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    // The client gives up after 300 ms, long before the blackhole's end
    // (2 s), so the connection is still held when it does, however late
    // a busy machine runs its timer; the retry goes after the end.
    let hole = Duration::from_secs(2);
    let t0 = Instant::now();
    let p = Proxy::start(config(&nginx.url(), &["blackhole@0+2s"]))
        .await
        .unwrap();
    let http = || reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("http://{}/", p.addr);
    let first = http()
        .get(&url)
        .header("x-retry-attempt", "1")
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    let gave_up = t0.elapsed();
    assert!(first.unwrap_err().is_timeout(), "blackhole: never answered");
    tokio::time::sleep_until((t0 + hole + Duration::from_millis(200)).into()).await;
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
    // Binned when it came in: no later than when the client gave up on it.
    let held = r.series.first_attempts.iter().position(|&n| n > 0).unwrap();
    assert!(
        held as u128 * u128::from(r.bin_ms) <= gave_up.as_millis(),
        "the first attempt arrived at {} ms, the client gave up at {gave_up:?}",
        held as u64 * r.bin_ms
    );
    assert_eq!(nginx.log_of(1).len(), 1, "only the retry reached nginx");
}
