//! `stagger grpc health`: a gRPC health probe (`grpc.health.v1.Health/Check`)
//! with A6 retries, for init containers and scripts that wait for a
//! dependency. It drives the library's gRPC layer over hyper's HTTP/2
//! client; the two protobuf messages are written and read by hand.
//!
//! Exit codes (those of `grpc_health_probe`, so it drops into existing
//! manifests): 0 SERVING; 1 bad usage; 2 could not connect (a connect
//! timeout included); 3 the RPC failed (a non-OK status, the deadline);
//! 4 the server answered but is not SERVING.

mod health;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Subcommand;
use health::{probe, Target};
use serde::Serialize;
use stagger::classify::grpc_code_name;
use stagger::config::ServiceConfig;
use stagger::grpc::{AttemptRecord, MethodPolicy};
use stagger::tower::grpc::RetryLayer;

use crate::args::{duration, limit, ScheduleArgs, Verbosity};

/// gRPC tools.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  stagger grpc health 127.0.0.1:50051
  stagger grpc health db:50051 --service shop.Cart --format json

Exit status:
  Those of the tool run (`stagger grpc health --help`); bad usage is 1, as
  grpc_health_probe has it.")]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Health(HealthArgs),
}

/// Probe a gRPC health service (grpc.health.v1.Health/Check) with A6 retries.
///
/// Asks whether a server (or one of its services) is SERVING, retrying
/// UNAVAILABLE as gRPC's A6 says: 5 attempts, 100 ms x2 up to 1 s, +-20 %
/// jitter, honouring grpc-retry-pushback-ms (-1 stops at once).
#[derive(Debug, clap::Args)]
#[command(
    verbatim_doc_comment,
    after_help = "Examples:
  stagger grpc health 127.0.0.1:50051
  stagger grpc health db:50051 --service shop.Cart --deadline 30s --format json
  stagger grpc health 127.0.0.1:50051 --service-config retry.json -v

Exit status:
  grpc_health_probe's: 0 SERVING; 1 bad usage; 2 could not connect (connect timeout included);
  3 the RPC failed (a non-OK status, the deadline); 4 answered but not SERVING.",
    mut_arg("attempts", |a| a.default_value("5")),
    mut_arg("base", |a| a.default_value("100ms")),
    mut_arg("cap", |a| a.default_value("1s"))
)]
pub struct HealthArgs {
    /// The server: `HOST:PORT` or `http://HOST:PORT` (plain HTTP/2, no TLS).
    addr: String,
    /// The service to ask about (e.g. `--service shop.Cart`); empty asks
    /// about the server as a whole.
    #[arg(long, default_value = "", value_name = "NAME")]
    service: String,
    #[command(flatten)]
    schedule: ScheduleArgs,
    /// A deadline over every attempt and wait (e.g. `--deadline 30s`; 0 = no limit).
    #[arg(long, default_value = "10s", value_parser = duration, value_name = "D")]
    deadline: Duration,
    /// How long one connection attempt may take (e.g. `--connect-timeout 2s`; 0 = no limit).
    #[arg(long, default_value = "1s", value_parser = duration, value_name = "D")]
    connect_timeout: Duration,
    /// A gRPC service config (JSON): its policy for
    /// `grpc.health.v1.Health/Check` and its `retryThrottling` replace
    /// `--attempts`, `--base` and `--cap` (e.g. `--service-config retry.json`).
    #[arg(long, value_name = "FILE")]
    service_config: Option<std::path::PathBuf>,
    /// Output: text | json (e.g. `--format json`).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// `-v` prints each attempt and wait on stderr; `-q` only errors.
    #[command(flatten)]
    talk: Verbosity,
}

/// A clap error for `stagger grpc …`: exit 1 for bad usage (0 for
/// `--help`), as `grpc_health_probe` does. `None` for other subcommands.
pub fn usage_exit(e: &clap::Error) -> Option<ExitCode> {
    let mut words = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    if words.next().as_deref() != Some("grpc") {
        return None;
    }
    let _ = e.print();
    Some(ExitCode::from(if e.exit_code() == 0 { 0 } else { 1 }))
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    match &a.command {
        Command::Health(h) => Ok(health(h)),
    }
}

/// One attempt in `--format json`.
#[derive(Debug, Clone, Serialize)]
struct AttemptJson {
    attempt: u32,
    grpc_status: Option<&'static str>,
    pushback_ms: Option<i64>,
    delay_ms: Option<u64>,
    /// The attempt failed to connect (a refusal or the connect timeout).
    #[serde(skip)]
    connect: bool,
}

#[derive(Debug, Serialize)]
struct Summary {
    status: Option<&'static str>,
    stop_reason: &'static str,
    elapsed_ms: u64,
    attempts: Vec<AttemptJson>,
}

