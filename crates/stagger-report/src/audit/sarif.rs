//! `stagger audit --format sarif`: the findings as a SARIF 2.1.0 log, each
//! at its file and line, with every check of the audit as a rule carrying
//! its help text (`stagger_audit::checks`). Code-scanning services and
//! editors read this format.
//!
//! [`SarifWriter`] writes the log as the findings come, so an audit of a
//! large cluster dump never holds them all; [`sarif`] is the whole log of a
//! few findings as one string.
//!
//! ```
//! use stagger_audit::path::{audit_path, Options, PathInput};
//! use stagger_report::audit::sarif::{locate_path, sarif, Texts};
//!
//! let vs = "kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - retries: {attempts: 9}\n";
//! let report = audit_path(&[PathInput::new("vs.yaml", vs, None)], &Options::default()).unwrap();
//! let texts: Texts = [("vs.yaml", vs)].into_iter().collect();
//! let log = sarif(&locate_path(&report, &texts), &[]);
//! let log: serde_json::Value = serde_json::from_str(&log).unwrap();
//! let result = &log["runs"][0]["results"][0];
//! assert_eq!(result["locations"][0]["physicalLocation"]["region"]["startLine"], 5);
//! ```

use std::collections::HashMap;
use std::io::{self, Write};

use serde_json::{json, Value};
use stagger_audit::checks::CHECKS;
use stagger_audit::path::PathReport;
use stagger_audit::Report;

/// The text of every file read, by the name it was given.
#[derive(Debug, Default, Clone)]
pub struct Texts<'a> {
    by_name: HashMap<&'a str, &'a str>,
}

impl<'a> Texts<'a> {
    /// The text of `file`, if it was read.
    fn get(&self, file: &str) -> Option<&'a str> {
        self.by_name.get(file).copied()
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for Texts<'a> {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(names_and_texts: I) -> Self {
        Texts {
            by_name: names_and_texts.into_iter().collect(),
        }
    }
}

/// One finding at a place in a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Located {
    /// The check's id.
    pub rule: &'static str,
    /// What is wrong and what to change.
    pub message: String,
    /// The file and its 1-based line, then any other layers it concerns.
    pub places: Vec<(String, usize)>,
}

/// The 1-based number of the first line at or after line `from` (1-based)
/// holding one of `needles` (the first needle found wins, in order).
fn line_of(text: &str, needles: &[&str], from: usize) -> Option<usize> {
    needles.iter().filter(|n| !n.is_empty()).find_map(|n| {
        text.lines()
            .enumerate()
            .skip(from.saturating_sub(1))
            .find(|(_, l)| !is_filler(l) && l.contains(n))
            .map(|(i, _)| i + 1)
    })
}

/// The keys a finding of the one-file checklist is about, in the spellings
/// the files use.
fn keys(id: &str) -> &'static [&'static str] {
    match id {
        "attempts_high" | "no_max_attempts" => &["maxAttempts", "max_attempts", "attempts"],
        "non_transient_codes" => &["retryableStatusCodes", "nonFatalStatusCodes", "retry_on"],
        "no_backoff" => &["backoffMultiplier", "hedgingDelay", "multiplier", "base"],
        "no_jitter" => &["jitter"],
        "retry_after_ignored" => &["max_retry_after"],
        _ => &[],
    }
}

/// The findings of the one-file checklist, each at the line of the method
/// it concerns (the key it is about when the file has one).
pub fn locate_report(r: &Report, texts: &Texts<'_>) -> Vec<Located> {
    r.findings
        .iter()
        .map(|f| {
            let text = texts.get(&f.file).unwrap_or("");
            let service = f.method.split('/').next().unwrap_or("");
            let start = match service {
                "" | "*" => line_of(text, &["methodConfig"], 1),
                s => line_of(text, &[&format!("\"{s}\""), s], 1),
            }
            .unwrap_or_else(|| object_line(text, &[]));
            let line = line_of(text, keys(f.id), start).unwrap_or(start);
            Located {
                rule: f.id,
                message: f.message.clone(),
                places: vec![(f.file.clone(), line)],
            }
        })
        .collect()
}

/// Whether a line holds nothing a finding can be about: blank, a comment
/// (`#` in YAML, TOML, nginx and HAProxy files) or a YAML document marker.
fn is_filler(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
}

