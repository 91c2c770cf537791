//! `stagger audit --format sarif`: the findings as a SARIF 2.1.0 log, each
//! at its file and line, with every check of the audit as a rule carrying
//! its help text (`stagger_audit::checks`). Code-scanning services and
//! editors read this format; the exit code stays the audit's.

use serde_json::{json, Value};
use stagger_audit::checks::CHECKS;
use stagger_audit::path::PathReport;
use stagger_audit::Report;

/// The text of every file read, by the name it was given.
pub type Texts<'a> = [(&'a str, &'a str)];

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

/// The text of `file`, if it was read.
fn text_of<'a>(texts: &Texts<'a>, file: &str) -> Option<&'a str> {
    texts.iter().find(|(n, _)| *n == file).map(|(_, t)| *t)
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
pub fn from_report(r: &Report, texts: &Texts<'_>) -> Vec<Located> {
    r.findings
        .iter()
        .map(|f| {
            let text = text_of(texts, &f.file).unwrap_or("");
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
        Some((whole, object)) if object.contains('/') && text_of(texts, whole).is_some() => {
            let name = object.rsplit('/').next().unwrap_or(object);
            (whole, text_of(texts, whole).unwrap_or(""), vec![name])
        }
        // The objects one reader takes from a file of several kinds
        // (`FILE#KIND`): the selector names the object.
        Some((whole, _)) if text_of(texts, whole).is_some() => (
            whole,
            text_of(texts, whole).unwrap_or(""),
            vec![first, short],
        ),
        _ => (file, text_of(texts, file).unwrap_or(""), vec![first, short]),
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
pub fn from_path(r: &PathReport, texts: &Texts<'_>) -> Vec<Located> {
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

/// The SARIF 2.1.0 log of `found`: one run of the `stagger` tool whose
/// rules are every check of the audit. `notes` are what the run tells
/// beside its results, each with its level (`note` for a file or object
/// skipped, `error` for one that cannot be read), as the run's
/// notifications: nothing read or left out goes unsaid.
pub fn render(found: &[Located], notes: &[(&str, String)]) -> String {
    let rules: Vec<Value> = CHECKS
        .iter()
        .map(|c| {
            json!({
                "id": c.id,
                "name": pascal(c.id),
                "shortDescription": {"text": c.summary},
                "fullDescription": {"text": c.help},
                "help": {"text": c.help},
                "defaultConfiguration": {"level": if c.id == "invalid" { "error" } else { "warning" }}
            })
        })
        .collect();
    // A result without a location is refused by code scanning, so a finding
    // no file holds (a path of built-in layers only) is told as a
    // notification of the run instead.
    let (placed, nowhere): (Vec<&Located>, Vec<&Located>) =
        found.iter().partition(|f| !f.places.is_empty());
    let notes: Vec<Value> = nowhere
        .iter()
        .map(|f| {
            json!({
                "level": "warning",
                "message": {"text": format!("{}: {}", f.rule, f.message)},
                "descriptor": {"id": f.rule}
            })
        })
        .chain(
            notes
                .iter()
                .map(|(level, text)| json!({"level": level, "message": {"text": text}})),
        )
        .collect();
    let results: Vec<Value> = placed
        .into_iter()
        .map(|f| {
            let index = CHECKS.iter().position(|c| c.id == f.rule);
            let mut result = json!({
                "ruleId": f.rule,
                "level": if f.rule == "invalid" { "error" } else { "warning" },
                "message": {"text": f.message},
            });
            if let Some(i) = index {
                result["ruleIndex"] = json!(i);
            }
            if let Some((file, line)) = f.places.first() {
                result["locations"] = json!([location(file, *line)]);
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
            result
        })
        .collect();
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "stagger",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules
            }},
            "invocations": [{
                "executionSuccessful": true,
                "toolExecutionNotifications": notes
            }],
            "results": results
        }]
    });
    serde_json::to_string_pretty(&log).unwrap_or_default() + "\n"
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
    fn a_line_is_found_from_a_starting_line() {
        let text = "a\nmaxAttempts\nb\nmaxAttempts\n";
        assert_eq!(line_of(text, &["maxAttempts"], 1), Some(2));
        assert_eq!(line_of(text, &["maxAttempts"], 3), Some(4));
        assert_eq!(line_of(text, &["nothing"], 1), None);
    }
}
