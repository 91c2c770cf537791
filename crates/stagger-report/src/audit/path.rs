//! A call path as text: one row per layer, the totals, the assumptions and
//! the findings, in at most 120 columns.

use std::fmt::Write;
use std::time::Duration;

use stagger_audit::path::{count, Budget, Dead, PathReport, Protocol};

use crate::text::{cut, cut_middle, WIDTH};

/// `text` wrapped to the table's width, every line indented by `indent`.
fn wrap(text: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    for line in crate::text::wrap(text, WIDTH - indent, "") {
        let _ = writeln!(out, "{pad}{line}");
    }
    out
}

/// An estimate as the table shows it: to three decimals, then as a count.
fn figure(x: f64) -> String {
    count(stagger_sim::rounded(x, 3))
}

/// A layer's name, `FILE WHAT`, in at most `w` columns, so layers of one
/// file never read alike: the file is cut before what the layer is
/// (system and selector); a cluster-local host drops its
/// `.svc.cluster.local`; a selector still too long loses its middle.
fn layer_name(file: &str, what: &str, w: usize) -> String {
    let full = format!("{file} {what}");
    if full.chars().count() <= w {
        return full;
    }
    let what = what.replace(".svc.cluster.local", "");
    let what_len = what.chars().count();
    // Room for at least a few characters of the file name and a space.
    if what_len + 6 <= w {
        return format!("{} {what}", cut(file, w - what_len - 1));
    }
    cut_middle(&what, w)
}

/// A count of attempts: "1 attempt", "2.40 attempts".
pub(super) fn attempts(x: f64) -> String {
    if x == 1.0 {
        "1 attempt".to_string()
    } else {
        format!("{} attempts", count(x))
    }
}

fn budget(b: Option<&Budget>) -> String {
    match b {
        None => "none".to_string(),
        Some(Budget::Ratio { ratio, .. }) => format!("ratio {}", count(*ratio)),
        Some(Budget::Concurrent {
            percent,
            min_concurrency,
        }) => {
            format!("{}% in flight, min {min_concurrency}", count(*percent))
        }
        Some(Budget::MaxConcurrent { max }) => format!("{max} in flight"),
        Some(Budget::Drains { what }) => (*what).to_string(),
    }
}

fn wait(d: Option<Duration>) -> String {
    match d {
        None => "forever (no timeout on the path)".to_string(),
        Some(d) => format!("{d:.1?}"),
    }
}

/// The budget sizing at the stated rate and latency, if any.
fn sizing(r: &PathReport, s: &mut String) {
    if let (Some(rate), Some(latency), false) =
        (r.options.rate, r.options.latency, r.sizing.is_empty())
    {
        let _ = writeln!(
            s,
            "Budget sizing at {} requests/s and {latency:?} per attempt (Little's law: retries in flight = retries/s × latency):",
            count(rate)
        );
        for z in &r.sizing {
            let floor = match z.floor {
                Some(f) => format!(
                    "at most {f} in flight keeps the bottom at or under {}",
                    count(z.bound)
                ),
                None => format!("the other layers alone pass {}", count(z.bound)),
            };
            s.push_str(&wrap(
                &format!(
                    "layer {}: {} requests/s, {} in flight; the cap of {} lets {} retries/s through of {} wanted: {} tries per request, {}; {floor}",
                    z.layer + 1,
                    figure(z.rate),
                    figure(z.active),
                    figure(z.cap),
                    figure(z.allowed_per_second),
                    figure(z.wanted_per_second),
                    figure(z.tries),
                    attempts(stagger_sim::rounded(z.bottom_attempts, 3)),
                ),
                2,
            ));
        }
    }
}

/// The table of layers, edge first, and what reaches the dependency.
fn table(r: &PathReport, s: &mut String) {
    let _ = writeln!(
        s,
        "{:>2} {:<44} {:<38} {:>6} {:>8}  budget",
        "#", "layer", "retries on", "tries", "sends"
    );
    for (i, (l, n)) in r.layers.iter().zip(&r.dead.layers).enumerate() {
        let mut what = format!("{} {}", l.system, l.selector);
        if l.implicit {
            what.push_str(" (implicit)");
        }
        let who = layer_name(l.file_name(), &what, 44);
        let on = if n.retries || l.max_tries == Some(1) {
            l.retry_on.clone()
        } else {
            format!("not {} ({})", n.sees, l.retry_on)
        };
        let _ = writeln!(
            s,
            "{:>2} {:<44} {:<38} {:>6} {:>8}  {}",
            i + 1,
            cut(&who, 44),
            cut(&on, 38),
            count(n.tries),
            count(n.sends),
            cut(&budget(l.budget.as_ref()), 16)
        );
    }
    let _ = writeln!(
        s,
        "   {:<44} {:>55}",
        "dependency",
        format!("{} per call", attempts(r.dead.bottom_attempts))
    );
}

/// What cuts the retries at each layer, what the audit assumed, and the
/// findings.
fn notes(r: &PathReport, s: &mut String) {
    for (i, l) in r.layers.iter().enumerate() {
        if let Some(cut) = &l.cut_by {
            s.push_str(&wrap(
                &format!("What cuts it at layer {}: {cut}.", i + 1),
                0,
            ));
        }
    }
    let assumes: Vec<String> = r
        .layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.assumes.iter().map(move |a| format!("{}: {a}", i + 1)))
        .collect();
    if !assumes.is_empty() {
        let _ = writeln!(s, "Assumes:");
        for a in assumes {
            s.push_str(&wrap(&a, 2));
        }
    }
    if r.findings.is_empty() {
        let _ = writeln!(s, "No findings.");
    } else {
        let _ = writeln!(s, "Findings:");
        for f in &r.findings {
            s.push_str(&wrap(&format!("{}: {}", f.id, f.message), 2));
        }
    }
}

/// The path as text, at most 120 columns.
pub fn path_text(r: &PathReport) -> String {
    let mut s = String::new();
    let proto = match r.protocol {
        Protocol::Http if r.layers.iter().all(|l| l.relays_tcp()) => "TCP",
        Protocol::Grpc => "gRPC",
        Protocol::Http => "HTTP",
    };
    let dead = match r.options.dead {
        Dead::Refused => "refuses every connection",
        Dead::Unavailable => "answers every attempt with unavailable",
        Dead::Blackhole => "never answers",
    };
    let _ = writeln!(s, "Call path, edge first ({proto}); the dependency {dead}:");
    table(r, &mut s);
    let _ = writeln!(
        s,
        "The edge waits {} before it gives up.",
        wait(r.dead.edge_waits)
    );
    let _ = writeln!(
        s,
        "At failure rate {}, the dependency gets {} per call.",
        r.options.failure_rate,
        attempts(r.at_rate.bottom_attempts)
    );
    let _ = writeln!(
        s,
        "With each layer's budget drained or capping (steady state, {} requests in flight): {} per call.",
        r.options.concurrency,
        attempts(r.budgeted_bottom_attempts)
    );
    sizing(r, &mut s);
    notes(r, &mut s);
    s
}
