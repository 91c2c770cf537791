//! `stagger audit --path`: the layers of one call path, from the edge to
//! the dependency, read together. The readers and the model live in
//! `stagger_audit::path`; this module splits the path, reads the
//! files, prints and picks the exit code (the audit's: 0 clean, 1
//! findings, 2 bad usage or an unreadable file).

use std::path::Path;
use std::process::ExitCode;

use stagger_audit::path::{
    audit_file, audit_path, split_dump, what_is, Dead, FileReport, GatewayImpl, IstioVersion,
    Options, PathInput, Protocol, Reading,
};
use stagger_report::audit::sarif::{locate_path, sarif, Located, Texts};

use crate::args::AuditFormat as Format;
use crate::args::UsageError;

/// The failure the dead dependency shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DeadArg {
    /// It refuses every connection.
    Refused,
    /// It answers 503 / UNAVAILABLE at once.
    Unavailable,
    /// It never answers.
    Blackhole,
}

/// The call's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProtocolArg {
    /// HTTP requests.
    Http,
    /// gRPC calls.
    Grpc,
}

/// The Gateway API implementation that runs the routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum GatewayArg {
    /// Istio: its default conditions plus the rule's codes, and its implicit policy without `retry`.
    Istio,
    /// Envoy Gateway: connection failures plus the rule's codes.
    EnvoyGateway,
    /// Any other: connection errors and the rule's codes.
    Generic,
}

/// Flags of `stagger audit --path` (also used when `stagger audit FILE`
/// finds a mesh, gateway, proxy or application config).
#[derive(Debug, clap::Args)]
pub struct PathArgs {
    /// The call path, edge first: FILE[:SELECTOR],FILE,… where a selector
    /// names the host, route, method, cluster or profile of a file that
    /// holds several (e.g. `--path vs.yaml:reviews,svc.json:shop.Cart/Get`).
    #[arg(long, value_name = "FILES")]
    pub path: Option<String>,
    /// What the dead dependency does with each attempt.
    #[arg(long, value_enum, default_value = "refused")]
    dead: DeadArg,
    /// The call's protocol (default: gRPC when a gRPC service config is on the path).
    #[arg(long, value_enum)]
    protocol: Option<ProtocolArg>,
    /// The second scenario: each attempt at the bottom fails with this probability.
    #[arg(long, default_value_t = 0.5, value_name = "P")]
    failure_rate: f64,
    /// The Istio release whose defaults apply (1.24 and later: 503 is not in the implicit policy).
    #[arg(long, default_value = "1.24", value_name = "1.N", value_parser = istio_version)]
    istio_version: u32,
    /// The AWS SDK's mode for a profile without retry_mode: legacy (boto3) or standard.
    #[arg(long, default_value = "legacy", value_parser = ["legacy", "standard"])]
    aws_default_mode: String,
    /// Requests in flight at each proxy, for budgets that cap concurrent retries.
    #[arg(long, default_value_t = 100, value_name = "N")]
    concurrency: u32,
    /// The Gateway API implementation that runs HTTPRoutes.
    #[arg(long, value_enum, default_value = "istio")]
    gateway: GatewayArg,
    /// Endpoints behind a proxy whose tries only its servers bound (ingress-nginx tries "0").
    #[arg(long, default_value_t = 3, value_name = "N")]
    endpoints: u32,
    /// Requests a second at the edge: with --latency, size each cap on
    /// concurrent retries by Little's law (e.g. `--rate 200`).
    #[arg(long, value_name = "PER_SECOND", requires = "latency")]
    rate: Option<f64>,
    /// How long one attempt takes while the dependency is down (e.g. `--latency 250ms`).
    #[arg(long, value_name = "D", requires = "rate", value_parser = latency)]
    latency: Option<std::time::Duration>,
    /// The attempts per call at the bottom a sized cap must keep the path under.
    #[arg(long, default_value_t = 2.0, value_name = "N")]
    bound: f64,
    /// Also write an SVG picture of the path to this file.
    #[arg(long, value_name = "FILE")]
    svg: Option<String>,
}

fn latency(s: &str) -> Result<std::time::Duration, String> {
    let d = stagger::config::parse_duration(s, stagger::config::Bare::None)
        .map_err(|e| format!("{e}; write a duration such as 250ms or 1.5s"))?;
    if d.is_zero() {
        return Err("must be above 0".to_string());
    }
    Ok(d)
}

fn istio_version(s: &str) -> Result<u32, String> {
    s.strip_prefix("1.")
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("{s:?} is not an Istio version such as 1.23"))
}

/// `FILE:SELECTOR` split where the part before the colon is a file (a
/// selector may hold `/` and spaces; a file name may hold `:`).
fn split(entry: &str) -> (&str, Option<&str>) {
    if entry.starts_with('@') {
        // A built-in layer (`@istio-sidecar`, `@istio-sidecar:HOST`).
        return (entry, None);
    }
    if Path::new(entry).is_file() {
        return (entry, None);
    }
    for (i, _) in entry.match_indices(':') {
        if Path::new(&entry[..i]).is_file() {
            return (&entry[..i], Some(&entry[i + 1..]).filter(|s| !s.is_empty()));
        }
    }
    (entry, None)
}

/// A file's text, refused over the audit's limit
/// ([`stagger_audit::path::MAX_BYTES`]) before it is read.
pub fn read(f: &str) -> Result<String, UsageError> {
    let len = std::fs::metadata(f)
        .map_err(|e| UsageError(format!("{f}: cannot read: {e}")))?
        .len();
    if len > stagger_audit::path::MAX_BYTES {
        return Err(UsageError(format!(
            "{f}: {len} bytes, larger than the {} (4 MiB) the audit reads: not a config file",
            stagger_audit::path::MAX_BYTES
        )));
    }
    std::fs::read_to_string(f).map_err(|e| UsageError(format!("{f}: cannot read: {e}")))
}

