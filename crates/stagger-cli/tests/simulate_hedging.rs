//! `stagger simulate --model hedging` end to end: the real binary, small runs.

use std::process::{Command, Output};

fn stagger(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagger"))
        .args(["simulate", "--model", "hedging"])
        .args(args)
        .output()
        .expect("the binary runs")
}

#[test]
fn json_has_the_documented_shape() {
    let _turn = crate::support::any();
    let out = stagger(&[
        "--format",
        "json",
        "--requests",
        "20000",
        "--strategy",
        "none,20ms,p95+budget",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["model"], "hedging");
    let p = &doc["params"];
    assert_eq!(p["latency_median_ms"], 10.0);
    assert_eq!(p["stall_prob"], 0.02);
    assert_eq!(p["capacity"], "inf");
    assert_eq!(p["cancel"], "queued");
    assert_eq!(p["hedge_attempts"], 2);
    let rows = doc["strategies"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["none", "20ms", "p95+budget"]);
    for r in rows {
        for k in ["p50_ms", "p99_ms", "p999_ms", "extra_load"] {
            assert!(r[k].is_f64(), "{k} in {r}");
        }
    }
    // The tail cut: a stall of 200 ms is in none's p99, not in the hedged one's.
    assert!(rows[0]["p99_ms"].as_f64().unwrap() > 200.0);
    assert!(rows[1]["p99_ms"].as_f64().unwrap() < 40.0);
    assert_eq!(rows[0]["extra_load"], 0.0);
}

#[test]
fn the_report_is_written_with_the_sweep() {
    let _turn = crate::support::any();
    let dir = std::env::temp_dir().join(format!("stagger-hedging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = stagger(&[
        "--requests",
        "4000",
        "--capacity",
        "4",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("4 FIFO servers at utilisation 0.7"),
        "{table}"
    );
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("cancel running") && html.contains("cancel queued"));
    assert!(dir.join("results.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let _turn = crate::support::any();
    for (args, flag) in [
        (&["--capacity", "2.5"][..], "--capacity"),
        (&["--capacity", "0"], "--capacity"),
        (&["--cancel", "never"], "--cancel"),
        (&["--utilisation", "1.2"], "--utilisation"),
        (&["--stall-prob", "1.5"], "--stall-prob"),
        (&["--latency-sigma", "nan"], "--latency-sigma"),
        (&["--latency-median", "0"], "--latency-median"),
        (&["--requests", "0"], "--requests"),
        (&["--hedge-attempts", "0"], "--hedge-attempts"),
        (&["--strategy", "p95+cache"], "--strategy"),
    ] {
        let out = stagger(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn the_hedging_game_day_runs_short_and_bounded_on_loopback() {
    let _turn = crate::support::storm();
    let out = Command::new(env!("CARGO_BIN_EXE_stagger"))
        .args([
            "gameday",
            "--fault",
            "slow",
            "--hedging",
            "none,20ms",
            "--rate",
            "200",
            "--duration",
            "1s",
        ])
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(table.lines().count(), 4, "{table}");
    assert!(table.contains("200 GET requests"), "{table}");
    let wrong = Command::new(env!("CARGO_BIN_EXE_stagger"))
        .args(["gameday", "--fault", "stall", "--hedging", "p95"])
        .output()
        .expect("the binary runs");
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("--hedging"));
}
