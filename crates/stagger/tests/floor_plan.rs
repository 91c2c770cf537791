//! The library's floor plan holds: few top-level modules, and an engine
//! and guardrails that touch no transport, runtime or clock of their own.
//! Read from the source tree, so a change that breaks the plan fails here.

use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The lines of `file` that are code (comments and doc comments dropped).
fn code(file: &Path) -> Vec<(usize, String)> {
    fs::read_to_string(file)
        .unwrap()
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect()
}

#[test]
fn the_crate_has_at_most_16_top_level_modules() {
    let mut modules: Vec<String> = Vec::new();
    for entry in fs::read_dir(src()).unwrap() {
        let p = entry.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
        if stem == "lib" || modules.contains(&stem) {
            continue;
        }
        modules.push(stem);
    }
    modules.sort();
    assert!(
        modules.len() <= 16,
        "{} modules: {modules:?}",
        modules.len()
    );
    // And lib.rs declares no module of its own beyond them.
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared = lib
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            (l.starts_with("mod ") || l.starts_with("pub mod ")) && !l.ends_with(';')
        })
        .count();
    assert_eq!(declared, 0, "an inline module in lib.rs");
}

/// The code lines of every non-test source under `dir`: a file's unit
/// tests (from its first unindented `#[cfg(...test...)]` on), `tests.rs` and the loom
/// models may use what they like.
fn library_code(dir: &str) -> Vec<(PathBuf, usize, String)> {
    let mut out = Vec::new();
    for file in sources(&src().join(dir)) {
        if file.ends_with("tests.rs") || file.ends_with("loom.rs") {
            continue;
        }
        for (n, line) in code(&file) {
            // A file's unit tests are a module at its end, unindented.
            if line.starts_with("#[cfg(") && line.contains("test") {
                break;
            }
            out.push((file.clone(), n, line));
        }
    }
    out
}

fn uses(lines: &[(PathBuf, usize, String)], banned: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (file, n, line) in lines {
        for b in banned {
            if line.contains(b) {
                found.push(format!("{}:{n}: {b}: {}", file.display(), line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_engine_and_the_guardrails_import_no_transport_or_runtime() {
    let banned = [
        "tokio",
        "hyper",
        "tower",
        "reqwest",
        "http::",
        "use http",
        "crate::http",
        "crate::grpc",
        "tonic",
    ];
    let mut found = uses(&library_code("engine"), &banned);
    found.extend(uses(&library_code("guardrails"), &banned));
    assert!(found.is_empty(), "{}", found.join("\n"));
}

// The engine reads the time it is given: a `ManualClock` reaches every
// path of a call, drop and cancel included.
#[test]
fn the_engine_reads_no_clock_it_was_not_given() {
    let found = uses(
        &library_code("engine"),
        &["MonotonicClock", "Instant::now", "SystemTime::now"],
    );
    assert!(found.is_empty(), "{}", found.join("\n"));
}

// gRPC's words are spelled once, in `grpc/wire.rs`; the HTTP reader calls
// them when it meets a `grpc-status`.
#[test]
fn http_holds_no_grpc_words_of_its_own() {
    let found = uses(&library_code("http"), &["\"grpc-", "application/grpc"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}
