//! `stagger http` end to end: the binary against a scripted server on
//! 127.0.0.1; exit codes, output and the JSON shape.

use std::collections::VecDeque;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Response, StatusCode};
use axum::Router;

/// One scripted answer: status, headers, delay before answering.
type Answer = (u16, Vec<(&'static str, String)>, Duration);
type Script = Arc<Mutex<VecDeque<Answer>>>;

struct Server {
    url: String,
    seen: Arc<Mutex<Vec<(Instant, HeaderMap)>>>,
}

async fn start(script: Vec<Answer>) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let script: Script = Arc::new(Mutex::new(script.into()));
    let seen: Arc<Mutex<Vec<(Instant, HeaderMap)>>> = Arc::default();
    let s2 = seen.clone();
    let app = Router::new().fallback(move |req: Request| {
        let script = script.clone();
        let seen = s2.clone();
        async move {
            seen.lock()
                .unwrap()
                .push((Instant::now(), req.headers().clone()));
            let next = script.lock().unwrap().pop_front();
            let (code, headers, delay) = next.unwrap_or((200, vec![], Duration::ZERO));
            tokio::time::sleep(delay).await;
            let mut resp = Response::new(Body::from(format!("body {code}")));
            *resp.status_mut() = StatusCode::from_u16(code).unwrap();
            for (k, v) in headers {
                resp.headers_mut().insert(k, v.parse().unwrap());
            }
            resp
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Server { url, seen }
}

async fn stagger(args: Vec<String>) -> Output {
    tokio::time::timeout(
        Duration::from_secs(20),
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_stagger"))
                .arg("http")
                .args(args)
                .output()
                .unwrap()
        }),
    )
    .await
    .expect("stagger http took too long")
    .unwrap()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_then_200_exits_0_and_prints_the_body() {
    let _quiet = crate::support::quiet();
    let s = start(vec![(503, vec![], Duration::ZERO)]).await;
    let out = stagger(args(&[&s.url, "--base", "10ms", "-v"])).await;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "body 200");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("attempt 1: HTTP 503"), "{err}");
    assert!(err.contains("waiting"), "{err}");
    assert_eq!(s.seen.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_has_the_documented_shape() {
    let _quiet = crate::support::quiet();
    let s = start(vec![(
        429,
        vec![("retry-after", "1".into())],
        Duration::ZERO,
    )])
    .await;
    let out = stagger(args(&[&s.url, "--base", "10ms", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "attempts",
            "elapsed_ms",
            "final_status",
            "idempotency_key",
            "not_retried",
            "replayed",
            "stop_reason"
        ]
    );
    assert_eq!(v["final_status"], 200);
    assert_eq!(v["stop_reason"], "success");
    assert!(v["idempotency_key"].is_null());
    assert_eq!(v["replayed"], false);
    let a = v["attempts"].as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["attempt"], 1);
    assert_eq!(a[0]["status"], 429);
    assert!(a[0]["error"].is_null());
    assert_eq!(a[0]["hint_ms"], 1000);
    assert!(a[0]["delay_ms"].as_u64().unwrap() >= 1000);
    // No wait follows the last attempt: null, as in `stagger run`.
    assert!(a[1]["delay_ms"].is_null());
    let seen = s.seen.lock().unwrap();
    assert!(seen[1].0 - seen[0].0 >= Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_http_error_exits_22() {
    let _quiet = crate::support::quiet();
    let s = start(vec![(404, vec![], Duration::ZERO)]).await;
    let out = stagger(args(&[&s.url, "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(22));
    let v = json(&out);
    assert_eq!(v["final_status"], 404);
    assert_eq!(v["stop_reason"], "not_retryable");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_connection_exits_7() {
    let _quiet = crate::support::quiet();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", l.local_addr().unwrap());
    drop(l);
    let out = stagger(args(&[&url, "--base", "1ms", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(7));
    let v = json(&out);
    assert!(v["final_status"].is_null());
    assert_eq!(v["stop_reason"], "attempts_exhausted");
    assert!(v["attempts"][0]["error"]
        .as_str()
        .unwrap()
        .contains("onnect"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_or_the_deadline_exits_28() {
    let _quiet = crate::support::quiet();
    let s = start(vec![(200, vec![], Duration::from_secs(3))]).await;
    let out = stagger(args(&[
        &s.url,
        "--attempts",
        "1",
        "--attempt-timeout",
        "100ms",
    ]))
    .await;
    assert_eq!(out.status.code(), Some(28));
    let s = start(vec![(
        503,
        vec![("retry-after", "30".into())],
        Duration::ZERO,
    )])
    .await;
    let started = Instant::now();
    let out = stagger(args(&[&s.url, "--deadline", "2s", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(28));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(json(&out)["stop_reason"], "deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_retried_only_with_a_key() {
    let _quiet = crate::support::quiet();
    let s = start(vec![
        (503, vec![], Duration::ZERO),
        (503, vec![], Duration::ZERO),
    ])
    .await;
    let out = stagger(args(&[&s.url, "-d", "x=1", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(22));
    assert_eq!(json(&out)["attempts"].as_array().unwrap().len(), 1);
    let out = stagger(args(&[
        &s.url,
        "-d",
        "x=1",
        "--idempotency-key",
        "auto",
        "--base",
        "5ms",
        "--format",
        "json",
    ]))
    .await;
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    // The key itself, without the header's quotes.
    let key = v["idempotency_key"].as_str().unwrap().to_string();
    assert_eq!(key.len(), 36, "{key}");
    let key = format!("\"{key}\"");
    let seen = s.seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    for (_, h) in &seen[1..] {
        assert_eq!(h["idempotency-key"].to_str().unwrap(), key);
        assert_eq!(h["content-length"], "3");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_usage_exits_2() {
    let _quiet = crate::support::quiet();
    for a in [
        vec!["http://127.0.0.1:1/", "-H", "nocolon"],
        vec!["not a url"],
        vec!["http://127.0.0.1:1/", "--attempts", "0"],
        vec!["http://127.0.0.1:1/", "--base", "soon"],
        vec!["http://127.0.0.1:1/", "-X", "GE T"],
    ] {
        let out = stagger(args(&a)).await;
        assert_eq!(
            out.status.code(),
            Some(2),
            "{a:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_409_with_retry_after_is_retried_and_the_replay_reported() {
    let _quiet = crate::support::quiet();
    let s = start(vec![
        (409, vec![("retry-after", "1".into())], Duration::ZERO),
        (
            200,
            vec![("idempotent-replayed", "true".into())],
            Duration::ZERO,
        ),
        // The same 409 to a call without a key.
        (409, vec![("retry-after", "1".into())], Duration::ZERO),
    ])
    .await;
    let keyed = [
        "-X",
        "POST",
        "--data-binary",
        "order",
        "--idempotency-key",
        "k-1",
        "--base",
        "10ms",
        "--format",
        "json",
    ];
    let out = stagger(args(&[&[s.url.as_str()][..], &keyed[..]].concat())).await;
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["attempts"][0]["hint_ms"], 1000, "{v}");
    assert_eq!(v["replayed"], true, "{v}");
    let out = stagger(args(&[&s.url, "-X", "PUT", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(22));
    let v = json(&out);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["replayed"], false, "{v}");
    assert_eq!(s.seen.lock().unwrap().len(), 3);
}

/// A POST without a key on a 503 is sent once; the report used to say only
/// "stop: not_retryable". The JSON names why and the error line points to
/// `--idempotency-key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unkeyed_post_not_retried_says_why_and_names_the_key_flag() {
    let _quiet = crate::support::quiet();
    let s = start(vec![(503, vec![], Duration::ZERO)]).await;
    let out = stagger(args(&[&s.url, "-X", "POST", "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(22));
    let v = json(&out);
    assert_eq!(v["stop_reason"], "not_retryable");
    assert_eq!(v["not_retried"], "not_idempotent");
    let s = start(vec![(503, vec![], Duration::ZERO)]).await;
    let out = stagger(args(&[&s.url, "-X", "POST"])).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not_idempotent"), "{err}");
    assert!(err.contains("--idempotency-key auto"), "{err}");
}
