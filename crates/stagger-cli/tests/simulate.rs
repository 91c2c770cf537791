//! `stagger simulate` end to end: the real binary, small runs.

use std::path::PathBuf;
use std::process::{Command, Output};

fn stagger(args: &[&str], cwd: Option<&PathBuf>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stagger"));
    c.arg("simulate").args(args);
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    c.output().expect("the binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stagger-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let _turn = crate::support::any();
    for (args, flag) in [
        (&["--clients", "0"][..], "--clients"),
        (&["--clients", "9..3", "--model", "contention"], "--clients"),
        (&["--strategy", "fast"], "--strategy"),
        (&["--strategy", "full+cache"], "--strategy"),
        (&["--attempts", "many"], "--attempts"),
        (&["--attempts", "0"], "--attempts"),
        (&["--model", "weather"], "--model"),
        (&["--format", "xml"], "--format"),
        (&["--threads", "0"], "--threads"),
        (&["--seeds", "1,x"], "--seeds"),
        (&["--duration", "5 parsecs"], "--duration"),
        (&["--tick", "0"], "--tick"),
        (&["--cap", "10ms"], "--cap"),
        (&["--success-model", "cubic"], "--success-model"),
        (
            &["--outage-start", "10s", "--outage-end", "5s"],
            "--outage-end",
        ),
        (&["--rate=-3", "--model", "metastable"], "--rate"),
        (&["--runs", "0"], "--runs"),
    ] {
        let out = stagger(args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn json_is_byte_identical_whatever_the_thread_count() {
    let _turn = crate::support::any();
    let base = ["--format", "json", "--runs", "6", "--seed", "3"];
    for model in [
        &["--model", "failover"][..],
        &["--model", "contention", "--clients", "1..15"],
        &[
            "--model",
            "metastable",
            "--duration",
            "30s",
            "--strategy",
            "full,full+budget+breaker",
        ],
        &["--model", "layers"],
    ] {
        let run = |threads: &str| {
            let mut a: Vec<&str> = base.to_vec();
            a.extend_from_slice(model);
            a.extend_from_slice(&["--threads", threads]);
            let out = stagger(&a, None);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        let one = run("1");
        assert_eq!(one, run("2"), "{model:?}");
        let doc: serde_json::Value = serde_json::from_slice(&one).unwrap();
        assert!(doc["strategies"].as_array().is_some_and(|s| !s.is_empty()));
    }
}

#[test]
fn json_has_the_documented_fields() {
    let _turn = crate::support::any();
    let out = stagger(&["--format", "json", "--runs", "2"], None);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["model"], "failover");
    let row = &doc["strategies"][0];
    for key in [
        "strategy",
        "runs",
        "attempts",
        "requests",
        "amplification",
        "request_success",
        "peak_load_over_capacity",
        "post_outage_peak_over_capacity",
        "recovery_s",
        "budget_refusals",
        "breaker_opens",
    ] {
        assert!(row.get(key).is_some(), "missing {key}");
    }
    for key in ["t_s", "load", "retries", "successes"] {
        assert_eq!(
            row["series"][key].as_array().map(Vec::len),
            Some(240),
            "{key}"
        );
    }
    let out = stagger(
        &[
            "--model",
            "contention",
            "--clients",
            "3",
            "--format",
            "json",
            "--runs",
            "2",
        ],
        None,
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["strategies"][0];
    assert_eq!(row["clients"], 3);
    assert!(row["calls"].is_number() && row["completion_ms"].is_number());
}

#[test]
fn no_flags_prints_the_comparison_and_writes_the_report() {
    let _turn = crate::support::any();
    let dir = scratch("default");
    let out = stagger(&["--runs", "3"], Some(&dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for s in [
        "none",
        "immediate",
        "exponential",
        "full",
        "full+budget",
        "full+budget+breaker",
    ] {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{s} "))),
            "{s}:\n{table}"
        );
    }
    let report = dir.join("stagger-report");
    let html = std::fs::read_to_string(report.join("report.html")).unwrap();
    assert!(
        html.matches("<svg").count() >= 8,
        "one chart per strategy and more"
    );
    // Self-contained: nothing is fetched when the page opens.
    assert!(!html.contains("src=") && !html.contains("href="));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["strategies"].as_array().map(Vec::len), Some(6));
    let csv = std::fs::read_to_string(report.join("series.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 6 * 240);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's first command printed four identical `+budget+breaker`
/// rows (`none+budget+breaker` among them), left out a budget alone, and
/// was 192 columns wide.
#[test]
fn the_first_screen_fits_100_columns_shows_budget_alone_and_no_identical_rows() {
    let _turn = crate::support::any();
    let out = stagger(&["--runs", "4", "--out", "none"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    for line in table.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|w| w.parse::<f64>().is_ok())
        })
        .collect();
    assert!(
        rows.iter().any(|l| l.starts_with("full+budget ")),
        "{table}"
    );
    assert!(!rows.iter().any(|l| l.starts_with("none+")), "{table}");
    let numbers: Vec<&str> = rows
        .iter()
        .map(|l| l.split_once(' ').unwrap().1.trim())
        .collect();
    for (i, a) in numbers.iter().enumerate() {
        assert!(
            !numbers[i + 1..].contains(a),
            "two identical rows:\n{table}"
        );
    }
    // The guardrails in use are said in the library's own words.
    let budget = stagger::guardrails::budget::RatioBudget::default().to_string();
    assert!(table.replace("\n  ", " ").contains(&budget), "{table}");
}

/// Asked for rows that are the same, the table says so and why.
#[test]
fn identical_rows_are_named_with_the_reason() {
    let _turn = crate::support::any();
    let out = stagger(
        &[
            "--runs",
            "4",
            "--out",
            "none",
            "--strategy",
            "none+budget+breaker,full+budget+breaker",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap().replace("\n  ", " ");
    assert!(
        table.contains(
            "none+budget+breaker, full+budget+breaker print the same numbers: they sent no retry"
        ),
        "{table}"
    );
}

/// The HTML report described old defaults (budget "floor 10", breaker
/// "≥ 20 calls" without its quiet-client rule) and a side-by-side layout
/// the page does not have.
#[test]
fn the_report_describes_the_guardrails_the_run_used() {
    let _turn = crate::support::any();
    let dir = scratch("guardrails");
    let out = stagger(
        &["--runs", "2", "--out", dir.join("r").to_str().unwrap()],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(dir.join("r/report.html")).unwrap();
    let esc = |s: String| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    for said in [
        stagger::guardrails::budget::RatioBudget::default().to_string(),
        stagger::Breaker::default().to_string(),
        stagger::Throttle::default().to_string(),
        stagger::export::SliWindow::default().to_string(),
    ] {
        assert!(
            html.contains(&esc(said.clone())),
            "the report does not say: {said}"
        );
    }
    assert!(!html.contains("floor 10)"), "the old budget prose");
    assert!(
        !html.contains("on the left"),
        "the page has no left and right"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn out_writes_the_report_for_every_model_and_none_disables_it() {
    let _turn = crate::support::any();
    let dir = scratch("models");
    for model in ["contention", "metastable", "layers"] {
        let target = dir.join(model);
        let out = stagger(
            &[
                "--model",
                model,
                "--runs",
                "2",
                "--clients",
                "4",
                "--duration",
                "20s",
                "--out",
                target.to_str().unwrap(),
            ],
            None,
        );
        assert!(
            out.status.success(),
            "{model}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let html = std::fs::read_to_string(target.join("report.html")).unwrap();
        assert!(html.contains("<svg"), "{model}");
    }
    let out = stagger(&["--runs", "2", "--out", "none"], Some(&dir));
    assert!(out.status.success());
    assert!(!dir.join("stagger-report").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_drill_runs_in_one_command_at_both_shapes() {
    let _turn = crate::support::any();
    let thin = stagger(&["--drill", "--runs", "20", "--format", "json"], None);
    assert!(
        thin.status.success(),
        "{}",
        String::from_utf8_lossy(&thin.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&thin.stdout).unwrap();
    assert_eq!(doc["params"]["clients"], "400");
    assert_eq!(doc["params"]["arrivals"], 100);
    let rows = doc["strategies"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names.join(","), stagger_sim::DRILL_STRATEGIES);
    let guarded = rows.last().unwrap();
    assert!(guarded["amplification"].as_f64().unwrap() <= 1.3);
    assert!(guarded["budget_refusals"].as_f64().unwrap() > 0.0);
    let busy = stagger(
        &[
            "--drill",
            "--clients",
            "10",
            "--runs",
            "5",
            "--server-sheds-retries",
            "--format",
            "json",
        ],
        None,
    );
    assert!(busy.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&busy.stdout).unwrap();
    assert_eq!(doc["params"]["clients"], "10");
    assert_eq!(doc["params"]["server_sheds_retries"], true);
    for (args, flag) in [
        (&["--drill", "--model", "metastable"][..], "--drill"),
        (
            &["--server-sheds-retries", "--model", "metastable"],
            "--server-sheds-retries",
        ),
    ] {
        let out = stagger(args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "{args:?}"
        );
    }
}

#[test]
fn the_priority_model_serves_critical_work_at_twice_capacity() {
    let _turn = crate::support::any();
    let out = stagger(&["--model", "priority", "--format", "json"], None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let row = |name: &str| rows.iter().find(|r| r["server"] == name).unwrap().clone();
    let low = |r: &serde_json::Value, k: &str| r[k][0].as_f64().unwrap();
    let high = |r: &serde_json::Value, k: &str| r[k][1].as_f64().unwrap();
    assert!(low(&row("limit by priority"), "critical_served") >= 0.99);
    assert!(high(&row("limit (no priorities)"), "critical_served") < 0.6);
    assert_eq!(doc["seeds"].as_array().unwrap().len(), 5);
    // The table names every way of shedding.
    let table = stagger(&["--model", "priority"], None);
    let text = String::from_utf8_lossy(&table.stdout);
    for name in [
        "queue + deadline drop",
        "limit (no priorities)",
        "limit by priority + CPU trigger",
    ] {
        assert!(text.contains(name), "{text}");
    }
}

#[test]
fn the_priority_model_compares_at_each_load_given() {
    let _turn = crate::support::any();
    let out = stagger(
        &[
            "--model",
            "priority",
            "--load",
            "0.5,3",
            "--critical-share",
            "0.3",
            "--duration",
            "5s",
            "--runs",
            "2",
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["params"]["loads"], serde_json::json!([0.5, 3.0]));
    assert_eq!(doc["params"]["critical_share"], 0.3);
    assert_eq!(doc["seeds"], serde_json::json!([1, 2]));
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "4 ways of shedding at each of 2 loads");
    let mean = |server: &str, load: f64, k: &str| {
        rows.iter()
            .find(|r| r["server"] == server && r["load"] == load)
            .unwrap()[k]
            .as_f64()
            .unwrap()
    };
    // Half the capacity: everything is served. Three times, with 30 %
    // critical (0.9× the capacity of critical work alone): blind to
    // priorities a third is served, by priority most of it (0.89 here).
    assert!(mean("limit (no priorities)", 0.5, "critical_mean") > 0.97);
    assert!(mean("limit (no priorities)", 3.0, "critical_mean") < 0.5);
    assert!(mean("limit by priority", 3.0, "critical_mean") > 0.8);
    assert!(mean("limit by priority", 3.0, "sheddable_mean") < 0.2);
    // Each mean lies within its row's range over its seeds.
    for r in rows {
        let (lo, hi, m) = (
            r["critical_served"][0].as_f64().unwrap(),
            r["critical_served"][1].as_f64().unwrap(),
            r["critical_mean"].as_f64().unwrap(),
        );
        assert!(lo <= m && m <= hi, "{r}");
    }
    for (flag, value) in [
        ("--load", "0,2"),
        ("--load", "fast"),
        ("--critical-share", "1.5"),
        ("--runs", "50"),
        ("--duration", "1h"),
    ] {
        let out = stagger(&["--model", "priority", flag, value], None);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "{flag} {value}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--model priority` printed a Markdown table, unlike every other model,
/// and only a second load said which load it was: now a header line names
/// the load and the columns are aligned text.
#[test]
fn the_priority_table_is_plain_text_headed_by_its_load() {
    let _turn = crate::support::any();
    let out = stagger(
        &[
            "--model",
            "priority",
            "--load",
            "0.5,3",
            "--duration",
            "2s",
            "--runs",
            "1",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains('|') && !text.contains("##"), "{text}");
    let heads: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("priority:"))
        .collect();
    assert_eq!(heads.len(), 2, "{text}");
    assert!(heads[0].contains("load 0.5× capacity"), "{text}");
    assert!(heads[1].contains("load 3× capacity"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("server ")), "{text}");
}

/// `simulate --help` listed `--out` under the priority model's heading.
#[test]
fn help_lists_out_among_the_shared_options() {
    let _turn = crate::support::any();
    let out = stagger(&["--help"], None);
    let help = String::from_utf8_lossy(&out.stdout);
    let at = |s: &str| {
        help.find(s)
            .unwrap_or_else(|| panic!("{s} missing: {help}"))
    };
    assert!(
        at("--out <DIR>") < at("Hedging model (--model hedging)"),
        "{help}"
    );
    assert!(
        at("--out <DIR>") < at("Priority model (--model priority)"),
        "{help}"
    );
}
