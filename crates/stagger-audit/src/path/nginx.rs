//! nginx's `proxy_next_upstream`, in an `nginx.conf` or as ingress-nginx
//! annotations and ConfigMap keys.
//!
//! The rules (nginx's `ngx_http_proxy_module` and upstream docs, and
//! ingress-nginx's annotations and ConfigMap reference):
//! - `proxy_next_upstream` lists the failures passed to the *next* server:
//!   `error timeout` by default; `invalid_header`, `http_500`, `http_502`,
//!   `http_503`, `http_504`, `http_403`, `http_404`, `http_429` add
//!   answers; `off` turns it off; without `non_idempotent`, a POST, LOCK or
//!   PATCH is never passed on;
//! - `proxy_next_upstream_tries` counts tries, the first included, and 0
//!   (the default) sets no limit, so the servers of the upstream bound
//!   them: each try goes to another server, and an upstream of one server
//!   (or a plain `proxy_pass` host) gets one try whatever the setting;
//! - `proxy_next_upstream_timeout` (0, off, by default) bounds the tries
//!   together, `proxy_read_timeout` (60 s) each;
//! - ingress-nginx writes the same directives from
//!   `nginx.ingress.kubernetes.io/proxy-next-upstream` (`error timeout`),
//!   `-tries` (3) and `-timeout` (0), or its ConfigMap's keys of the same
//!   names; `proxy-request-buffering: "off"` streams the body, and a
//!   request whose body nginx started sending is never passed on.
//!
//! nginx answers a failed connection with 502 and a timeout with 504.

use std::time::Duration;

use serde_json::Value;

use super::rules::Rule;
use super::tree;
use super::{Layer, Options, PathError, PathInput, System};

/// What ends a line that opens a block.
const OPENS_BLOCK: char = '{';

/// One directive or block: its words and, for a block, its children.
#[derive(Debug, Clone, Default)]
struct Node {
    words: Vec<String>,
    children: Vec<Node>,
}

/// Whether `text` reads as nginx's configuration syntax.
pub(crate) fn looks_like(text: &str) -> bool {
    let lines = text.lines().map(str::trim).filter(|l| !l.starts_with('#'));
    let mut blocks = 0;
    let mut proxy = false;
    for l in lines {
        let first = l.split_whitespace().next().unwrap_or("");
        if l.ends_with(OPENS_BLOCK)
            && matches!(
                first,
                "http" | "server" | "location" | "upstream" | "events"
            )
        {
            blocks += 1;
        }
        if matches!(
            first,
            "proxy_pass" | "proxy_next_upstream" | "proxy_next_upstream_tries"
        ) && l.ends_with(';')
        {
            proxy = true;
        }
    }
    blocks > 0 || proxy
}

/// nginx's words, `{`, `}` and `;`, without comments.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if !cur.is_empty() {
            out.push(std::mem::take(cur));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '#' if cur.is_empty() => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' if cur.is_empty() => {
                for d in chars.by_ref() {
                    if d == c {
                        break;
                    }
                    cur.push(d);
                }
                out.push(std::mem::take(&mut cur));
            }
            '{' | '}' | ';' => {
                flush(&mut cur, &mut out);
                out.push(c.to_string());
            }
            c if c.is_whitespace() => flush(&mut cur, &mut out),
            c => cur.push(c),
        }
    }
    flush(&mut cur, &mut out);
    out
}

fn parse(f: &PathInput<'_>) -> Result<Vec<Node>, PathError> {
    let mut stack: Vec<Node> = vec![Node::default()];
    let mut words = Vec::new();
    for t in tokens(f.text) {
        match t.as_str() {
            ";" => {
                let n = Node {
                    words: std::mem::take(&mut words),
                    children: Vec::new(),
                };
                if let Some(p) = stack.last_mut() {
                    p.children.push(n);
                }
            }
            "{" => {
                if stack.len() > 64 {
                    return Err(PathError::new(f.name, "", "blocks nested deeper than 64"));
                }
                stack.push(Node {
                    words: std::mem::take(&mut words),
                    children: Vec::new(),
                });
            }
            "}" => {
                let n = stack
                    .pop()
                    .filter(|_| !stack.is_empty())
                    .ok_or_else(|| PathError::new(f.name, "", "a `}` closes no block"))?;
                if let Some(p) = stack.last_mut() {
                    p.children.push(n);
                }
            }
            _ => words.push(t),
        }
    }
    if stack.len() != 1 {
        return Err(PathError::new(
            f.name,
            "",
            "a block is not closed (a `}` is missing)",
        ));
    }
    Ok(stack.pop().map(|n| n.children).unwrap_or_default())
}

