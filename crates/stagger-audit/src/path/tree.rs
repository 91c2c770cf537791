//! Reading mesh configs as trees: YAML (several documents per file) or JSON
//! into [`serde_json::Value`], keys looked up in either spelling Envoy and
//! Istio accept (`num_retries` and proto-JSON's `numRetries`), Go and
//! proto-JSON durations, and numbers written as strings (proto-JSON writes
//! 64-bit integers as strings: `hostSelectionRetryMaxAttempts: "5"`).

use std::time::Duration;

use serde_json::{Map, Value};

use super::PathError;

/// The largest text read as YAML (a config file, not a data dump).
pub(crate) const MAX_BYTES: usize = 4 << 20;

/// Every non-empty document of `text`, YAML or JSON (JSON is YAML).
///
/// The YAML reader is `serde-saphyr`: maintained, pure Rust, and built not
/// to panic on hostile input (with limits on aliases and depth), where the
/// once-common `serde_yaml` is archived.
pub(crate) fn documents(file: &str, text: &str) -> Result<Vec<Value>, PathError> {
    documents_within(file, text, MAX_BYTES)
}

#[cfg(test)]
thread_local! {
    /// How many texts this thread parsed as YAML, for tests that count.
    pub(crate) static PARSED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The largest cluster dump read (`kubectl get … -A -o yaml`).
pub(crate) const MAX_DUMP_BYTES: usize = 64 << 20;

/// [`documents`] of a text up to `limit` bytes: past a config file's size
/// (a cluster dump), the reader's node and event limits grow with the
/// text (one node per 4 bytes, one event per 2, never below the reader's
/// defaults), its alias and depth limits stay.
pub(crate) fn documents_within(
    file: &str,
    text: &str,
    limit: usize,
) -> Result<Vec<Value>, PathError> {
    if text.len() > limit {
        return Err(PathError::new(
            file,
            "",
            format!("larger than {limit} bytes"),
        ));
    }
    #[cfg(test)]
    PARSED.with(|n| n.set(n.get() + 1));
    let parsed = {
        let mut budget = serde_saphyr::Budget::default();
        budget.max_nodes = budget.max_nodes.max(text.len() / 4);
        budget.max_events = budget.max_events.max(text.len() / 2);
        let mut options = serde_saphyr::Options::default();
        options.budget = Some(budget);
        serde_saphyr::from_multiple_with_options::<Value>(text, options)
    };
    parsed
        .map(|docs| docs.into_iter().filter(|d| !d.is_null()).collect())
        .map_err(|e| PathError::new(file, "", yaml_problem(&e.to_string())))
}

/// The items of a list as `kubectl get … -o yaml` prints it, each as its
/// own text, so a dump is parsed one object at a time instead of as one
/// tree of every object: `Some((header, items))` when `text` is one YAML
/// document whose column-0 `items:` key holds a block sequence written at
/// column 0 (`- ` lines). `header` is the rest of the document with
/// `items: []` in place of the sequence; each item is a one-element YAML
/// sequence (`- kind: …` and its indented lines). `None` for any other
/// shape (several documents, an indented or flow sequence), which is then
/// read whole.
pub(crate) fn list_items(text: &str) -> Option<(String, Vec<&str>)> {
    let mut header = String::new();
    let mut items = Vec::new();
    let mut in_items = false;
    let mut seen_items = false;
    let mut start: Option<usize> = None;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let here = at;
        at += line.len();
        let blank = line.trim().is_empty() || line.trim_start().starts_with('#');
        let indented = line.starts_with([' ', '\t']);
        if blank || indented {
            if in_items {
                // Inside an item, or a comment before the first one; an
                // indented sequence (`  - …`) is not this shape.
                if start.is_none() && !blank {
                    return None;
                }
            } else {
                header.push_str(line);
            }
            continue;
        }
        if line.starts_with("---") || line.starts_with("...") || line.starts_with('%') {
            return None;
        }
        let item = line.starts_with('-')
            && matches!(
                line.as_bytes().get(1),
                None | Some(b' ' | b'\t' | b'\n' | b'\r')
            );
        if in_items && item {
            if let Some(s) = start.replace(here) {
                items.push(&text[s..here]);
            }
            continue;
        }
        if in_items {
            if let Some(s) = start.take() {
                items.push(&text[s..here]);
            }
            in_items = false;
        }
        if line.trim_end() == "items:" {
            if seen_items {
                return None;
            }
            seen_items = true;
            in_items = true;
            header.push_str("items: []\n");
            continue;
        }
        header.push_str(line);
    }
    if let Some(s) = start {
        items.push(&text[s..]);
    }
    seen_items.then_some((header, items))
}

