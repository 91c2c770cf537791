//! `stagger audit`: check retry configs against the production checklist
//! and print what the engine measures they would do to a failing
//! dependency. The checks and the numbers live in `stagger_audit`;
//! this module owns reading files, printing and the exit code.
//!
//! Exit codes (a contract): 0 no finding; 1 findings (like a linter); 2 bad
//! usage, or a file that cannot be read or parsed (the message names the
//! file and the field).

mod path;
mod repo;
mod sarif;

use std::process::ExitCode;

use stagger_audit::path::{what_is, Reading};
use stagger_audit::{audit, Input, Report};

use crate::args::{AuditFormat as Format, UsageError};

/// Flags of `stagger audit`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  stagger audit examples/audit/service-config-bad.json
  stagger audit edge.json cart.toml --format json   (layers of one path, outermost first)
  stagger audit svc.json --format sarif > audit.sarif (SARIF 2.1.0 for code scanning)
  stagger audit --path examples/audit/path/istio-vs.yaml:cart,examples/audit/path/envoy-routes.yaml,examples/audit/path/cart-service-config.json,examples/audit/path/cart.toml
  stagger audit httproute.yaml        (a mesh, gateway, proxy or application config: each object it holds)
  stagger audit deploy/               (a repository: every retry config, and the call paths its routes imply, worst first)
  kubectl get vs,dr,httproute -A -o yaml | stagger audit -   (a cluster dump on stdin)
  stagger audit --path httproute.yaml:retries/1,application.yml:backendA,@istio-sidecar
                                      (@istio-sidecar: a sidecar with Istio's default policy)

Exit status: 0 no finding, 1 findings, 2 bad usage or an unreadable file.
Text output fits 120 columns: one row per methodConfig entry (its first name, +N for the others).")]
pub struct Args {
    /// gRPC service configs (JSON) or stagger policy files (`.toml`, or JSON
    /// with the policy keys); several files are the layers of one call path,
    /// outermost first (e.g. `stagger audit edge.json db.json`). One mesh,
    /// gateway, proxy or application config (Istio, Envoy, Linkerd, Gateway
    /// API, nginx, HAProxy, Traefik, resilience4j, AWS) is audited object by
    /// object, as `--path` reads it. A directory is read whole (every
    /// retry config under it, and the call paths its routes imply); `-`
    /// reads a `kubectl get … -A -o yaml` dump from stdin.
    #[arg(
        required_unless_present = "path",
        conflicts_with = "path",
        value_name = "FILE"
    )]
    files: Vec<String>,
    #[command(flatten)]
    path: crate::audit::path::PathArgs,
    /// Output on stdout: text | json | sarif (SARIF 2.1.0, for code scanning; e.g. `--format sarif`).
    #[arg(long, value_enum, default_value_t = Format::Text, value_name = "F")]
    format: Format,
}

/// Runs `stagger audit`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    if a.path.path.is_some() {
        let (text, code) = crate::audit::path::run(&a.path, a.format)?;
        write_out(text.as_bytes())?;
        return Ok(code);
    }
    if let [one] = a.files.as_slice() {
        if one == "-" || std::path::Path::new(one).is_dir() {
            let (text, code) = crate::audit::repo::run(&a.path, one, a.format)?;
            write_out(text.as_bytes())?;
            return Ok(code);
        }
    }
    let mut texts = Vec::with_capacity(a.files.len());
    for f in &a.files {
        texts.push(crate::audit::path::read(f)?);
    }
    let readings: Vec<Reading> = a
        .files
        .iter()
        .zip(&texts)
        .map(|(f, t)| what_is(f, t))
        .collect();
    for (f, r) in a.files.iter().zip(&readings) {
        if let Reading::Other(what) = r {
            return Err(UsageError(format!(
                "{f}: {what}; stagger audit reads gRPC service configs, stagger policy files, and (on a call path) mesh, gateway, proxy and application retry configs"
            ))
            .into());
        }
    }
    if let [Reading::Path(what)] = readings.as_slice() {
        let (text, code) =
            crate::audit::path::run_file(&a.path, &a.files[0], &texts[0], what, a.format)?;
        write_out(text.as_bytes())?;
        return Ok(code);
    }
    if let Some((f, Reading::Path(what))) = a
        .files
        .iter()
        .zip(&readings)
        .find(|(_, r)| matches!(r, Reading::Path(_)))
    {
        return Err(UsageError(format!(
            "{f}: {what}, one layer of a call path: read the files together with --path {}",
            a.files.join(",")
        ))
        .into());
    }
    let inputs: Vec<Input<'_>> = a
        .files
        .iter()
        .zip(&texts)
        .map(|(f, t)| Input::new(f, t))
        .collect();
    let report = audit(&inputs).map_err(|e| UsageError(e.to_string()))?;
    let text = match a.format {
        Format::Json => serde_json::to_string(&report)? + "\n",
        Format::Text => table(&report),
        Format::Sarif => {
            let named: Vec<(&str, &str)> = a
                .files
                .iter()
                .zip(&texts)
                .map(|(f, t)| (f.as_str(), t.as_str()))
                .collect();
            crate::audit::sarif::render(&crate::audit::sarif::from_report(&report, &named), &[])
        }
    };
    let code = if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    write_out(text.as_bytes())?;
    Ok(code)
}

/// Writes to stdout; a reader that went away (`| head`) ends the output
/// quietly, as ripgrep does, and the exit status stays the audit's.
fn write_out(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// The widest line the table prints.
pub const WIDTH: usize = 120;
/// The widest method cell; longer names are cut with `…`.
const METHOD: usize = 40;

/// `s` in at most `w` columns: cut with `…` when longer.
fn cell(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A method label in at most `w` columns, keeping its `(+N)` count.
fn method_cell(label: &str, w: usize) -> String {
    match label.rsplit_once(" (+") {
        Some((name, more)) if more.ends_with(')') && label.chars().count() > w => {
            let tail = format!(" (+{more}");
            let room = w.saturating_sub(tail.chars().count());
            format!("{}{tail}", cell(name, room))
        }
        _ => cell(label, w),
    }
}

/// `text` broken at spaces into lines of at most `w` columns (a longer word
/// is cut).
fn wrap(text: &str, w: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let word = cell(word, w);
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > w {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    lines.push(line);
    lines
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

fn table(r: &Report) -> String {
    use std::fmt::Write;
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
            for (i, line) in wrap(&f.message, message).iter().enumerate() {
                let (id, method) = match i {
                    0 => (f.id, method_cell(&f.method, width)),
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
                method_cell(&m.method, width),
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