/// The settings in force at a location: inherited from `http` and
/// `server` unless the location sets its own.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    on: Vec<String>,
    tries: u64,
    timeout: Option<Duration>,
    read: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            on: vec!["error".into(), "timeout".into()],
            tries: 0,
            timeout: None,
            read: Duration::from_secs(60),
        }
    }
}

/// nginx's time: `90s`, `1m`, `500ms`, `1h 30m`, or bare seconds.
fn nginx_time(s: &str) -> Option<Duration> {
    stagger::config::parse_duration(s, stagger::config::Bare::Seconds).ok()
}

fn apply(s: &mut Settings, n: &Node, f: &PathInput<'_>) -> Result<(), PathError> {
    let arg = |i: usize| n.words.get(i).map(String::as_str).unwrap_or("");
    let bad =
        |what: &str| PathError::new(f.name, &n.words[0], format!("{:?} is not {what}", arg(1)));
    match arg(0) {
        "proxy_next_upstream" => s.on = n.words[1..].to_vec(),
        "proxy_next_upstream_tries" => {
            s.tries = arg(1).parse().map_err(|_| bad("a whole number"))?
        }
        "proxy_next_upstream_timeout" => {
            s.timeout = Some(nginx_time(arg(1)).ok_or_else(|| bad("a time such as 30s"))?)
                .filter(|d| !d.is_zero());
        }
        "proxy_read_timeout" => {
            s.read = nginx_time(arg(1)).ok_or_else(|| bad("a time such as 30s"))?
        }
        _ => {}
    }
    Ok(())
}

/// Every location that proxies, with its settings, and the upstreams.
fn walk(
    nodes: &[Node],
    inherited: &Settings,
    f: &PathInput<'_>,
    out: &mut Vec<(String, String, Settings)>,
    upstreams: &mut Vec<(String, u32)>,
) -> Result<(), PathError> {
    let mut s = inherited.clone();
    for n in nodes
        .iter()
        .filter(|n| n.children.is_empty() && !n.words.is_empty())
    {
        apply(&mut s, n, f)?;
    }
    for n in nodes {
        let head = n.words.first().map(String::as_str).unwrap_or("");
        if head == "upstream" && n.words.len() > 1 {
            let servers = n
                .children
                .iter()
                .filter(|c| {
                    c.words.first().map(String::as_str) == Some("server")
                        && !c.words.iter().any(|w| w == "down")
                })
                .count();
            upstreams.push((
                n.words[1].clone(),
                u32::try_from(servers).unwrap_or(u32::MAX),
            ));
            continue;
        }
        if head == "location" {
            let mut here = s.clone();
            for c in n
                .children
                .iter()
                .filter(|c| c.children.is_empty() && !c.words.is_empty())
            {
                apply(&mut here, c, f)?;
            }
            if let Some(p) = n
                .children
                .iter()
                .find(|c| c.words.first().map(String::as_str) == Some("proxy_pass"))
            {
                let path = n.words[1..].join(" ");
                out.push((
                    path,
                    p.words.get(1).cloned().unwrap_or_default(),
                    here.clone(),
                ));
            }
            walk(
                &n.children
                    .iter()
                    .filter(|c| !c.children.is_empty())
                    .cloned()
                    .collect::<Vec<_>>(),
                &here,
                f,
                out,
                upstreams,
            )?;
        } else if !n.children.is_empty() {
            walk(&n.children, &s, f, out, upstreams)?;
        }
    }
    Ok(())
}