/// The reader's error in one line of words: where, and what (an alias
/// bomb is named as one, not as the reader's internal counters).
fn yaml_problem(message: &str) -> String {
    let line = first_line(message);
    let line = line.strip_prefix("error: ").unwrap_or(line);
    match line.find("budget breached") {
        Some(i) => {
            let at = line[..i].trim_end_matches([' ', ':']);
            let at = if at.is_empty() {
                String::new()
            } else {
                format!(" at {at}")
            };
            format!("refused{at}: its aliases expand past the reader's limit (a YAML alias bomb)")
        }
        None => format!("not valid YAML or JSON: {line}"),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// A key as both spellings meet: lower case, without `_` or `-`.
fn fold(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The value under `key` in `v`, in any of the spellings (`retry_on`,
/// `retryOn`).
pub(crate) fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    let want = fold(key);
    v.as_object()?
        .iter()
        .find(|(k, _)| fold(k) == want)
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

/// Takes the value under `key` out of `v` (the key found as [`get`]
/// finds it), leaving the rest.
pub(crate) fn take(v: &mut Value, key: &str) -> Option<Value> {
    let want = fold(key);
    let m = v.as_object_mut()?;
    let k = m.keys().find(|k| fold(k) == want)?.clone();
    m.remove(&k)
}

/// The object under `key`, if it is one.
pub(crate) fn obj<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    get(v, key)?.as_object()
}

/// The list under `key` (an absent key is an empty list).
pub(crate) fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    get(v, key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The string under `key`.
pub(crate) fn string<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get(v, key)?.as_str()
}

/// A non-negative integer under `key`: a number, or digits in a string
/// (proto-JSON's 64-bit form, Kubernetes annotations). `Err` names what
/// was found instead.
pub(crate) fn uint(v: &Value, key: &str) -> Result<Option<u64>, String> {
    let Some(x) = get(v, key) else {
        return Ok(None);
    };
    let x = match x {
        // A wrapper (`UInt32Value`) written as an object: `{value: 3}`.
        Value::Object(_) => match get(x, "value") {
            Some(inner) => inner,
            None => return Err(format!("`{key}` is an object without `value`")),
        },
        other => other,
    };
    match x {
        Value::Number(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a whole number ≥ 0, not {n}")),
        Value::String(s) => s
            .trim()
            .parse::<u64>()
            .map(Some)
            .map_err(|_| format!("`{key}` must be a whole number ≥ 0, not {s:?}")),
        other => Err(format!("`{key}` must be a whole number, not {other}")),
    }
}

/// A number under `key` (a percentage, a ratio), bare or in a
/// `{value: x}` wrapper (`budgetPercent: {value: 10}`).
pub(crate) fn number(v: &Value, key: &str) -> Result<Option<f64>, String> {
    let Some(mut x) = get(v, key) else {
        return Ok(None);
    };
    if x.is_object() {
        x = get(x, "value").ok_or_else(|| format!("`{key}` is an object without `value`"))?;
    }
    let n = match x {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n.is_finite() && n >= 0.0 => Ok(Some(n)),
        _ => Err(format!("`{key}` must be a number ≥ 0, not {x}")),
    }
}

/// A duration under `key`: a string read by [`stagger::config::parse_duration`] with a
/// unit required (`2s`, `150ms`, `1m30s`, proto-JSON's `"0.200s"`), or
/// `{seconds, nanos}`.
pub(crate) fn duration(v: &Value, key: &str) -> Result<Option<Duration>, String> {
    let Some(x) = get(v, key) else {
        return Ok(None);
    };
    let bad = || format!("`{key}` must be a duration such as \"2s\" or \"150ms\", not {x}");
    match x {
        Value::String(s) => go_duration(s).map(Some).ok_or_else(bad),
        Value::Object(_) => {
            let secs = uint(x, "seconds").map_err(|_| bad())?.unwrap_or(0);
            if secs > 1_000_000_000 {
                return Err(bad());
            }
            let nanos = uint(x, "nanos").map_err(|_| bad())?.unwrap_or(0);
            let nanos = u32::try_from(nanos)
                .ok()
                .filter(|n| *n < 1_000_000_000)
                .ok_or_else(bad)?;
            Ok(Some(Duration::new(secs, nanos)))
        }
        _ => Err(bad()),
    }
}

/// A duration with a unit required (Go's and protobuf JSON's forms, `0`
/// alone), by the audit's one grammar.
pub(crate) fn go_duration(s: &str) -> Option<Duration> {
    stagger::config::parse_duration(s, stagger::config::Bare::None).ok()
}

/// Every object in `v` (depth first, `v` itself included) that has `key`:
/// finds route configurations in a bootstrap, an RDS response or a config
/// dump alike.
pub(crate) fn objects_with<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    fn walk<'a>(v: &'a Value, want: &str, depth: u32, out: &mut Vec<&'a Value>) {
        if depth > 64 {
            return;
        }
        match v {
            Value::Object(m) => {
                if m.keys().any(|k| fold(k) == want) {
                    out.push(v);
                    return;
                }
                for x in m.values() {
                    walk(x, want, depth + 1, out);
                }
            }
            Value::Array(a) => {
                for x in a {
                    walk(x, want, depth + 1, out);
                }
            }
            _ => {}
        }
    }
    walk(v, &fold(key), 0, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_in_either_spelling() {
        let v = json!({"num_retries": 3, "retryOn": "5xx", "perTryTimeout": "1s"});
        assert_eq!(uint(&v, "numRetries").unwrap(), Some(3));
        assert_eq!(string(&v, "retry_on"), Some("5xx"));
        assert_eq!(
            duration(&v, "per_try_timeout").unwrap(),
            Some(Duration::from_secs(1))
        );
        assert_eq!(uint(&json!({"n": "5"}), "n").unwrap(), Some(5));
        assert_eq!(uint(&json!({"n": {"value": 7}}), "n").unwrap(), Some(7));
        assert!(uint(&json!({"n": "five"}), "n")
            .unwrap_err()
            .contains("five"));
        assert_eq!(
            number(&json!({"p": {"value": 10}}), "p").unwrap(),
            Some(10.0)
        );
    }

    #[test]
    fn several_documents_and_empty_ones() {
        let docs = documents("f", "---\na: 1\n---\n---\nb: 2\n...\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
        let err = documents("f.yaml", "a: [1, 2").unwrap_err();
        assert!(err.to_string().starts_with("f.yaml: "), "{err}");
    }
}
