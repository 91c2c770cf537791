//! What the caller is told of a call: [`RetryInfo`] at the end, an
//! [`AttemptLog`] per attempt, and the one-layer rule's word to the inbound
//! request.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName};

use super::inbound::Inbound;
use crate::engine::call::Call;
use crate::outcome::{Class, NotRetried, StopReason};

/// How a call ended, put in the final response's extensions (and carried by
/// the error when there is no response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryInfo {
    /// Attempts made.
    pub attempts: u32,
    /// Why the call stopped.
    pub reason: StopReason,
    /// When a retryable failure was not retried, why.
    pub not_retried: Option<NotRetried>,
    /// Total time slept between attempts.
    pub waited: Duration,
    /// The final answer was a replay: the server had already run a request
    /// with the call's `Idempotency-Key` and sent back the stored answer
    /// (`Idempotent-Replayed: true`) instead of running it again.
    pub replayed: bool,
}

impl RetryInfo {
    /// A call that stopped for `reason` after `attempts` attempts, having
    /// waited nothing.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) const fn stopped(attempts: u32, reason: StopReason) -> Self {
        RetryInfo {
            attempts,
            reason,
            not_retried: None,
            waited: Duration::ZERO,
            replayed: false,
        }
    }
}

/// One attempt as reported to an [`on_attempt`](super::Settings::on_attempt) hook.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AttemptLog {
    /// The attempt (1-based).
    pub attempt: u32,
    /// Its response status, if it got a response.
    pub status: Option<u16>,
    /// Its transport error or timeout, if it got no response.
    pub error: Option<String>,
    /// The server's hint, if it gave a usable one.
    pub hint: Option<Duration>,
    /// The wait before the next attempt; `None` when the call stops here.
    pub delay: Option<Duration>,
    /// Why the call stopped, when it stops here.
    pub stop: Option<StopReason>,
}

/// A hook shown every attempt.
pub type AttemptHook = Arc<dyn Fn(&AttemptLog) + Send + Sync>;

/// `Idempotent-Replayed`: the server's mark on a stored answer it sent again
/// (a `HeaderName`, so reading it on every answer parses no name).
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Whether an answer is a replay (`Idempotent-Replayed: true`, the value
/// read without regard to case).
#[cfg_attr(not(any(feature = "tower", feature = "reqwest")), allow(dead_code))]
pub(super) fn is_replay(headers: &HeaderMap) -> bool {
    headers
        .get(IDEMPOTENT_REPLAYED)
        .is_some_and(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"true"))
}

/// The one-layer rule's word up, for every transport: a call that stopped on
/// a failure that could have cleared, after retrying it here (or declining
/// to, serving an inbound retry or told no by the layer below), marks the
/// inbound request it serves as given up, so the server layer answers with
/// the "do not retry" mark and the layers above fail fast. A layer that made
/// one attempt and was not asked to hold back (say it allows no retries)
/// leaves retrying to its caller.
pub(crate) fn mark_if_gave_up<R>(
    inbound: Option<&Inbound>,
    last_class: Option<Class>,
    call: &Call<R>,
    reason: StopReason,
) {
    let Some(inbound) = inbound else { return };
    if reason == StopReason::Success || !last_class.is_some_and(Class::may_clear) {
        return;
    }
    let declined = matches!(
        call.not_retried(),
        Some(NotRetried::ServingRetry | NotRetried::ServerSaidNo)
    );
    if call.attempts() > 1 || declined {
        inbound.mark_gave_up();
    }
}