/// A location of an `nginx.conf` that proxies, by its path (or its
/// upstream's name).
pub(crate) fn layer(f: &PathInput<'_>, conf: &Conf) -> Result<Layer, PathError> {
    let (locations, upstreams) = conf.0.as_ref().map_err(Clone::clone)?;
    let (path, pass, s) = pick(f, locations)?;
    let up = target(pass);
    let servers = upstreams.iter().find(|(n, _)| *n == up).map(|(_, c)| *c);
    let mut layer = Layer::new(
        f.name,
        System::Nginx,
        if up.is_empty() {
            path.clone()
        } else {
            format!("{path} → {up}")
        },
    );
    let servers = match servers {
        Some(n) => n,
        None => {
            layer.assumes.push(format!("{up:?} is not an upstream block here: one server (a name that resolves to several addresses at startup gets more)"));
            1
        }
    };
    apply_settings(&mut layer, &s.on, s.tries, Some(servers));
    if servers == 1 && s.tries != 1 {
        layer.assumes.push(format!("upstream {up} has one server: nginx does not retry it, whatever proxy_next_upstream_tries ({}) says", s.tries));
    }
    layer.per_try_timeout = Some(s.read);
    layer.timeout = s.timeout;
    Ok(layer)
}

/// A location: (path, proxy_pass, settings).
type Location = (String, String, Settings);

/// An `nginx.conf` read once, for every location of it: the locations
/// that proxy and the upstreams with their servers, or why it does not
/// read.
pub(crate) struct Conf(Result<(Vec<Location>, Upstreams), PathError>);

/// The upstreams of a file, each with its servers.
type Upstreams = Vec<(String, u32)>;

/// Reads `f` once (see [`Conf`]).
pub(crate) fn read_conf(f: &PathInput<'_>) -> Conf {
    Conf(locations(f))
}

/// Every location of the file that proxies, and its upstreams with their
/// servers.
fn locations(f: &PathInput<'_>) -> Result<(Vec<Location>, Upstreams), PathError> {
    let nodes = parse(f)?;
    let mut locations = Vec::new();
    let mut upstreams = Vec::new();
    walk(
        &nodes,
        &Settings::default(),
        f,
        &mut locations,
        &mut upstreams,
    )?;
    Ok((locations, upstreams))
}

/// A location as a path names it: its path.
fn labels(locations: &[Location]) -> Vec<String> {
    locations.iter().map(|l| l.0.clone()).collect()
}

/// The proxied locations of an `nginx.conf` a path names one of when it
/// holds several, else none (or the file does not read).
pub(crate) fn selectors(conf: &Conf) -> Vec<String> {
    match &conf.0 {
        Ok((locations, _)) if locations.len() > 1 => labels(locations),
        _ => Vec::new(),
    }
}

/// The upstream (or host) a `proxy_pass` sends to.
fn target(pass: &str) -> String {
    let rest = pass.split_once("://").map_or(pass, |(_, r)| r);
    rest.split(['/', ':']).next().unwrap_or(rest).to_string()
}

/// The location the selector names by path or upstream, or the only one;
/// locations the selector names that proxy alike are one layer.
fn pick<'a>(f: &PathInput<'_>, locations: &'a [Location]) -> Result<&'a Location, PathError> {
    let labels = labels(locations);
    let picked: Vec<&Location> = match f.selector {
        None => locations.iter().collect(),
        Some(s) => locations
            .iter()
            .filter(|l| l.0 == s || target(&l.1) == s)
            .collect(),
    };
    match picked.as_slice() {
        [] if locations.is_empty() => Err(PathError::new(
            f.name,
            "location",
            "no location proxies (no proxy_pass)",
        )),
        [] => Err(PathError::new(
            f.name,
            "location",
            format!(
                "no location or upstream {:?} (locations: {})",
                f.selector.unwrap_or(""),
                labels.join(", ")
            ),
        )),
        [one] => Ok(*one),
        several => {
            // Locations the selector names that proxy alike are one layer.
            let first = several[0];
            let same = several.iter().all(|l| {
                target(&l.1) == target(&first.1)
                    && l.2.on == first.2.on
                    && l.2.tries == first.2.tries
            });
            if f.selector.is_none() || !same {
                return Err(PathError::new(
                    f.name,
                    "location",
                    format!(
                        "holds {} proxied locations ({}): name one as {}:PATH",
                        several.len(),
                        labels.join(", "),
                        f.name
                    ),
                )
                .with_choices(labels));
            }
            Ok(first)
        }
    }
}

