//! `stagger gameday --priority`: a CPU-bound upstream on 127.0.0.1 at twice
//! its measured capacity, 20 % critical / 80 % sheddable, behind ShedLayer
//! with priorities, ShedLayer without and tower-acc's AIMD limit, in one
//! run of 3 s per server. The assertions are the qualitative result with
//! wide margins: other processes on a loaded machine take CPU from the
//! upstream during a run, which only makes the overload deeper.

use crate::common;

use std::time::Duration;

use common::{code, stagger, stagger_with, TempDir};
use serde_json::Value;

fn gameday(dir: &TempDir) -> Value {
    let args = [
        "gameday",
        "--priority",
        "--duration",
        "3s",
        "--format",
        "json",
    ];
    let done = stagger_with(&args, dir, None, Duration::from_secs(90));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    serde_json::from_str(&done.stdout).unwrap_or_else(|e| panic!("{e}: {}", done.stdout))
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number: {v}"))
}

/// One run's servers, with the comparison every run must show.
fn checked(doc: &Value) -> [Value; 3] {
    let report = &doc["report"];
    assert!(num(report, &["capacity_rps"]) > 10.0, "{report}");
    assert!(num(report, &["unloaded_p99_ms"]) > 0.0, "{report}");
    let servers = report["servers"].as_array().expect("servers");
    let names: Vec<&str> = servers
        .iter()
        .filter_map(|s| s["server"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "ShedLayer + priorities",
            "ShedLayer (no priorities)",
            "tower-acc AIMD"
        ]
    );
    let [with, without, acc] = [&servers[0], &servers[1], &servers[2]];
    let crit = |s: &Value| num(s, &["critical", "success_pct"]);
    // Twice the capacity was offered: every server served at most about
    // half, and both ShedLayers turned work away.
    for s in [with, without] {
        assert!(num(s, &["layer_shed"]) > 0.0, "{s}");
        assert!(num(s, &["sheddable", "success_pct"]) < 80.0, "{s}");
    }
    // Priorities: the sheddable requests take the rejections.
    assert!(
        num(with, &["sheddable", "shed"]) > 10.0 * num(with, &["critical", "shed"]).max(1.0),
        "{with}"
    );
    // Without priorities, critical fares like sheddable (the simulator: 49–51 %).
    assert!(crit(with) >= crit(without) + 15.0, "{with}\n{without}");
    // tower-acc queues instead of answering 503.
    assert_eq!(num(acc, &["layer_shed"]), 0.0, "{acc}");
    assert_eq!(num(acc, &["critical", "shed"]), 0.0, "{acc}");
    [with.clone(), without.clone(), acc.clone()]
}

#[test]
fn priorities_keep_critical_served_at_twice_the_capacity() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-priority");
    // A second run only if another process's load pulled the first below
    // 95 %; the comparison above holds in each run.
    let mut best = 0.0f64;
    for _ in 0..2 {
        let [with, ..] = checked(&gameday(&dir));
        best = best.max(num(&with, &["critical", "success_pct"]));
        if best >= 95.0 {
            break;
        }
    }
    assert!(best >= 95.0, "critical success with priorities {best} %");
}

#[test]
fn a_duration_out_of_range_or_another_scenario_is_a_usage_error() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-priority-bad");
    let done = stagger(&["gameday", "--priority", "--duration", "100ms"], &dir);
    assert_eq!(code(&done), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("--duration"), "{}", done.stderr);
    let done = stagger(&["gameday", "--priority", "--hedging", "none"], &dir);
    assert_eq!(code(&done), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("--hedging"), "{}", done.stderr);
}

/// One run of the CPU trigger's server: its part of the report.
fn cpu_run(dir: &TempDir) -> Value {
    let args = [
        "gameday",
        "--priority",
        "--duration",
        "2s",
        "--cpu-trigger",
        "12s",
        "--format",
        "json",
    ];
    let done = stagger_with(&args, dir, None, Duration::from_secs(150));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    let doc: Value = serde_json::from_str(&done.stdout).expect("one JSON document");
    doc["report"]["cpu"].clone()
}

/// Whether the trigger held the upstream near its threshold without
/// flapping, or why not.
fn held(cpu: &Value) -> Result<(), String> {
    let h = &cpu["holding"];
    let mean = num(h, &["mean_utilisation"]);
    if (mean - 0.8).abs() > 0.1 {
        return Err(format!("settled CPU {mean}: {h}"));
    }
    let p2p = num(h, &["shed_rate_peak_to_peak"]);
    if p2p > 0.6 {
        return Err(format!("the shed rate wanders: peak-to-peak {p2p}: {h}"));
    }
    let swings = num(h, &["swings"]);
    if swings > 4.0 {
        return Err(format!("the shed rate flaps: {swings} swings: {h}"));
    }
    if num(h, &["samples_not_shedding"]) > 0.0 {
        return Err(format!("it let go after settling: {h}"));
    }
    Ok(())
}

/// The CPU trigger (threshold 80 %), fed by the upstream's threads, holds
/// the upstream at twice its capacity near the threshold without flapping.
/// Near: the smoothed reading's mean after the trigger settled (the first
/// 40 % of its 12 s run) within 10 points of 80 %. Flapping, numerically,
/// after settling: any sample at which the shed rate is back at 0 (it let
/// go), more than 4 swings (turns after a move of 0.1 or more: a rate
/// flapping at the 100 ms readings has one every sample or two), or a
/// peak-to-peak above 0.6. Those bounds are wide because other processes
/// on a shared machine take the upstream's core at random, and the rate
/// rightly follows them (GAMEDAY.md has five runs' figures). A second run
/// only if the first missed (a burst of load from elsewhere).
#[test]
fn the_cpu_trigger_holds_a_cpu_bound_server_near_its_threshold_without_flapping() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-priority-cpu");
    let mut why = Vec::new();
    for _ in 0..2 {
        let cpu = cpu_run(&dir);
        let trace = cpu["trace"].as_array().expect("the trace");
        // A sample every 100 ms for 12 s (a loaded machine wakes it late),
        // and on until the last request has ended (within its deadline
        // after the 12 s): 127 were seen at load 4.7.
        assert!((80..=150).contains(&trace.len()), "{} samples", trace.len());
        assert!(num(&cpu, &["holding", "samples"]) >= 40.0, "{cpu}");
        // The trigger shed, lowest priority first: the sheddable requests
        // took the 503s (critical ones only when the core, taken by other
        // processes, could not keep up with them alone).
        assert!(num(&cpu, &["shed_by_cpu"]) > 0.0, "{cpu}");
        let server = &cpu["server"];
        assert!(
            num(server, &["sheddable", "shed"]) >= 5.0 * num(server, &["critical", "shed"]),
            "{server}"
        );
        match held(&cpu) {
            Ok(()) => return,
            Err(e) => why.push(e),
        }
    }
    panic!("{why:#?}");
}

/// The table's `shed` (the layer's own count) once covered the warm-up too,
/// beside 503 columns that skip it: it now counts the same requests, so the
/// two agree within a few answers still in flight at the warm-up's end.
#[test]
fn the_layers_shed_count_covers_the_same_requests_as_the_503_columns() {
    let _turn = crate::support::storm();
    let dir = TempDir::new("gameday-priority-shed");
    let [with, without, _] = checked(&gameday(&dir));
    for s in [&with, &without] {
        let layer = num(s, &["layer_shed"]);
        let answered = num(s, &["critical", "shed"]) + num(s, &["sheddable", "shed"]);
        assert!(
            (layer - answered).abs() <= 0.05 * answered + 10.0,
            "layer {layer} vs 503s {answered}: {s}"
        );
    }
}
