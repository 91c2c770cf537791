//! Every code-like name the reference pages give in prose must exist in the
//! library as written: a method removed or turned into a field cannot stay
//! documented. (The pages' code blocks are compiled as doc-tests; this
//! checks the names between backticks in their text.)
//!
//! A name is read from a backtick span of `docs/behaviour.md` or
//! `docs/library.md` when it is a path (`Type::item`), a call (`name(…)`,
//! `.name(…)`, `Type::name(…)`) or a `CamelCase` type name. Each is looked up
//! among the items the crate's sources declare: a `Type::method(…)` must be
//! a function in an `impl` of a type of that name, a `Type::Name` a variant,
//! associated constant or function of it, a `Type::field` (no call) a
//! function or field of it. Names of other crates are listed in `FOREIGN`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Types and functions of other crates (std, tower, tonic, tokio, …) and of
/// stagger's other crates that the pages name in passing.
const FOREIGN: &[&str] = &[
    // Notation of the formulas and tables, not code.
    "min",
    "max",
    "proportional",
    "Arc",
    "Box",
    "Bytes",
    "Clone",
    "Duration",
    "Instant",
    "Option",
    "Result",
    "Some",
    "Vec",
    "Request",
    "Response",
    // Names of the AWS SDKs the adaptive limiter's docs compare with: the
    // Rust SDK's limiter type and an AWS throttling error code.
    "ClientRateLimiter",
    "ThrottlingException",
    "ServiceBuilder",
    "Router",
    "Status",
    "Channel",
    "EAI_AGAIN",
    "map_request",
    // The shipped Prometheus alerts.
    "RetryAmplificationHigh",
    "RetryBudgetExhausted",
    "CircuitBreakerOpenLong",
];