/// `proxy_next_upstream` and its tries onto `layer`; `servers` bounds the
/// tries when known.
/// The values `proxy_next_upstream` takes (nginx's proxy module,
/// `ngx_http_proxy_next_upstream_masks`; ingress-nginx's annotation
/// passes them on).
const CONDITIONS: [&str; 12] = [
    "error",
    "timeout",
    "invalid_header",
    "http_500",
    "http_502",
    "http_503",
    "http_504",
    "http_403",
    "http_404",
    "http_429",
    "non_idempotent",
    "off",
];

fn apply_settings(layer: &mut Layer, on: &[String], tries: u64, servers: Option<u32>) {
    let on: Vec<String> = on.iter().map(|w| w.to_ascii_lowercase()).collect();
    for w in on.iter().filter(|w| !CONDITIONS.contains(&w.as_str())) {
        layer.invalid.push(format!(
            "`proxy_next_upstream` {w} is not a value nginx takes ({}): nginx refuses a configuration that holds it (invalid value), and the audit reads the rest without it; remove it",
            CONDITIONS.join(", ")
        ));
    }
    let on: Vec<String> = on
        .into_iter()
        .filter(|w| CONDITIONS.contains(&w.as_str()))
        .collect();
    let off = on.iter().any(|w| w == "off") || on.is_empty();
    let by_tries = if tries == 0 {
        u32::MAX
    } else {
        u32::try_from(tries).unwrap_or(u32::MAX)
    };
    let n = servers.map_or(by_tries, |s| s.max(1).min(by_tries));
    if off || n <= 1 {
        layer.max_tries = Some(1);
        layer.retry_on = if off {
            "nothing (proxy_next_upstream off)".into()
        } else {
            format!("nothing: one server ({})", on.join(" "))
        };
        return;
    }
    layer.max_tries = Some(n);
    let conds: Vec<String> = on
        .iter()
        .filter(|w| *w != "non_idempotent")
        .cloned()
        .collect();
    layer.retry_on = conds.join(" ");
    if on.iter().any(|w| w == "non_idempotent") {
        layer.non_idempotent = Some("proxy_next_upstream non_idempotent".into());
    } else {
        layer
            .assumes
            .push("without non_idempotent, nginx never passes a POST, LOCK or PATCH on".into());
    }
    layer.rule = Rule::Nginx { on: conds };
}

/// An ingress-nginx setting by key: the annotation, else the ConfigMap's.
type Lookup = Box<dyn Fn(&str) -> Option<String>>;

/// A ConfigMap that holds ingress-nginx's retry keys.
pub(crate) fn is_ingress_config_map(d: &Value) -> bool {
    tree::string(d, "kind") == Some("ConfigMap")
        && tree::obj(d, "data")
            .is_some_and(|m| m.keys().any(|k| k.starts_with("proxy-next-upstream")))
}

/// The Ingresses of a file.
fn ingresses(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| tree::string(d, "kind") == Some("Ingress"))
        .collect()
}

/// An object's name.
fn name_of(d: &Value) -> String {
    tree::get(d, "metadata")
        .and_then(|m| tree::string(m, "name"))
        .unwrap_or("")
        .to_string()
}

/// The Ingresses a path names one of when the file holds several, else
/// none.
pub(crate) fn ingress_selectors(docs: &[Value]) -> Vec<String> {
    let ingresses = ingresses(docs);
    if ingresses.len() > 1 {
        ingresses.iter().map(|d| name_of(d)).collect()
    } else {
        Vec::new()
    }
}

