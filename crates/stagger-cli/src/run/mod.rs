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

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use stagger::{Call, Class, Decision, Failure, MonotonicClock, Outcome, Policy, StopReason};

use crate::args::{duration, flag_error, limit, FormatArgs, PolicyArgs, Verbosity};

mod child;
mod codes;
mod report;

use child::{exit_code, Ending, Stdin, Supervisor};
use codes::{CodeSet, RetryRule};
pub(crate) use report::human;
use report::{AttemptRecord, Report};

const EXAMPLES: &str = "\
Examples:
  stagger run -- curl -fsS https://example.com/health
  stagger run --attempts 5 --base 1s --cap 30s --deadline 2m -- ./deploy.sh
  stagger run --attempt-timeout 30s --stop-on 2 -- make integration-test
  stagger run --retry-on 75 --format json -- rsync -a src/ host:dst/
  stagger sleep 0..5m && stagger run --attempts 4 --quiet -- backup.sh   (crontab)

Exit status: 0 when an attempt succeeded; otherwise the last attempt's
status (128+N if a signal N killed it), except: 124 when the deadline or an
attempt timeout ended the run (as timeout(1) does); 127 if the command was
not found and 126 if it could not be run (both at once, without retries);
2 for a bad flag. Interrupted by SIGINT or SIGTERM, stagger forwards the
signal to the command, makes no further attempt, and then ends by that same
signal (a shell reports 130 or 143), unless the interrupted attempt
succeeded.

The command runs in a process group of its own, so timeouts and forwarded
signals reach everything it started. A command that reads from the
terminal therefore cannot be run interactively under stagger.";

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
    /// run up to `--kill-after` past the deadline). Exit status 124.
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

    /// Grace period between SIGTERM and SIGKILL (e.g. `--kill-after 10s`; 0 kills at once).
    #[arg(long, default_value = "2s", value_parser = duration, value_name = "D")]
    kill_after: Duration,

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

/// How the run went, before it is reported.
struct Run {
    reason: StopReason,
    attempts: Vec<AttemptRecord>,
    /// The signal that ended the run early, if one did.
    interrupted: Option<i32>,
    /// The command could not be started.
    not_started: bool,
    elapsed: Duration,
}

impl Run {
    /// stagger's exit status (see `EXAMPLES` for the contract).
    fn exit_code(&self) -> u8 {
        let last = self.attempts.last();
        match self.reason {
            StopReason::Success => 0,
            StopReason::Cancelled => match self.interrupted {
                Some(s) => 128u8.saturating_add(u8::try_from(s).unwrap_or(0)),
                None => last.map_or(1, |a| a.exit_code),
            },
            StopReason::Deadline => 124,
            _ => match last {
                Some(a) if a.timed_out => 124,
                Some(a) => a.exit_code,
                None => 1,
            },
        }
    }
}

pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let mut builder = a.policy.policy()?;
    if let Some(t) = limit(a.attempt_timeout) {
        builder = builder.attempt_timeout(t);
    }
    let policy = builder.build().map_err(flag_error)?;
    let rule = RetryRule::new(a.retry_on.clone(), a.stop_on.clone());
    let first_stdin = if a.stdin_each {
        Stdin::buffer_all().context("--stdin-each: reading stdin")?
    } else {
        Stdin::Inherit
    };
    let supervisor = Supervisor::new(a.kill_after).context("listening for signals")?;
    let run = drive(a, &policy, &rule, &supervisor, first_stdin);
    drop(supervisor);

    let exit = run.exit_code();
    if !a.talk.quiet && run.reason != StopReason::Success && !run.not_started {
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
        report::print_json(&r).context("writing the report")?;
    }
    if let (StopReason::Cancelled, Some(sig)) = (run.reason, run.interrupted) {
        // End the way an interrupted program should, so that a calling
        // shell loop stops too; an exit status is the fallback.
        let _ = signal_hook::low_level::emulate_default_handler(sig);
    }
    Ok(ExitCode::from(exit))
}

/// The attempt loop: start, run, decide, wait.
fn drive(
    a: &Args,
    policy: &Policy,
    rule: &RetryRule,
    supervisor: &Supervisor,
    first_stdin: Stdin,
) -> Run {
    let clock = MonotonicClock;
    let start = Instant::now();
    let mut call = Call::new().idempotent(true);
    if let Some(end) = limit(a.deadline).and_then(|d| start.checked_add(d)) {
        call = call.deadline(end);
    }
    call.start_clock(start);
    let later_stdin = match &first_stdin {
        Stdin::Bytes(_) => first_stdin.clone(),
        _ => Stdin::Null,
    };
    let mut attempts: Vec<AttemptRecord> = Vec::new();
    let mut interrupted = None;
    let mut not_started = false;
    let reason = loop {
        let timeout = match policy.start_attempt(&mut call, clock) {
            Ok(t) => t,
            Err(reason) => break reason,
        };
        let stdin = if call.attempts() == 1 {
            &first_stdin
        } else {
            &later_stdin
        };
        if a.talk.verbose {
            report::start_line(call.attempts(), policy.max_attempts(), timeout);
        }
        let t0 = Instant::now();
        let ending = supervisor.attempt(&a.command, stdin, timeout);
        let mut record = AttemptRecord {
            attempt: call.attempts(),
            exit_code: 0,
            timed_out: false,
            duration_ms: report::millis(t0.elapsed()),
            delay_ms: None,
            signal: None,
        };
        let outcome: Outcome = match ending {
            Ending::NotStarted(e) => {
                not_started = true;
                record.exit_code = not_started_message(&a.command, &e);
                Failure::permanent().into()
            }
            Ending::Ran {
                status,
                timed_out,
                interrupted: caught,
            } => {
                record.exit_code = exit_code(status);
                record.timed_out = timed_out;
                record.signal = std::os::unix::process::ExitStatusExt::signal(&status);
                if caught.is_some() {
                    interrupted = caught;
                    match record.exit_code {
                        0 => Outcome::Success,
                        _ => Class::Cancelled.into(),
                    }
                } else if timed_out {
                    Failure::timeout().into()
                } else {
                    rule.outcome(record.exit_code)
                }
            }
        };
        attempts.push(record);
        match policy.decide(&mut call, outcome, clock) {
            Decision::Stop(reason) => break reason,
            Decision::Retry { after } => {
                let Some(last) = attempts.last_mut() else {
                    break StopReason::Cancelled;
                };
                if !a.talk.quiet {
                    report::retry_line(last, policy.max_attempts(), timeout, after);
                }
                let waited = Instant::now();
                let signal = supervisor.wait(after);
                last.delay_ms = Some(report::millis(match signal {
                    Some(_) => waited.elapsed(),
                    None => after,
                }));
                if signal.is_some() {
                    interrupted = signal;
                    break StopReason::Cancelled;
                }
            }
        }
    };
    Run {
        reason,
        attempts,
        interrupted,
        not_started,
        elapsed: start.elapsed(),
    }
}

/// Reports a command that could not be started; returns the shell's
/// status for it (127 not found, 126 anything else).
fn not_started_message(command: &[OsString], e: &std::io::Error) -> u8 {
    let name = command
        .first()
        .map_or_else(String::new, |c| c.to_string_lossy().into_owned());
    if e.kind() == std::io::ErrorKind::NotFound {
        eprintln!("stagger: {name}: command not found");
        127
    } else {
        eprintln!("stagger: {name}: cannot run: {e}");
        126
    }
}
