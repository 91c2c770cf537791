//! The `stagger` command.
//!
//! Exit codes (a contract): 0 success; 2 bad usage (a bad flag or value, with
//! a message naming it); 1 when a server subcommand (`lab`, `proxy`,
//! `gameday`) cannot listen where it was told to — a port in use is the
//! machine's state, not a mistake in the flags; each subcommand documents
//! any others.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod args;
mod audit;
mod gameday;
mod grpc;
mod http;
mod jitter;
mod lab;
mod proxy;
mod run;
mod schedule;
mod simulate;

const EXAMPLES: &str = "\
Examples:
  stagger http -m 10 --retry 4 https://api.example.com/health
  stagger run --deadline 5m -- ./deploy.sh
  stagger sleep 0..5m && backup.sh                 (a crontab line)
  stagger schedule --jitter full --attempts 6
  stagger simulate --model failover --format json
  stagger proxy http://127.0.0.1:8080 --fault stall@10s+2s

Exit status:
  0 success; 2 bad usage (the message names the flag); 1 a port that lab,
  proxy or gameday cannot listen on (say, one in use); every other code is
  documented in the subcommand's help (`stagger help http`, `stagger help run`).";

/// Retries that help a recovering dependency instead of burying it.
#[derive(Debug, Parser)]
#[command(name = "stagger", version, about, long_about = None, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a backoff schedule: per retry, b_n, the jitter's range and sample delays.
    Schedule(schedule::Args),
    /// Run a command, retrying it with jittered backoff when it fails.
    Run(run::Args),
    /// Sleep a random time in a range (e.g. `stagger sleep 0..5m && job` in a crontab).
    Sleep(jitter::SleepArgs),
    /// Print a jittered duration for scripts (e.g. `stagger jitter 30s --spread 10%`).
    Jitter(jitter::JitterArgs),
    /// Simulate retry storms in virtual time on the library's own policies: table, JSON, report.
    Simulate(Box<simulate::Args>),
    /// Send an HTTP request with stagger's retries (a curl-like client).
    Http(http::Args),
    /// Reproduce a retry storm and its cure over loopback HTTP (a game-day).
    Gameday(gameday::Args),
    /// Put a fault-injecting proxy in front of a real HTTP/1.1 or h2c service; print the arrival histogram.
    Proxy(proxy::Args),
    /// gRPC tools: `stagger grpc health ADDR` probes a health service with A6 retries.
    Grpc(grpc::Args),
    /// Serve the interactive lab in a browser: failover, jitter, hedging, priorities, "retry?".
    Lab(lab::Args),
    /// Audit retry configs and the call paths they make: gRPC service configs, policy files, meshes, gateways, proxies, application configs, whole repositories and `kubectl` dumps (e.g. `stagger audit deploy/`).
    Audit(audit::Args),
}

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cmd = args::negative_durations_reach_the_parser(Cli::command());
    let cli = match cmd
        .try_get_matches_from(&argv)
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        // `stagger grpc` keeps grpc_health_probe's exit code for bad usage.
        Err(e) => match grpc::usage_exit(&e) {
            Some(code) => return code,
            None => args::exit_naming_the_flag_typed(e, &argv),
        },
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stagger: {e:#}");
            if e.downcast_ref::<args::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Schedule(a) => schedule::run(&a),
        Command::Run(a) => run::run(&a),
        Command::Sleep(a) => jitter::sleep(&a),
        Command::Jitter(a) => jitter::jitter(&a),
        Command::Simulate(a) => simulate::run(&a),
        Command::Http(a) => http::run(&a),
        Command::Gameday(a) => gameday::run(&a),
        Command::Proxy(a) => proxy::run(&a),
        Command::Audit(a) => audit::run(&a),
        Command::Grpc(a) => grpc::run(&a),
        Command::Lab(a) => lab::run(&a),
    }
}
