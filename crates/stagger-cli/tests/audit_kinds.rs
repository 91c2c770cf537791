//! `stagger audit FILE` on every kind of retry config it reads: the real
//! binary recognises each by its content and audits every object in it, or
//! says in one line what it found; the published files beside the
//! repository are read without an unusable-input exit.

use crate::common;
use crate::support;

use common::*;
use serde_json::Value;

fn audit_in(dir: &TempDir, args: &[&str]) -> Done {
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    stagger(&all, dir)
}

/// Every published file of both folders (not their notes).
fn published() -> Option<Vec<String>> {
    let mut out = Vec::new();
    for folder in ["w4-configs", "mesh-configs"] {
        let dir = support::published::folder(folder)?;
        for sub in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            if sub.path().is_dir() {
                for f in std::fs::read_dir(sub.path())
                    .unwrap()
                    .filter_map(Result::ok)
                {
                    out.push(f.path().display().to_string());
                }
            }
        }
    }
    out.sort();
    Some(out)
}

#[test]
fn every_published_file_exits_0_or_1_in_text_and_json() {
    let _quiet = crate::support::any();
    let Some(files) = published() else { return };
    assert!(files.len() >= 20, "{} files", files.len());
    let dir = TempDir::new("audit-kinds");
    for f in files {
        let d = audit_in(&dir, &[&f, "--format", "json"]);
        assert!(matches!(code(&d), Some(0 | 1)), "{f}: {}", d.stderr);
        let v: Value = serde_json::from_str(&d.stdout).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(v.is_object(), "{f}");
        let t = audit_in(&dir, &[&f]);
        assert!(matches!(code(&t), Some(0 | 1)), "{f}: {}", t.stderr);
        assert!(t.stderr.is_empty(), "{f}: {}", t.stderr);
    }
}

#[test]
fn a_mesh_file_is_audited_object_by_object() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-kinds");
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n  hosts: [a]\n  http:\n  - name: read\n    route:\n    - destination: {host: a}\n  - name: write\n    route:\n    - destination: {host: a}\n    retries: {attempts: 0}\n";
    std::fs::write(dir.path("vs.yaml"), vs).unwrap();
    let d = audit_in(&dir, &["vs.yaml"]);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    assert!(
        d.stdout
            .contains("== vs.yaml:a/read (an Istio VirtualService"),
        "{}",
        d.stdout
    );
    assert!(d.stdout.contains("== vs.yaml:a/write"), "{}", d.stdout);
    let j = audit_in(&dir, &["vs.yaml", "--format", "json"]);
    let v: Value = serde_json::from_str(&j.stdout).unwrap();
    let paths = v["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2);
    assert_eq!(paths[0]["report"]["dead"]["bottom_attempts"], 3.0);
    assert_eq!(paths[1]["report"]["dead"]["bottom_attempts"], 1.0);
}

#[test]
fn a_kind_it_does_not_read_is_named_in_one_line() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-kinds");
    std::fs::write(
        dir.path("d.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n",
    )
    .unwrap();
    let d = audit_in(&dir, &["d.yaml"]);
    assert_eq!(code(&d), Some(2));
    assert_eq!(d.stderr.lines().count(), 1, "{}", d.stderr);
    assert!(
        d.stderr.contains("d.yaml") && d.stderr.contains("Deployment"),
        "{}",
        d.stderr
    );
    assert!(!d.stderr.contains("serviceConfig"), "{}", d.stderr);
}

#[test]
fn a_mesh_file_among_several_names_the_flag_that_reads_them_together() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-kinds");
    std::fs::write(dir.path("vs.yaml"), "apiVersion: networking.istio.io/v1\nkind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - route: []\n").unwrap();
    std::fs::write(dir.path("svc.json"), "{}").unwrap();
    let d = audit_in(&dir, &["vs.yaml", "svc.json"]);
    assert_eq!(code(&d), Some(2));
    assert_eq!(d.stderr.lines().count(), 1, "{}", d.stderr);
    assert!(d.stderr.contains("--path vs.yaml,svc.json"), "{}", d.stderr);
}

// `--path` refused over 4 MiB; plain `audit` read 50 MB into memory.
#[test]
fn plain_audit_refuses_a_file_over_4_mib_before_reading_it() {
    let _quiet = crate::support::any();
    let dir = TempDir::new("audit-kinds");
    let big = format!("{{\"methodConfig\":[],\"x\":\"{}\"}}", "a".repeat(5 << 20));
    std::fs::write(dir.path("big.json"), big).unwrap();
    let d = audit_in(&dir, &["big.json"]);
    assert_eq!(code(&d), Some(2));
    assert_eq!(d.stderr.lines().count(), 1, "{}", d.stderr);
    assert!(
        d.stderr.contains("big.json") && d.stderr.contains("4 MiB"),
        "{}",
        d.stderr
    );
}

#[test]
fn the_worked_path_gives_27_connects_through_the_binary() {
    let _quiet = crate::support::any();
    let Some(w4) = support::published::folder("w4-configs") else {
        return;
    };
    let route = w4.join("gateway-api/gateway-api__httproute-retry.yaml");
    let app = w4.join("resilience4j/resilience4j-spring-boot2-demo__application.yml");
    let p = format!(
        "{}:retries/1,{}:backendA,@istio-sidecar",
        route.display(),
        app.display()
    );
    let dir = TempDir::new("audit-kinds");
    let d = audit_in(&dir, &["--path", &p, "--format", "json"]);
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    let v: Value = serde_json::from_str(&d.stdout).unwrap();
    assert_eq!(v["dead"]["bottom_attempts"], 27.0);
    assert!(v["layers"][1]["cut_by"]
        .as_str()
        .unwrap()
        .contains("circuit breaker backendA"));
}
