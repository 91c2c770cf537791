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

use crate::common;

use crate::nginx;

use std::time::Duration;

use common::{code, stagger, stagger_with, TempDir};
use serde_json::Value;

fn row<'a>(v: &'a Value, strategy: &str) -> &'a Value {
    v["strategies"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == strategy))
        .unwrap_or_else(|| panic!("no row for {strategy}: {v}"))
}

/// The drill shape of POSTs to `target` (a 2 s stall at 3 s of 8 s),
/// JSON on stdout.
fn post_drill(target: &str, strategies: &str, dir: &TempDir) -> common::Done {
    stagger_with(
        &[
            "gameday",
            "--drill",
            "--target",
            target,
            "--method",
            "POST",
            "--duration",
            "8s",
            "--fault-at",
            "3s",
            "--strategy",
            strategies,
            "--format",
            "json",
        ],
        dir,
        None,
        Duration::from_secs(60),
    )
}

#[test]
fn the_guarded_preset_recovers_from_a_stall_in_front_of_nginx() {
    let _turn = crate::support::storm();
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let dir = TempDir::new("gameday-target");
    let target = format!("{}/work", nginx.url());
    let done = post_drill(&target, "none,full+budget+breaker", &dir);
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
    let _turn = crate::support::any();
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

/// A short baseline of the default shape (200 requests over 2 s) against
/// `url`, with `extra` flags; its stderr and nginx's log.
fn baseline(
    nginx: &nginx::Nginx,
    path: &str,
    extra: &[&str],
) -> (common::Done, Vec<nginx::Logged>) {
    let dir = TempDir::new("gameday-target-method");
    let target = format!("{}{path}", nginx.url());
    let mut args = vec![
        "gameday",
        "--target",
        &target,
        "--fault",
        "none",
        "--duration",
        "2s",
        "--strategy",
        "full",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let done = stagger_with(&args, &dir, None, Duration::from_secs(30));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    let log = nginx.log();
    (done, log)
}

#[test]
fn posting_to_a_read_endpoint_says_nginx_answered_405_to_every_request() {
    let _turn = crate::support::storm();
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let (done, log) = baseline(&nginx, nginx::Nginx::FILE, &["--method", "POST"]);
    let refused = log.iter().filter(|l| l.status == 405).count();
    assert!(refused > 0 && refused == log.len(), "{log:?}");
    assert!(log.iter().all(|l| l.method == "POST" && l.key.is_some()));
    // The line counts what nginx logged: every answer it gave was a 405.
    let says = format!(
        "stagger gameday: full: nginx answered 405 to 100 % of the requests it was sent \
         ({refused} of {refused}): does the endpoint accept POST?"
    );
    assert!(done.stderr.contains(&says), "{says}\n{}", done.stderr);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["params"]["method"], "POST");
    assert_eq!(v["strategies"][0]["request_success"], 0.0);
}

#[test]
fn a_target_is_read_with_gets_by_default_without_keys_or_a_405_line() {
    let _turn = crate::support::storm();
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let (done, log) = baseline(&nginx, nginx::Nginx::FILE, &[]);
    assert!(!log.is_empty());
    for l in &log {
        assert_eq!(
            (l.method.as_str(), l.status, &l.key),
            ("GET", 200, &None),
            "{l:?}"
        );
    }
    assert!(!done.stderr.contains("answered"), "{}", done.stderr);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["params"]["method"], "GET");
    assert!(v["strategies"][0]["request_success"].as_f64().unwrap() > 0.9);
}

#[test]
fn a_method_the_run_cannot_send_is_a_usage_error_naming_the_flag() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-method-bad");
    for (args, says) in [
        (
            &["--method", "GET"][..],
            "--method: the game-day's own server takes orders",
        ),
        (&["--method", "PUT"][..], "--method"),
        (
            &["--target", "http://127.0.0.1:1/x", "--no-keys"][..],
            "--no-keys: only POSTs carry an Idempotency-Key",
        ),
    ] {
        let mut all = vec!["gameday", "--duration", "10s"];
        all.extend_from_slice(args);
        let done = stagger(&all, &dir);
        assert_eq!(code(&done), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(says), "{args:?}: {}", done.stderr);
    }
}

/// Against nginx the table said `dup 9` where nginx's own log held 22 keys
/// it had answered 200 twice: the game-day's duplicate count is checked
/// against the upstream's log (its `log_format` carries the key).
#[test]
fn duplicate_writes_match_the_keys_nginx_logged_twice() {
    let _turn = crate::support::storm();
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let dir = TempDir::new("gameday-target-dups");
    let target = format!("{}/work", nginx.url());
    let done = post_drill(&target, "immediate", &dir);
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    let r = row(&v, "immediate");
    let mut served = std::collections::BTreeMap::<String, u64>::new();
    for l in nginx.log().iter().filter(|l| l.status == 200) {
        if let Some(k) = &l.key {
            *served.entry(k.clone()).or_default() += 1;
        }
    }
    let twice: u64 = served.values().map(|n| n.saturating_sub(1)).sum();
    assert!(
        twice > 0,
        "immediate retries through a stall apply writes twice"
    );
    assert_eq!(r["duplicates"].as_u64(), Some(twice), "{r}");
    // The proxy's `forwarded 4019` against nginx's 4007 lines: what
    // arrived and what nginx logged differ by the attempts the stall held
    // until their clients hung up, and the run says so.
    let said = done
        .stderr
        .lines()
        .find_map(|l| l.split_once("the proxy forwarded "))
        .map(|(_, rest)| rest.to_string())
        .unwrap_or_else(|| panic!("no forwarding line: {}", done.stderr));
    let num = |s: &str| s.split(' ').next().unwrap().parse::<u64>().unwrap();
    let forwarded = num(&said);
    assert_eq!(forwarded, nginx.log().len() as u64, "{said}");
    let arrived = num(said.split_once(" of the ").unwrap().1);
    assert_eq!(arrived, r["attempts"].as_u64().unwrap(), "{said}");
    let held = num(said.split_once("to nginx: ").unwrap().1);
    assert_eq!(forwarded + held, arrived, "{said}");
}
