//! `stagger audit DIR` and `stagger audit -`: a whole repository, or a
//! `kubectl get … -A -o yaml` dump on stdin. Every file the audit
//! recognises is read, every object of it that no reader takes is listed
//! as skipped with the reason (as is every other file), every retrying
//! object audited, and the call paths the routes imply reported worst
//! first (`stagger_audit::path::audit_repo`); this module walks the tree,
//! prints and picks the exit code: 0 clean, 1 findings, 2 a recognised
//! file that cannot be read (reported, after the rest).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;
use stagger_audit::path::{audit_repo_each, split_dump, what_is, Reading, RepoReport, Source};
use stagger_audit::{audit, Input, Report};
use stagger_report::audit::sarif::{locate_path, locate_report, Located, SarifWriter, Texts};

use crate::args::AuditFormat as Format;
use crate::args::UsageError;
use crate::audit::path::PathArgs;

/// The largest dump read from stdin.
pub const MAX_STDIN: u64 = 64 << 20;
/// The most files one directory walk reads.
pub const MAX_FILES: usize = 100_000;

/// What a walk found.
#[derive(Default)]
struct Found {
    /// Mesh, gateway, proxy and application configs (and dump objects).
    sources: Vec<Source>,
    /// gRPC service configs and stagger policy files, with their audits.
    clients: Vec<(String, String)>,
    /// Files read object by object (a dump), by name, with their text.
    split: Vec<(String, String)>,
    /// Files and objects that are not retry configs, each with why.
    skipped: Vec<Skipped>,
    /// Recognised files that cannot be read, as messages.
    unreadable: Vec<String>,
}

/// A file or an object the audit does not read, and why.
#[derive(Debug, serde::Serialize)]
struct Skipped {
    /// The file, or the object as `FILE#KIND/NAMESPACE/NAME`.
    name: String,
    /// The object's Kubernetes kind, when it is one object of a file.
    kind: Option<String>,
    /// Why it is not read.
    reason: String,
}

impl Skipped {
    fn new(name: String, reason: impl Into<String>) -> Self {
        let kind = name
            .split_once('#')
            .and_then(|(_, o)| o.split_once('/'))
            .map(|(k, _)| k.to_string());
        Skipped {
            name,
            kind,
            reason: reason.into(),
        }
    }
}

/// The sources of one file or dump the readers take; the objects none
/// takes are listed in `skipped` with what they are.
fn sort_objects(found: &mut Found, objects: Vec<Source>) {
    for s in objects {
        match what_is(&s.name, &s.text) {
            Reading::Other(what) if s.name.contains('#') => {
                found.skipped.push(Skipped::new(s.name, what));
            }
            _ => found.sources.push(s),
        }
    }
}

/// Why a file is skipped by its name alone.
const BY_NAME: &str = "not a config file by its name";

/// Whether a file's name says it may be a retry config the audit reads.
fn candidate(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    // AWS shared config files go by `config`, `credentials` and names
    // ending so (`aws_config`, `shared_config`).
    matches!(ext, "yaml" | "yml" | "json" | "toml" | "conf" | "cfg")
        || name.ends_with("config")
        || name.ends_with("credentials")
}

/// Whether JSON or TOML text is a gRPC service config or a stagger policy
/// file rather than some other JSON or TOML (a `package.json`, a
/// `Cargo.toml`).
fn is_client(name: &str, text: &str) -> bool {
    let keys = [
        "methodConfig",
        "method_config",
        "retryThrottling",
        "retry_throttling",
    ];
    if keys.iter().any(|k| text.contains(k)) {
        return true;
    }
    name.ends_with(".toml")
        && !text.contains("[package]")
        && !text.contains("[workspace]")
        && text.lines().any(|l| {
            let l = l.trim_start();
            ["attempts", "jitter", "[budget]", "backoff", "deadline"]
                .iter()
                .any(|k| l.starts_with(k))
        })
}

