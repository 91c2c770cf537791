//! # stagger-gameday — live faults on real sockets
//!
//! A retry policy is argued about in numbers; this crate makes them on real
//! sockets, on this machine:
//!
//! - [`gameday`]: a retry storm and its cure — a server on 127.0.0.1 (or in
//!   network namespaces of its own) with a finite capacity and a scripted
//!   fault, a fleet of clients using the library's reqwest middleware and
//!   guardrails, and what arrived at the server and what the clients got,
//!   per 100 ms; the hedging, priority and soak game-days; a drill against a
//!   real upstream (`--target`) through the proxy;
//! - [`proxy`]: the same faults in front of any real HTTP/1.1 or HTTP/2
//!   service — a fault-injecting reverse proxy that counts first attempts
//!   and retries per 100 ms.
//!
//! Strategies are built and recovery is judged by [`stagger_sim`], the same
//! as in the simulator ([`stagger_sim::Strategy::policy`],
//! [`stagger_sim::recovery`]), so a game-day and a simulation can be laid
//! side by side. [`results`] is what a game-day measured, as plain data;
//! the tables, pages and charts that show it are `stagger-report`'s.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

mod bins;
pub mod fault;
pub mod gameday;
mod listen;
pub mod proxy;
mod reset;
pub mod results;

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
