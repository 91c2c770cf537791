//! Child process control: spawn one attempt, time it out, forward signals.
//!
//! Every attempt runs in a process group of its own, so a signal meant for
//! it reaches everything it started (a shell script's `sleep`, a build's
//! compilers), not only its first process. A terminal's Ctrl-C therefore no
//! longer reaches the command directly: `stagger run` catches SIGHUP,
//! SIGINT, SIGQUIT and SIGTERM (which end the run) and SIGUSR1 and SIGUSR2
//! (which do not) and forwards them to the group itself.
//!
//! A group of its own is not the terminal's foreground group, so a command
//! that reads the terminal is stopped by SIGTTIN (SIGTTOU for some writes).
//! The waiter sees such a stop and the run ends with a message naming
//! `--foreground`, instead of waiting forever on a stopped command. With
//! `--foreground` (as in timeout(1)) the command stays in stagger's group:
//! it may read the terminal, and signals reach only its first process.
//!
//! One channel carries everything the supervisor waits for (the child's
//! exit or stop, from a thread blocked in `waitpid`, and caught signals,
//! from signal-hook's thread), so waiting is a single `recv_timeout` armed
//! with the next timer: no polling.

use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2};
use signal_hook::iterator::{Handle, Signals};

/// The signals `stagger run` catches and forwards to the command.
pub const FORWARDED: [i32; 6] = [SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2];

/// Whether a caught signal only passes through (the run goes on) rather
/// than asking the run to end.
pub fn passes_through(signal: i32) -> bool {
    signal == SIGUSR1 || signal == SIGUSR2
}

