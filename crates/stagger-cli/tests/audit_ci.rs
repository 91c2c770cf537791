//! The audit in CI: the repository's `.pre-commit-hooks.yaml` validated and
//! run by pre-commit itself, and its composite GitHub Action checked
//! against the GitHub Actions schema check-jsonschema ships — both PyPI
//! packages, in `<workspace>/target/audit-venv` (made by `.ci/run`).
//! Without them the tests print a note and pass, except under `CI`.

mod common;

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
    let text =
        std::fs::read_to_string(workspace().join(".github/actions/stagger-audit/action.yml"))
            .unwrap();
    assert!(text.contains("--format sarif"));
    assert!(text.contains("github/codeql-action/upload-sarif"));
    assert!(text.contains(r#"if [ "$code" -ge 2 ]; then exit "$code"; fi"#));
}

#[test]
fn the_pre_commit_manifest_passes_pre_commit_validation() {
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
