//! `stagger gameday --server-limit`: the library's ShedLayer with a
//! concurrency limit in front of the game-day server, under a stall and an
//! overload ramp. One short run per limit, one at a time; the assertions
//! are directions with wide margins (timers slip on a loaded machine).

use crate::common;

use std::time::Duration;

use common::{code, stagger_with, TempDir};
use serde_json::Value;

fn gameday(limit: &str, dir: &TempDir) -> Value {
    // 12 s of traffic ramping from 100/s to 300/s against capacity 200/s,
    // a 2 s stall at 5 s.
    let args = [
        "gameday",
        "--format",
        "json",
        "--strategy",
        "full",
        "--drop-expired",
        "--duration",
        "12s",
        "--fault-at",
        "5s",
        "--rate",
        "100",
        "--ramp-to",
        "300",
        "--server-limit",
        limit,
    ];
    let done = stagger_with(&args, dir, None, Duration::from_secs(60));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.stdout))
}

#[test]
fn a_limit_that_sheds_retries_first_keeps_goodput_up_through_a_stall_and_a_ramp() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-limit");
    let none = gameday("none", &dir);
    let aimd = gameday("aimd", &dir);
    assert_eq!(aimd["params"]["server_limit"], "aimd");
    assert_eq!(aimd["params"]["ramp_to"], 300.0);
    let (n, a) = (&none["strategies"][0], &aimd["strategies"][0]);
    assert!(n["shed_share"].is_null(), "no shedding layer: {n}");
    let shed = a["shed_share"].as_f64().unwrap();
    assert!(shed > 0.0 && shed < 0.6, "{shed}");
    let goodput = |r: &Value| r["goodput_after_fault"].as_f64().unwrap();
    assert!(
        goodput(a) > 1.5 * goodput(n).max(1.0),
        "aimd {} vs none {}",
        goodput(a),
        goodput(n)
    );
    assert!(a["amplification"].as_f64().unwrap() < n["amplification"].as_f64().unwrap());
    assert!(a["latency"]["p99_ms"].as_u64().is_some());
}

#[test]
fn a_bad_limit_or_ramp_is_a_usage_error_naming_its_flag() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-limit-bad");
    for (args, flag) in [
        (
            vec!["gameday", "--server-limit", "static:0"],
            "--server-limit",
        ),
        (vec!["gameday", "--server-limit", "vegas"], "--server-limit"),
        (vec!["gameday", "--ramp-to", "0"], "--ramp-to"),
        (
            vec!["gameday", "--server-limit", "aimd", "--shed-retries"],
            "--server-limit",
        ),
    ] {
        let done = stagger_with(&args, &dir, None, Duration::from_secs(20));
        assert_eq!(code(&done), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(flag), "{args:?}: {}", done.stderr);
    }
}
