//! `stagger gameday` end to end: the real binary, a real server on
//! 127.0.0.1, real clients. Each game-day is short (≤ 30 s) and the two
//! long ones run one at a time, so they measure the retry policies rather
//! than each other.
//!
//! The assertions are about directions and ratios with wide margins, never
//! exact counts: on a loaded 2-core machine timers slip by milliseconds and
//! a few requests more or less time out. Measured on this machine (debug
//! build, three runs), the stall run gives immediate retries a post-fault
//! peak of 3.3–3.4× capacity and no recovery, and budget + breaker a peak of
//! about 0.5× and recovery 1.3 s after the stall; the dead run gives full jitter
//! 4 retries per request to the end and budget + breaker none.

use crate::common;

use std::time::Duration;

use common::{code, stagger_with, TempDir};
use serde_json::Value;

fn gameday(args: &[&str], dir: &TempDir) -> Value {
    let mut all = vec!["gameday", "--format", "json"];
    all.extend_from_slice(args);
    let done = stagger_with(&all, dir, None, Duration::from_secs(90));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.stdout))
}

fn row<'a>(v: &'a Value, strategy: &str) -> &'a Value {
    v["strategies"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == strategy))
        .unwrap_or_else(|| panic!("no row for {strategy}: {v}"))
}

fn f(r: &Value, field: &str) -> f64 {
    r[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {r}"))
}

/// Successes at the clients from the end of the stall (10 s) on.
fn after_stall_successes(r: &Value) -> u64 {
    r["series"]["successes"]
        .as_array()
        .map(|s| s.iter().skip(100).filter_map(Value::as_u64).sum())
        .unwrap_or(0)
}

#[test]
fn a_stall_keeps_lockstep_retries_over_capacity_while_budget_and_breaker_recover() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-stall");
    let out = dir.path("report");
    let out_s = out.to_string_lossy().into_owned();
    // Traffic 13 s, stall 8–10 s: 8 s of normal history in the breakers'
    // windows (with less, they can trip just after the stall and hold the
    // clients off for 5 s), 3 s to watch afterwards; about 28 s for both
    // strategies.
    let v = gameday(
        &[
            "--fault",
            "stall",
            "--strategy",
            "immediate,full+budget+breaker",
            "--duration",
            "13s",
            "--fault-at",
            "8s",
            "--out",
            &out_s,
        ],
        &dir,
    );
    let storm = row(&v, "immediate");
    let cure = row(&v, "full+budget+breaker");
    for r in [storm, cure] {
        assert_eq!(r["duplicates"], 0, "{}", r["strategy"]);
        assert!(f(r, "requests") > 1000.0, "{r}");
    }

    // Immediate retries: the server stays over capacity after the stall
    // (measured ≈ 3.3×; asserted > 1.5×) for most of the 2.2 s of whole
    // 1 s windows after it (measured 1.8 s; asserted ≥ 1 s), and never
    // recovers.
    assert!(f(storm, "post_outage_peak_over_capacity") > 1.5, "{storm}");
    assert!(f(storm, "overloaded_after_fault_s") >= 1.0, "{storm}");
    assert_eq!(storm["recovered"], false, "{storm}");
    assert!(f(storm, "tail_retry_ratio") > 1.0, "{storm}");

    // Budget + breaker: load under capacity after the stall (measured ≈
    // 0.5×; asserted < 1×), back at baseline quickly (measured 1.3 s in
    // every run; this run can see at most 2 s), and few retries at the end
    // (measured 3 %; asserted < 20 %).
    assert!(f(cure, "post_outage_peak_over_capacity") < 1.0, "{cure}");
    assert_eq!(cure["recovered"], true, "{cure}");
    assert!(f(cure, "recovery_s") <= 2.0, "{cure}");
    assert!(f(cure, "tail_retry_ratio") < 0.2, "{cure}");

    // Ratios: the storm retries several times as much (measured ≈ 10×;
    // asserted > 3×), and after the stall it serves next to nothing while
    // the cure serves most requests (measured 0 against ≈ 200; asserted
    // less than a quarter).
    assert!(
        f(storm, "retry_ratio") > 3.0 * f(cure, "retry_ratio"),
        "{storm}\n{cure}"
    );
    let (storm_ok, cure_ok) = (after_stall_successes(storm), after_stall_successes(cure));
    assert!(cure_ok >= 100, "{cure_ok} successes after the stall");
    assert!(4 * storm_ok < cure_ok, "{storm_ok} against {cure_ok}");

    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("<svg") && html.contains("full+budget+breaker"));
    assert!(!html.contains("<script"), "the report is static");
    let json = std::fs::read_to_string(out.join("results.json")).expect("results.json");
    let saved: Value = serde_json::from_str(&json).expect("results.json parses");
    assert_eq!(saved["params"]["fault"], "stall");
    let series = &row(&saved, "immediate")["series"];
    assert_eq!(series["t_s"].as_array().map(Vec::len), Some(130));
}

