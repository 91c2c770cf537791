//! `stagger audit DIR` and `stagger audit -` on the real binary: a tree of
//! files read whole (unrecognised files skipped with a count, unreadable
//! ones reported), a `kubectl get … -A -o yaml` dump read from stdin, and
//! every call path the routes imply printed worst first.

use crate::common;
use crate::support;

use std::time::Duration;

use common::*;
use serde_json::Value;

fn repo(rel: &str) -> String {
    format!("{}/../../{rel}", env!("CARGO_MANIFEST_DIR"))
}

const VS: &str = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cart, namespace: shop}\nspec:\n  hosts: [cart]\n  http:\n  - route:\n    - destination: {host: cart}\n    retries: {attempts: 2, retryOn: connect-failure}\n";

#[test]
fn the_examples_directory_prints_the_27_attempt_path_first() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    let d = stagger(&["audit", &repo("examples/audit/path")], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let paths = d.stdout.split("Call paths").nth(1).expect(&d.stdout);
    let first = paths.lines().nth(1).unwrap();
    assert!(first.trim_start().starts_with("27 "), "{first}");
    assert!(
        first.contains("storefront-route.yaml:storefront/0 → "),
        "{first}"
    );
    assert!(first.ends_with("@istio-sidecar:inventory"), "{first}");
    assert!(
        paths.contains("cut by: circuit breaker inventory"),
        "{paths}"
    );
    let j = stagger(
        &["audit", &repo("examples/audit/path"), "--format", "json"],
        &dir,
    );
    let v = json(&j);
    assert_eq!(v["paths"][0]["report"]["dead"]["bottom_attempts"], 27.0);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(
        skipped.len(),
        1,
        "the folder's README is not a retry config"
    );
    assert!(skipped[0]["name"].as_str().unwrap().ends_with("README.md"));
}

