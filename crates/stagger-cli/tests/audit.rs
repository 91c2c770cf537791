//! `stagger audit` end to end: the real binary on the configs under
//! `examples/audit`, its exit codes (0 clean, 1 findings, 2 unusable input)
//! and its JSON.

use crate::common;
use crate::support;

use common::*;
use serde_json::Value;

fn example(name: &str) -> String {
    format!("{}/../../examples/audit/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn audit(args: &[&str]) -> Done {
    let dir = TempDir::new("audit");
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    stagger(&all, &dir)
}

#[test]
fn good_examples_exit_0_with_no_finding() {
    let _quiet = crate::support::any();
    for f in ["service-config-good.json", "policy-good.toml"] {
        let d = audit(&[&example(f)]);
        assert_eq!(code(&d), Some(0), "{f}: {}{}", d.stdout, d.stderr);
        assert!(d.stdout.starts_with("no findings"), "{}", d.stdout);
        assert!(d.stdout.contains("attempts at the bottom of the path: 3"));
    }
}

#[test]
fn bad_examples_exit_1_and_name_every_checklist_item() {
    let _quiet = crate::support::any();
    let d = audit(&[&example("policy-bad.toml")]);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    for id in [
        "non_transient_codes",
        "attempts_high",
        "no_jitter",
        "no_backoff",
        "no_budget",
        "no_deadline",
        "retry_after_ignored",
        "no_breaker",
    ] {
        assert!(d.stdout.contains(id), "{id} missing:\n{}", d.stdout);
    }
    let d = audit(&[&example("service-config-bad.json")]);
    assert_eq!(code(&d), Some(1));
    assert!(d.stdout.contains("treats as 5"), "{}", d.stdout);
    // One entry gRPC rejects: the client runs without the whole config.
    let d = audit(&[&example("service-config-rejected.json")]);
    assert_eq!(code(&d), Some(1));
    assert!(d.stdout.contains("invalid"), "{}", d.stdout);
    assert!(
        d.stdout.contains("attempts at the bottom of the path: 1"),
        "{}",
        d.stdout
    );
}

#[test]
fn json_has_the_documented_shape() {
    let _quiet = crate::support::any();
    let d = audit(&[&example("service-config-bad.json"), "--format", "json"]);
    assert_eq!(code(&d), Some(1));
    assert!(
        d.stdout.starts_with(r#"{"findings":[{"id":"#),
        "{}",
        d.stdout
    );
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    let top: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(top, ["bottom_attempts", "findings", "methods"]);
    for f in v["findings"].as_array().unwrap() {
        let keys: Vec<_> = f.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["file", "id", "message", "method"]);
    }
    let get = &v["methods"][0];
    assert_eq!(get["method"], "shop.Cart/Get");
    // maxAttempts 10 is capped at 5 by gRPC: a dead dependency gets 5.
    assert_eq!(get["amplification"]["dead"], 5.0);
    assert!(get["amplification"]["half"].as_f64().unwrap() > 1.8);
    assert_eq!(v["bottom_attempts"], 5);

    let d = audit(&[&example("service-config-good.json"), "--format", "json"]);
    assert_eq!(code(&d), Some(0));
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["findings"], Value::Array(vec![]));
}

#[test]
fn layers_multiply_and_are_reported() {
    let _quiet = crate::support::any();
    let d = audit(&[
        &example("service-config-bad.json"),
        &example("policy-bad.toml"),
        "--format",
        "json",
    ]);
    assert_eq!(code(&d), Some(1));
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["bottom_attempts"], 30);
    assert!(v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "duplicate_layers"
            && f["message"].as_str().unwrap().contains("5 × 6 = 30")));
}

#[test]
fn unusable_input_exits_2_naming_the_file_and_the_field() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-bad");
    std::fs::write(dir.path("p.toml"), "attempts = 0\n").unwrap();
    std::fs::write(dir.path("s.json"), "{\"methodConfig\": {}}").unwrap();
    std::fs::write(dir.path("x.json"), "not json").unwrap();
    for (file, field) in [
        ("p.toml", "`attempts`"),
        ("s.json", "`methodConfig`"),
        ("x.json", "`serviceConfig`"),
    ] {
        let d = stagger(&["audit", file], &dir);
        assert_eq!(code(&d), Some(2), "{file}");
        assert!(
            d.stderr.contains(file) && d.stderr.contains(field),
            "{file}: {}",
            d.stderr
        );
        assert!(d.stdout.is_empty());
    }
    let d = stagger(&["audit", "missing.json"], &dir);
    assert_eq!(code(&d), Some(2));
    assert!(d.stderr.contains("missing.json"), "{}", d.stderr);
    // Bad usage: no file, an unknown format.
    assert_eq!(code(&stagger(&["audit"], &dir)), Some(2));
    let d = stagger(
        &["audit", &example("policy-good.toml"), "--format", "xml"],
        &dir,
    );
    assert_eq!(code(&d), Some(2));
}

