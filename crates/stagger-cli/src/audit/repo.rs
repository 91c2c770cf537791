//! `stagger audit DIR` and `stagger audit -`: a whole repository, or a
//! `kubectl get … -A -o yaml` dump on stdin. Every file the audit
//! recognises is read, every object of it that no reader takes is listed
//! as skipped with the reason (as is every other file), every retrying
//! object and client config audited, and the call paths the routes imply
//! reported worst first, all by `stagger_audit::path::audit_gathered`;
//! this module walks the tree, prints and picks the exit code: 0 clean,
//! 1 findings, 2 a recognised file that cannot be read (reported, after
//! the rest).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use stagger_audit::path::{audit_gathered, Audited, Gathered, Options, RepoReport};
use stagger_report::audit::sarif::{locate_path, locate_report, Located, SarifWriter, Texts};

use crate::args::AuditFormat as Format;
use crate::args::UsageError;
use crate::audit::path::PathArgs;

/// The largest dump read from stdin.
pub const MAX_STDIN: u64 = 64 << 20;
/// The most files one directory walk reads.
pub const MAX_FILES: usize = 100_000;

/// Every file under `dir`, sorted, skipping hidden directories and build
/// output (`target`, `node_modules`).
fn walk(dir: &Path, found: &mut Gathered, seen: &mut usize) -> Result<(), UsageError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| UsageError(format!("{}: cannot read: {e}", dir.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let meta = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(_) => continue,
        };
        if meta.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                walk(&p, found, seen)?;
            }
            continue;
        }
        *seen += 1;
        if *seen > MAX_FILES {
            return Err(UsageError(format!(
                "{}: more than {MAX_FILES} files; audit a smaller tree",
                dir.display()
            )));
        }
        let shown = p.strip_prefix(".").unwrap_or(&p).display().to_string();
        if !meta.is_file() {
            found.not_a_file(shown);
        } else if found.wants(&shown, meta.len()) {
            match std::fs::read(&p) {
                Ok(bytes) => found.file(shown, bytes),
                Err(e) => found.cannot_read(&shown, e),
            }
        }
    }
    Ok(())
}

/// `stagger audit DIR` (or `-` for stdin): what to print and the exit code.
pub fn run(a: &PathArgs, target: &str, format: Format) -> anyhow::Result<(String, ExitCode)> {
    let mut found = Gathered::default();
    if target == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_STDIN + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| UsageError(format!("stdin: cannot read: {e}")))?;
        if bytes.len() as u64 > MAX_STDIN {
            return Err(UsageError(format!(
                "stdin: more than {MAX_STDIN} bytes (64 MiB): not a cluster dump the audit reads"
            ))
            .into());
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| UsageError("stdin: not UTF-8 text".to_string()))?;
        found.dump("-".to_string(), text);
    } else {
        walk(Path::new(target), &mut found, &mut 0)?;
    }
    let o = crate::audit::path::options(a);
    match format {
        Format::Json => return json(&found, &o),
        Format::Sarif => return sarif(&found, &o),
        Format::Text => {}
    }
    let mut objects = Vec::new();
    let mut repo = audit_gathered(&found, &o, |a| {
        if let Audited::Object(mut object) = a {
            keep_what_the_text_prints(&mut object.report);
            objects.push(*object);
        }
    });
    repo.objects = objects;
    let out = stagger_report::audit::repo_text(
        &repo,
        &repo.clients,
        &found.skipped,
        repo.cannot_read.len(),
    );
    let code = finish(&repo.cannot_read, &repo, repo.is_clean());
    Ok((out, code))
}