#[test]
fn files_the_audit_does_not_recognise_are_listed_as_skipped_with_the_reason() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    std::fs::create_dir_all(dir.path("tree/sub")).unwrap();
    std::fs::create_dir_all(dir.path("tree/.git")).unwrap();
    std::fs::write(dir.path("tree/README.md"), "# hello\n").unwrap();
    std::fs::write(dir.path("tree/Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    std::fs::write(dir.path("tree/package.json"), "{\"name\": \"x\"}").unwrap();
    std::fs::write(
        dir.path("tree/sub/logo.png"),
        [0x89u8, 0x50, 0x4e, 0x47, 0, 0xff],
    )
    .unwrap();
    std::fs::write(dir.path("tree/.git/config.yaml"), VS).unwrap();
    std::fs::write(dir.path("tree/sub/cart-vs.yaml"), VS).unwrap();
    let d = stagger(&["audit", "tree", "--format", "json"], &dir);
    assert!(matches!(code(&d), Some(0 | 1)), "{}", d.stderr);
    let v = json(&d);
    let skipped: Vec<&str> = v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        skipped,
        [
            "tree/Cargo.toml",
            "tree/README.md",
            "tree/package.json",
            "tree/sub/logo.png"
        ],
        "{v}"
    );
    assert!(v["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .all(|k| k["reason"].as_str().is_some_and(|r| !r.is_empty())));
    assert_eq!(
        v["objects"].as_array().unwrap().len(),
        1,
        "hidden folders are not read"
    );
    let t = stagger(&["audit", "tree"], &dir);
    assert!(
        t.stdout
            .contains("4 skipped (not retry configs), 0 unreadable"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("  tree/README.md: not a config file by its name"),
        "{}",
        t.stdout
    );
}

#[test]
fn an_unreadable_recognised_file_is_reported_and_exits_2() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    std::fs::create_dir_all(dir.path("tree")).unwrap();
    std::fs::write(dir.path("tree/good.yaml"), VS).unwrap();
    std::fs::write(
        dir.path("tree/broken.yaml"),
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nspec: [\n",
    )
    .unwrap();
    let d = stagger(&["audit", "tree"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stdout);
    assert!(d.stderr.contains("broken.yaml"), "{}", d.stderr);
    assert!(
        d.stdout.contains("good.yaml"),
        "the rest is still audited: {}",
        d.stdout
    );
    assert!(d.stdout.contains("1 unreadable"), "{}", d.stdout);
}

fn dump(n: usize) -> String {
    let mut s = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for i in 0..n {
        let ns = format!("team-{}", i % 40);
        match i % 3 {
            0 | 1 => s.push_str(&format!(
                "- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata: {{name: svc-{i}, namespace: {ns}}}\n  spec:\n    hosts: [svc-{i}]\n    http:\n    - route:\n      - destination: {{host: svc-{i}}}\n      retries: {{attempts: {}, retryOn: 5xx}}\n",
                1 + i % 4
            )),
            _ => s.push_str(&format!(
                "- apiVersion: gateway.networking.k8s.io/v1\n  kind: HTTPRoute\n  metadata: {{name: r-{i}, namespace: {ns}}}\n  spec:\n    rules:\n    - backendRefs: [{{name: svc-{}}}]\n      retry: {{attempts: 2}}\n",
                i - 1
            )),
        }
    }
    s
}

#[test]
fn a_kubectl_dump_on_stdin_is_read_object_by_object() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    let text = dump(90);
    let d = stagger_with(
        &["audit", "-", "--format", "json"],
        &dir,
        Some(text.as_bytes()),
        Duration::from_secs(60),
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let v = json(&d);
    let objects = v["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 90);
    assert_eq!(objects[0]["file"], "-#VirtualService/team-0/svc-0");
    // svc-1 retries 1 + 1 % 4 = 2 attempts: 3 tries.
    assert_eq!(objects[1]["report"]["dead"]["bottom_attempts"], 3.0);
}

/// Every object of a large dump is audited. What it costs is a benchmark
/// (BENCHMARKS.md, "`stagger audit` on a cluster dump"), not a test: the
/// limit here only ends a run that hangs.
#[test]
fn a_ten_thousand_object_dump_is_audited_whole() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    let text = dump(10_000);
    let d = stagger_with(
        &["audit", "-", "--format", "json"],
        &dir,
        Some(text.as_bytes()),
        Duration::from_secs(300),
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["objects"].as_array().unwrap().len(), 10_000);
}

#[test]
fn every_published_file_in_one_tree_is_read_and_its_paths_are_worst_first() {
    let _quiet = crate::support::any();
    let Some(w4) = support::published::folder("w4-configs") else {
        return;
    };
    let root = w4.parent().unwrap().display().to_string();
    let dir = TempDir::new("audit-repo");
    let d = stagger(&["audit", &root, "--format", "json"], &dir);
    assert!(matches!(code(&d), Some(0 | 1)), "{}", d.stderr);
    let v = json(&d);
    assert_eq!(v["unreadable"], Value::Array(vec![]));
    let bottoms: Vec<f64> = v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["report"]["dead"]["bottom_attempts"].as_f64().unwrap())
        .collect();
    assert!(bottoms.windows(2).all(|w| w[0] >= w[1]), "{bottoms:?}");
    // Paths start where traffic enters, never at an application that no
    // route of these folders leads to.
    for p in v["paths"].as_array().unwrap() {
        let first = p["hops"][0].as_str().unwrap();
        assert!(!first.contains("resilience4j"), "{first}");
    }
    assert!(v["objects"].as_array().unwrap().len() >= 20);
}

#[test]
fn malformed_dumps_on_stdin_are_one_line_errors_and_exit_2() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    let bomb = "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n";
    let big = format!("x: {}\n", "y".repeat(50 << 20));
    let cases: [(&str, Vec<u8>); 5] = [
        ("empty", Vec::new()),
        ("binary", vec![0xff, 0xfe, 0x00, 0x81, 0x92]),
        ("alias bomb", bomb.as_bytes().to_vec()),
        ("50 MB", big.into_bytes()),
        ("wrong types", b"apiVersion: networking.istio.io/v1\nkind: VirtualService\nspec: {hosts: [a], http: [{retries: {attempts: many}}]}\n".to_vec()),
    ];
    for (what, input) in cases {
        let d = stagger_with(&["audit", "-"], &dir, Some(&input), Duration::from_secs(60));
        assert_eq!(code(&d), Some(2), "{what}: {}", d.stdout);
        let errors: Vec<&str> = d.stderr.lines().collect();
        assert_eq!(errors.len(), 1, "{what}: {}", d.stderr);
        assert!(
            errors[0].contains("-:") || errors[0].contains("stdin:"),
            "{what}: {}",
            errors[0]
        );
    }
}

/// A small dump as `kubectl get vs,dr,httproute,deploy -A -o yaml` prints
/// it: a VirtualService that turns retries off, its DestinationRule, an
/// HTTPRoute that tries 6 times and a Deployment.
const MIXED: &str = "apiVersion: v1
kind: List
items:
- apiVersion: networking.istio.io/v1
  kind: VirtualService
  metadata: {name: cart, namespace: shop}
  spec:
    hosts: [cart]
    http:
    - route:
      - destination: {host: cart}
      retries: {attempts: 0}
- apiVersion: networking.istio.io/v1
  kind: DestinationRule
  metadata: {name: cart, namespace: shop}
  spec:
    host: cart
    trafficPolicy: {connectionPool: {http: {maxRetries: 4}}}
- apiVersion: gateway.networking.k8s.io/v1
  kind: HTTPRoute
  metadata: {name: web, namespace: shop}
  spec:
    rules:
    - backendRefs: [{name: web, port: 80}]
      retry: {attempts: 5, codes: [503]}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: web, namespace: shop}
  spec: {}
";

#[test]
fn mixed_kinds_on_stdin_are_each_audited_or_listed_as_skipped() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    let d = stagger_with(
        &["audit", "-", "--format", "json"],
        &dir,
        Some(MIXED.as_bytes()),
        Duration::from_secs(60),
    );
    // The HTTPRoute's 6 tries are a finding: not "no findings", exit 0.
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let v = json(&d);
    let files: Vec<&str> = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["file"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["-#VirtualService", "-#HTTPRoute"], "{v}");
    let route = &v["objects"][1]["report"];
    assert_eq!(route["dead"]["bottom_attempts"], 6.0);
    // The DestinationRule is read with its VirtualService.
    let vs = v["objects"][0]["report"].to_string();
    assert!(vs.contains("maxRetries"), "{vs}");
    assert_eq!(
        v["skipped"],
        serde_json::json!([{
            "name": "-#Deployment/shop/web",
            "kind": "Deployment",
            "reason": "a Kubernetes Deployment, which holds no retry settings stagger reads"
        }])
    );
    let t = stagger_with(
        &["audit", "-"],
        &dir,
        Some(MIXED.as_bytes()),
        Duration::from_secs(60),
    );
    assert!(
        t.stdout
            .contains("  -#Deployment/shop/web: a Kubernetes Deployment"),
        "{}",
        t.stdout
    );
    let sarif = stagger_with(
        &["audit", "-", "--format", "sarif"],
        &dir,
        Some(MIXED.as_bytes()),
        Duration::from_secs(60),
    );
    let log: Value = serde_json::from_str(&sarif.stdout).unwrap();
    let notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"].to_string();
    assert!(notes.contains("skipped -#Deployment/shop/web"), "{notes}");
}