#[test]
fn against_a_dead_dependency_the_breaker_cuts_retries_to_about_zero() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-dead");
    let v = gameday(
        &[
            "--fault",
            "dead",
            "--strategy",
            "full,full+budget+breaker",
            "--duration",
            "8s",
        ],
        &dir,
    );
    let plain = row(&v, "full");
    let guarded = row(&v, "full+budget+breaker");
    for r in [plain, guarded] {
        assert_eq!(r["duplicates"], 0, "{}", r["strategy"]);
        assert_eq!(r["recovered"], Value::Null, "the fault never clears");
    }
    // Full jitter alone keeps every request at its 5 attempts: 4 retries
    // per request to the end (asserted > 2).
    assert!(f(plain, "tail_retry_ratio") > 2.0, "{plain}");
    assert!(f(plain, "amplification") > 3.0, "{plain}");
    // With the breaker, retries in the last quarter are about zero
    // (measured 0; asserted < 5 %), and the pods' breakers did open.
    assert!(f(guarded, "tail_retry_ratio") < 0.05, "{guarded}");
    assert!(f(guarded, "breaker_opens") >= 1.0, "{guarded}");
    assert!(
        f(guarded, "amplification") < 0.25 * f(plain, "amplification"),
        "{plain}\n{guarded}"
    );
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-flags");
    for (args, flag) in [
        (&["--duration", "500s"][..], "--duration"),
        (&["--duration", "soon"][..], "--duration"),
        (&["--strategy", "fast"][..], "--strategy"),
        (&["--strategy", "full+cache"][..], "--strategy"),
        (&["--rate", "0"][..], "--rate"),
        (&["--rate", "5000"][..], "--rate"),
        (&["--clients", "0"][..], "--clients"),
        (&["--fault", "meteor"][..], "--fault"),
        (
            &["--fault", "stall", "--duration", "4s", "--fault-at", "3s"][..],
            "--duration",
        ),
        (&["--attempts", "0"][..], "--attempts"),
        (
            &["--strategy", "all+budget", "--duration", "120s"][..],
            "--strategy",
        ),
        (&["--format", "xml"][..], "--format"),
        // Review regression: this overflowed a Duration and panicked.
        (
            &["--fault", "stall", "--fault-at", "18446744073709551615s"][..],
            "--fault-at",
        ),
    ] {
        let mut all = vec!["gameday"];
        all.extend_from_slice(args);
        let done = stagger_with(&all, &dir, None, Duration::from_secs(10));
        assert_eq!(code(&done), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(flag), "{args:?}: {}", done.stderr);
        assert!(done.stdout.is_empty(), "{args:?}: {}", done.stdout);
    }
}

/// Regression for the guardrails that never engaged at the drill's shape:
/// 400 pods at half a request per second each saw too little traffic for a
/// fixed floor of 10 retries or a 20-call breaker minimum, and
/// `full+budget+breaker` made 2 attempts per request and served 65 % (no
/// retries served 88 %). Measured on this machine (release build) it now
/// makes 1.10 and serves 88 %; the margins here are wide.
#[test]
fn the_drill_thin_pods_budget_engages_in_a_stall() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-drill");
    // The drill's shape, shortened: 13 s of traffic, the stall at 8–10 s.
    let v = gameday(
        &[
            "--drill",
            "--strategy",
            "full+budget+breaker",
            "--duration",
            "13s",
            "--fault-at",
            "8s",
        ],
        &dir,
    );
    assert_eq!(v["params"]["pods"], 400);
    let r = row(&v, "full+budget+breaker");
    assert!(f(r, "budget_refusals") > 50.0, "the budgets engage: {r}");
    assert!(f(r, "amplification") < 1.4, "{r}");
    assert!(f(r, "request_success") > 0.8, "{r}");
    assert!(r["recovered"] == true, "{r}");
}

/// The p99 counted successful requests only, so a strategy that failed most
/// of its requests showed the best tail (and one that failed them all,
/// none). Every request now counts, a failed one at the moment it failed.
#[test]
fn p99_counts_the_requests_that_failed() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-p99");
    let v = gameday(
        &["--fault", "dead", "--strategy", "full", "--duration", "4s"],
        &dir,
    );
    let r = row(&v, "full");
    assert!(f(r, "request_success") < 0.01, "{r}");
    // Each failed request spent its attempts and their waits first.
    assert!(
        r["latency"]["p99_ms"].as_u64().is_some_and(|ms| ms > 100),
        "{r}"
    );
}