/// What the supervisor hears about.
enum Event {
    Exited(io::Result<ExitStatus>),
    /// The command was stopped by this signal.
    Stopped(i32),
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
        /// Whether stagger had to send SIGKILL (a timeout or an interrupt
        /// that the command outlived by the grace period).
        killed: bool,
        /// The terminal stop (SIGTTIN or SIGTTOU) that made stagger end the
        /// command, if one did.
        tty_stop: Option<i32>,
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

/// How attempts are run and stopped.
#[derive(Debug, Clone, Copy)]
pub struct Control {
    /// Grace period between the timeout signal and SIGKILL (0: no SIGKILL).
    pub kill_after: Duration,
    /// The signal sent when an attempt times out (SIGTERM by default).
    pub timeout_signal: Signal,
    /// Keep the command in stagger's process group (`--foreground`).
    pub foreground: bool,
}

/// Runs attempts and waits, hearing the forwarded signals meanwhile.
pub struct Supervisor {
    tx: Sender<Event>,
    rx: Receiver<Event>,
    signals: Handle,
    control: Control,
}

/// Where signals for the command go: its group, or (with `--foreground`)
/// its first process only.
#[derive(Clone, Copy)]
struct Target {
    pid: Pid,
    group: bool,
}

impl Target {
    /// Sends `signal`. The command may already be gone (it exited just
    /// now): that is not an error.
    fn send(self, signal: Signal) {
        let _ = if self.group {
            killpg(self.pid, signal)
        } else {
            kill(self.pid, signal)
        };
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.signals.close();
    }
}

impl Supervisor {
    /// Starts listening for the forwarded signals.
    pub fn new(control: Control) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let mut signals = Signals::new(FORWARDED)?;
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
            control,
        })
    }

    /// Waits `d`, or less if a signal that ends the run arrives: then
    /// returns it. SIGUSR1 and SIGUSR2 have no command to go to here.
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
            match event {
                Event::Signal(s) if !passes_through(s) => return Some(s),
                _ => {}
            }
        }
    }

    /// Runs one attempt of `command` with `stdin`, cutting it off after
    /// `timeout`: the timeout signal to its process group, then SIGKILL
    /// once the grace period has passed. A caught signal is forwarded the
    /// same way.
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
        if !self.control.foreground {
            cmd.process_group(0);
        }
        cmd.args(args).stdin(match stdin {
            Stdin::Inherit => Stdio::inherit(),
            Stdin::Null => Stdio::null(),
            Stdin::Bytes(_) => Stdio::piped(),
        });
        let start = Instant::now();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return Ending::NotStarted(e),
        };
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let target = Target {
            pid,
            group: !self.control.foreground,
        };
        if let (Stdin::Bytes(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let bytes = Arc::clone(bytes);
            // A command that never reads its input must not block stagger:
            // the writer ends on EPIPE when the command exits.
            let _ = thread::Builder::new().name("stdin".into()).spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        // The waiter reaps the child itself (std's `Child` is dropped
        // unwaited) so that it hears stops as well as the exit.
        drop(child);
        let to_main = self.tx.clone();
        let waiter = thread::Builder::new()
            .name("wait".into())
            .spawn(move || wait_for(pid, &to_main));
        if let Err(e) = waiter {
            // Without a waiter nothing would reap the child: stop it here.
            target.send(Signal::SIGKILL);
            return Ending::NotStarted(e);
        }
        self.supervise(target, start, timeout)
    }

    fn supervise(&self, target: Target, start: Instant, timeout: Option<Duration>) -> Ending {
        let mut term_at = timeout.and_then(|t| start.checked_add(t));
        let mut kill_at: Option<Instant> = None;
        let mut timed_out = false;
        let mut interrupted = None;
        let mut killed = false;
        let mut tty_stop = None;
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
                            killed: killed && status.signal() == Some(Signal::SIGKILL as i32),
                            tty_stop,
                        },
                        Err(e) => Ending::NotStarted(e),
                    };
                }
                Ok(Event::Signal(s)) if passes_through(s) => {
                    target.send(Signal::try_from(s).unwrap_or(Signal::SIGUSR1));
                }
                Ok(Event::Signal(s)) => {
                    let first = interrupted.is_none();
                    interrupted.get_or_insert(s);
                    term_at = None;
                    if first {
                        target.send(Signal::try_from(s).unwrap_or(Signal::SIGTERM));
                        // A grace period already running (after a timeout) is kept.
                        kill_at = kill_at.or_else(|| self.grace_end());
                    } else {
                        // Asked twice: stop waiting for a clean exit.
                        target.send(Signal::SIGKILL);
                        killed = true;
                    }
                }
                Ok(Event::Stopped(s))
                    if !self.control.foreground && (s == SIGTTIN || s == SIGTTOU) =>
                {
                    // Stopped for wanting the terminal, it would wait
                    // forever: end it (SIGKILL works on a stopped process).
                    if tty_stop.is_none() {
                        tty_stop = Some(s);
                        term_at = None;
                        kill_at = None;
                        target.send(Signal::SIGKILL);
                    }
                }
                // Stopped by someone else (SIGSTOP, SIGTSTP): they will
                // continue it.
                Ok(Event::Stopped(_)) => {}
                Err(RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    if kill_at.is_some_and(|k| now >= k) {
                        target.send(Signal::SIGKILL);
                        killed = true;
                        kill_at = None;
                    }
                    if term_at.is_some_and(|t| now >= t) {
                        timed_out = true;
                        term_at = None;
                        target.send(self.control.timeout_signal);
                        // A stopped command would never act on it.
                        target.send(Signal::SIGCONT);
                        kill_at = self.grace_end();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Every sender is gone, including our own: cannot happen
                    // while `self` lives. Stop the group rather than hang.
                    target.send(Signal::SIGKILL);
                    return Ending::NotStarted(io::Error::other("lost track of the command"));
                }
            }
        }
    }

    /// When SIGKILL follows a signal sent now: never with a grace period
    /// of 0 (timeout(1)'s "0 disables").
    fn grace_end(&self) -> Option<Instant> {
        let kill_after = self.control.kill_after;
        if kill_after.is_zero() {
            return None;
        }
        Instant::now().checked_add(kill_after)
    }
}

/// The waiter thread: reports each stop of `pid` and, last, its exit.
fn wait_for(pid: Pid, to_main: &Sender<Event>) {
    loop {
        let event = match waitpid(pid, Some(WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Exited(_, code)) => {
                Event::Exited(Ok(ExitStatus::from_raw((code & 0xff) << 8)))
            }
            Ok(WaitStatus::Signaled(_, sig, core)) => {
                let raw = sig as i32 | if core { 0x80 } else { 0 };
                Event::Exited(Ok(ExitStatus::from_raw(raw)))
            }
            Ok(WaitStatus::Stopped(_, sig)) => Event::Stopped(sig as i32),
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => Event::Exited(Err(io::Error::from(e))),
        };
        let last = matches!(event, Event::Exited(_));
        if to_main.send(event).is_err() || last {
            return;
        }
    }
}
/// Parses `--signal`: TERM, SIGTERM, term, or a number.
pub fn parse_signal(s: &str) -> Result<Signal, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| format!("`{t}` is not a signal number"));
    }
    let upper = t.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>()
        .map_err(|_| format!("`{t}` is not a signal; write e.g. TERM, INT, HUP, KILL or 9"))
}
