//! `stagger grpc health` against a grpcio health server scripted to fail
//! (Python, `crates/stagger/tests/interop/fault_server.py`).

use crate::interop;

use std::process::{Command, Output};

use interop::{python, FaultServer};
use serde_json::Value;

fn probe(port: u16, extra: &[&str]) -> (Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_stagger"))
        .args([
            "grpc",
            "health",
            &format!("127.0.0.1:{port}"),
            "--format",
            "json",
        ])
        .args(extra)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, v)
}

fn statuses(v: &Value) -> Vec<String> {
    v["attempts"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x["grpc_status"].as_str().unwrap_or("-").to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn grpcio_unavailable_then_serving_exits_0() {
    let _quiet = crate::support::quiet();
    let Some(py) = python() else { return };
    let server = FaultServer::start(&py, "unavailable,pushback:50");
    let (out, v) = probe(server.port, &["--base", "10ms"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(statuses(&v), ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
    assert_eq!(v["attempts"][1]["pushback_ms"], 50);
    assert_eq!(v["attempts"][1]["delay_ms"], 50);
    assert_eq!(v["status"], "SERVING");
}

#[test]
fn grpcio_failure_after_headers_exits_3_without_retrying() {
    let _quiet = crate::support::quiet();
    let Some(py) = python() else { return };
    let server = FaultServer::start(&py, "after_headers");
    let (out, v) = probe(server.port, &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(statuses(&v), ["UNAVAILABLE"]);
    assert_eq!(server.requests(1).len(), 1);
}

#[test]
fn grpcio_resource_exhausted_exits_3() {
    let _quiet = crate::support::quiet();
    let Some(py) = python() else { return };
    let server = FaultServer::start(&py, "exhausted");
    let (out, v) = probe(server.port, &[]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(statuses(&v), ["RESOURCE_EXHAUSTED"]);
}

#[test]
fn grpcio_slow_past_the_deadline_exits_3() {
    let _quiet = crate::support::quiet();
    let Some(py) = python() else { return };
    let server = FaultServer::start(&py, "slow:3000");
    let (out, v) = probe(server.port, &["--deadline", "300ms"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(v["stop_reason"], "deadline");
}
