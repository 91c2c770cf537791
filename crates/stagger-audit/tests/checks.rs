//! The checks the audit makes are listed once (`stagger_audit::checks`),
//! and the user's page documents the same ids.

use std::collections::BTreeSet;

use stagger_audit::checks::CHECKS;

/// The ids in the first column of docs/audit.md's finding tables.
fn documented() -> BTreeSet<String> {
    let page = std::fs::read_to_string(format!(
        "{}/../../docs/audit.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    page.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(id, _)| id.to_string())
        .filter(|id| id.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

#[test]
fn every_check_is_documented_and_every_documented_id_is_a_check() {
    let checks: BTreeSet<String> = CHECKS.iter().map(|c| c.id.to_string()).collect();
    let docs = documented();
    let undocumented: Vec<_> = checks.difference(&docs).collect();
    let unknown: Vec<_> = docs.difference(&checks).collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/audit.md: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "documented but not a check: {unknown:?}"
    );
}
