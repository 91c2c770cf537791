//! The audit of service configs and policy files (`stagger audit FILE…`)
//! as a table of at most 120 columns.

use std::fmt::Write;

use stagger_audit::Report;

use crate::text::{cut, wrap, WIDTH};

/// The widest method cell; longer names are cut with `…`.
const METHOD: usize = 40;

/// A method label in at most `w` columns, keeping its `(+N)` count.
fn method_cut(label: &str, w: usize) -> String {
    match label.rsplit_once(" (+") {
        Some((name, more)) if more.ends_with(')') && label.chars().count() > w => {
            let tail = format!(" (+{more}");
            let room = w.saturating_sub(tail.chars().count());
            format!("{}{tail}", cut(name, room))
        }
        _ => cut(label, w),
    }
}

/// An exact figure as computed (up to 5 decimals, no trailing zeros); an
/// estimate to 3 decimals.
fn figure(x: f64, exact: bool) -> String {
    if exact {
        let s = format!("{x:.5}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        format!("{x:.3}")
    }
}

/// The audit of service configs and policy files as a table: the findings,
/// each method's attempts per logical request, the attempts at the bottom.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let width = r
        .findings
        .iter()
        .map(|f| f.method.chars().count())
        .chain(r.methods.iter().map(|m| m.method.chars().count()))
        .chain(["method".len()])
        .max()
        .unwrap_or(6)
        .min(METHOD);
    if r.findings.is_empty() {
        out.push_str("no findings\n");
    } else {
        let message = WIDTH - 20 - 1 - width - 2;
        let _ = writeln!(out, "{:<20} {:<width$}  message", "finding", "method");
        for f in &r.findings {
            for (i, line) in wrap(&f.message, message, "").iter().enumerate() {
                let (id, method) = match i {
                    0 => (f.id, method_cut(&f.method, width)),
                    _ => ("", String::new()),
                };
                let _ = writeln!(
                    out,
                    "{}",
                    format!("{id:<20} {method:<width$}  {line}").trim_end()
                );
            }
        }
    }
    if !r.methods.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "{:<width$}  {:>7}  {:>7}  attempts per logical request, on the library's engine",
            "method", "dead", "half"
        );
        for m in &r.methods {
            let a = &m.amplification;
            let mut how = match a.sample {
                None => "exact".to_string(),
                Some(n) => format!("estimate, {n} requests"),
            };
            if let Some(n) = m.until_timeout {
                let _ = write!(how, "; until the timeout: {n}");
            }
            let _ = writeln!(
                out,
                "{:<width$}  {:>7}  {:>7}  {how}",
                method_cut(&m.method, width),
                figure(a.dead, a.exact),
                figure(a.half, a.exact)
            );
        }
        let _ = writeln!(
            out,
            "(dead: every attempt fails; half: each fails with probability 0.5; below 1: a breaker refused attempts;"
        );
        let _ = writeln!(
            out,
            " exact: every outcome path enumerated; estimate: sampled over seeded requests)"
        );
    }
    let _ = writeln!(
        out,
        "\nattempts at the bottom of the path: {}",
        r.bottom_attempts
    );
    if !r.findings.is_empty() {
        let n = r.findings.len();
        let _ = writeln!(out, "{n} finding{}", if n == 1 { "" } else { "s" });
    }
    out
}
