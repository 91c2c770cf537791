//! `stagger gameday --target`: the game-day's fleet against a server nobody
//! here wrote (Debian's nginx, started by the test on 127.0.0.1), through
//! the embedded fault proxy, at a short drill shape: 400 thin pods, 200
//! requests/s, a 2 s stall at 3 s of 8 s.
//!
//! Measured on this 2-core machine (debug build): `none` about 81 %
//! success; `full+budget+breaker` about 84 %, amplification 1.2, recovered
//! about 1 s after the stall. The bounds below are the (recovery
//! within 2 s, amplification ≤ 1.3, success at least `none`'s) with a
//! margin of 3 points on success for timer slip.

mod common;

#[path = "../../stagger-lab/tests/support/nginx.rs"]
mod nginx;

use std::time::Duration;

use common::{code, stagger, stagger_with, TempDir};
use serde_json::Value;

fn row<'a>(v: &'a Value, strategy: &str) -> &'a Value {
    v["strategies"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == strategy))
        .unwrap_or_else(|| panic!("no row for {strategy}: {v}"))
}

#[test]
fn the_guarded_preset_recovers_from_a_stall_in_front_of_nginx() {
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let dir = TempDir::new("gameday-target");
    let target = format!("{}/work", nginx.url());
    let done = stagger_with(
        &[
            "gameday",
            "--drill",
            "--target",
            &target,
            "--duration",
            "8s",
            "--fault-at",
            "3s",
            "--strategy",
            "none,full+budget+breaker",
            "--format",
            "json",
        ],
        &dir,
        None,
        Duration::from_secs(60),
    );
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["params"]["target"], target.as_str());
    let none = row(&v, "none");
    let guarded = row(&v, "full+budget+breaker");
    let success = |r: &Value| r["request_success"].as_f64().unwrap();
    let ampl = guarded["amplification"].as_f64().unwrap();
    let recovery = guarded["recovery_s"].as_f64();
    assert!(
        recovery.is_some_and(|r| r <= 2.0),
        "recovered within 2 s of the stall: {recovery:?}"
    );
    assert!(ampl <= 1.3, "amplification {ampl}");
    assert!(
        success(guarded) >= success(none) - 0.03,
        "guarded {} against none {}",
        success(guarded),
        success(none)
    );
    assert!(
        success(none) > 0.5,
        "nginx served the fleet: {}",
        success(none)
    );
    // The stall held requests: nothing was retried without a fault.
    assert_eq!(none["retries"], 0);
    // nginx served no more than arrived at the proxy, and at least every
    // success the clients saw.
    let log = nginx.log();
    let arrived: u64 = [none, guarded]
        .iter()
        .map(|r| r["attempts"].as_u64().unwrap())
        .sum();
    let requests: f64 = [none, guarded]
        .iter()
        .map(|r| r["requests"].as_f64().unwrap() * success(r))
        .sum();
    assert!(log.len() as u64 <= arrived, "{} > {arrived}", log.len());
    assert!(
        log.len() as f64 >= requests.floor(),
        "{} < {requests}",
        log.len()
    );
    assert!(log.iter().all(|l| l.method == "POST" && l.uri == "/work"));
}

#[test]
fn a_bad_target_is_a_usage_error_naming_the_flag() {
    let dir = TempDir::new("gameday-target-bad");
    for (args, says) in [
        (&["--target", "ftp://127.0.0.1:1/x"][..], "--target: "),
        (&["--target", "127.0.0.1:1"][..], "--target: "),
        (
            &["--target", "http://127.0.0.1:1/work", "--shed-retries"][..],
            "--target: --shed-retries",
        ),
    ] {
        let mut all = vec!["gameday", "--duration", "10s"];
        all.extend_from_slice(args);
        let done = stagger(&all, &dir);
        assert_eq!(code(&done), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(says), "{args:?}: {}", done.stderr);
    }
}
