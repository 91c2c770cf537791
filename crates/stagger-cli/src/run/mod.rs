//! `stagger run`: retry any command from a shell, a crontab or a CI job.
//!
//! `until cmd; do sleep 5; done` retries in lockstep, forever, whatever the
//! failure. `stagger run` drives the library's decision engine instead: each
//! attempt's exit status becomes an outcome for [`Policy::decide`], which
//! answers with a jittered wait or a reason to stop; the deadline and the
//! attempt timeout come from the same engine. This module only owns the
//! processes, the waiting and the output.
//!
//! A command is treated as idempotent: a timed-out attempt (result unknown)
//! is retried like any other failure. Make sure running it twice is safe.

mod child;
mod codes;
mod drive;
mod report;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::Signal;
use stagger::StopReason;

use crate::args::{duration, flag_error, limit, FormatArgs, PolicyArgs, Verbosity};

use drive::{drive, Driving, OWN_FAILURE};

use child::{Control, Stdin, Supervisor};
use codes::{CodeSet, RetryRule};
pub(crate) use report::human;
use report::Report;

const EXAMPLES: &str = "\
Examples:
  stagger run -- curl -fsS https://example.com/health
  stagger run --attempts 5 --base 1 --cap 30 --deadline 2m -- ./deploy.sh
  stagger run --attempt-timeout 30 -s INT -k 10 --stop-on 2 -- make integration-test
  stagger run --retry-on 75 --format json -- rsync -a src/ host:dst/
  stagger run --foreground -- ./login.sh          (a command that asks for a password)
  stagger sleep 0..5m && stagger run --attempts 4 -q -- backup.sh   (crontab)

Exit status: 0 when an attempt succeeded; otherwise the last attempt's
status (128+N if signal N killed it), except, as timeout(1) has them:
  124  the deadline or an attempt timeout ended the run
  137  ... and the command had to be killed with SIGKILL (see --kill-after)
  125  stagger itself failed (signals, stdin, or a command stopped for
       reading the terminal without --foreground)
  126  the command could not be run (not executable), without retries
  127  the command was not found (or, for a path, no such file), without retries
  2    a bad flag
With --preserve-status, a timed-out run exits with the command's own status.

Signals: SIGHUP, SIGINT, SIGQUIT and SIGTERM sent to stagger are forwarded
to the command; no further attempt is made, and stagger then ends by that
same signal (a shell reports 129, 130, 131 or 143) unless the interrupted
attempt succeeded. SIGUSR1 and SIGUSR2 are forwarded and the run goes on.
Ctrl-C: the command gets SIGINT, then SIGKILL if it is still running after
--kill-after (2 s by default); a second Ctrl-C kills it at once.

The command runs in a process group of its own, so timeouts and forwarded
signals reach everything it started. Such a command cannot read the
terminal: if it tries, it is stopped by the system (SIGTTIN), and stagger
ends it and says so. --foreground runs it in stagger's group instead, as
timeout(1) does: it may read the terminal, and signals reach only the
command itself, not the processes it started.";