/// The Ingress the selector names (or `configmap`), with how to look its
/// settings up: its annotations over the ConfigMap's keys.
fn lookup(f: &PathInput<'_>, docs: &[Value]) -> Result<(String, Lookup), PathError> {
    let cm = docs.iter().find(|d| is_ingress_config_map(d));
    let ingresses = ingresses(docs);
    let names: Vec<String> = ingresses.iter().map(|d| name_of(d)).collect();
    Ok(match (f.selector, ingresses.len(), cm) {
        (None, 0, Some(cm)) | (Some("configmap"), _, Some(cm)) => {
            let data = tree::obj(cm, "data").cloned().unwrap_or_default();
            (
                format!("ConfigMap {}", name_of(cm)),
                Box::new(move |k: &str| data.get(k).and_then(Value::as_str).map(str::to_string)),
            )
        }
        (None, 1, _) | (Some(_), _, _) => {
            let ing = match f.selector {
                None => ingresses[0],
                Some(s) => *ingresses.iter().find(|d| name_of(d) == s).ok_or_else(|| {
                    PathError::new(
                        f.name,
                        "metadata.name",
                        format!("no Ingress named {s:?} (here: {})", names.join(", ")),
                    )
                })?,
            };
            let ann = tree::get(ing, "metadata")
                .and_then(|m| tree::obj(m, "annotations"))
                .cloned()
                .unwrap_or_default();
            let data = cm
                .and_then(|c| tree::obj(c, "data"))
                .cloned()
                .unwrap_or_default();
            (
                name_of(ing),
                Box::new(move |k: &str| {
                    ann.get(&format!("nginx.ingress.kubernetes.io/{k}"))
                        .or_else(|| data.get(k))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                }),
            )
        }
        _ => {
            return Err(PathError::new(
                f.name,
                "metadata.name",
                format!(
                    "holds {} Ingresses ({}): name one as {}:NAME",
                    ingresses.len(),
                    names.join(", "),
                    f.name
                ),
            )
            .with_choices(names));
        }
    })
}

/// One Ingress with ingress-nginx annotations (the ConfigMap's keys, in
/// the same file, are its defaults), by name.
pub(crate) fn ingress(f: &PathInput<'_>, docs: &[Value], o: &Options) -> Result<Layer, PathError> {
    let (label, get) = lookup(f, docs)?;
    let field = |k: &str| format!("metadata.annotations.nginx.ingress.kubernetes.io/{k}");
    let mut layer = Layer::new(f.name, System::Nginx, label);
    let on: Vec<String> = get("proxy-next-upstream")
        .unwrap_or_else(|| "error timeout".into())
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let tries = match get("proxy-next-upstream-tries") {
        None => 3,
        Some(t) => t.trim().parse::<u64>().map_err(|_| {
            PathError::new(
                f.name,
                &field("proxy-next-upstream-tries"),
                format!("{t:?} is not a whole number"),
            )
        })?,
    };
    if get("proxy-next-upstream").is_none() {
        layer.assumes.push(
            "proxy-next-upstream unset: ingress-nginx's \"error timeout\" (no status is retried)"
                .into(),
        );
    }
    let servers = if tries == 0 {
        layer.assumes.push(format!("proxy-next-upstream-tries \"0\": no limit but the endpoints, counted as {} (--endpoints)", o.endpoints));
        Some(o.endpoints)
    } else {
        if get("proxy-next-upstream-tries").is_none() {
            layer
                .assumes
                .push("proxy-next-upstream-tries unset: ingress-nginx's 3".into());
        }
        None
    };
    apply_settings(&mut layer, &on, tries, servers);
    if let Some(t) = get("proxy-next-upstream-timeout") {
        let secs: u64 = t.trim().parse().map_err(|_| {
            PathError::new(
                f.name,
                &field("proxy-next-upstream-timeout"),
                format!("{t:?} is not whole seconds"),
            )
        })?;
        layer.timeout = Some(Duration::from_secs(secs)).filter(|d| !d.is_zero());
    }
    let read = match get("proxy-read-timeout") {
        Some(t) => t.trim().parse::<u64>().map_err(|_| {
            PathError::new(
                f.name,
                &field("proxy-read-timeout"),
                format!("{t:?} is not whole seconds"),
            )
        })?,
        None => 60,
    };
    layer.per_try_timeout = Some(Duration::from_secs(read));
    if get("proxy-request-buffering").is_some_and(|v| v.trim() == "off")
        && layer.max_tries != Some(1)
    {
        layer.assumes.push("proxy-request-buffering \"off\": a request whose body nginx started sending is not passed on, so only requests without a body are retried".into());
    }
    Ok(layer)
}