/// Whether `line` holds `word` with no name character either side
/// (`cart` in `host: cart.shop`, not in `cartography`).
fn has_word(line: &str, word: &str) -> bool {
    let part = |c: char| c.is_alphanumeric() || c == '-' || c == '_';
    !word.is_empty()
        && line
            .match_indices(word)
            .any(|(i, _)| !line[..i].ends_with(part) && !line[i + word.len()..].starts_with(part))
}

/// The 1-based line of the object named by one of `names`: its `name:` line
/// when it has one, else the first line holding the name that is not a
/// comment, else the file's first line that is not a comment.
fn object_line(text: &str, names: &[&str]) -> usize {
    let lines = || text.lines().enumerate().filter(|(_, l)| !is_filler(l));
    let named = names.iter().find_map(|n| {
        let key = format!("name: {n}");
        lines()
            .find(|(_, l)| has_word(l, &key))
            .or_else(|| lines().find(|(_, l)| has_word(l, n)))
    });
    named.or_else(|| lines().next()).map_or(1, |(i, _)| i + 1)
}

/// The 1-based line of the first of `keys` in the object that starts at
/// line `from` (it ends at the next document or Kubernetes object).
fn field_line(text: &str, from: usize, keys: &[&str]) -> Option<usize> {
    let object: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .take_while(|(i, l)| {
            let t = l.trim_start().trim_start_matches("- ");
            *i + 1 == from || (l.trim() != "---" && !t.starts_with("apiVersion:"))
        })
        .filter(|(_, l)| !is_filler(l))
        .collect();
    keys.iter()
        .find_map(|k| object.iter().find(|(_, l)| l.contains(k)))
        .map(|(i, _)| i + 1)
}

/// The keys a finding about a call path's layer is about, in the
/// spellings the mesh, gateway, proxy and application files use, most
/// telling first.
fn path_keys(id: &str) -> &'static [&'static str] {
    const TRIES: &[&str] = &[
        "attempts",
        "maxAttempts",
        "max_attempts",
        "maxRetryAttempts",
        "proxy_next_upstream_tries",
        "proxy-next-upstream-tries",
        "retries",
        "retry:",
        "retry ",
        "retry_policy",
        "retryPolicy",
    ];
    match id {
        "retries_non_idempotent" => &[
            "retryOn",
            "retry_on",
            "retry-on",
            "retriableStatusCodes",
            "retryableStatusCodes",
            "retryExceptions",
            "codes:",
            "proxy_next_upstream",
            "proxy-next-upstream",
            "retries",
            "retry:",
        ],
        "per_try_timeout_exceeds_deadline" => &[
            "perTryTimeout",
            "per_try_timeout",
            "backendRequest",
            "timeout",
        ],
        "budget_concurrency_floor" => &[
            "retryBudget",
            "retry_budget",
            "minRetryConcurrency",
            "max_retries",
            "maxRetries",
        ],
        "retries_at_several_layers" | "no_budget_on_path" | "invalid" => TRIES,
        _ => &[],
    }
}

/// The field an `invalid` finding names in backquotes (its last segment:
/// `retry.attempts` is found as `attempts`).
fn named_field(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    let field = &message[start..start + len];
    field
        .rsplit(['.', '/'])
        .next()
        .filter(|f| !f.is_empty() && !f.contains(' '))
}

/// Where a layer of `file` named by `selector` is, for the finding `id`:
/// its file and the line of the field the finding is about, else of the
/// object. An object of a split dump (`FILE#KIND/NAMESPACE/NAME`) is
/// placed in `FILE` itself, when `FILE`'s text was read.
fn place(
    texts: &Texts<'_>,
    file: &str,
    selector: &str,
    id: &str,
    message: &str,
) -> (String, usize) {
    let first = selector.split('/').next().unwrap_or("");
    let short = first.split('.').next().unwrap_or("");
    let (shown, text, names) = match file.split_once('#') {
        // One object of a dump: `FILE#KIND/NAMESPACE/NAME`.
        Some((whole, object)) if object.contains('/') && texts.get(whole).is_some() => {
            let name = object.rsplit('/').next().unwrap_or(object);
            (whole, texts.get(whole).unwrap_or(""), vec![name])
        }
        // The objects one reader takes from a file of several kinds
        // (`FILE#KIND`): the selector names the object.
        Some((whole, _)) if texts.get(whole).is_some() => {
            (whole, texts.get(whole).unwrap_or(""), vec![first, short])
        }
        _ => (file, texts.get(file).unwrap_or(""), vec![first, short]),
    };
    let names: Vec<&str> = names.into_iter().filter(|n| !n.is_empty()).collect();
    let at = object_line(text, &names);
    let field = match id {
        "invalid" => named_field(message).and_then(|f| field_line(text, at, &[f])),
        _ => None,
    };
    let line = field
        .or_else(|| field_line(text, at, path_keys(id)))
        .unwrap_or(at);
    (shown.to_string(), line)
}