/// Tells the files that could not be read and the paths that did not, on stderr, and gives the
/// exit code: 2 when a file could not be read, else 1 for a finding, else 0.
fn finish(unreadable: &[String], repo: &RepoReport, clean: bool) -> ExitCode {
    for e in unreadable {
        eprintln!("error: {e}");
    }
    for e in &repo.unconnected {
        eprintln!("note: a path the routes imply does not read: {e}");
    }
    if !unreadable.is_empty() {
        ExitCode::from(2)
    } else if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Drops from an object's audit what the text does not print of it (its
/// layers, numbers at a rate, sizing and the findings' words), keeping its
/// attempts at a dead dependency and its findings' ids, so the text of a
/// dump holds a few names and numbers per object, not every report.
fn keep_what_the_text_prints(r: &mut stagger_audit::path::PathReport) {
    r.layers = Vec::new();
    r.sizing = Vec::new();
    r.dead.layers = Vec::new();
    r.at_rate.layers = Vec::new();
    for f in &mut r.findings {
        f.layers = Vec::new();
        f.message = String::new();
    }
}

/// `--format json`: written to stdout as the audit goes, each object's
/// audit as it is made, so the objects of a dump are never all held (nor
/// the text of them all). The keys are those of one JSON object, in the
/// order it always had: `clients`, `objects`, `paths`, `paths_cut`,
/// `skipped`, `unreadable`. The text returned is empty.
fn json(found: &Gathered, o: &Options) -> anyhow::Result<(String, ExitCode)> {
    let mut out = Out::new();
    let mut clients = Vec::new();
    let mut opened = false;
    let mut clean = true;
    // The clients come first, each before any object: the list is written
    // once, at the first object (or after the last client).
    let open = |out: &mut Out, clients: &[serde_json::Value]| {
        out.put(b"{\"clients\":");
        out.value(&clients);
        out.put(b",\"objects\":[");
    };
    let repo = audit_gathered(found, o, |a| match a {
        Audited::Client { file, report } => clients.push(json!({"file": file, "report": report})),
        Audited::Object(object) => {
            if opened {
                out.put(b",");
            } else {
                open(&mut out, &clients);
                opened = true;
            }
            clean &= object.report.is_clean();
            out.value(&object);
        }
    });
    if !opened {
        open(&mut out, &clients);
    }
    clean &= repo.is_clean();
    out.put(b"],\"paths\":");
    out.value(&repo.paths);
    out.put(b",\"paths_cut\":");
    out.value(&repo.paths_cut);
    out.put(b",\"skipped\":");
    out.value(&found.skipped);
    out.put(b",\"unreadable\":");
    out.value(&repo.cannot_read);
    out.put(b"}\n");
    out.finish()?;
    let code = finish(&repo.cannot_read, &repo, clean);
    Ok((String::new(), code))
}

/// Buffered stdout that keeps the first error and writes nothing after it:
/// a reader that has gone (a closed pipe) ends the writing quietly, as for
/// the other formats; any other error is [`finish`](Out::finish)'s.
struct Out {
    w: std::io::BufWriter<std::io::Stdout>,
    error: Option<std::io::Error>,
}

impl Out {
    fn new() -> Out {
        Out {
            w: std::io::BufWriter::new(std::io::stdout()),
            error: None,
        }
    }

    fn put(&mut self, bytes: &[u8]) {
        use std::io::Write;
        // Never an error: `write` keeps it for `finish`.
        let _ = self.write_all(bytes);
    }

    fn value(&mut self, v: &impl serde::Serialize) {
        // Writing to `Out` fails only on a value serde cannot write.
        if let Err(e) = serde_json::to_writer(&mut *self, v) {
            self.error.get_or_insert(e.into());
        }
    }

    fn finish(mut self) -> std::io::Result<()> {
        use std::io::Write;
        let result = match self.error.take() {
            Some(e) => Err(e),
            None => self.w.flush(),
        };
        match result {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other,
        }
    }
}

impl std::io::Write for Out {
    /// Takes every byte: the first error is kept for `finish`, and what
    /// comes after it is dropped.
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.error.is_none() {
            self.error = self.w.write_all(bytes).err();
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `--format sarif`: written to stdout as the audit goes, each finding as
/// its object's audit is made, so the objects of a dump are never all held
/// (nor their findings, nor the log). The skipped and the unreadable are
/// the run's notifications. The text returned is empty.
fn sarif(found: &Gathered, o: &Options) -> anyhow::Result<(String, ExitCode)> {
    let texts: Texts = found
        .sources
        .iter()
        .map(|s| (s.name.as_str(), s.text.as_str()))
        .chain(found.clients.iter().map(|(n, t)| (n.as_str(), t.as_str())))
        .chain(found.split.iter().map(|(n, t)| (n.as_str(), t.as_str())))
        .collect();
    let mut clean = true;
    let mut log = SarifWriter::new(Out::new())?;
    // `Out` keeps the first error for its `finish` and takes every byte.
    let mut write = |found: Vec<Located>| {
        for f in &found {
            let _ = log.write(f);
        }
    };
    let repo = audit_gathered(found, o, |a| match a {
        Audited::Client { report, .. } => write(locate_report(report, &texts)),
        Audited::Object(object) => {
            clean &= object.report.is_clean();
            write(locate_path(&object.report, &texts));
        }
    });
    for p in &repo.paths {
        write(locate_path(&p.report, &texts));
    }
    clean &= repo.is_clean();
    // The log has always told the client configs it could not read before
    // the sources: the report's list (the gathering's, the sources', the
    // clients') in that order.
    let (gathered, rest) = repo.cannot_read.split_at(found.unreadable.len());
    let (sources, clients) = rest.split_at(repo.unreadable.len());
    let unreadable: Vec<String> = [gathered, clients, sources].concat();
    let notes: Vec<(&str, String)> = found
        .skipped
        .iter()
        .map(|k| ("note", format!("skipped {}: {}", k.name, k.reason)))
        .chain(
            unreadable
                .iter()
                .map(|e| ("error", format!("cannot read {e}"))),
        )
        .collect();
    log.finish(&notes)?.finish()?;
    let code = finish(&unreadable, &repo, clean);
    Ok((String::new(), code))
}
