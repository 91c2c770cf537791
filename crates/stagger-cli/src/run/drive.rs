//! `stagger run`'s attempts: start the command, read how it ended as the
//! engine's facts, wait as the supervisor does — run by the library's
//! blocking executor, the one attempt loop a blocking caller has — and the
//! exit status that follows from the run.

use std::cell::RefCell;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use stagger::exec::{Attempt, BlockingSleeper, Notice};
use stagger::{Class, Failure, Outcome, Policy, RetryAttemptExt, StopReason};

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

/// What the attempts left behind, shared by the attempt, the notify hook
/// and the sleeper.
#[derive(Default)]
struct Trace {
    attempts: Vec<AttemptRecord>,
    /// The last attempt's time limit, for its retry line.
    timeout: Option<Duration>,
    interrupted: Option<i32>,
    not_started: bool,
    tty_stop: Option<i32>,
}

/// Runs `stagger run`'s attempts under `policy` with the library's blocking
/// executor (its one attempt loop): the command is started, its ending read
/// as the engine's facts, and the waits are the supervisor's, which a
/// signal cuts short.
pub fn drive(
    a: &Driving<'_>,
    policy: &Policy,
    rule: &RetryRule,
    supervisor: &Supervisor,
    first_stdin: Stdin,
) -> Run {
    let start = Instant::now();
    let later_stdin = match &first_stdin {
        Stdin::Bytes(_) => first_stdin.clone(),
        _ => Stdin::Null,
    };
    let trace = RefCell::new(Trace::default());
    let run_one = |attempt: &Attempt| -> Result<(), Failure> {
        let stdin = if attempt.number == 1 {
            &first_stdin
        } else {
            &later_stdin
        };
        if a.verbose {
            report::start_line(attempt.number, policy.max_attempts(), attempt.timeout);
        }
        let t0 = Instant::now();
        let ending = supervisor.attempt(a.command, stdin, attempt.timeout);
        let mut record = AttemptRecord {
            attempt: attempt.number,
            exit_code: 0,
            timed_out: false,
            duration_ms: report::millis(t0.elapsed()),
            delay_ms: None,
            signal: None,
            killed: false,
        };
        let mut t = trace.borrow_mut();
        let outcome = facts(a.command, ending, rule, &mut record, &mut t);
        t.attempts.push(record);
        t.timeout = attempt.timeout;
        match outcome {
            Outcome::Success => Ok(()),
            Outcome::Failure(f) => Err(f),
        }
    };
    let retry_line = |n: &Notice<'_, (), Failure>| {
        let t = trace.borrow();
        if let (false, Some(last)) = (a.quiet, t.attempts.last()) {
            report::retry_line(last, policy.max_attempts(), t.timeout, n.delay);
        }
    };
    let waits = Waits {
        supervisor,
        trace: &trace,
    };
    let retried = run_one
        .retry_with_attempt(policy)
        .when(|f: &Failure| *f)
        .notify(retry_line)
        .sleep(waits)
        .idempotent(true);
    let done = match a.deadline {
        Some(d) => retried.timeout(d).report(),
        None => retried.report(),
    };
    let t = trace.into_inner();
    Run {
        reason: done.reason,
        attempts: t.attempts,
        interrupted: t.interrupted,
        not_started: t.not_started,
        tty_stop: t.tty_stop,
        elapsed: start.elapsed(),
    }
}

/// The facts of one attempt's ending, with its record filled in.
fn facts(
    command: &[OsString],
    ending: Ending,
    rule: &RetryRule,
    record: &mut AttemptRecord,
    t: &mut Trace,
) -> Outcome {
    match ending {
        Ending::NotStarted(e) => {
            t.not_started = true;
            record.exit_code = not_started_message(command, &e);
            Failure::permanent().into()
        }
        Ending::Ran {
            status,
            timed_out,
            interrupted,
            killed,
            tty_stop,
        } => {
            record.exit_code = exit_code(status);
            record.timed_out = timed_out;
            record.killed = killed;
            record.signal = std::os::unix::process::ExitStatusExt::signal(&status);
            if tty_stop.is_some() {
                // Another attempt would stop the same way.
                t.tty_stop = tty_stop;
                Failure::permanent().into()
            } else if interrupted.is_some() {
                t.interrupted = interrupted;
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
    }
}

/// The waits between attempts: the supervisor's, cut short by a signal,
/// which ends the run.
struct Waits<'a> {
    supervisor: &'a Supervisor,
    trace: &'a RefCell<Trace>,
}

impl BlockingSleeper for Waits<'_> {
    fn sleep(&mut self, d: Duration) {
        let waited = Instant::now();
        let signal = self.supervisor.wait(d);
        let mut t = self.trace.borrow_mut();
        if let Some(last) = t.attempts.last_mut() {
            last.delay_ms = Some(report::millis(match signal {
                Some(_) => waited.elapsed(),
                None => d,
            }));
        }
        if signal.is_some() {
            t.interrupted = signal;
        }
    }

    fn interrupted(&self) -> bool {
        self.trace.borrow().interrupted.is_some()
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
