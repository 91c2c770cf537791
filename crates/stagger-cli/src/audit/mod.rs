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

use std::process::ExitCode;

use stagger_audit::path::{what_is, Reading};
use stagger_audit::{audit, Input};
use stagger_report::audit::sarif::{locate_report, sarif, Texts};

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
        Format::Text => stagger_report::audit::table(&report),
        Format::Sarif => {
            let named: Texts = a
                .files
                .iter()
                .zip(&texts)
                .map(|(f, t)| (f.as_str(), t.as_str()))
                .collect();
            sarif(&locate_report(&report, &named), &[])
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
