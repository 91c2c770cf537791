//! What the audit of a repository reads, sorted from what a walk of files
//! or a dump on stdin hands over: the mesh, gateway, proxy and application
//! configs (one source per object of a many-object file), the gRPC service
//! configs and stagger policy files, and, for everything else, why it is
//! skipped or cannot be read. Nothing handed over is dropped unsaid.
//!
//! ```
//! use stagger_audit::path::Gathered;
//!
//! let mut g = Gathered::default();
//! assert!(!g.wants("src/main.rs", 120));
//! assert!(g.wants("deploy/vs.yaml", 120));
//! g.file("deploy/vs.yaml".into(), b"kind: VirtualService\nspec:\n  hosts: [a]\n".to_vec());
//! g.file("svc.json".into(), br#"{"methodConfig": []}"#.to_vec());
//! assert_eq!(g.sources.len(), 1);
//! assert_eq!(g.clients.len(), 1);
//! assert_eq!(g.skipped[0].name, "src/main.rs");
//! assert!(g.skipped[0].by_name);
//! ```

use serde::Serialize;

use super::detect::{what_is, Reading};
use super::repo::{audit_repo_each, split_dump, ObjectAudit, RepoReport, Source};
use super::Options;
use crate::{Input, Report};

/// The largest file the audit reads (4 MiB): a config is far smaller.
pub const MAX_BYTES: u64 = 4 << 20;

/// A file or an object the audit does not read, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The file, or the object as `FILE#KIND/NAMESPACE/NAME`.
    pub name: String,
    /// The object's Kubernetes kind, when it is one object of a file.
    pub kind: Option<String>,
    /// Why it is not read.
    pub reason: String,
    /// Whether its name alone ruled it out (a repository's source file),
    /// not what it holds.
    #[serde(skip)]
    pub by_name: bool,
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
            by_name: false,
        }
    }
}

/// Everything handed over, sorted into what the audit reads and what it
/// does not.
#[derive(Debug, Default)]
pub struct Gathered {
    /// Mesh, gateway, proxy and application configs (and dump objects),
    /// for [`audit_repo`](super::audit_repo) (as [`audit_gathered`] reads
    /// them).
    pub sources: Vec<Source>,
    /// gRPC service configs and stagger policy files, by name, with their
    /// text, for [`audit`](crate::audit) (as [`audit_gathered`] reads
    /// them).
    pub clients: Vec<(String, String)>,
    /// Files read object by object (a dump), by name, with their text: a
    /// finding about one of their objects is placed in them.
    pub split: Vec<(String, String)>,
    /// Files and objects that are not retry configs, each with why.
    pub skipped: Vec<Skipped>,
    /// Files that should be read and cannot be, as messages naming them.
    pub unreadable: Vec<String>,
}

impl Gathered {
    /// Whether the file `name` of `len` bytes is worth reading: its name
    /// says it may be a config (`.yaml`, `.yml`, `.json`, `.toml`, `.conf`,
    /// `.cfg`, or a name ending in `config` or `credentials`, as AWS's
    /// shared files go) and it is at most [`MAX_BYTES`]. A file that is not
    /// is recorded as skipped or unreadable, with why.
    pub fn wants(&mut self, name: &str, len: u64) -> bool {
        let path = std::path::Path::new(name);
        let base = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let candidate = matches!(ext, "yaml" | "yml" | "json" | "toml" | "conf" | "cfg")
            || base.ends_with("config")
            || base.ends_with("credentials");
        if !candidate {
            self.skipped.push(Skipped {
                by_name: true,
                ..Skipped::new(
                    name.to_string(),
                    "not a config file by its name (.yaml, .yml, .json, .toml, .conf, .cfg, or a name ending in config or credentials)",
                )
            });
            return false;
        }
        if len > MAX_BYTES {
            self.unreadable.push(format!(
                "{name}: {len} bytes, larger than the 4 MiB the audit reads"
            ));
            return false;
        }
        true
    }

    /// Records what is not a file (a socket, a device) as skipped.
    pub fn not_a_file(&mut self, name: String) {
        self.skipped.push(Skipped::new(name, "not a regular file"));
    }

    /// Records a file that could not be read, with the reason.
    pub fn cannot_read(&mut self, name: &str, why: impl std::fmt::Display) {
        self.unreadable.push(format!("{name}: cannot read: {why}"));
    }

    /// Sorts the file `name` holding `bytes`.
    pub fn file(&mut self, name: String, bytes: Vec<u8>) {
        let Ok(text) = String::from_utf8(bytes) else {
            self.skipped.push(Skipped::new(name, "not UTF-8 text"));
            return;
        };
        match what_is(&name, &text) {
            Reading::Client if is_client(&name, &text) => self.clients.push((name, text)),
            Reading::Path(what) if what != "a YAML file" => self.dump(name, text),
            // An unparseable .yaml/.yml: recognised by its name, reported.
            Reading::Path(_) if name.ends_with(".yaml") || name.ends_with(".yml") => {
                self.sources.push(Source { name, text });
            }
            Reading::Other(what) => self.skipped.push(Skipped::new(name, what)),
            Reading::Client => self.skipped.push(Skipped::new(
                name,
                "JSON or TOML that is neither a gRPC service config nor a stagger policy file",
            )),
            Reading::Path(what) => self.skipped.push(Skipped::new(
                name,
                format!("{what} that does not parse, and not named .yaml or .yml"),
            )),
        }
    }