#[test]
fn mixed_kinds_in_one_file_are_each_audited_in_text_json_and_sarif() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    std::fs::write(dir.path("mixed.yaml"), MIXED).unwrap();
    let d = stagger(&["audit", "mixed.yaml", "--format", "json"], &dir);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let v = json(&d);
    let files: Vec<&str> = v["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["file"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["mixed.yaml#VirtualService", "mixed.yaml#HTTPRoute"]);
    assert_eq!(v["skipped"][0]["name"], "mixed.yaml#Deployment/shop/web");
    let t = stagger(&["audit", "mixed.yaml"], &dir);
    assert!(t.stdout.contains("== mixed.yaml#HTTPRoute"), "{}", t.stdout);
    assert!(
        t.stdout.contains("skipped mixed.yaml#Deployment/shop/web"),
        "{}",
        t.stdout
    );
    let s = stagger(&["audit", "mixed.yaml", "--format", "sarif"], &dir);
    let log: Value = serde_json::from_str(&s.stdout).unwrap();
    let route_line = MIXED
        .lines()
        .position(|l| l.contains("codes: [503]"))
        .unwrap()
        + 1;
    assert!(
        log["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| {
                let p = &r["locations"][0]["physicalLocation"];
                p["artifactLocation"]["uri"] == "mixed.yaml"
                    && p["region"]["startLine"] == route_line
            }),
        "{log}"
    );
}

