//! `stagger audit` end to end: the real binary on the configs under
//! `examples/audit`, its exit codes (0 clean, 1 findings, 2 unusable input)
//! and its JSON.

mod common;

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
    for f in ["service-config-good.json", "policy-good.toml"] {
        let d = audit(&[&example(f)]);
        assert_eq!(code(&d), Some(0), "{f}: {}{}", d.stdout, d.stderr);
        assert!(d.stdout.starts_with("no findings"), "{}", d.stdout);
        assert!(d.stdout.contains("attempts at the bottom of the path: 3"));
    }
}

#[test]
fn bad_examples_exit_1_and_name_every_checklist_item() {
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
    assert!(d.stdout.contains("invalid") && d.stdout.contains("treats as 5"));
}

#[test]
fn json_has_the_documented_shape() {
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
        assert_eq!(keys, ["id", "message", "method"]);
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

/// The README shows real output: every `$ stagger audit …` block in it is
/// what the binary prints today.
#[test]
fn readme_shows_real_output() {
    let root = format!("{}/../..", env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
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
                if a.starts_with("examples/") {
                    format!("{root}/{a}")
                } else {
                    a.to_string()
                }
            })
            .collect();
        args.extend(paths.iter().map(String::as_str));
        let d = stagger(&args, &dir);
        let printed = d.stdout.replace(&format!("{root}/"), "");
        assert_eq!(printed, shown, "README block for `{cmd}` is stale");
        checked += 1;
    }
    assert!(checked >= 4, "found {checked} audit blocks");
}