    /// Sorts the objects of a file of Kubernetes objects or a dump (`-`
    /// for stdin): the sources the readers take, the objects none takes
    /// listed as skipped with what they are. A file's text is kept in
    /// [`split`](Self::split); stdin's is not (no file holds it).
    pub fn dump(&mut self, name: String, text: String) {
        let objects = split_dump(&name, &text);
        if objects.len() > 1 && name != "-" {
            self.split.push((name, text));
        }
        for s in objects {
            match what_is(&s.name, &s.text) {
                Reading::Other(what) if s.name.contains('#') => {
                    self.skipped.push(Skipped::new(s.name, what));
                }
                _ => self.sources.push(s),
            }
        }
    }
}

/// What [`audit_gathered`] hands over as it audits: each client config's
/// audit first, then each retrying object's, in the order gathered.
#[derive(Debug)]
pub enum Audited<'a> {
    /// A gRPC service config or stagger policy file and its checklist
    /// audit (also kept in [`RepoReport::clients`]).
    Client {
        /// The file's name.
        file: &'a str,
        /// Its audit.
        report: &'a Report,
    },
    /// One retrying object of the sources, alone (handed over, not kept:
    /// [`RepoReport::objects`] stays empty).
    Object(Box<ObjectAudit>),
}

/// Audits everything gathered, as `stagger audit DIR` does: each client
/// config against the checklist ([`audit`](crate::audit)), then the
/// sources as [`audit_repo_each`] does (each object handed to `each` as it
/// is made, then the call paths the routes imply, worst first). The report
/// holds the paths, the clients' reports, and every message about what
/// could not be read ([`RepoReport::cannot_read`]): the gathering's, the
/// sources', the clients'.
///
/// ```
/// use stagger_audit::path::{audit_gathered, Audited, Gathered, Options};
///
/// let mut g = Gathered::default();
/// g.file(
///     "deploy/vs.yaml".into(),
///     b"kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - route: [{destination: {host: a}}]\n".to_vec(),
/// );
/// g.file("deploy/broken.yaml".into(), b"kind: VirtualService\nspec: [\n".to_vec());
/// g.file(
///     "svc.json".into(),
///     br#"{"methodConfig": [{"name": [{"service": "a.A"}], "timeout": "1s"}]}"#.to_vec(),
/// );
/// let mut objects = Vec::new();
/// let report = audit_gathered(&g, &Options::default(), |a| {
///     if let Audited::Object(o) = a {
///         objects.push(o.file);
///     }
/// });
/// assert_eq!(objects, ["deploy/vs.yaml"]);
/// assert_eq!(report.clients[0].0, "svc.json");
/// assert_eq!(report.cannot_read.len(), 1);
/// assert!(report.cannot_read[0].starts_with("deploy/broken.yaml"));
/// ```
pub fn audit_gathered(
    found: &Gathered,
    o: &Options,
    mut each: impl FnMut(Audited<'_>),
) -> RepoReport {
    let mut clients = Vec::with_capacity(found.clients.len());
    let mut client_errors = Vec::new();
    for (name, text) in &found.clients {
        match crate::audit(&[Input::new(name, text)]) {
            Ok(report) => {
                each(Audited::Client {
                    file: name,
                    report: &report,
                });
                clients.push((name.clone(), report));
            }
            Err(e) => client_errors.push(e.to_string()),
        }
    }
    let mut report = audit_repo_each(&found.sources, o, |a| each(Audited::Object(Box::new(a))));
    report.clients = clients;
    report.cannot_read = found
        .unreadable
        .iter()
        .cloned()
        .chain(report.unreadable.iter().map(ToString::to_string))
        .chain(client_errors)
        .collect();
    report
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_json_and_toml_are_skipped_with_why() {
        let mut g = Gathered::default();
        g.file("package.json".into(), br#"{"name": "x"}"#.to_vec());
        g.file("Cargo.toml".into(), b"[package]\nname = \"x\"\n".to_vec());
        g.file("policy.toml".into(), b"attempts = 3\n".to_vec());
        assert_eq!(g.clients.len(), 1, "{g:?}");
        assert_eq!(g.clients[0].0, "policy.toml");
        assert_eq!(g.skipped.len(), 2, "{g:?}");
        assert!(g
            .skipped
            .iter()
            .all(|k| !k.by_name && k.reason.contains("neither")));
    }

    #[test]
    fn a_file_over_the_limit_is_unreadable_and_named() {
        let mut g = Gathered::default();
        assert!(!g.wants("big.yaml", MAX_BYTES + 1));
        assert!(g.wants("aws/config", MAX_BYTES));
        assert!(g.unreadable[0].starts_with("big.yaml: "), "{g:?}");
        g.file("x.yaml".into(), vec![0xff, 0xfe]);
        assert_eq!(g.skipped[0].reason, "not UTF-8 text");
    }

    #[test]
    fn an_object_of_a_dump_that_no_reader_takes_is_skipped_with_its_kind() {
        let mut g = Gathered::default();
        let dump = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: c, namespace: n}\n- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata: {name: v, namespace: n}\n  spec:\n    hosts: [a]\n";
        g.dump("-".into(), dump.into());
        assert_eq!(g.sources.len(), 1, "{g:?}");
        assert_eq!(g.skipped.len(), 1, "{g:?}");
        assert_eq!(g.skipped[0].kind.as_deref(), Some("ConfigMap"));
        assert!(g.split.is_empty(), "stdin has no file to place findings in");
        g.dump("dump.yaml".into(), dump.into());
        assert_eq!(g.split.len(), 1);
    }
}
