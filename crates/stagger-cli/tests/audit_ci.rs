//! The audit in CI: the repository's `.pre-commit-hooks.yaml` validated and
//! run by pre-commit itself, and its composite GitHub Action checked
//! against the GitHub Actions schema check-jsonschema ships — both PyPI
//! packages, in `<workspace>/target/audit-venv` (made by `.ci/run`).
//! Without them the tests print a note and pass, except under `CI`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool of the virtualenv, or `None` (after a note) outside CI.
fn tool(name: &str) -> Option<PathBuf> {
    let path = workspace().join("target/audit-venv/bin").join(name);
    if path.exists() {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !ci,
        "CI is set but {} is missing; .ci/run makes it",
        path.display()
    );
    eprintln!("note: skipping: no {}", path.display());
    None
}

#[test]
fn the_action_passes_the_github_actions_schema() {
    let _quiet = crate::support::any();
    let Some(check) = tool("check-jsonschema") else {
        return;
    };
    let out = Command::new(check)
        .args(["--builtin-schema", "vendor.github-actions"])
        .arg(workspace().join(".github/actions/stagger-audit/action.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_action_writes_sarif_and_keeps_the_exit_codes() {
    let _quiet = crate::support::any();
    let text =
        std::fs::read_to_string(workspace().join(".github/actions/stagger-audit/action.yml"))
            .unwrap();
    assert!(text.contains("--format sarif"));
    assert!(text.contains("github/codeql-action/upload-sarif"));
    assert!(text.contains(r#"echo "exit-code=$code" >> "$GITHUB_OUTPUT""#));
}

/// One step of the composite Action: its `if:` condition (empty when it
/// has none) and its `run:` script.
fn step(action: &str, name: &str) -> (String, String) {
    let mut lines = action
        .lines()
        .skip_while(|l| l.trim() != format!("- name: {name}"))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("- name:"));
    let mut cond = String::new();
    let mut script = String::new();
    while let Some(l) = lines.next() {
        if let Some(c) = l.trim().strip_prefix("if: ") {
            cond = c.to_string();
        }
        if l.trim() == "run: |" {
            let indent = l.len() - l.trim_start().len();
            for body in lines.by_ref() {
                if !body.trim().is_empty() && body.len() - body.trim_start().len() <= indent {
                    break;
                }
                script.push_str(body.trim_start());
                script.push('\n');
            }
        }
    }
    (cond, script)
}

#[test]
fn the_actions_upload_step_is_reached_on_a_tree_with_a_file_stagger_cannot_read() {
    let _quiet = crate::support::any();
    let action =
        std::fs::read_to_string(workspace().join(".github/actions/stagger-audit/action.yml"))
            .unwrap();
    let dir = TempDir::new("audit-ci");
    std::fs::create_dir_all(dir.path("tree")).unwrap();
    std::fs::copy(
        workspace().join("examples/audit/path/storefront-route.yaml"),
        dir.path("tree/route.yaml"),
    )
    .unwrap();
    // An HTTPRoute whose retry count is not a number: recognised, unreadable.
    std::fs::write(
        dir.path("tree/broken.yaml"),
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: b}\nspec:\n  rules:\n  - retry: {attempts: many}\n",
    )
    .unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_stagger")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |script: &str, env: &[(&str, &str)]| {
        std::fs::write(dir.path("step.sh"), script).unwrap();
        Command::new("bash")
            .arg("-e")
            .arg(dir.path("step.sh"))
            .current_dir(dir.path(""))
            .env("PATH", &path)
            .env("GITHUB_OUTPUT", dir.path("outputs"))
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let (_, audit) = step(&action, "Audit");
    let out = run(
        &audit,
        &[
            ("AUDIT_PATH", "tree"),
            ("AUDIT_ARGS", ""),
            ("SARIF_FILE", "audit.sarif"),
        ],
    );
    assert!(out.status.success(), "the audit step itself does not fail");
    let outputs = std::fs::read_to_string(dir.path("outputs")).unwrap();
    assert!(outputs.contains("exit-code=2"), "{outputs}");
    assert!(outputs.contains("logged=true"), "{outputs}");
    let log: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("audit.sarif")).unwrap()).unwrap();
    assert!(!log["runs"][0]["results"].as_array().unwrap().is_empty());
    assert!(
        log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
            .to_string()
            .contains("broken.yaml")
    );
    // The upload waits on nothing but the log: not on the audit's success.
    let (upload, _) = step(&action, "Upload to code scanning");
    assert!(upload.contains("!cancelled()"), "{upload}");
    assert!(
        upload.contains("steps.audit.outputs.logged == 'true'"),
        "{upload}"
    );
    assert!(!upload.contains("success()"), "{upload}");
    // And the job still fails after it, naming why.
    let (_, last) = step(
        &action,
        "Fail on an unreadable config, or on findings when asked",
    );
    let fail = run(&last, &[("CODE", "2"), ("FAIL_ON_FINDINGS", "false")]);
    assert_eq!(fail.status.code(), Some(2));
    let pass = run(&last, &[("CODE", "1"), ("FAIL_ON_FINDINGS", "false")]);
    assert!(pass.status.success());
    let findings = run(&last, &[("CODE", "1"), ("FAIL_ON_FINDINGS", "true")]);
    assert_eq!(findings.status.code(), Some(1));
}

#[test]
fn the_pre_commit_manifest_passes_pre_commit_validation() {
    let _quiet = crate::support::any();
    let Some(pc) = tool("pre-commit") else { return };
    let out = Command::new(pc)
        .arg("validate-manifest")
        .arg(workspace().join(".pre-commit-hooks.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

#[test]
fn the_pre_commit_hook_fails_a_repository_whose_path_multiplies_to_27() {
    let _quiet = crate::support::any();
    let Some(pc) = tool("pre-commit") else { return };
    let dir = TempDir::new("audit-ci");
    let repo = dir.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    for f in ["storefront-route.yaml", "storefront-application.yml"] {
        std::fs::copy(
            workspace().join("examples/audit/path").join(f),
            repo.join(f),
        )
        .unwrap();
    }
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "configs"]);
    let bin = Path::new(env!("CARGO_BIN_EXE_stagger")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(pc)
        .args(["try-repo"])
        .arg(workspace())
        .args(["stagger-audit", "--all-files"])
        .current_dir(&repo)
        .env("PATH", path)
        .env("PRE_COMMIT_HOME", dir.path("pre-commit-home"))
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("- exit code: 1"), "{text}");
    assert!(
        text.contains("27  storefront-route.yaml:storefront/0 → storefront-application.yml:inventory → @istio-sidecar:inventory"),
        "{text}"
    );
}
