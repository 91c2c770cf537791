//! `stagger gameday` against connection resets, and a short soak: the real
//! binary, a real server on 127.0.0.1, real clients.
//!
//! The reset fault reads each request, applies every other one, and resets
//! the connection: keyed POSTs recover without a duplicate, unkeyed ones are
//! never repeated. The soak is the CI form of the ten-minute run in
//! GAMEDAY.md: 1 min of steady traffic with the process's resident memory
//! and open descriptors sampled from /proc/self every second, flat after a
//! 30 s warm-up.

use crate::common;

use std::time::Duration;

use common::{code, stagger_with, TempDir};
use serde_json::Value;

fn gameday(args: &[&str], dir: &TempDir, limit: Duration) -> (Option<i32>, Value) {
    let mut all = vec!["gameday", "--format", "json"];
    all.extend_from_slice(args);
    let done = stagger_with(&all, dir, None, limit);
    let v = serde_json::from_str(&done.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", done.stdout, done.stderr));
    (code(&done), v)
}

fn row<'a>(v: &'a Value, strategy: &str) -> &'a Value {
    v["strategies"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == strategy))
        .unwrap_or_else(|| panic!("no row for {strategy}: {v}"))
}

fn n(r: &Value, field: &str) -> f64 {
    r[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {r}"))
}

#[test]
fn resets_are_retried_without_duplicates_only_when_keyed() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-reset");
    // Traffic 8 s, resets from 2 s to 5 s.
    let short = ["--fault", "reset", "--duration", "8s", "--fault-at", "2s"];
    let mut args = short.to_vec();
    args.extend_from_slice(&["--strategy", "none,full"]);
    let (status, v) = gameday(&args, &dir, Duration::from_secs(60));
    assert_eq!(status, Some(0));
    let none = row(&v, "none");
    let full = row(&v, "full");
    // The server reset a share of the attempts, and applied half of those.
    assert!(n(none, "rejected") >= 100.0, "{none}");
    // Keyed POSTs are retried after a reset; the ledger catches every retry
    // of an order already applied.
    assert!(n(full, "retries") > 0.0, "{full}");
    assert!(n(full, "deduplicated") > 0.0, "{full}");
    assert_eq!(n(full, "duplicates"), 0.0, "{full}");
    assert!(
        n(full, "request_success") > n(none, "request_success"),
        "{full}\n{none}"
    );

    // Without keys the same strategy never repeats a POST whose outcome is
    // unknown.
    let mut args = short.to_vec();
    args.extend_from_slice(&["--strategy", "full", "--no-keys"]);
    let (status, v) = gameday(&args, &dir, Duration::from_secs(60));
    assert_eq!(status, Some(0));
    let unkeyed = row(&v, "full");
    assert_eq!(n(unkeyed, "retries"), 0.0, "{unkeyed}");
    assert_eq!(n(unkeyed, "duplicates"), 0.0, "{unkeyed}");
    assert!(unkeyed["stops"]["not_retryable"].as_u64().unwrap_or(0) >= 100);
}

#[test]
fn a_short_soak_holds_memory_and_descriptors_flat() {
    let _turn = crate::support::alone();
    let dir = TempDir::new("gameday-soak");
    let (status, v) = gameday(
        &[
            "--soak",
            "--fault",
            "none",
            "--strategy",
            "full+budget+breaker",
            "--duration",
            "1m",
            "--rate",
            "300",
            "--workers",
            "60",
        ],
        &dir,
        Duration::from_secs(120),
    );
    let soak = &v["soak"];
    let samples = soak["samples"].as_array().unwrap();
    assert!(samples.len() >= 40, "{} samples", samples.len());
    assert_eq!(soak["warm_window_s"], serde_json::json!([30.0, 37.5]));
    assert_eq!(soak["end_window_s"], serde_json::json!([52.5, 60.0]));
    assert!(n(soak, "rss_growth_pct") < 5.0, "{soak}");
    // Descriptors are judged by the verdict's own rule (growth under 5 %
    // plus a few that come and go), which `flat` carries; a bare
    // percentage of some ninety descriptors moves by ten with nine
    // connections.
    assert_eq!(soak["flat"], true);
    assert_eq!(status, Some(0));
    let r = row(&v, "full+budget+breaker");
    assert!(n(r, "requests") >= 17_500.0, "{r}");
    assert!(n(r, "request_success") > 0.99, "{r}");
}

#[test]
fn a_soak_runs_one_strategy_and_may_run_long() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-soak-usage");
    let done = stagger_with(
        &["gameday", "--soak", "--strategy", "none,full"],
        &dir,
        None,
        Duration::from_secs(10),
    );
    assert_eq!(code(&done), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("--strategy"), "{}", done.stderr);
    // Without --soak, ten minutes is refused; with it, ten minutes passes
    // the duration check (the bad rate is what is refused).
    let done = stagger_with(
        &["gameday", "--duration", "10m"],
        &dir,
        None,
        Duration::from_secs(10),
    );
    assert_eq!(code(&done), Some(2));
    assert!(done.stderr.contains("--duration"), "{}", done.stderr);
    let done = stagger_with(
        &[
            "gameday",
            "--soak",
            "--strategy",
            "full",
            "--duration",
            "10m",
            "--rate",
            "0",
        ],
        &dir,
        None,
        Duration::from_secs(10),
    );
    assert_eq!(code(&done), Some(2));
    assert!(done.stderr.contains("--rate"), "{}", done.stderr);
}
