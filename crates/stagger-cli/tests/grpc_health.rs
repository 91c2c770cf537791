//! `stagger grpc health` against tonic-health on 127.0.0.1 behind a
//! scripted fault layer: exit codes, the JSON, retries and their limits.

use crate::grpc_support;

use std::process::Output;
use std::time::Duration;

use grpc_support::{start, Fault, Script};
use serde_json::Value;

/// Runs the binary without blocking the runtime the server lives on.
async fn stagger(args: Vec<String>) -> Output {
    let bin = env!("CARGO_BIN_EXE_stagger");
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new(bin).args(args).output().unwrap()
    });
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the probe finished")
        .unwrap()
}

fn args(addr: impl ToString, extra: &[&str]) -> Vec<String> {
    let mut v = vec!["grpc".to_string(), "health".into(), addr.to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_exits_0() {
    let _quiet = crate::support::quiet();
    let addr = start(Script::default()).await;
    let out = stagger(args(addr, &[])).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "status: SERVING"
    );
    let out = stagger(args(format!("http://{addr}"), &["--service", "shop"])).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unavailable_is_retried_and_the_json_lists_each_attempt() {
    let _quiet = crate::support::quiet();
    let script = Script::new([Fault::TrailersOnly(14, None), Fault::TrailersOnly(14, None)]);
    let addr = start(script.clone()).await;
    let out = stagger(args(addr, &["--format", "json", "--base", "10ms"])).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v = json(&out);
    assert_eq!(v["status"], "SERVING");
    assert_eq!(v["stop_reason"], "success");
    assert!(v["elapsed_ms"].is_u64());
    let attempts = v["attempts"].as_array().unwrap();
    let statuses: Vec<&str> = attempts
        .iter()
        .map(|a| a["grpc_status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
    // 10 ms ×2 with ±20 %: 8–12 ms, then 16–24 ms; none after the last.
    let d1 = attempts[0]["delay_ms"].as_u64().unwrap();
    let d2 = attempts[1]["delay_ms"].as_u64().unwrap();
    assert!(
        (8..=12).contains(&d1) && (16..=24).contains(&d2),
        "{d1} {d2}"
    );
    assert!(attempts[2]["delay_ms"].is_null());
    assert!(attempts.iter().all(|a| a["pushback_ms"].is_null()));
    let keys: Vec<&String> = attempts[0].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 4);
    assert_eq!(script.received().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn not_serving_exits_4() {
    let _quiet = crate::support::quiet();
    let addr = start(Script::default()).await;
    let out = stagger(args(addr, &["--service", "down", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert_eq!(json(&out)["status"], "NOT_SERVING");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_rpc_exits_3() {
    let _quiet = crate::support::quiet();
    // An unknown service: NOT_FOUND, not retried.
    let addr = start(Script::default()).await;
    let out = stagger(args(addr, &["--service", "nobody", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v = json(&out);
    assert!(v["status"].is_null());
    assert_eq!(v["attempts"][0]["grpc_status"], "NOT_FOUND");
    assert_eq!(v["stop_reason"], "not_retryable");
}

#[tokio::test(flavor = "multi_thread")]
async fn pushback_minus_one_stops_at_once() {
    let _quiet = crate::support::quiet();
    let script = Script::new([Fault::TrailersOnly(14, Some("-1"))]);
    let addr = start(script.clone()).await;
    let out = stagger(args(addr, &["--format", "json"])).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let v = json(&out);
    assert_eq!(v["attempts"][0]["pushback_ms"], -1);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(script.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_run_out_with_exit_3() {
    let _quiet = crate::support::quiet();
    let script = Script::new([Fault::TrailersOnly(14, None); 5]);
    let addr = start(script.clone()).await;
    let out = stagger(args(
        addr,
        &["--format", "json", "--attempts", "3", "--base", "1ms"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(json(&out)["stop_reason"], "attempts_exhausted");
    assert_eq!(script.received().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_server_meets_the_deadline_with_exit_3() {
    let _quiet = crate::support::quiet();
    let script = Script::new([Fault::Slow(Duration::from_secs(10))]);
    let addr = start(script).await;
    let out = stagger(args(addr, &["--format", "json", "--deadline", "300ms"])).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(json(&out)["stop_reason"], "deadline");
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_listening_exits_2() {
    let _quiet = crate::support::quiet();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let out = stagger(args(addr, &["--deadline", "1s", "--base", "10ms"])).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connect_timeout_exits_2() {
    let _quiet = crate::support::quiet();
    // A port that accepts nothing: its backlog is full, so connecting hangs
    // until the connect timeout.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let socket = socket2_free_backlog(&listener);
    // The first attempt's connect times out; the deadline ends the second
    // while it is still connecting.
    let out = stagger(args(
        addr,
        &[
            "--connect-timeout",
            "300ms",
            "--deadline",
            "500ms",
            "--base",
            "10ms",
        ],
    ))
    .await;
    drop(socket);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// Fills the listener's accept backlog with connections nobody accepts,
/// so that one more connect hangs (Linux drops the SYN of a full queue).
fn socket2_free_backlog(listener: &std::net::TcpListener) -> Vec<std::net::TcpStream> {
    let addr = listener.local_addr().unwrap();
    let mut held = Vec::new();
    for _ in 0..512 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50)) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    held
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_configs_policy_applies() {
    let _quiet = crate::support::quiet();
    let dir = std::env::temp_dir().join(format!("stagger-grpc-health-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("retry.json");
    std::fs::write(
        &path,
        r#"{"methodConfig":[{"name":[{"service":"grpc.health.v1.Health","method":"Check"}],
        "retryPolicy":{"maxAttempts":2,"initialBackoff":"0.01s","maxBackoff":"0.1s",
        "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#,
    )
    .unwrap();
    let script = Script::new([Fault::TrailersOnly(14, None); 3]);
    let addr = start(script.clone()).await;
    let out = stagger(args(addr, &["--service-config", path.to_str().unwrap()])).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(script.received().len(), 2);
    // A bad file is bad usage, naming the flag.
    std::fs::write(
        &path,
        r#"{"methodConfig":[{"retryPolicy":{"maxAttempts":1}}]}"#,
    )
    .unwrap();
    let out = stagger(args(addr, &["--service-config", path.to_str().unwrap()])).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--service-config"));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_usage_exits_1() {
    let _quiet = crate::support::quiet();
    for bad in [
        args("127.0.0.1:1", &["--attempts", "x"]),
        args("127.0.0.1:1", &["--deadline", "soon"]),
        args("no-port", &[]),
        args("127.0.0.1:1", &["--attempts", "0"]),
        vec!["grpc".into(), "health".into()],
    ] {
        let out = stagger(bad.clone()).await;
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {out:?}");
        assert!(!out.stderr.is_empty());
    }
    let out = stagger(vec!["grpc".into(), "health".into(), "--help".into()]).await;
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Exit status:"));
}

/// A port with nothing listening on it.
fn closed_port() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_1_against_a_closed_port_connects_once_and_exits_2_at_once() {
    let _quiet = crate::support::quiet();
    let addr = closed_port();
    let started = std::time::Instant::now();
    let out = stagger(args(addr, &["--attempts", "1", "--format", "json"])).await;
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let v = json(&out);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v}");
    assert!(took < Duration::from_secs(2), "took {took:?}: {v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_bound_every_connect_a_refused_one_included() {
    let _quiet = crate::support::quiet();
    let addr = closed_port();
    let out = stagger(args(
        addr,
        &["--attempts", "3", "--base", "10ms", "--format", "json"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let v = json(&out);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 3, "{v}");
    assert_eq!(v["stop_reason"], "attempts_exhausted", "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn deadline_0_is_no_limit() {
    let _quiet = crate::support::quiet();
    let script = Script::new([Fault::Slow(Duration::from_millis(300))]);
    let addr = start(script).await;
    let out = stagger(args(addr, &["--deadline", "0", "--connect-timeout", "0"])).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "status: SERVING"
    );
}
