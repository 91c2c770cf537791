//! The audit of a repository or a cluster dump (`stagger audit DIR`,
//! `stagger audit -`) as text: a few names and numbers per object.

use std::fmt::Write;

use stagger_audit::path::{RepoReport, Skipped};
use stagger_audit::Report;

/// The files skipped by their name that the text lists one by one.
const NAMED_SHOWN: usize = 20;

/// Finding ids in order of first appearance, each once with its count
/// (`no_budget ×3`), or `no findings`.
fn ids<'a>(all: impl Iterator<Item = &'a str>) -> String {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for id in all {
        match seen.iter_mut().find(|(x, _)| *x == id) {
            Some((_, n)) => *n += 1,
            None => seen.push((id, 1)),
        }
    }
    if seen.is_empty() {
        return "no findings".to_string();
    }
    seen.iter()
        .map(|(id, n)| match n {
            1 => (*id).to_string(),
            n => format!("{id} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A count with its noun, singular for one.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The audit of a repository or a cluster dump (`stagger audit DIR`): each
/// retrying object alone, the call paths its routes imply (worst first),
/// what was skipped and a count of what could not be read.
pub fn repo_text(
    repo: &RepoReport,
    clients: &[(String, Report)],
    skipped: &[Skipped],
    unreadable: usize,
) -> String {
    let mut s = String::new();
    let findings = |r: &stagger_audit::path::PathReport| ids(r.findings.iter().map(|f| f.id));
    let _ = writeln!(
        s,
        "Retrying objects, each alone (attempts at a dead dependency):"
    );
    for o in &repo.objects {
        let name = match &o.selector {
            Some(sel) => format!("{}:{sel}", o.file),
            None => o.file.clone(),
        };
        let _ = writeln!(
            s,
            "  {:>7}  {name}  ({})",
            stagger_audit::path::count(o.report.dead.bottom_attempts),
            findings(&o.report)
        );
    }
    for (f, r) in clients {
        let _ = writeln!(
            s,
            "  {:>7}  {f}  ({})",
            r.bottom_attempts,
            ids(r.findings.iter().map(|x| x.id))
        );
    }
    let _ = writeln!(
        s,
        "\nCall paths the routes imply, worst first (attempts at a dead dependency for one call at the edge):"
    );
    if repo.paths.is_empty() {
        let _ = writeln!(s, "  none: no route leads to another retrying object");
    }
    for p in &repo.paths {
        let _ = writeln!(
            s,
            "  {:>7}  {}",
            stagger_audit::path::count(p.report.dead.bottom_attempts),
            p.hops.join(" → ")
        );
        for cut in p.report.layers.iter().filter_map(|l| l.cut_by.as_ref()) {
            let _ = writeln!(s, "           cut by: {cut}");
        }
        for f in &p.report.findings {
            let first = f.message.split(". ").next().unwrap_or(&f.message);
            let _ = writeln!(s, "           {}: {first}", f.id);
        }
    }
    if repo.paths_cut {
        let _ = writeln!(
            s,
            "  (the walk stopped at {} paths)",
            stagger_audit::path::MAX_PATHS
        );
    }
    if !skipped.is_empty() {
        let _ = writeln!(s, "\nSkipped (not retry configs the audit reads):");
        // Every object and config file skipped for what it holds; files
        // skipped by their name (a repository's sources) up to a screen.
        let (by_name, listed): (Vec<&Skipped>, Vec<&Skipped>) =
            skipped.iter().partition(|k| k.by_name);
        for k in listed.iter().chain(by_name.iter().take(NAMED_SHOWN)) {
            let _ = writeln!(s, "  {}: {}", k.name, k.reason);
        }
        if by_name.len() > NAMED_SHOWN {
            let _ = writeln!(
                s,
                "  … and {} more files not named as configs (--format json lists every one)",
                by_name.len() - NAMED_SHOWN
            );
        }
    }
    let objects = repo.objects.len() + clients.len();
    let _ = writeln!(
        s,
        "\n{}, {}, {} skipped (not retry configs), {} unreadable.",
        count(objects, "object", "objects"),
        count(repo.paths.len(), "path", "paths"),
        skipped.len(),
        unreadable
    );
    s
}
