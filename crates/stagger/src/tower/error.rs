//! The error of a retried call that ended without a response.

use std::error::Error as StdError;
use std::fmt;

use crate::http::RetryInfo;

/// A boxed error, as tower passes them around.
pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// What went wrong, coarsely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The inner service failed (connection refused, reset, …); see
    /// [`source`](StdError::source).
    Service,
    /// The last attempt did not answer within its timeout.
    Timeout,
    /// Reading the request body failed.
    Body,
    /// No attempt could be made: the deadline had passed or a guardrail
    /// (breaker, throttle) refused the first attempt.
    Refused,
}

/// A retried call that ended without a response: what happened last, and
/// the [`RetryInfo`] of the call.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    info: RetryInfo,
    source: Option<BoxError>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, info: RetryInfo, source: Option<BoxError>) -> Self {
        Error { kind, info, source }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Attempts, stop reason and waits of the call.
    pub fn info(&self) -> RetryInfo {
        self.info
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::Service => "request failed",
            ErrorKind::Timeout => "attempt timed out",
            ErrorKind::Body => "reading the request body failed",
            ErrorKind::Refused => "no attempt was allowed",
        };
        write!(
            f,
            "{what} after {} attempt{} ({})",
            self.info.attempts,
            if self.info.attempts == 1 { "" } else { "s" },
            self.info.reason
        )?;
        if let Some(why) = self.info.not_retried {
            write!(f, ", not retried: {why}")?;
        }
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

pub(crate) use crate::http::AttemptTimedOut;
