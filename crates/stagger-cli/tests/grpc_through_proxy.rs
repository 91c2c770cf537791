//! gRPC through the fault proxy: `stagger grpc health` against tonic-health
//! on 127.0.0.1 with `stagger_gameday::proxy` (h2c) between them. The probe's
//! A6 retries arrive with `grpc-previous-rpc-attempts` and are counted as
//! retries; the status, carried in trailers, comes through.

use crate::grpc_support;

use std::time::Duration;

use grpc_support::{start, Fault, Script};
use stagger_gameday::proxy::{self, Config, Proxy};

#[tokio::test(flavor = "multi_thread")]
async fn grpc_retries_through_the_proxy_are_counted_and_the_trailers_pass() {
    let _turn = crate::support::quiet();
    let script = Script::new([Fault::TrailersOnly(14, None), Fault::TrailersOnly(14, None)]);
    let upstream = start(script).await;
    let cfg = Config::new(
        "127.0.0.1:0".parse().unwrap(),
        proxy::upstream("UPSTREAM", &format!("http://{upstream}")).unwrap(),
    );
    let p = Proxy::start(cfg).await.unwrap();
    let bin = env!("CARGO_BIN_EXE_stagger");
    let addr = p.addr.to_string();
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args([
                "grpc", "health", &addr, "--format", "json", "--base", "10ms",
            ])
            .output()
            .unwrap()
    });
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the probe finished")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "SERVING", "{v}");
    let r = p.report();
    p.stop();
    assert_eq!((r.first_attempts, r.retries), (1, 2), "{r:?}");
    assert_eq!(r.retries_by.grpc_previous_rpc_attempts, 2);
    // Two UNAVAILABLE answers (HTTP 200) and one OK: only the OK is "ok".
    assert_eq!((r.forwarded, r.upstream_ok), (3, 1), "{r:?}");
    assert_eq!(r.upstream_grpc_errors, 2);
    let by: Vec<(&str, u64)> = r
        .grpc_status
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(by, [("OK", 1), ("UNAVAILABLE", 2)]);
    assert!(
        stagger_report::proxy::text(&r).contains("gRPC calls by grpc-status: OK 1, UNAVAILABLE 2")
    );
}

/// The proxy counted gRPC UNAVAILABLE (HTTP 200 + grpc-status 14) as
/// `upstream 2xx`; this one comes in the trailers, after a message.
#[tokio::test(flavor = "multi_thread")]
async fn grpc_unavailable_in_the_trailers_is_not_counted_as_ok() {
    let _turn = crate::support::quiet();
    let upstream = start(Script::new([Fault::AfterHeaders(14)])).await;
    let cfg = Config::new(
        "127.0.0.1:0".parse().unwrap(),
        proxy::upstream("UPSTREAM", &format!("http://{upstream}")).unwrap(),
    );
    let p = Proxy::start(cfg).await.unwrap();
    let bin = env!("CARGO_BIN_EXE_stagger");
    let addr = p.addr.to_string();
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin)
            .args([
                "grpc",
                "health",
                &addr,
                "--attempts",
                "1",
                "--format",
                "json",
            ])
            .output()
            .unwrap()
    });
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the probe finished")
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let r = p.report();
    p.stop();
    assert_eq!(
        (r.forwarded, r.upstream_ok, r.upstream_grpc_errors),
        (1, 0, 1),
        "{r:?}"
    );
    assert_eq!(r.grpc_status.get("UNAVAILABLE"), Some(&1));
    assert_eq!(r.series.upstream_ok.iter().sum::<u32>(), 0);
}

/// An HTTP/1.1 request to an h2c-only upstream was answered
/// `502 … (stagger proxy fault)` though no fault was asked for; then, on
/// a busy machine, `operation was canceled` or `received unexpected
/// message from connection`, as hyper's client lost one race or another:
/// the answer must name the upstream as HTTP/2-only whichever way hyper
/// told it.
#[tokio::test(flavor = "multi_thread")]
async fn an_http1_request_to_an_h2c_only_upstream_is_not_called_a_fault() {
    let _turn = crate::support::quiet();
    let upstream = start(Script::new([])).await;
    let cfg = Config::new(
        "127.0.0.1:0".parse().unwrap(),
        proxy::upstream("UPSTREAM", &format!("http://{upstream}")).unwrap(),
    );
    let p = Proxy::start(cfg).await.unwrap();
    let url = format!("http://{}/grpc.health.v1.Health/Check", p.addr);
    let resp = reqwest::Client::builder()
        .http1_only()
        .build()
        .unwrap()
        .post(&url)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap();
    let r = p.report();
    p.stop();
    assert_eq!(status, 502, "{body}");
    assert!(!body.contains("fault)"), "{body}");
    assert!(body.contains("no fault was injected"), "{body}");
    assert!(body.contains("the upstream speaks HTTP/2 only"), "{body}");
    assert_eq!(r.upstream_errors, 1);
    let why = r.first_upstream_error.unwrap_or_default();
    assert!(why.contains("the upstream speaks HTTP/2 only"), "{why}");
    assert!(
        body.contains(&why),
        "the answer and the report agree: {body}"
    );
}
