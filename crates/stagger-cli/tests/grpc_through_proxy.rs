//! gRPC through the fault proxy: `stagger grpc health` against tonic-health
//! on 127.0.0.1 with `stagger_lab::proxy` (h2c) between them. The probe's
//! A6 retries arrive with `grpc-previous-rpc-attempts` and are counted as
//! retries; the status, carried in trailers, comes through.

#[path = "../../stagger/tests/grpc_support/mod.rs"]
mod grpc_support;

use std::time::Duration;

use grpc_support::{start, Fault, Script};
use stagger_lab::proxy::{self, Config, Proxy};

#[tokio::test(flavor = "multi_thread")]
async fn grpc_retries_through_the_proxy_are_counted_and_the_trailers_pass() {
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
    assert_eq!((r.forwarded, r.upstream_ok), (3, 3));
}
