//! Errors of configuration and of retried calls.

use std::fmt;
use std::time::Duration;

use crate::outcome::StopReason;

/// A configuration value that stagger refuses, naming the field.
///
/// ```
/// use stagger::Backoff;
/// let err = Backoff { multiplier: 0.5, ..Backoff::new() }.validate().unwrap_err();
/// assert_eq!(err.field(), "multiplier");
/// assert!(err.to_string().contains("multiplier"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    field: &'static str,
    problem: String,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, problem: impl Into<String>) -> Self {
        ConfigError {
            field,
            problem: problem.into(),
        }
    }

    /// The name of the offending field, as spelled in the builder and in config files.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.field, self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// The error of a retried call that did not succeed: why it stopped, how many
/// attempts were made, and the last underlying error (if an attempt ran at all).
///
/// One pointer wide (its details live behind a box allocated only when a
/// call fails), so `Result<T, RetryError<E>>` costs a successful call no
/// more than `Result<T, Box<_>>` would.
#[derive(Debug)]
pub struct RetryError<E> {
    inner: Box<Failed<E>>,
}

#[derive(Debug)]
pub(crate) struct Failed<E> {
    pub(crate) reason: StopReason,
    pub(crate) attempts: u32,
    pub(crate) elapsed: Option<Duration>,
    pub(crate) last: Option<E>,
    pub(crate) timed_out: bool,
    /// The last failure's result was unknown (a timeout the closure
    /// reported itself, say): the work may have happened.
    pub(crate) unknown: bool,
    pub(crate) retry_in: Option<Duration>,
    pub(crate) refused: Option<ConfigError>,
}

impl<E> From<Failed<E>> for RetryError<E> {
    #[cold]
    fn from(f: Failed<E>) -> Self {
        RetryError { inner: Box::new(f) }
    }
}

impl<E> RetryError<E> {
    /// Why the call stopped.
    pub fn reason(&self) -> StopReason {
        self.inner.reason
    }

    /// How many attempts were made (0 when a guardrail refused the first one).
    pub fn attempts(&self) -> u32 {
        self.inner.attempts
    }

    /// Time from the first attempt to the stop, waits included — known when
    /// the executor read the clock at the start (a deadline, an observer, a
    /// guardrail or a notify hook made it), `None` otherwise: the success
    /// path never pays for a clock read it does not need.
    pub fn elapsed(&self) -> Option<Duration> {
        self.inner.elapsed
    }

    /// The last attempt's error, if an attempt ran and failed with an error.
    pub fn last(&self) -> Option<&E> {
        self.inner.last.as_ref()
    }

    /// When the guardrail that stopped the call (an open breaker) said it
    /// might admit calls again, if it did: a caller can fail fast until then.
    pub fn retry_in(&self) -> Option<Duration> {
        self.inner.retry_in
    }

    /// Whether the last attempt was cut off by its timeout.
    pub fn timed_out(&self) -> bool {
        self.inner.timed_out
    }

    /// The setting this executor cannot honour, when it refused to run the
    /// call at all (for example an `attempt_timeout` given to a blocking
    /// closure that cannot see it).
    pub fn refused(&self) -> Option<&ConfigError> {
        self.inner.refused.as_ref()
    }

    /// Takes the last attempt's error.
    pub fn into_last(self) -> Option<E> {
        self.inner.last
    }

    /// Marks the last failure's result as unknown.
    pub(crate) fn set_unknown(&mut self) {
        self.inner.unknown = true;
    }
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = self.refused() {
            return write!(f, "refused before the first attempt: {c}");
        }
        write!(
            f,
            "gave up after {} attempt{} ({})",
            self.attempts(),
            if self.attempts() == 1 { "" } else { "s" },
            self.reason()
        )?;
        if let Some(why) = self.why() {
            write!(f, ": {why}")?;
        }
        if let Some(e) = self.last() {
            write!(f, ": {e}")?;
        }
        Ok(())
    }
}

impl<E> RetryError<E> {
    /// What a user needs to hear beside a stop reason whose cause is not
    /// plain from its name.
    fn why(&self) -> Option<&'static str> {
        match self.reason() {
            // A timeout's result is unknown; the engine repeats it only for
            // a call declared safe to repeat.
            StopReason::NotRetryable if self.timed_out() => Some(
                "the attempt timed out, so whether it took effect is unknown, and a call not \
                 declared idempotent is not repeated (declare it with `.idempotent(true)` if \
                 repeating it is safe)",
            ),
            StopReason::NotRetryable if self.inner.unknown => Some(
                "whether the last attempt took effect is unknown (a timeout, say), and a call \
                 not declared idempotent is not repeated (declare it with `.idempotent(true)` \
                 if repeating it is safe)",
            ),
            StopReason::Budget => {
                Some("the retry budget refused: a new client earns retries with traffic")
            }
            _ => None,
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.last().map(|e| e as _)
    }
}
