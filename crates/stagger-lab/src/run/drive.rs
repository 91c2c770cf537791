//! The attempt loop of `stagger run`: start the command, read how it
//! ended, ask the engine, wait; and the exit status that follows from the
//! run.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use stagger::time::MonotonicClock;
use stagger::{Call, Class, Decision, Failure, Outcome, Policy, StopReason};

use super::child::{exit_code, Ending, Stdin, Supervisor};
use super::codes::RetryRule;
use super::report::{self, AttemptRecord};

/// What the loop needs besides the policy: the command, the deadline over
/// every attempt and wait, and how much to say on stderr.
#[derive(Debug, Clone, Copy)]
pub struct Driving<'a> {
    /// The command and its arguments.
    pub command: &'a [OsString],
    /// The deadline over the whole run (`None`: none).
    pub deadline: Option<Duration>,
    /// Say each attempt's start.
    pub verbose: bool,
    /// Say nothing but errors.
    pub quiet: bool,
}

/// stagger's own failure (timeout(1)'s 125).
pub const OWN_FAILURE: u8 = 125;

/// How the run went, before it is reported.
pub struct Run {
    /// Why the run stopped.
    pub reason: StopReason,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptRecord>,
    /// The signal that ended the run early, if one did.
    pub interrupted: Option<i32>,
    /// The command could not be started.
    pub not_started: bool,
    /// The command was stopped for reading (or writing) the terminal.
    pub tty_stop: Option<i32>,
    /// How long the run took.
    pub elapsed: Duration,
}

impl Run {
    /// stagger's exit status (the contract `stagger run --help` states).
    pub fn exit_code(&self, preserve_status: bool) -> u8 {
        let last = self.attempts.last();
        // After a timeout: the command's status, 137 if it had to be
        // killed, or else 124.
        let timed_out = |a: Option<&AttemptRecord>| match a {
            Some(a) if preserve_status => a.exit_code,
            Some(a) if a.killed => 137,
            _ => 124,
        };
        match self.reason {
            StopReason::Success => 0,
            _ if self.tty_stop.is_some() => OWN_FAILURE,
            StopReason::Cancelled => match self.interrupted {
                Some(s) => 128u8.saturating_add(u8::try_from(s).unwrap_or(0)),
                None => last.map_or(1, |a| a.exit_code),
            },
            StopReason::Deadline => match last {
                Some(a) if a.timed_out => timed_out(Some(a)),
                Some(a) if preserve_status => a.exit_code,
                _ => 124,
            },
            _ => match last {
                Some(a) if a.timed_out => timed_out(Some(a)),
                Some(a) => a.exit_code,
                None => 1,
            },
        }
    }
}

/// The attempt loop: start, run, decide, wait.
pub fn drive(
    a: &Driving<'_>,
    policy: &Policy,
    rule: &RetryRule,
    supervisor: &Supervisor,
    first_stdin: Stdin,
) -> Run {
    let clock = MonotonicClock;
    let start = Instant::now();
    let mut call = Call::new().idempotent(true);
    if let Some(end) = a.deadline.and_then(|d| start.checked_add(d)) {
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
    let mut tty_stop = None;
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
        if a.verbose {
            report::start_line(call.attempts(), policy.max_attempts(), timeout);
        }
        let t0 = Instant::now();
        let ending = supervisor.attempt(a.command, stdin, timeout);
        let mut record = AttemptRecord {
            attempt: call.attempts(),
            exit_code: 0,
            timed_out: false,
            duration_ms: report::millis(t0.elapsed()),
            delay_ms: None,
            signal: None,
            killed: false,
        };
        let outcome: Outcome = match ending {
            Ending::NotStarted(e) => {
                not_started = true;
                record.exit_code = not_started_message(a.command, &e);
                Failure::permanent().into()
            }
            Ending::Ran {
                status,
                timed_out,
                interrupted: caught,
                killed,
                tty_stop: stopped,
            } => {
                record.exit_code = exit_code(status);
                record.timed_out = timed_out;
                record.killed = killed;
                record.signal = std::os::unix::process::ExitStatusExt::signal(&status);
                if stopped.is_some() {
                    // Another attempt would stop the same way.
                    tty_stop = stopped;
                    Failure::permanent().into()
                } else if caught.is_some() {
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
                if !a.quiet {
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
        tty_stop,
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
        // A path was looked up as given, not on PATH.
        if name.contains('/') {
            eprintln!("stagger: {name}: no such file or directory");
        } else {
            eprintln!("stagger: {name}: command not found");
        }
        127
    } else {
        eprintln!("stagger: {name}: cannot run: {e}");
        126
    }
}