/// Every regular file under `dir`, as the walk names it.
fn files_under(dir: &std::path::Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p.display().to_string());
        }
    }
}

#[test]
fn every_file_of_the_published_folders_is_audited_or_listed_as_skipped() {
    let _quiet = crate::support::any();
    let Some(w4) = support::published::folder("w4-configs") else {
        return;
    };
    let data = w4.parent().unwrap().to_path_buf();
    let dir = TempDir::new("audit-repo");
    for folder in ["w4-configs", "mesh-configs", "service-configs"] {
        let root = data.join(folder);
        let d = stagger(
            &["audit", &root.display().to_string(), "--format", "json"],
            &dir,
        );
        assert!(matches!(code(&d), Some(0 | 1)), "{folder}: {}", d.stderr);
        let v = json(&d);
        let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let whole = |name: &str| name.split('#').next().unwrap_or(name).to_string();
        for o in v["objects"].as_array().unwrap() {
            seen.insert(whole(o["file"].as_str().unwrap()));
        }
        for c in v["clients"].as_array().unwrap() {
            seen.insert(whole(c["file"].as_str().unwrap()));
        }
        for k in v["skipped"].as_array().unwrap() {
            assert!(!k["reason"].as_str().unwrap().is_empty(), "{k}");
            seen.insert(whole(k["name"].as_str().unwrap()));
        }
        if folder == "mesh-configs" {
            // An AWS shared config named as the SDK's tests name it is read.
            assert!(
                seen.iter()
                    .any(|f| f.ends_with("aws-sdk-go-v2__shared_config"))
                    && !v["skipped"]
                        .to_string()
                        .contains("aws-sdk-go-v2__shared_config"),
                "{v}"
            );
        }
        let mut all = Vec::new();
        files_under(&root, &mut all);
        for f in all {
            assert!(seen.contains(&f), "{f} neither audited nor skipped");
        }
    }
}

#[test]
fn the_text_lists_a_screen_of_files_skipped_by_name_and_counts_the_rest() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-repo");
    std::fs::create_dir_all(dir.path("tree/src")).unwrap();
    for i in 0..25 {
        std::fs::write(dir.path(&format!("tree/src/m{i:02}.rs")), "fn main() {}\n").unwrap();
    }
    std::fs::write(
        dir.path("tree/deploy.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {}\n",
    )
    .unwrap();
    let t = stagger(&["audit", "tree"], &dir);
    assert!(matches!(code(&t), Some(0 | 1)), "{}", t.stderr);
    assert!(
        t.stdout
            .contains("  tree/deploy.yaml: a Kubernetes Deployment"),
        "{}",
        t.stdout
    );
    let listed = t
        .stdout
        .lines()
        .filter(|l| l.contains("tree/src/m"))
        .count();
    assert_eq!(listed, 20, "{}", t.stdout);
    assert!(
        t.stdout
            .contains("… and 5 more files not named as configs (--format json lists every one)"),
        "{}",
        t.stdout
    );
    let j = stagger(&["audit", "tree", "--format", "json"], &dir);
    assert_eq!(json(&j)["skipped"].as_array().unwrap().len(), 26);
}
