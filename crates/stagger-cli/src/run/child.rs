//! Child process control: spawn one attempt, time it out, forward signals.
//!
//! Every attempt runs in a process group of its own, so a signal meant for
//! it reaches everything it started (a shell script's `sleep`, a build's
//! compilers), not only its first process. A terminal's Ctrl-C therefore no
//! longer reaches the command directly: `stagger run` catches SIGINT and
//! SIGTERM and forwards them to the group itself.
//!
//! One channel carries everything the supervisor waits for (the child's
//! exit, from a thread blocked in `wait`, and caught signals, from
//! signal-hook's thread), so waiting is a single `recv_timeout` armed with
//! the next timer: no polling.

use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::{Handle, Signals};

/// What the supervisor hears about.
enum Event {
    Exited(io::Result<ExitStatus>),
    Signal(i32),
}

/// What the command's standard input is for one attempt.
#[derive(Debug, Clone)]
pub enum Stdin {
    /// stagger's own stdin (the first attempt, without `--stdin-each`).
    Inherit,
    /// Nothing: reads see end of file at once.
    Null,
    /// The same buffered bytes for every attempt (`--stdin-each`).
    Bytes(Arc<Vec<u8>>),
}

impl Stdin {
    /// Reads all of stagger's stdin, for `--stdin-each`.
    pub fn buffer_all() -> io::Result<Stdin> {
        let mut buf = Vec::new();
        io::stdin().lock().read_to_end(&mut buf)?;
        Ok(Stdin::Bytes(Arc::new(buf)))
    }
}

/// How one attempt ended.
#[derive(Debug)]
pub enum Ending {
    /// The command ran and ended.
    Ran {
        /// Its exit status.
        status: ExitStatus,
        /// Whether stagger cut it off at its timeout (or the deadline).
        timed_out: bool,
        /// The signal stagger caught and forwarded while it ran, if any.
        interrupted: Option<i32>,
    },
    /// The command could not be started at all.
    NotStarted(io::Error),
}

/// The shell's number for an exit status: the code, or 128 + the signal
/// that killed the process.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + (s & 0x7f)) as u8,
        (None, None) => 1,
    }
}

/// Runs attempts and waits, hearing SIGINT and SIGTERM meanwhile.
pub struct Supervisor {
    tx: Sender<Event>,
    rx: Receiver<Event>,
    signals: Handle,
    /// Grace period between SIGTERM and SIGKILL.
    kill_after: Duration,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.signals.close();
    }
}

impl Supervisor {
    /// Starts listening for SIGINT and SIGTERM.
    pub fn new(kill_after: Duration) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let mut signals = Signals::new([SIGINT, SIGTERM])?;
        let handle = signals.handle();
        let to_main = tx.clone();
        thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for s in signals.forever() {
                    if to_main.send(Event::Signal(s)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Supervisor {
            tx,
            rx,
            signals: handle,
            kill_after,
        })
    }

    /// Waits `d`, or less if SIGINT or SIGTERM arrives: then returns it.
    pub fn wait(&self, d: Duration) -> Option<i32> {
        let until = Instant::now().checked_add(d);
        loop {
            let event = match until {
                Some(t) => match self
                    .rx
                    .recv_timeout(t.saturating_duration_since(Instant::now()))
                {
                    Ok(e) => e,
                    Err(_) => return None,
                },
                None => self.rx.recv().ok()?,
            };
            if let Event::Signal(s) = event {
                return Some(s);
            }
        }
    }

    /// Runs one attempt of `command` with `stdin`, cutting it off after
    /// `timeout`: SIGTERM to its process group, then SIGKILL once the grace
    /// period has passed. A caught signal is forwarded the same way.
    pub fn attempt(
        &self,
        command: &[std::ffi::OsString],
        stdin: &Stdin,
        timeout: Option<Duration>,
    ) -> Ending {
        let Some((program, args)) = command.split_first() else {
            return Ending::NotStarted(io::Error::new(io::ErrorKind::NotFound, "no command"));
        };
        let mut cmd = Command::new(program);
        cmd.args(args).process_group(0).stdin(match stdin {
            Stdin::Inherit => Stdio::inherit(),
            Stdin::Null => Stdio::null(),
            Stdin::Bytes(_) => Stdio::piped(),
        });
        let start = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return Ending::NotStarted(e),
        };
        let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        if let (Stdin::Bytes(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let bytes = Arc::clone(bytes);
            // A command that never reads its input must not block stagger:
            // the writer ends on EPIPE when the command exits.
            let _ = thread::Builder::new().name("stdin".into()).spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        let to_main = self.tx.clone();
        let waiter = thread::Builder::new().name("wait".into()).spawn(move || {
            let _ = to_main.send(Event::Exited(child.wait()));
        });
        if let Err(e) = waiter {
            // Without a waiter nothing would reap the child: stop it here.
            let _ = killpg(group, Signal::SIGKILL);
            return Ending::NotStarted(e);
        }
        self.supervise(group, start, timeout)
    }

    fn supervise(&self, group: Pid, start: Instant, timeout: Option<Duration>) -> Ending {
        let mut term_at = timeout.and_then(|t| start.checked_add(t));
        let mut kill_at: Option<Instant> = None;
        let mut timed_out = false;
        let mut interrupted = None;
        loop {
            let next = match (term_at, kill_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let event = match next {
                Some(t) => self
                    .rx
                    .recv_timeout(t.saturating_duration_since(Instant::now())),
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Exited(result)) => {
                    return match result {
                        Ok(status) => Ending::Ran {
                            status,
                            timed_out,
                            interrupted,
                        },
                        Err(e) => Ending::NotStarted(e),
                    };
                }
                Ok(Event::Signal(s)) => {
                    let first = interrupted.is_none();
                    interrupted.get_or_insert(s);
                    term_at = None;
                    if first {
                        signal_group(group, Signal::try_from(s).unwrap_or(Signal::SIGTERM));
                        // A grace period already running (after a timeout) is kept.
                        kill_at = kill_at.or_else(|| self.grace_end());
                    } else {
                        // Asked twice: stop waiting for a clean exit.
                        signal_group(group, Signal::SIGKILL);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    if kill_at.is_some_and(|k| now >= k) {
                        signal_group(group, Signal::SIGKILL);
                        kill_at = None;
                    }
                    if term_at.is_some_and(|t| now >= t) {
                        timed_out = true;
                        term_at = None;
                        signal_group(group, Signal::SIGTERM);
                        kill_at = self.grace_end();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Every sender is gone, including our own: cannot happen
                    // while `self` lives. Stop the group rather than hang.
                    signal_group(group, Signal::SIGKILL);
                    return Ending::NotStarted(io::Error::other("lost track of the command"));
                }
            }
        }
    }

    fn grace_end(&self) -> Option<Instant> {
        if self.kill_after.is_zero() {
            return Some(Instant::now());
        }
        Instant::now().checked_add(self.kill_after)
    }
}

/// Sends `signal` to every process of the group. The group may already be
/// gone (the command exited just now): that is not an error.
fn signal_group(group: Pid, signal: Signal) {
    let _ = killpg(group, signal);
}
