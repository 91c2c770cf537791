//! # stagger-lab — the game-day and the reports, as a library
//!
//! A retry policy is argued about in numbers and charts. This crate holds
//! everything the `stagger` binary shows beyond one call's schedule:
//!
//! - [`gameday`]: a retry storm and its cure on real sockets — a server on
//!   127.0.0.1 with a finite capacity and a scripted fault, a fleet of
//!   clients using the library's reqwest middleware and guardrails, and
//!   what arrived at the server and what the clients got, per 100 ms;
//! - [`proxy`]: the same faults in front of any real HTTP/1.1 or HTTP/2
//!   service — a fault-injecting reverse proxy that counts first attempts
//!   and retries per 100 ms;
//! - [`simulate`]: the table and the self-contained HTML/SVG report of a
//!   [`stagger_sim`] simulation;
//! - [`lab`]: the simulator and the decision engine behind a small web
//!   server, for a browser.
//!
//! Strategies are built and recovery is judged by [`stagger_sim`], the same
//! as in the simulator ([`stagger_sim::Strategy::policy`],
//! [`stagger_sim::recovery`]), so a game-day and a simulation can be laid
//! side by side. The binary only parses flags, calls this crate, prints and
//! sets the exit code.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::time::Duration;

mod bins;
pub mod gameday;
pub mod health;
mod html;
pub mod lab;
pub mod output;
pub mod progress;
pub mod proxy;
pub mod request;
mod reset;
pub mod run;
pub mod schedule;
pub mod simulate;
mod svg;
#[cfg(feature = "tls")]
pub mod tls;
pub mod window;

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A bad setting; the message starts with the flag that names it
    /// (`--rate: …`).
    Usage,
    /// The work could not run (a port could not be bound, a runtime or an
    /// HTTP client could not be built).
    Run,
    /// A report could not be written.
    Io,
}

/// An error of this crate: a kind, a message for the user and the cause
/// (as [`source`](std::error::Error::source)).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Usage,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error {
            kind,
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The cause is `source()`, not repeated here.
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<stagger_sim::SimError> for Error {
    fn from(e: stagger_sim::SimError) -> Self {
        Error::usage(e.to_string())
    }
}

/// Parses a duration as sleep(1) and timeout(1) take it, bare seconds
/// (`30`, `1.5`), or with units as people write it (`250ms`, `5s`, `1m30s`).
/// A negative value is refused with a message saying so.
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!(
            "`{s}` is negative; a duration is 0 or more (e.g. 30, 250ms, 5s)"
        ));
    }
    if s.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        && s.chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        return s
            .parse::<f64>()
            .ok()
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .ok_or_else(|| format!("`{s}` is not a number of seconds; write e.g. 30, 1.5, 250ms"));
    }
    humantime::parse_duration(s).map_err(|e| {
        format!("`{s}` is not a duration ({e}); write seconds (30) or with a unit (250ms, 5s, 1m)")
    })
}
