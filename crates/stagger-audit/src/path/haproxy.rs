//! HAProxy backends: `retries` and `retry-on`.
//!
//! The rules (HAProxy's configuration manual, `retries`, `retry-on`,
//! `option redispatch`):
//! - `retries` is the number of times a request or connection attempt is
//!   *retried* after a failure, 3 by default (set in `defaults` or the
//!   backend), so 1 + retries attempts;
//! - `retry-on` says what is retried: `conn-failure` by default (a
//!   connection that could not be made), and `empty-response`,
//!   `junk-response`, `response-timeout`, `0rtt-rejected`, status codes
//!   (404, 408, 425, 500, 501, 502, 503, 504) or `all-retryable-errors`
//!   beyond; `none` turns retries off;
//! - before retrying the same server HAProxy waits a turn-around of
//!   min(`timeout connect`, 1 s); with `option redispatch` the last retry
//!   goes to another server;
//! - HAProxy answers 503 when every connection attempt failed and 504 at
//!   `timeout server`;
//! - a section without a `server` line (a `listen stats` page) connects to
//!   nothing, so it has no connection to retry: its requests are answered
//!   by HAProxy itself (the stats applet) or with 503 at once (`src/backend.c`,
//!   `assign_server`: no server to pick). It is no layer of a call path.

use std::time::Duration;

use super::rules::{Pause, Rule};
use super::{Layer, PathError, PathInput, System};

/// A brace, which opens a block in nginx's syntax and never appears in
/// HAProxy's.
const BLOCK_OPENS: char = '{';

const SECTIONS: [&str; 5] = ["global", "defaults", "frontend", "backend", "listen"];

/// Whether `text` reads as an HAProxy configuration: section keywords at
/// the start of lines, no YAML keys or braces.
pub(crate) fn looks_like(text: &str) -> bool {
    let mut sections = 0;
    for l in text.lines() {
        if l.starts_with(char::is_whitespace) || l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        let first = l.split_whitespace().next().unwrap_or("");
        if SECTIONS.contains(&first) {
            sections += 1;
        } else if l.trim_end().ends_with(':') || l.contains(BLOCK_OPENS) {
            return false;
        }
    }
    sections > 0
        && text.lines().any(|l| {
            let f = l.split_whitespace().next().unwrap_or("");
            matches!(f, "backend" | "listen" | "defaults")
        })
}

/// A section's name and its lines' words.
struct Section {
    kind: String,
    name: String,
    lines: Vec<Vec<String>>,
}

fn sections(text: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for l in text.lines() {
        let l = l.split('#').next().unwrap_or("");
        let words: Vec<String> = l.split_whitespace().map(str::to_string).collect();
        let Some(first) = words.first() else { continue };
        if !l.starts_with(char::is_whitespace) && SECTIONS.contains(&first.as_str()) {
            out.push(Section {
                kind: first.clone(),
                name: words.get(1).cloned().unwrap_or_default(),
                lines: Vec::new(),
            });
        } else if let Some(s) = out.last_mut() {
            s.lines.push(words);
        }
    }
    out
}

/// HAProxy's time: bare milliseconds, or `us`, `ms`, `s`, `m`, `h`, `d`.
fn time(s: &str) -> Option<Duration> {
    stagger::config::parse_duration(s, stagger::config::Bare::Millis).ok()
}

#[derive(Clone)]
pub(crate) struct Settings {
    retries: u64,
    on: Vec<String>,
    connect: Option<Duration>,
    server: Option<Duration>,
    redispatch: bool,
    /// `mode tcp`: a relayed stream, whose only retry is a connection.
    tcp: bool,
}

fn read(s: &mut Settings, sec: &Section, f: &PathInput<'_>) -> Result<u32, PathError> {
    let mut servers = 0u32;
    for w in &sec.lines {
        let at = |k: &str| format!("{} {}.{k}", sec.kind, sec.name);
        let arg = |i: usize| w.get(i).map(String::as_str).unwrap_or("");
        match (arg(0), arg(1)) {
            ("retries", n) => {
                s.retries = n.parse().map_err(|_| {
                    PathError::new(
                        f.name,
                        &at("retries"),
                        format!("{n:?} is not a whole number"),
                    )
                })?;
            }
            ("retry-on", _) => s.on = w[1..].to_vec(),
            ("option", "redispatch") => s.redispatch = true,
            ("mode", m) => s.tcp = m.eq_ignore_ascii_case("tcp"),
            ("no", "option") if arg(2) == "redispatch" => s.redispatch = false,
            ("timeout", "connect") => {
                s.connect = Some(time(arg(2)).ok_or_else(|| {
                    PathError::new(
                        f.name,
                        &at("timeout connect"),
                        format!("{:?} is not a time such as 5s", arg(2)),
                    )
                })?)
            }
            ("timeout", "server") => {
                s.server = Some(time(arg(2)).ok_or_else(|| {
                    PathError::new(
                        f.name,
                        &at("timeout server"),
                        format!("{:?} is not a time such as 30s", arg(2)),
                    )
                })?)
            }
            ("server" | "server-template", _) => servers += 1,
            _ => {}
        }
    }
    Ok(servers)
}