/// Sorts one file into `found`.
fn take(found: &mut Found, name: String, bytes: Vec<u8>) {
    let Ok(text) = String::from_utf8(bytes) else {
        found.skipped.push(Skipped::new(name, "not UTF-8 text"));
        return;
    };
    match what_is(&name, &text) {
        Reading::Client if is_client(&name, &text) => found.clients.push((name, text)),
        Reading::Path(what) if what != "a YAML file" => {
            let objects = split_dump(&name, &text);
            if objects.len() > 1 {
                found.split.push((name, text));
            }
            sort_objects(found, objects);
        }
        // An unparseable .yaml/.yml: recognised by its name, reported.
        Reading::Path(_) if name.ends_with(".yaml") || name.ends_with(".yml") => {
            found.sources.push(Source { name, text });
        }
        Reading::Other(what) => found.skipped.push(Skipped::new(name, what)),
        Reading::Client => found.skipped.push(Skipped::new(
            name,
            "JSON or TOML that is neither a gRPC service config nor a stagger policy file",
        )),
        Reading::Path(what) => found.skipped.push(Skipped::new(
            name,
            format!("{what} that does not parse, and not named .yaml or .yml"),
        )),
    }
}

/// Every file under `dir`, sorted, skipping hidden directories and build
/// output (`target`, `node_modules`).
fn walk(dir: &Path, found: &mut Found, seen: &mut usize) -> Result<(), UsageError> {
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
            found
                .skipped
                .push(Skipped::new(shown, "not a regular file"));
            continue;
        }
        if !candidate(&p) {
            found.skipped.push(Skipped::new(
                shown,
                format!("{BY_NAME} (.yaml, .yml, .json, .toml, .conf, .cfg, or a name ending in config or credentials)"),
            ));
            continue;
        }
        if meta.len() > crate::audit::path::MAX_BYTES {
            found.unreadable.push(format!(
                "{shown}: {} bytes, larger than the 4 MiB the audit reads",
                meta.len()
            ));
            continue;
        }
        match std::fs::read(&p) {
            Ok(bytes) => take(found, shown, bytes),
            Err(e) => found.unreadable.push(format!("{shown}: cannot read: {e}")),
        }
    }
    Ok(())
}

/// `stagger audit DIR` (or `-` for stdin): what to print and the exit code.
pub fn run(a: &PathArgs, target: &str, format: Format) -> anyhow::Result<(String, ExitCode)> {
    let mut found = Found::default();
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
        let objects = split_dump("-", &text);
        sort_objects(&mut found, objects);
    } else {
        walk(Path::new(target), &mut found, &mut 0)?;
    }
    match format {
        Format::Json => return json(&found, &crate::audit::path::options(a)),
        Format::Sarif => return sarif(&found, &crate::audit::path::options(a)),
        Format::Text => {}
    }
    let mut objects = Vec::new();
    let mut repo = audit_repo_each(
        &found.sources,
        &crate::audit::path::options(a),
        |mut object| {
            keep_what_the_text_prints(&mut object.report);
            objects.push(object);
        },
    );
    repo.objects = objects;
    let mut unreadable = std::mem::take(&mut found.unreadable);
    unreadable.extend(repo.unreadable.drain(..).map(|e| e.to_string()));
    let mut clients: Vec<(String, Report)> = Vec::new();
    for (name, text) in &found.clients {
        match audit(&[Input::new(name, text)]) {
            Ok(r) => clients.push((name.clone(), r)),
            Err(e) => unreadable.push(e.to_string()),
        }
    }
    let clean = repo.is_clean() && clients.iter().all(|(_, r)| r.is_clean());
    let (by_name, listed) = found
        .skipped
        .iter()
        .map(|k| (k.name.as_str(), k.reason.as_str()))
        .partition(|(_, reason)| reason.starts_with(BY_NAME));
    let skipped = stagger_report::audit::Skipped { listed, by_name };
    let out = stagger_report::audit::repo_text(&repo, &clients, &skipped, unreadable.len());
    let code = finish(&unreadable, &repo, clean);
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
fn json(found: &Found, o: &stagger_audit::path::Options) -> anyhow::Result<(String, ExitCode)> {
    let mut unreadable = found.unreadable.clone();
    let mut client_errors = Vec::new();
    let mut clean = true;
    let mut list = Vec::new();
    for (name, text) in &found.clients {
        match audit(&[Input::new(name, text)]) {
            Ok(r) => {
                clean &= r.is_clean();
                list.push(json!({"file": name, "report": r}));
            }
            Err(e) => client_errors.push(e.to_string()),
        }
    }
    let mut out = Out::new();
    out.write(b"{\"clients\":");
    out.value(&list);
    out.write(b",\"objects\":[");
    let mut first = true;
    let repo = audit_repo_each(&found.sources, o, |object| {
        clean &= object.report.is_clean();
        if !first {
            out.write(b",");
        }
        first = false;
        out.value(&object);
    });
    clean &= repo.is_clean();
    unreadable.extend(repo.unreadable.iter().map(|e| e.to_string()));
    unreadable.extend(client_errors);
    out.write(b"],\"paths\":");
    out.value(&repo.paths);
    out.write(b",\"paths_cut\":");
    out.value(&repo.paths_cut);
    out.write(b",\"skipped\":");
    out.value(&found.skipped);
    out.write(b",\"unreadable\":");
    out.value(&unreadable);
    out.write(b"}\n");
    out.finish()?;
    let code = finish(&unreadable, &repo, clean);
    Ok((String::new(), code))
}