/// The findings of a call path, each at the first layer it concerns that
/// is a file (a built-in layer such as `@istio-sidecar` has none: its
/// finding is placed at the path's files, which imply it), the others as
/// related places. A path of built-in layers only has no place.
pub fn locate_path(r: &PathReport, texts: &Texts<'_>) -> Vec<Located> {
    r.findings
        .iter()
        .map(|f| {
            let mut layers: Vec<usize> = f.layers.clone();
            if layers.is_empty() {
                layers = (0..r.layers.len()).collect();
            }
            let files = |layers: &[usize]| {
                let mut places = Vec::new();
                for &i in layers {
                    let Some(layer) = r.layers.get(i) else {
                        continue;
                    };
                    if layer.file.starts_with('@') {
                        continue;
                    }
                    let place = place(texts, &layer.file, &layer.selector, f.id, &f.message);
                    if !places.contains(&place) {
                        places.push(place);
                    }
                }
                places
            };
            let mut places = files(&layers);
            if places.is_empty() {
                let all: Vec<usize> = (0..r.layers.len()).collect();
                places = files(&all);
            }
            Located {
                rule: f.id,
                message: f.message.clone(),
                places,
            }
        })
        .collect()
}

/// A file name as a SARIF artifact URI: a relative reference as given, an
/// absolute path as a `file://` URI, every byte outside the unreserved set
/// and `/` percent-encoded.
fn uri(file: &str) -> String {
    let mut out = String::new();
    if file.starts_with('/') {
        out.push_str("file://");
    }
    for b in file.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn location(file: &str, line: usize) -> Value {
    json!({
        "physicalLocation": {
            "artifactLocation": {"uri": uri(file)},
            "region": {"startLine": line.max(1)}
        }
    })
}

/// `snake_case` as `PascalCase`, SARIF's convention for a rule's name.
fn pascal(id: &str) -> String {
    id.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn level(rule: &str) -> &'static str {
    if rule == "invalid" {
        "error"
    } else {
        "warning"
    }
}

/// A SARIF 2.1.0 log written as its findings come: one run of the
/// `stagger` tool whose rules are every check of the audit, one result per
/// line. Only the findings no file holds are kept until [`finish`]
/// (code scanning refuses a result without a location, so each is told as
/// a notification of the run instead).
///
/// [`finish`]: SarifWriter::finish
#[derive(Debug)]
pub struct SarifWriter<W: Write> {
    out: W,
    results: usize,
    nowhere: Vec<Value>,
}

impl<W: Write> SarifWriter<W> {
    /// Starts the log on `out`: its header and the rules.
    pub fn new(mut out: W) -> io::Result<Self> {
        let rules: Vec<Value> = CHECKS
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "name": pascal(c.id),
                    "shortDescription": {"text": c.summary},
                    "fullDescription": {"text": c.help},
                    "help": {"text": c.help},
                    "defaultConfiguration": {"level": level(c.id)}
                })
            })
            .collect();
        let tool = json!({"driver": {
            "name": "stagger",
            "version": env!("CARGO_PKG_VERSION"),
            "rules": rules
        }});
        out.write_all(
            b"{\"$schema\":\"https://json.schemastore.org/sarif-2.1.0.json\",\"version\":\"2.1.0\",\"runs\":[{\"tool\":",
        )?;
        serde_json::to_writer(&mut out, &tool)?;
        out.write_all(b",\"results\":[")?;
        Ok(SarifWriter {
            out,
            results: 0,
            nowhere: Vec::new(),
        })
    }

    /// Writes one finding as a result at its first place, its other places
    /// as related locations.
    pub fn write(&mut self, f: &Located) -> io::Result<()> {
        let Some((file, line)) = f.places.first() else {
            self.nowhere.push(json!({
                "level": "warning",
                "message": {"text": format!("{}: {}", f.rule, f.message)},
                "descriptor": {"id": f.rule}
            }));
            return Ok(());
        };
        let mut result = json!({
            "ruleId": f.rule,
            "level": level(f.rule),
            "message": {"text": f.message},
            "locations": [location(file, *line)],
        });
        if let Some(i) = CHECKS.iter().position(|c| c.id == f.rule) {
            result["ruleIndex"] = json!(i);
        }
        if f.places.len() > 1 {
            let related: Vec<Value> = f.places[1..]
                .iter()
                .enumerate()
                .map(|(i, (file, line))| {
                    let mut l = location(file, *line);
                    l["id"] = json!(i + 1);
                    l
                })
                .collect();
            result["relatedLocations"] = json!(related);
        }
        self.out
            .write_all(if self.results == 0 { b"\n" } else { b",\n" })?;
        serde_json::to_writer(&mut self.out, &result)?;
        self.results += 1;
        Ok(())
    }

    /// Ends the log: `notes` are what the run tells beside its results,
    /// each with its level (`note` for a file or object skipped, `error`
    /// for one that cannot be read), as the run's notifications, after the
    /// findings no file holds: nothing read or left out goes unsaid.
    /// Gives back the writer, flushed.
    pub fn finish(mut self, notes: &[(&str, String)]) -> io::Result<W> {
        let notes: Vec<Value> = std::mem::take(&mut self.nowhere)
            .into_iter()
            .chain(
                notes
                    .iter()
                    .map(|(level, text)| json!({"level": level, "message": {"text": text}})),
            )
            .collect();
        let invocations = json!([{
            "executionSuccessful": true,
            "toolExecutionNotifications": notes
        }]);
        self.out.write_all(b"],\n\"invocations\":")?;
        serde_json::to_writer(&mut self.out, &invocations)?;
        self.out.write_all(b"}]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The whole SARIF 2.1.0 log of `found`, with `notes` as the run's
/// notifications (see [`SarifWriter::finish`]).
pub fn sarif(found: &[Located], notes: &[(&str, String)]) -> String {
    let write = || -> io::Result<Vec<u8>> {
        let mut w = SarifWriter::new(Vec::new())?;
        for f in found {
            w.write(f)?;
        }
        w.finish(notes)
    };
    // Writing to memory fails only on a value serde cannot write, which
    // these are not.
    String::from_utf8(write().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_name_becomes_a_uri_reference() {
        assert_eq!(uri("a b/c.yaml"), "a%20b/c.yaml");
        assert_eq!(uri("/etc/x.json"), "file:///etc/x.json");
    }

    #[test]
    fn the_log_is_json_with_every_result_located_and_the_rest_notified() {
        let placed = Located {
            rule: "invalid",
            message: "a".into(),
            places: vec![("a b.yaml".into(), 3), ("c.yaml".into(), 1)],
        };
        let nowhere = Located {
            rule: "no_budget_on_path",
            message: "b".into(),
            places: vec![],
        };
        let log: Value =
            serde_json::from_str(&sarif(&[placed, nowhere], &[("note", "skipped x".into())]))
                .unwrap();
        let run = &log["runs"][0];
        assert_eq!(log["version"], "2.1.0");
        assert_eq!(run["results"].as_array().unwrap().len(), 1);
        let r = &run["results"][0];
        assert_eq!(r["level"], "error");
        assert_eq!(
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            "a%20b.yaml"
        );
        assert_eq!(r["relatedLocations"][0]["id"], 1);
        let notes = &run["invocations"][0]["toolExecutionNotifications"];
        assert_eq!(notes[0]["descriptor"]["id"], "no_budget_on_path");
        assert_eq!(notes[1]["message"]["text"], "skipped x");
        assert_eq!(
            run["tool"]["driver"]["rules"].as_array().unwrap().len(),
            CHECKS.len()
        );
    }

    #[test]
    fn a_line_is_found_from_a_starting_line() {
        let text = "a\nmaxAttempts\nb\nmaxAttempts\n";
        assert_eq!(line_of(text, &["maxAttempts"], 1), Some(2));
        assert_eq!(line_of(text, &["maxAttempts"], 3), Some(4));
        assert_eq!(line_of(text, &["nothing"], 1), None);
    }
}