/// Run a command; when it fails, wait a jittered backoff and run it again.
///
/// Example: `stagger run --attempts 4 --deadline 5m -- ./flaky-upload.sh`
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    #[command(flatten)]
    policy: PolicyArgs,

    /// Bound the whole run, attempts and waits included (e.g. `--deadline 10m`;
    /// 0 = no limit, as for timeout(1)).
    ///
    /// A wait that would leave no time for another attempt ends the run at
    /// once, and an attempt still running at the deadline is cut off as by
    /// `--attempt-timeout` (so a command that ignores SIGTERM can hold the
    /// run up to `--kill-after` past the deadline; with `-k 0`, until it exits). Exit status 124.
    #[arg(long, value_parser = duration, value_name = "D")]
    deadline: Option<Duration>,

    /// Cut off an attempt that runs longer than D (e.g. `--attempt-timeout 30s`;
    /// 0 = no limit).
    ///
    /// The attempt's process group gets SIGTERM, then SIGKILL after
    /// `--kill-after`. A timeout counts as a failure and is retried (the
    /// command is assumed safe to run again); if it ends the run, the exit
    /// status is 124.
    #[arg(long, value_parser = duration, value_name = "D")]
    attempt_timeout: Option<Duration>,

    /// Grace period between the timeout signal (or a forwarded Ctrl-C) and
    /// SIGKILL (e.g. `-k 10s`; 0 = never SIGKILL, as in timeout(1)).
    ///
    /// After a timeout, a command still running D after the signal is
    /// killed, and the exit status is 137. After Ctrl-C (SIGINT) or another
    /// ending signal, likewise: SIGKILL once D has passed; a second Ctrl-C
    /// kills at once.
    #[arg(short = 'k', long, default_value = "2s", value_parser = duration, value_name = "D")]
    kill_after: Duration,

    /// The signal sent when an attempt times out, a name or a number
    /// (e.g. `-s INT`, `--signal HUP`, `-s 9`; default TERM).
    #[arg(short = 's', long = "signal", default_value = "TERM", value_parser = child::parse_signal, value_name = "SIG")]
    signal: Signal,

    /// Run the command in stagger's own process group, as timeout(1)
    /// `--foreground` does (e.g. `--foreground`).
    ///
    /// The command may then read the terminal (a password prompt, a
    /// `[Y/n]`) and gets the terminal's Ctrl-C and Ctrl-Z itself; timeouts
    /// and forwarded signals reach only the command, not the processes it
    /// started.
    #[arg(long)]
    foreground: bool,

    /// After a timeout, exit with the command's own status (e.g. 143 for
    /// SIGTERM) instead of 124 (e.g. `--preserve-status`).
    #[arg(long)]
    preserve_status: bool,

    /// Retry only these exit codes (e.g. `--retry-on 1,75` or `--retry-on 64-78`).
    ///
    /// Without it, every non-zero status is retried except 126 (not
    /// executable), 127 (not found), 130 and 143 (interrupted by SIGINT or
    /// SIGTERM).
    #[arg(long, value_parser = codes::parse_codes, value_name = "CODES", conflicts_with = "stop_on")]
    retry_on: Option<CodeSet>,

    /// Never retry these exit codes, on top of 126, 127, 130 and 143 (e.g. `--stop-on 2`).
    #[arg(long, value_parser = codes::parse_codes, value_name = "CODES")]
    stop_on: Option<CodeSet>,

    /// `-q` silences the retry and give-up lines (a command that cannot be
    /// started is still reported); `-v` also says when an attempt starts
    /// and how the run ended.
    #[command(flatten)]
    talk: Verbosity,

    /// With `json`, a final report on stdout after the command's output:
    /// `{"stop_reason":…,"exit_code":…,"elapsed_ms":…,"attempts":[{"attempt":1,
    /// "exit_code":1,"timed_out":false,"duration_ms":…,"delay_ms":…}]}`;
    /// `exit_code` is stagger's own status, `delay_ms` the wait after each
    /// attempt (`null` after the last one).
    #[command(flatten)]
    format: FormatArgs,

    /// Buffer stdin and give all of it to every attempt (e.g. `dump | stagger run --stdin-each -- psql`).
    ///
    /// Without it, only the first attempt reads stdin; later attempts get
    /// an empty one. With it, stdin is read to its end (in memory) before
    /// the first attempt starts.
    #[arg(long)]
    stdin_each: bool,

    /// The command and its arguments, after `--` (e.g. `-- make deploy`).
    #[arg(required = true, trailing_var_arg = true, num_args = 1.., value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let mut builder = a.policy.policy()?;
    if let Some(t) = limit(a.attempt_timeout) {
        builder = builder.attempt_timeout(t);
    }
    let policy = builder.build().map_err(flag_error)?;
    let rule = RetryRule::new(a.retry_on.clone(), a.stop_on.clone());
    // From here on a failure is stagger's own, not the command's: 125.
    let own = |e: anyhow::Error| {
        eprintln!("stagger: {e:#}");
        Ok(ExitCode::from(OWN_FAILURE))
    };
    let first_stdin = if a.stdin_each {
        match Stdin::buffer_all().context("--stdin-each: reading stdin") {
            Ok(s) => s,
            Err(e) => return own(e),
        }
    } else {
        Stdin::Inherit
    };
    let control = Control {
        kill_after: a.kill_after,
        timeout_signal: a.signal,
        foreground: a.foreground,
    };
    let supervisor = match Supervisor::new(control).context("listening for signals") {
        Ok(s) => s,
        Err(e) => return own(e),
    };
    let driving = Driving {
        command: &a.command,
        deadline: limit(a.deadline),
        verbose: a.talk.verbose,
        quiet: a.talk.quiet,
    };
    let run = drive(&driving, &policy, &rule, &supervisor, first_stdin);
    drop(supervisor);

    let exit = run.exit_code(a.preserve_status);
    if let Some(sig) = run.tty_stop {
        let name = Signal::try_from(sig).map_or("a terminal stop", |s| s.as_str());
        eprintln!(
            "stagger: the command was stopped ({name}) for using the terminal, which it \
             cannot do in a process group of its own; ended it. Use --foreground to let \
             it read the terminal"
        );
    }
    if !a.talk.quiet
        && run.reason != StopReason::Success
        && !run.not_started
        && run.tty_stop.is_none()
    {
        report::give_up_line(run.reason, run.attempts.len() as u32, exit);
    } else if a.talk.verbose && run.reason == StopReason::Success {
        report::success_line(run.attempts.len() as u32, run.elapsed);
    }
    if a.format.json() {
        let r = Report {
            stop_reason: run.reason.as_str(),
            exit_code: exit,
            elapsed_ms: report::millis(run.elapsed),
            attempts: run.attempts,
        };
        if let Err(e) = report::print_json(&r).context("writing the report") {
            return own(e);
        }
    }
    if let (StopReason::Cancelled, Some(sig)) = (run.reason, run.interrupted) {
        // End the way an interrupted program should, so that a calling
        // shell loop stops too; an exit status is the fallback.
        let _ = signal_hook::low_level::emulate_default_handler(sig);
    }
    Ok(ExitCode::from(exit))
}
