//! `stagger gameday --hosts`: the server and the pods in network namespaces
//! the command creates, a kernel blackhole (nftables drops every packet to
//! the server: connect timeouts), at a short drill shape. Needs Linux, root,
//! iproute2 and nftables; elsewhere it skips with a message, except under
//! `CI=true` where `.ci/run` installs them.
//!
//! Measured on this 2-core machine (debug build): `none` 67 % success,
//! `full+budget+breaker` 67 %, 0.70 attempts arriving per request (1.22
//! made: the rest never left the clients' hosts), recovered 0.5 s after the
//! blackhole.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{code, finish, spawn, stagger, TempDir};
use serde_json::Value;

fn can_run() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    let tools = ["ip", "nft"].iter().all(|t| {
        ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(t).exists())
    });
    if root && tools && cfg!(target_os = "linux") {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "--hosts needs Linux, root, iproute2 and nftables; .ci/run installs them"
    );
    eprintln!("skipped: --hosts needs Linux, root, iproute2 and nftables");
    false
}

fn leftovers(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Removes whatever namespaces of one child are left, even if the test
/// fails half-way (the child removes its own; this is the second net).
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        for ns in leftovers(&self.0) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

/// One short drill with a blackhole; the namespaces are checked gone.
fn drill(dir: &TempDir) -> Value {
    let started = Instant::now();
    let child = spawn(
        &[
            "gameday",
            "--drill",
            "--hosts",
            "4",
            "--fault",
            "blackhole",
            "--duration",
            "9s",
            "--fault-at",
            "3s",
            "--strategy",
            "none,full+budget+breaker",
            "--format",
            "json",
        ],
        &dir.0,
        false,
    );
    let sweep = Sweep(format!("stg{}x", child.id()));
    let done = finish(child, started, Duration::from_secs(90));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    assert!(
        leftovers(&sweep.0).is_empty(),
        "the command removed its namespaces"
    );
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["params"]["hosts"], 4);
    v
}

fn row(v: &Value, s: &str) -> Value {
    v["strategies"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == s))
        .unwrap_or_else(|| panic!("no row for {s}"))
        .clone()
}

#[test]
fn the_guarded_preset_holds_when_failures_are_connect_timeouts() {
    if !can_run() {
        return;
    }
    let dir = TempDir::new("gameday-hosts");
    // Recovery is a timing on a shared 2-core machine, and connections
    // caught by the blackhole sit in TCP's retransmission backoff after it
    // ends: a run that misses only the 2 s recovery bound is run once more
    // (both values are in the message if the second misses too).
    let mut missed = Vec::new();
    let v = loop {
        let v = drill(&dir);
        let r = row(&v, "full+budget+breaker")["recovery_s"].as_f64();
        if r.is_some_and(|r| r <= 2.0) || missed.len() == 1 {
            missed.push(r);
            break v;
        }
        missed.push(r);
    };
    let recovery = missed.last().copied().flatten();
    assert!(
        recovery.is_some_and(|r| r <= 2.0),
        "recovered within 2 s of the blackhole: {missed:?}"
    );
    let (none, guarded) = (row(&v, "none"), row(&v, "full+budget+breaker"));
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    // The blackhole cost requests: connect timeouts, not refusals.
    assert!(f(&none, "request_success") < 0.9, "{none}");
    assert!(f(&guarded, "amplification") <= 1.3);
    assert!(f(&guarded, "client_amplification") <= 1.3, "{guarded}");
    assert!(f(&guarded, "request_success") >= f(&none, "request_success") - 0.03);
    // Keyed POSTs retried after connect timeouts were never applied twice.
    assert_eq!(guarded["duplicates"], 0);
}

#[test]
fn a_kernel_fault_without_hosts_is_a_usage_error() {
    let dir = TempDir::new("gameday-hosts-bad");
    let done = stagger(
        &["gameday", "--fault", "blackhole", "--duration", "10s"],
        &dir,
    );
    assert_eq!(code(&done), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("--fault: blackhole is a kernel fault"),
        "{}",
        done.stderr
    );
    let done = stagger(&["gameday", "--hosts", "0", "--duration", "10s"], &dir);
    assert_eq!(code(&done), Some(2));
    assert!(
        done.stderr.contains("--hosts: must be between 1 and 16"),
        "{}",
        done.stderr
    );
}