/// The audit's assumptions from the flags.
pub fn options(a: &PathArgs) -> Options {
    Options {
        protocol: a.protocol.map(|p| match p {
            ProtocolArg::Http => Protocol::Http,
            ProtocolArg::Grpc => Protocol::Grpc,
        }),
        dead: match a.dead {
            DeadArg::Refused => Dead::Refused,
            DeadArg::Unavailable => Dead::Unavailable,
            DeadArg::Blackhole => Dead::Blackhole,
        },
        failure_rate: a.failure_rate,
        istio: IstioVersion {
            minor: a.istio_version,
        },
        aws_default_standard: a.aws_default_mode == "standard",
        concurrency: a.concurrency.max(1),
        gateway: match a.gateway {
            GatewayArg::Istio => GatewayImpl::Istio,
            GatewayArg::EnvoyGateway => GatewayImpl::EnvoyGateway,
            GatewayArg::Generic => GatewayImpl::Generic,
        },
        endpoints: a.endpoints.max(1),
        rate: a.rate,
        latency: a.latency,
        bound: a.bound,
    }
}

/// `stagger audit FILE` on a file the call-path readers read (`what` says
/// what it is): every object it holds, each as a path of one layer. A
/// file whose objects different readers take is read by each of them (as
/// `FILE#KIND`); an object none takes is listed as skipped, with why.
pub fn run_file(
    a: &PathArgs,
    file: &str,
    text: &str,
    what: &str,
    format: Format,
) -> anyhow::Result<(String, ExitCode)> {
    let o = options(a);
    let mut read: Vec<(String, String, Vec<FileReport>)> = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    for s in split_dump(file, text) {
        let kind = match what_is(&s.name, &s.text) {
            Reading::Other(why) if s.name != file => {
                skipped.push((s.name, why));
                continue;
            }
            Reading::Path(w) if s.name != file => w,
            _ => what.to_string(),
        };
        let reports = audit_file(&s.name, &s.text, &o).map_err(|e| UsageError(e.to_string()))?;
        read.push((s.name, kind, reports));
    }
    let clean = read
        .iter()
        .all(|(_, _, rs)| rs.iter().all(|r| r.report.is_clean()));
    let out = if format == Format::Sarif {
        let texts: Texts = [(file, text)].into_iter().collect();
        let found: Vec<Located> = read
            .iter()
            .flat_map(|(_, _, rs)| rs)
            .flat_map(|r| locate_path(&r.report, &texts))
            .collect();
        let notes: Vec<(&str, String)> = skipped
            .iter()
            .map(|(name, why)| ("note", format!("skipped {name}: {why}")))
            .collect();
        sarif(&found, &notes)
    } else if format == Format::Json {
        let list: Vec<serde_json::Value> = read
            .iter()
            .flat_map(|(name, kind, rs)| {
                rs.iter().map(move |r| {
                    serde_json::json!({"file": name, "kind": kind, "selector": r.selector, "report": r.report})
                })
            })
            .collect();
        let skipped: Vec<serde_json::Value> = skipped
            .iter()
            .map(|(name, why)| serde_json::json!({"name": name, "reason": why}))
            .collect();
        serde_json::to_string(
            &serde_json::json!({"file": file, "kind": what, "paths": list, "skipped": skipped}),
        )? + "\n"
    } else {
        let mut s = String::new();
        for (name, kind, rs) in &read {
            for r in rs {
                let name = match &r.selector {
                    Some(sel) => format!("{name}:{sel}"),
                    None => name.clone(),
                };
                s.push_str(&format!("== {name} ({kind})\n"));
                s.push_str(&stagger_report::audit::path_text(&r.report));
                s.push('\n');
            }
        }
        for (name, why) in &skipped {
            s.push_str(&format!("skipped {name}: {why}\n"));
        }
        s
    };
    let code = if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    Ok((out, code))
}

/// Runs `stagger audit --path`: what to print and the exit code.
pub fn run(a: &PathArgs, format: Format) -> anyhow::Result<(String, ExitCode)> {
    let path = a.path.as_deref().unwrap_or_default();
    let entries: Vec<(&str, Option<&str>)> = path
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(split)
        .collect();
    if entries.is_empty() {
        return Err(UsageError("--path: no files given".into()).into());
    }
    let mut texts = Vec::with_capacity(entries.len());
    for (f, _) in &entries {
        let text = if f.starts_with('@') {
            String::new()
        } else {
            read(f)?
        };
        texts.push(text);
    }
    let inputs: Vec<PathInput<'_>> = entries
        .iter()
        .zip(&texts)
        .map(|((f, sel), t)| PathInput::new(f, t, *sel))
        .collect();
    let options = options(a);
    let report = audit_path(&inputs, &options).map_err(|e| UsageError(e.to_string()))?;
    if let Some(svg) = &a.svg {
        std::fs::write(svg, stagger_report::audit::path_svg(&report))
            .map_err(|e| UsageError(format!("{svg}: cannot write: {e}")))?;
    }
    let text = match format {
        Format::Json => serde_json::to_string(&report)? + "\n",
        Format::Text => stagger_report::audit::path_text(&report),
        Format::Sarif => {
            let named: Texts = entries
                .iter()
                .zip(&texts)
                .map(|((f, _), t)| (*f, t.as_str()))
                .collect();
            sarif(&locate_path(&report, &named), &[])
        }
    };
    let code = if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    Ok((text, code))
}
