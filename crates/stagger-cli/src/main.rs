//! The `stagger` command.
//!
//! Exit codes (a contract): 0 success; 2 bad usage (a bad flag or value, with
//! a message naming it); each subcommand documents any others.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod audit;
mod gameday;
mod gameday_limit;
mod http;
mod jitter;
mod progress;
mod run;
mod schedule;
mod simulate;

/// Retries that help a recovering dependency instead of burying it.
#[derive(Debug, Parser)]
#[command(name = "stagger", version, about, long_about = None)]
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
    /// Check retry configs (gRPC service configs, policy files) against the production checklist.
    Audit(audit::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
        Command::Audit(a) => audit::run(&a),
    }
}