/// Every backend and `listen` section: (name, settings over the
/// `defaults` above it, servers).
fn backends(f: &PathInput<'_>) -> Result<Vec<(String, Settings, u32)>, PathError> {
    let secs = sections(f.text);
    let mut defaults = Settings {
        retries: 3,
        on: vec!["conn-failure".into()],
        connect: None,
        server: None,
        redispatch: false,
        tcp: false,
    };
    let mut backends = Vec::new();
    for sec in &secs {
        match sec.kind.as_str() {
            "defaults" => {
                read(&mut defaults, sec, f)?;
            }
            "backend" | "listen" => {
                let mut s = defaults.clone();
                let servers = read(&mut s, sec, f)?;
                backends.push((sec.name.clone(), s, servers));
            }
            _ => {}
        }
    }
    Ok(backends)
}

/// The names of the sections that connect to servers: a section that
/// connects to none (a stats page) is no retrying layer.
fn serving(backends: &[(String, Settings, u32)]) -> Vec<String> {
    backends
        .iter()
        .filter(|b| b.2 > 0)
        .map(|b| b.0.clone())
        .collect()
}

/// An HAProxy config read once, for every backend of it: its backends, or
/// why it does not read.
pub(crate) struct Conf(Result<Vec<(String, Settings, u32)>, PathError>);

/// Reads the backends of `f` once (see [`Conf`]).
pub(crate) fn read_conf(f: &PathInput<'_>) -> Conf {
    Conf(backends(f))
}

/// The backends (or listen sections) a path names one of when no one of
/// them is read alone, else none (or the file does not read).
pub(crate) fn selectors(conf: &Conf) -> Vec<String> {
    let Ok(backends) = &conf.0 else {
        return Vec::new();
    };
    let names = serving(backends);
    if backends.len() > 1 && names.len() != 1 {
        names
    } else {
        Vec::new()
    }
}

/// The backend (or listen section) the path names, or the only one that
/// connects to servers.
fn chosen(f: &PathInput<'_>, conf: &Conf) -> Result<(String, Settings, u32), PathError> {
    let backends = conf.0.as_ref().map_err(Clone::clone)?;
    let names = serving(backends);
    let serving = names.len();
    let chosen = match f.selector {
        None if backends.len() == 1 => backends[0].clone(),
        None if serving == 1 => {
            let i = backends.iter().position(|b| b.2 > 0).unwrap_or(0);
            backends[i].clone()
        }
        None if backends.is_empty() => {
            return Err(PathError::new(
                f.name,
                "backend",
                "no backend or listen section",
            ))
        }
        None => {
            return Err(PathError::new(
                f.name,
                "backend",
                format!(
                    "holds {} backends ({}): name one as {}:BACKEND",
                    backends.len(),
                    names.join(", "),
                    f.name
                ),
            )
            .with_choices(names))
        }
        Some(want) => {
            let i = backends.iter().position(|b| b.0 == want).ok_or_else(|| {
                PathError::new(
                    f.name,
                    "backend",
                    format!("no backend {want:?} (backends: {})", names.join(", ")),
                )
            })?;
            backends[i].clone()
        }
    };
    Ok(chosen)
}

pub(crate) fn layer(f: &PathInput<'_>, conf: &Conf) -> Result<Layer, PathError> {
    let (name, s, servers) = chosen(f, conf)?;
    let mut layer = Layer::new(f.name, System::Haproxy, name);
    layer.tcp = s.tcp;
    let mut on: Vec<String> = s.on.iter().map(|w| w.to_ascii_lowercase()).collect();
    if s.tcp && !on.iter().any(|w| w == "none") {
        // retry-on is an HTTP mode setting: a TCP relay retries only the
        // connection it could not make.
        on = vec!["conn-failure".into()];
        layer.assumes.push(
            "mode tcp: HAProxy relays a stream and retries only a connection it could not make"
                .into(),
        );
    }
    layer.per_try_timeout = s.server;
    if servers == 0 {
        layer.retry_on =
            "nothing: no server line, so no connection to retry (a stats page, or 503 at once)"
                .into();
        return Ok(layer);
    }
    if s.retries == 0 || on.iter().any(|w| w == "none") {
        layer.retry_on = "nothing (retries 0 or retry-on none)".into();
        return Ok(layer);
    }
    layer.max_tries = Some(u32::try_from(s.retries.saturating_add(1)).unwrap_or(u32::MAX));
    layer.retry_on = on.join(" ");
    let turn = s
        .connect
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(1));
    layer.pause = Pause::Steps {
        base: turn,
        factor: 1.0,
        max: turn,
    };
    let servers = match servers {
        1 => "1 server".to_string(),
        n => format!("{n} servers"),
    };
    layer.assumes.push(format!(
        "{servers}; turn-around {turn:?} before each retry (min of timeout connect and 1 s){}",
        if s.redispatch {
            "; option redispatch sends the last retry to another server"
        } else {
            ""
        }
    ));
    if on
        .iter()
        .any(|w| w != "conn-failure" && w != "0rtt-rejected")
    {
        layer.non_idempotent = Some(format!("retry-on {}", on.join(" ")));
    }
    layer.rule = Rule::Haproxy { on };
    Ok(layer)
}
