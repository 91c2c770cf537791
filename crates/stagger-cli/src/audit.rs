//! `stagger audit`: check retry configs against the production checklist
//! and print what the engine measures they would do to a failing
//! dependency. The checks and the numbers live in `stagger_sim::audit`;
//! this module owns reading files, printing and the exit code.
//!
//! Exit codes (a contract): 0 no finding; 1 findings (like a linter); 2 bad
//! usage, or a file that cannot be read or parsed (the message names the
//! file and the field).

use std::process::ExitCode;

use stagger_sim::audit::{audit, Input, Report};

use crate::args::{FormatArgs, UsageError};

/// Flags of `stagger audit`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  stagger audit examples/audit/service-config-bad.json
  stagger audit edge.json cart.toml --format json   (layers of one path, outermost first)

Exit status: 0 no finding, 1 findings, 2 bad usage or an unreadable file.")]
pub struct Args {
    /// gRPC service configs (JSON) or stagger policy files (`.toml`, or JSON
    /// with the policy keys); several files are the layers of one call path,
    /// outermost first (e.g. `stagger audit edge.json db.json`).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<String>,
    #[command(flatten)]
    output: FormatArgs,
}

/// Runs `stagger audit`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let mut texts = Vec::with_capacity(a.files.len());
    for f in &a.files {
        let text =
            std::fs::read_to_string(f).map_err(|e| UsageError(format!("{f}: cannot read: {e}")))?;
        texts.push(text);
    }
    let inputs: Vec<Input<'_>> = a
        .files
        .iter()
        .zip(&texts)
        .map(|(f, t)| Input::new(f, t))
        .collect();
    let report = audit(&inputs).map_err(|e| UsageError(e.to_string()))?;
    if a.output.json() {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", table(&report));
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let width = r
        .findings
        .iter()
        .map(|f| f.method.len())
        .chain(r.methods.iter().map(|m| m.method.len()))
        .chain(["method".len()])
        .max()
        .unwrap_or(6);
    if r.findings.is_empty() {
        out.push_str("no findings\n");
    } else {
        let _ = writeln!(out, "{:<20} {:<width$}  message", "finding", "method");
        for f in &r.findings {
            let _ = writeln!(out, "{:<20} {:<width$}  {}", f.id, f.method, f.message);
        }
    }
    if !r.methods.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>6}   attempts per logical request, measured on the engine",
            "method", "dead", "half"
        );
        for m in &r.methods {
            let _ = writeln!(
                out,
                "{:<width$}  {:>6.3}  {:>6.3}",
                m.method, m.amplification.dead, m.amplification.half
            );
        }
        let _ = writeln!(
            out,
            "(dead: every attempt fails; half: each fails with probability 0.5; below 1: a breaker refused attempts)"
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