/// What the sources declare: types with their members, and every function.
#[derive(Default)]
struct Declared {
    /// Type (struct, enum, trait, alias) name → its fields, variants,
    /// associated items and methods.
    members: BTreeMap<String, BTreeSet<String>>,
    /// Every function or method name, wherever declared.
    functions: BTreeSet<String>,
    /// Type name → the functions of its `impl`s (and a trait's own).
    methods: BTreeMap<String, BTreeSet<String>>,
    /// Every module name, and every name a `use … as` gives.
    modules: BTreeSet<String>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier that starts `s` (after spaces), if any.
fn ident(s: &str) -> Option<&str> {
    let s = s.trim_start();
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// `s` without a leading `<…>` (balanced).
fn skip_generics(s: &str) -> &str {
    let s = s.trim_start();
    if !s.starts_with('<') {
        return s;
    }
    let mut depth = 0;
    let mut prev = ' ';
    for (i, c) in s.char_indices() {
        let arrow = prev == '-';
        prev = c;
        match c {
            '<' => depth += 1,
            '>' if !arrow => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// The type an `impl` header (the text between `impl` and `{`) is for.
fn impl_target(header: &str) -> Option<String> {
    let rest = skip_generics(header);
    // `impl Trait for Type`: the type after the last top-level ` for `.
    let target = match rest.rfind(" for ") {
        Some(i) => &rest[i + 5..],
        None => rest,
    };
    let path = target.trim().split('<').next()?.trim();
    let last = path.rsplit("::").next()?.trim_start_matches('&');
    ident(last).map(str::to_owned)
}

impl Declared {
    fn read(src: &Path) -> Self {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let mut d = Declared::default();
        for f in files {
            d.read_file(&fs::read_to_string(f).unwrap());
        }
        d
    }

    fn read_file(&mut self, text: &str) {
        // The type whose body or impl each open brace belongs to.
        let mut stack: Vec<Option<String>> = Vec::new();
        let mut pending: Option<String> = None;
        let mut in_enum_or_struct: Vec<bool> = Vec::new();
        let mut pending_kind_data = false;
        let mut in_str = false;
        for raw in text.lines() {
            let line = raw.trim();
            if line.starts_with("//") || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line
                .split(|c: char| !is_ident(c) && c != '<' && c != '>')
                .filter(|w| !w.is_empty())
                .collect();
            let owner = stack.iter().rev().flatten().next().cloned();
            let data_body = in_enum_or_struct.last().copied().unwrap_or(false);
            // Declarations on this line.
            for (i, w) in words.iter().enumerate() {
                let next = words.get(i + 1).map(|n| n.split('<').next().unwrap_or(n));
                match (*w, next) {
                    ("fn", Some(n)) => {
                        self.functions.insert(n.to_owned());
                        if let Some(o) = &owner {
                            self.members
                                .entry(o.clone())
                                .or_default()
                                .insert(n.to_owned());
                            self.methods
                                .entry(o.clone())
                                .or_default()
                                .insert(n.to_owned());
                        }
                    }
                    ("struct" | "enum" | "trait" | "type" | "union", Some(n)) => {
                        self.members.entry(n.to_owned()).or_default();
                        if line.ends_with('{') || !line.ends_with(';') {
                            pending = Some(n.to_owned());
                            pending_kind_data = *w == "struct" || *w == "enum";
                        }
                        break;
                    }
                    ("mod", Some(n)) => {
                        self.modules.insert(n.to_owned());
                    }
                    ("as", Some(n)) if line.contains("use ") => {
                        self.modules.insert(n.to_owned());
                    }
                    ("const", Some(n)) if n != "fn" => {
                        if let Some(o) = &owner {
                            self.members
                                .entry(o.clone())
                                .or_default()
                                .insert(n.to_owned());
                        }
                    }
                    _ => {}
                }
            }
            if let Some(rest) = line.strip_prefix("impl") {
                if rest.starts_with(['<', ' ']) {
                    pending = impl_target(rest.trim_end_matches('{'));
                    pending_kind_data = false;
                }
            }
            // A field or variant of the struct or enum being read.
            if data_body && stack.len() == in_enum_or_struct.len() {
                if let Some(o) = &owner {
                    let l = line
                        .trim_start_matches("pub(crate) ")
                        .trim_start_matches("pub ");
                    if let Some(n) = ident(l) {
                        let after = l[n.len()..].trim_start();
                        if after.starts_with([':', ',', '(', '{', '=']) || after.is_empty() {
                            self.members
                                .entry(o.clone())
                                .or_default()
                                .insert(n.to_owned());
                        }
                    }
                }
            }
            let code = line.replace("'{'", "").replace("'}'", "");
            for c in code.chars() {
                if c == '"' {
                    in_str = !in_str;
                }
                if in_str {
                    continue;
                }
                match c {
                    '{' => {
                        stack.push(pending.take());
                        in_enum_or_struct.push(std::mem::take(&mut pending_kind_data));
                    }
                    '}' => {
                        stack.pop();
                        in_enum_or_struct.pop();
                    }
                    _ => {}
                }
            }
            if line.ends_with(';') && !line.starts_with("impl") {
                pending = None;
                pending_kind_data = false;
            }
        }
    }

    fn has_type(&self, t: &str) -> bool {
        self.members.contains_key(t)
    }

    fn has_member(&self, t: &str, m: &str) -> bool {
        self.members.get(t).is_some_and(|ms| ms.contains(m))
    }
}

/// The backtick spans of a Markdown page's prose (fenced blocks skipped).
fn spans(page: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in page.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(code), Some(_)) = (parts.next(), parts.next()) {
            out.push((n + 1, code.to_owned()));
        }
        // An unclosed last span is not code.
    }
    out
}

/// What a span names that must exist, or why it does not.
fn check(span: &str, d: &Declared) -> Result<(), String> {
    let s = span.trim().trim_start_matches('.');
    // A name, or a name and its arguments (`retry_500(true)`); anything else
    // (a date, a header value, a formula) is not a name.
    let end = s
        .find(|c: char| !is_ident(c) && c != ':')
        .unwrap_or(s.len());
    let (head, rest) = s.split_at(end);
    let call = rest.starts_with('(') && rest.ends_with(')');
    if !(rest.is_empty() || call) || head.len() < 2 {
        return Ok(());
    }
    let path: Vec<&str> = head.split("::").collect();
    if path
        .iter()
        .any(|p| p.is_empty() || !p.starts_with(|c: char| c.is_ascii_alphabetic()))
    {
        return Ok(());
    }
    // A path into another crate (`u32::MAX`, `http_body::Body`).
    let root = path[0];
    if path.len() > 1
        && root.starts_with(|c: char| c.is_ascii_lowercase())
        && root != "stagger"
        && !d.modules.contains(root)
    {
        return Ok(());
    }
    let foreign = |n: &str| FOREIGN.contains(&n);
    match path.as_slice() {
        [name] if call => {
            if d.functions.contains(*name) || d.has_type(name) || foreign(name) {
                Ok(())
            } else if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                // A variant with data, `Fixed(n)`: any member of that name.
                let any = d.members.values().any(|m| m.contains(*name));
                any.then_some(()).ok_or(format!("no `{name}`"))
            } else {
                Err(format!("no function `{name}`"))
            }
        }
        [name] => {
            let camel = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().any(|c| c.is_ascii_lowercase())
                && !name.contains('_');
            if !camel || d.has_type(name) || foreign(name) {
                return Ok(());
            }
            let any = d.members.values().any(|m| m.contains(*name));
            any.then_some(()).ok_or(format!("no type `{name}`"))
        }
        [.., ty, item] => {
            if !ty.starts_with(|c: char| c.is_ascii_uppercase()) {
                // A module path (`stagger::limit::Limiter`): its last item.
                let known = d.has_type(item) || d.functions.contains(*item);
                return if known || d.modules.contains(*item) || foreign(item) {
                    Ok(())
                } else {
                    Err(format!("no `{item}`"))
                };
            }
            if foreign(ty) {
                return Ok(());
            }
            if !d.has_type(ty) {
                return Err(format!("no type `{ty}`"));
            }
            if d.has_member(ty, item) {
                Ok(())
            } else {
                Err(format!("`{ty}` has no `{item}`"))
            }
        }
        [] => Ok(()),
    }
    .and_then(|()| {
        // A call of a name that is only a field is a removed method.
        match path.as_slice() {
            [.., ty, item] if call && ty.starts_with(|c: char| c.is_ascii_uppercase()) => {
                let is_fn = d.methods.get(*ty).is_some_and(|m| m.contains(*item))
                    || item.starts_with(|c: char| c.is_ascii_uppercase());
                is_fn
                    .then_some(())
                    .ok_or(format!("`{ty}::{item}` is not a function"))
            }
            _ => Ok(()),
        }
    })
}

#[test]
fn every_code_name_in_the_reference_pages_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let declared = Declared::read(&root.join("src"));
    assert!(
        declared.has_member("Policy", "decide"),
        "the scanner reads impls"
    );
    assert!(declared.has_member("StopReason", "Deadline"), "and enums");
    let mut missing = Vec::new();
    for page in ["behaviour.md", "library.md"] {
        let text = fs::read_to_string(root.join("../../docs").join(page)).unwrap();
        for (line, span) in spans(&text) {
            if let Err(why) = check(&span, &declared) {
                missing.push(format!("docs/{page}:{line}: `{span}`: {why}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names the library does not have:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_removed_method_is_caught() {
    let mut d = Declared::default();
    d.read_file(
        "pub struct Settings {\n    pub retry_500: bool,\n}\n\
         impl Settings {\n    pub fn new() -> Self { todo!() }\n}\n",
    );
    assert_eq!(check("Settings::new()", &d), Ok(()));
    assert_eq!(check("retry_500", &d), Ok(()));
    assert!(check("Settings::retry_500(true)", &d).is_err());
    assert!(check("Settings::one_layer(false)", &d).is_err());
    d.read_file(
        "pub struct Layer;\nimpl Layer {\n    pub fn one_layer(self) -> Self { self }\n}\n",
    );
    assert_eq!(check("Layer::one_layer(false)", &d), Ok(()));
    assert!(
        check("Settings::one_layer(false)", &d).is_err(),
        "another type's method"
    );
    assert!(check("count_window(n)", &d).is_err());
    assert!(check("Gone", &d).is_err());
}