fn health(a: &HealthArgs) -> ExitCode {
    let started = Instant::now();
    let usage = |msg: String| {
        eprintln!("stagger: {msg}");
        ExitCode::from(1)
    };
    let records: Records = Arc::default();
    let layer = match build_layer(a, records.clone()) {
        Ok(l) => l,
        Err(msg) => return usage(msg),
    };
    let authority = a.addr.strip_prefix("http://").unwrap_or(&a.addr);
    let uri = format!("http://{authority}/grpc.health.v1.Health/Check");
    let Ok(uri) = uri.parse::<http::Uri>() else {
        return usage(format!("ADDR `{}`: not HOST:PORT", a.addr));
    };
    if uri.port().is_none() || a.addr.starts_with("https://") {
        return usage(format!(
            "ADDR `{}`: write HOST:PORT (plain HTTP/2, no TLS)",
            a.addr
        ));
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stagger: cannot start the runtime: {e}");
            return ExitCode::from(3);
        }
    };
    let target = Target {
        addr: a.addr.clone(),
        service: a.service.clone(),
        connect_timeout: limit(Some(a.connect_timeout)),
        deadline: limit(Some(a.deadline)),
    };
    let mut end = rt.block_on(probe(&target, layer, uri));
    let attempts = records.lock().map(|r| r.clone()).unwrap_or_default();
    // The deadline may end a call while it is still trying to connect: no
    // attempt got an answer and some could not connect, so the server could
    // not be reached; that is not an RPC that failed.
    let never_answered = attempts.iter().all(|r| r.grpc_status.is_none());
    if end.code == 3 && never_answered && attempts.iter().any(|r| r.connect) {
        end.code = 2;
        end.message = format!("could not connect to {} ({})", a.addr, end.reason);
    }
    if a.format == "json" {
        let summary = Summary {
            status: end.status,
            stop_reason: end.reason.as_str(),
            elapsed_ms: started.elapsed().as_millis() as u64,
            attempts,
        };
        println!(
            "{}",
            serde_json::to_string(&summary).unwrap_or_else(|_| "{}".into())
        );
    } else {
        match end.status {
            Some(s) => println!("status: {s}"),
            None => eprintln!("stagger: {}", end.message),
        }
    }
    ExitCode::from(end.code)
}

type Records = Arc<Mutex<Vec<AttemptJson>>>;

fn build_layer(a: &HealthArgs, records: Records) -> Result<RetryLayer, String> {
    let (sink, verbose) = (records, a.talk.verbose);
    // A probe counts every try, a connection that was refused included:
    // `--attempts 1` connects once. So the layer makes no transparent
    // retries; a refused connection is an attempt like any other.
    let mut b =
        RetryLayer::builder()
            .transparent_retries(0)
            .on_attempt(move |r: &AttemptRecord| {
                let status = r.status.map(|c| grpc_code_name(c).unwrap_or("UNKNOWN"));
                if verbose {
                    let what = match (&status, &r.error) {
                        (Some(s), _) => (*s).to_string(),
                        (None, Some(e)) => e.clone(),
                        _ => "no answer".into(),
                    };
                    let next = match (r.delay, r.stop) {
                        (Some(d), _) => format!("retrying in {}", crate::run::human(d)),
                        (None, Some(s)) => format!("stop: {s}"),
                        _ => String::new(),
                    };
                    eprintln!("stagger: attempt {}: {what}; {next}", r.attempt);
                }
                if let Ok(mut v) = sink.lock() {
                    v.push(AttemptJson {
                        attempt: r.attempt,
                        grpc_status: status,
                        pushback_ms: r.pushback_ms,
                        delay_ms: r.delay.map(|d| d.as_millis() as u64),
                        // hyper-util's words for a connection that was never made.
                        connect: r.error.as_deref().is_some_and(|e| e.contains("(Connect)")),
                    });
                }
            });
    match &a.service_config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--service-config {}: {e}", path.display()))?;
            let config = ServiceConfig::from_json(&text)
                .map_err(|e| format!("--service-config {}: {e}", path.display()))?;
            b = b
                .service_config(&config)
                .map_err(|e| format!("--service-config {}: {e}", path.display()))?;
        }
        None => {
            let attempts = a.schedule.limit().map_err(|e| e.to_string())?;
            if attempts > 1 {
                let policy = MethodPolicy::builder()
                    .max_attempts(attempts)
                    .initial_backoff(a.schedule.base())
                    .max_backoff(a.schedule.cap())
                    .retryable_codes([14])
                    .build()
                    .map_err(|e| {
                        let flag = match e.field() {
                            "initial_backoff" | "base" => "base",
                            "cap" => "cap",
                            other => other,
                        };
                        format!("--{}: {}", flag.replace('_', "-"), e.problem())
                    })?;
                b = b.service("grpc.health.v1.Health", policy);
            }
        }
    }
    b.build().map_err(|e| format!("{e}"))
}