/// The audit's page shows real output: every `$ stagger audit …` block in
/// `docs/audit.md` is what the binary prints today.
#[test]
fn readme_shows_real_output() {
    let _quiet = crate::support::any();
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(format!("{root}/docs/audit.md")).unwrap();
    let mut checked = 0;
    let mut lines = readme.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(cmd) = line.strip_prefix("$ stagger audit ") else {
            continue;
        };
        let mut shown = String::new();
        while let Some(l) = lines.peek() {
            if l.starts_with("$ ") || l.starts_with("```") {
                break;
            }
            shown.push_str(lines.next().unwrap());
            shown.push('\n');
        }
        let dir = TempDir::new("audit-readme");
        let mut args = vec!["audit"];
        let paths: Vec<String> = cmd
            .split_whitespace()
            .map(|a| {
                // A lone file or a `--path` list of them.
                a.split(',')
                    .map(|p| {
                        if p.starts_with("examples/") {
                            format!("{root}/{p}")
                        } else {
                            p.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        args.extend(paths.iter().map(String::as_str));
        let d = stagger(&args, &dir);
        let printed = d.stdout.replace(&format!("{root}/"), "");
        assert_eq!(printed, shown, "docs/audit.md block for `{cmd}` is stale");
        checked += 1;
    }
    assert!(checked >= 4, "found {checked} audit blocks");
}

/// The published configs beside the repository, or `None` (with a note)
/// where the folder is absent; under CI its absence fails.
fn published() -> Option<Vec<String>> {
    let dir = support::published::folder("service-configs")?;
    let read =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: cannot list: {e}", dir.display()));
    let mut out: Vec<String> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no config in {}", dir.display());
    Some(out)
}

#[test]
fn every_published_config_exits_0_or_1_with_json() {
    let _quiet = crate::support::any();
    let Some(files) = published() else { return };
    for f in files {
        let d = stagger_with(
            &["audit", &f, "--format", "json"],
            &TempDir::new("audit-published"),
            None,
            std::time::Duration::from_secs(60),
        );
        assert!(matches!(code(&d), Some(0 | 1)), "{f}: {}", d.stderr);
        assert!(d.stderr.is_empty(), "{f}: {}", d.stderr);
        let v: Value = serde_json::from_str(&d.stdout).unwrap();
        assert!(
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .all(|x| x["id"] != "invalid"),
            "{f}: {}",
            d.stdout
        );
        // Text too: one row per entry, every line within 120 columns.
        let d = stagger(&["audit", &f], &TempDir::new("audit-published"));
        assert!(matches!(code(&d), Some(0 | 1)), "{f}: {}", d.stderr);
        for line in d.stdout.lines() {
            assert!(line.chars().count() <= 120, "{f}: {line}");
        }
    }
}

/// A service config with `n` method names in one entry.
fn many_names(dir: &TempDir, n: usize) -> String {
    let names: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({"service": "google.cloud.kms.v1.KeyManagementService",
                "method": format!("ListCryptoKeyVersionsOfAKeyRing{i}")})
        })
        .collect();
    let v = serde_json::json!({"methodConfig": [{"name": names, "timeout": "60s",
        "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "60s",
        "backoffMultiplier": 1.3, "retryableStatusCodes": ["UNAVAILABLE", "DEADLINE_EXCEEDED"]}}]});
    let path = dir.path("kms.json");
    std::fs::write(&path, v.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn thousands_of_names_in_one_entry_print_one_row_within_120_columns() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-many");
    let file = many_names(&dir, 3000);
    let d = stagger(&["audit", &file], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    for line in d.stdout.lines() {
        assert!(line.chars().count() <= 120, "{line}");
    }
    let rows: Vec<&str> = d
        .stdout
        .lines()
        .filter(|l| l.contains("  exact") || l.contains("  estimate"))
        .collect();
    assert_eq!(rows.len(), 1, "{}", d.stdout);
    assert!(rows[0].contains("(+2999)"), "{}", rows[0]);
}

#[test]
fn a_closed_stdout_ends_the_program_quietly() {
    let _quiet = crate::support::any();
    use std::io::Read;
    let dir = TempDir::new("audit-pipe");
    let file = many_names(&dir, 3000);
    let started = std::time::Instant::now();
    let mut child = spawn(&["audit", &file, "--format", "json"], &dir.0, false);
    let mut head = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The pipe is closed here, with most of the JSON unread.
    let d = finish(child, started, std::time::Duration::from_secs(30));
    assert!(head.starts_with(b"{\"findings\""));
    assert!(d.stderr.is_empty(), "{}", d.stderr);
    assert!(matches!(code(&d), Some(0 | 1)), "{:?}", d.status);
}

fn path_example(name: &str) -> String {
    example(&format!("path/{name}"))
}

#[test]
fn a_call_path_multiplies_to_27_and_its_fixed_form_to_3() {
    let _quiet = crate::support::any();
    let bad = [
        path_example("edge-vs.yaml"),
        path_example("cart-service-config.json"),
        path_example("inventory-db.toml"),
    ]
    .join(",");
    let d = audit(&["--path", &bad]);
    assert_eq!(code(&d), Some(1), "{}{}", d.stdout, d.stderr);
    assert!(d.stdout.contains("27 attempts per call"), "{}", d.stdout);
    for id in [
        "retries_at_several_layers",
        "mesh_default_retries",
        "no_budget_on_path",
    ] {
        assert!(d.stdout.contains(id), "{id}: {}", d.stdout);
    }
    assert!(
        d.stdout.lines().all(|l| l.chars().count() <= 120),
        "{}",
        d.stdout
    );
    let fixed = [
        path_example("edge-vs-fixed.yaml"),
        path_example("cart-service-config-fixed.json"),
        path_example("inventory-db-fixed.toml"),
    ]
    .join(",");
    let dir = TempDir::new("audit-path");
    let svg = dir.path("path.svg");
    let svg = svg.to_str().unwrap();
    let d = stagger(
        &["audit", "--path", &fixed, "--format", "json", "--svg", svg],
        &dir,
    );
    assert_eq!(code(&d), Some(0), "{}{}", d.stdout, d.stderr);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["dead"]["bottom_attempts"], 3.0);
    assert_eq!(v["layers"][0]["system"], "istio");
    assert_eq!(v["layers"].as_array().unwrap().len(), 3);
    let picture = std::fs::read_to_string(svg).unwrap();
    assert!(
        picture.starts_with("<svg") && picture.contains("3 attempts"),
        "{picture}"
    );
}

#[test]
fn a_path_selector_that_matches_nothing_exits_2_naming_the_choices() {
    let _quiet = crate::support::any();
    let p = format!("{}:nowhere", path_example("edge-vs.yaml"));
    let d = audit(&["--path", &p]);
    assert_eq!(code(&d), Some(2), "{}{}", d.stdout, d.stderr);
    assert!(
        d.stderr
            .contains("no VirtualService routes host \"nowhere\" (hosts: cart)"),
        "{}",
        d.stderr
    );
    let d = audit(&["--path", "/no/such/file.yaml"]);
    assert_eq!(code(&d), Some(2));
    assert!(
        d.stderr.contains("/no/such/file.yaml: cannot read"),
        "{}",
        d.stderr
    );
    let d = audit(&[
        "--path",
        &path_example("edge-vs.yaml"),
        "--failure-rate",
        "2",
    ]);
    assert_eq!(code(&d), Some(2));
    assert!(d.stderr.contains("--failure-rate"), "{}", d.stderr);
}

#[test]
fn rate_and_latency_size_a_cap_and_one_without_the_other_is_a_usage_error() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-sizing");
    let text = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cart}\nspec:\n  hosts: [cart]\n  http:\n  - route:\n    - destination: {host: cart}\n    retries: {attempts: 2, retryOn: connect-failure}\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: cart}\nspec:\n  host: cart\n  trafficPolicy: {connectionPool: {http: {maxRetries: 10}}}\n";
    std::fs::write(dir.path("dr.yaml"), text).unwrap();
    let d = stagger(
        &[
            "audit",
            "--path",
            "dr.yaml",
            "--rate",
            "100",
            "--latency",
            "500ms",
            "--bound",
            "1.1",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    assert!(
        d.stdout
            .contains("the cap of 10 lets 20 retries/s through of 200 wanted"),
        "{}",
        d.stdout
    );
    assert!(
        d.stdout.contains("budget_concurrency_floor"),
        "{}",
        d.stdout
    );
    let alone = stagger(&["audit", "--path", "dr.yaml", "--rate", "100"], &dir);
    assert_eq!(code(&alone), Some(2));
    assert!(alone.stderr.contains("--latency"), "{}", alone.stderr);
    let bad = stagger(
        &[
            "audit",
            "--path",
            "dr.yaml",
            "--rate",
            "100",
            "--latency",
            "0s",
        ],
        &dir,
    );
    assert_eq!(code(&bad), Some(2));
    assert!(bad.stderr.contains("--latency"), "{}", bad.stderr);
}

#[test]
fn the_help_says_the_audit_reads_meshes_gateways_proxies_and_dumps() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit");
    let d = stagger(&["--help"], &dir);
    let line = d
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("audit"))
        .unwrap_or_default()
        .to_string();
    for word in ["meshes", "gateways", "proxies", "kubectl"] {
        assert!(line.contains(word), "{word} missing from {line:?}");
    }
}
