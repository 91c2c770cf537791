//! `stagger simulate --model metastable --server …`: one row per server ×
//! client strategy, the older `--server-skips-expired` still accepted, bad
//! input named by its flag.

use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stagger"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = simulate(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

const SHORT: [&str; 8] = [
    "--model",
    "metastable",
    "--duration",
    "40s",
    "--runs",
    "1",
    "--format",
    "json",
];

#[test]
fn one_row_per_server_and_strategy_and_the_limit_breaks_the_loop() {
    let _turn = crate::support::any();
    let mut args = SHORT.to_vec();
    args.extend([
        "--server",
        "fifo,deadline-drop,adaptive",
        "--strategy",
        "none,full",
    ]);
    let doc = json(&args);
    let rows = doc["strategies"].as_array().unwrap();
    let names: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["server"].as_str().unwrap().to_string(),
                r["strategy"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = ["fifo", "deadline-drop", "adaptive"]
        .iter()
        .flat_map(|s| ["none", "full"].map(|c| (s.to_string(), c.to_string())))
        .collect();
    assert_eq!(names, want);
    let goodput = |i: usize| rows[i]["goodput_after"].as_f64().unwrap();
    assert!(goodput(1) < 5.0, "full @ fifo");
    assert!(goodput(5) > 0.95 * 280.0, "full @ adaptive: {}", goodput(5));
    assert_eq!(rows[5]["recovered"], true);
    assert!(rows[5]["shed_share"].as_f64().unwrap() > 0.0);
}

#[test]
fn the_older_flag_still_means_deadline_drop() {
    let _turn = crate::support::any();
    let mut args = SHORT.to_vec();
    args.extend(["--server-skips-expired", "--strategy", "full"]);
    let doc = json(&args);
    assert_eq!(doc["strategies"][0]["server"], "deadline-drop");
    assert_eq!(doc["params"]["server_skips_expired"], true);
}

#[test]
fn bad_server_input_names_the_flag() {
    let _turn = crate::support::any();
    for (args, needle) in [
        (
            vec!["--model", "metastable", "--server", "lifo"],
            "--server",
        ),
        (
            vec!["--model", "metastable", "--server", "static:0"],
            "--server",
        ),
        (vec!["--model", "failover", "--server", "fifo"], "--server"),
        (
            vec![
                "--model",
                "metastable",
                "--server",
                "fifo",
                "--server-skips-expired",
            ],
            "--server",
        ),
    ] {
        let out = simulate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