/// Buffered stdout that keeps the first error: a reader that has gone
/// (a closed pipe) ends the writing quietly, as for the other formats.
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

    fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        if self.error.is_none() {
            self.error = self.w.write_all(bytes).err();
        }
    }

    fn value(&mut self, v: &impl serde::Serialize) {
        if self.error.is_none() {
            self.error = serde_json::to_writer(&mut self.w, v)
                .err()
                .map(std::io::Error::from);
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

/// `--format sarif`: written to stdout as the audit goes, each finding as
/// its object's audit is made, so the objects of a dump are never all held
/// (nor their findings, nor the log). The skipped and the unreadable are
/// the run's notifications. The text returned is empty.
fn sarif(found: &Found, o: &stagger_audit::path::Options) -> anyhow::Result<(String, ExitCode)> {
    let texts: Texts = found
        .sources
        .iter()
        .map(|s| (s.name.as_str(), s.text.as_str()))
        .chain(found.clients.iter().map(|(n, t)| (n.as_str(), t.as_str())))
        .chain(found.split.iter().map(|(n, t)| (n.as_str(), t.as_str())))
        .collect();
    let mut unreadable = found.unreadable.clone();
    let mut clean = true;
    let mut log = Log::new(std::io::BufWriter::new(std::io::stdout()));
    for (name, text) in &found.clients {
        match audit(&[Input::new(name, text)]) {
            Ok(r) => {
                clean &= r.is_clean();
                log.write(&locate_report(&r, &texts));
            }
            Err(e) => unreadable.push(e.to_string()),
        }
    }
    let repo = audit_repo_each(&found.sources, o, |object| {
        clean &= object.report.is_clean();
        log.write(&locate_path(&object.report, &texts));
    });
    for p in &repo.paths {
        log.write(&locate_path(&p.report, &texts));
    }
    clean &= repo.is_clean();
    unreadable.extend(repo.unreadable.iter().map(|e| e.to_string()));
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
    log.finish(&notes)?;
    let code = finish(&unreadable, &repo, clean);
    Ok((String::new(), code))
}

/// A SARIF log on stdout that keeps its first error: a reader that has gone
/// (a closed pipe) ends the writing quietly, as for the other formats.
struct Log<W: std::io::Write> {
    w: Result<SarifWriter<W>, std::io::Error>,
}

impl<W: std::io::Write> Log<W> {
    fn new(out: W) -> Self {
        Log {
            w: SarifWriter::new(out),
        }
    }

    fn write(&mut self, found: &[Located]) {
        if let Ok(w) = &mut self.w {
            if let Some(e) = found.iter().find_map(|f| w.write(f).err()) {
                self.w = Err(e);
            }
        }
    }

    fn finish(self, notes: &[(&str, String)]) -> std::io::Result<()> {
        match self.w.and_then(|w| w.finish(notes)) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other.map(drop),
        }
    }
}
