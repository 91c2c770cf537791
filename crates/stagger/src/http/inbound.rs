//! The inbound request a service is working on: its deadline, whether it
//! is a retry, and its priority.
//!
//! Retries multiply across layers: three layers of four attempts each send
//! 64 attempts to the bottom one. The one-layer rule (docs/behaviour.md §8) stops that:
//! a server layer ([`DeadlineLayer`](crate::tower::DeadlineLayer)) reads
//! `x-request-timeout-ms` / `grpc-timeout` and the attempt number
//! (`x-retry-attempt`, or a mesh's `x-envoy-attempt-count`) from each
//! request and runs the handler inside an [`Inbound`] scope. A client layer
//! (the tower [`RetryLayer`](crate::tower::RetryLayer) or the reqwest
//! [`RetryMiddleware`](crate::reqwest::RetryMiddleware)) called from that
//! handler then
//!
//! - never outlives the caller: the inbound deadline bounds the call;
//! - does not retry while serving an inbound retry: it fails fast and passes
//!   the error up;
//! - reports when it gave up after retrying, so the server layer marks the
//!   failure response with [`NO_RETRY`](super::NO_RETRY) and the caller does
//!   not retry what was already retried below;
//! - sends the inbound request's [`Priority`] on (`x-criticality`, also in
//!   gRPC metadata) unless the call says otherwise, so work done for a
//!   sheddable request stays sheddable on every hop.
//!
//! The scope is a tokio task-local: it follows the handler's future, not
//! tasks it spawns. To carry it into a spawned task, take
//! [`Inbound::current`] and run the task in [`Inbound::scope`], or put the
//! `Inbound` into the outbound request's extensions.
//!
//! ```
//! use stagger::http::Inbound;
//! use std::time::{Duration, Instant};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! # rt.block_on(async {
//! assert!(Inbound::current().is_none());
//! let inbound = Inbound::new(2, Some(Instant::now() + Duration::from_secs(1)));
//! inbound.scope(async {
//!     let now = Inbound::current().unwrap();
//!     assert!(now.attempt() > 1);
//!     assert_eq!(now.attempt(), 2);
//! }).await;
//! # });
//! ```

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderMap, HeaderValue};

use super::{inbound_attempt, PRIORITY, REQUEST_TIMEOUT};
use crate::grpc::is_grpc;
use crate::grpc::wire::GRPC_TIMEOUT;
use crate::outcome::deadline::{parse_grpc_timeout, parse_timeout_ms};
use crate::priority::Priority;

tokio::task_local! {
    static INBOUND: Inbound;
}

/// The request being served: its attempt number, its deadline, its
/// priority, and whether a call made while serving it gave up after
/// retrying. Clones share the "gave up" flag.
#[derive(Debug, Clone)]
pub struct Inbound {
    attempt: u32,
    deadline: Option<Instant>,
    priority: Option<Priority>,
    gave_up: Arc<AtomicBool>,
}

impl Inbound {
    /// An inbound request that is attempt `attempt` (1-based; 0 is read as
    /// 1), with an optional deadline.
    pub fn new(attempt: u32, deadline: Option<Instant>) -> Self {
        Inbound {
            attempt: attempt.max(1),
            deadline,
            priority: None,
            gave_up: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The same request with priority `priority`: calls made while serving
    /// it send it on unless their [`CallOptions`](super::CallOptions) name
    /// another.
    ///
    /// ```
    /// use stagger::http::Inbound;
    /// use stagger::priority::Priority;
    ///
    /// let inbound = Inbound::new(1, None);
    /// assert_eq!(inbound.priority(), Priority::CRITICAL, "none named");
    /// let crawler = inbound.with_priority(Priority::SHEDDABLE);
    /// assert_eq!(crawler.priority(), Priority::SHEDDABLE);
    /// ```
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Reads a request's headers at `now`: the attempt number (the highest
    /// of `x-retry-attempt`, Envoy's `x-envoy-attempt-count` and gRPC's
    /// `grpc-previous-rpc-attempts` + 1), `x-request-timeout-ms` (or
    /// `grpc-timeout` for gRPC) and `x-criticality`. Missing or malformed
    /// values mean attempt 1, no deadline and no priority named
    /// (`critical`).
    ///
    /// ```
    /// use http::{HeaderMap, HeaderValue};
    /// use stagger::http::Inbound;
    /// use std::time::{Duration, Instant};
    ///
    /// let mut h = HeaderMap::new();
    /// h.insert("x-retry-attempt", HeaderValue::from_static("3"));
    /// h.insert("x-request-timeout-ms", HeaderValue::from_static("250"));
    /// h.insert("x-criticality", HeaderValue::from_static("sheddable-plus"));
    /// let now = Instant::now();
    /// let inbound = Inbound::from_headers(&h, now);
    /// assert_eq!(inbound.attempt(), 3);
    /// assert_eq!(inbound.deadline(), Some(now + Duration::from_millis(250)));
    /// assert_eq!(inbound.priority(), stagger::priority::Priority::SHEDDABLE_PLUS);
    /// ```
    pub fn from_headers(headers: &HeaderMap, now: Instant) -> Self {
        let mut inbound = Inbound::new(inbound_attempt(headers), inbound_deadline(headers, now));
        inbound.priority = inbound_priority(headers);
        inbound
    }

    /// The priority of the request: the one it named, or `critical`.
    pub fn priority(&self) -> Priority {
        self.priority.unwrap_or_default()
    }

    /// The inbound attempt number (1 for a first attempt).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether the request being served is a retry (attempt 2 or later): the
    /// one-layer rule's fact, read the same by every transport.
    pub(crate) fn is_retry(&self) -> bool {
        self.attempt > 1
    }

    /// The deadline of the work for this request, if the caller sent one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether a call made while serving this request failed after its
    /// layer already retried (or was told not to): the failure should be
    /// passed up with `x-no-retry`.
    pub fn downstream_gave_up(&self) -> bool {
        self.gave_up.load(Ordering::Relaxed)
    }

    /// Records that a call made while serving this request gave up.
    pub fn mark_gave_up(&self) {
        self.gave_up.store(true, Ordering::Relaxed);
    }

    /// The inbound request of the current task, if it runs inside a
    /// [`scope`](Inbound::scope).
    pub fn current() -> Option<Inbound> {
        INBOUND.try_with(Inbound::clone).ok()
    }

    /// Runs `fut` with `self` as the current inbound request.
    pub fn scope<F: Future>(self, fut: F) -> tokio::task::futures::TaskLocalFuture<Inbound, F> {
        INBOUND.scope(self, fut)
    }
}

impl Inbound {
    /// Runs `f` (synchronously) with `self` as the current inbound request.
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        INBOUND.sync_scope(self, f)
    }
}

/// The caller's deadline a request carries, read at `now`:
/// `x-request-timeout-ms`, or `grpc-timeout` for gRPC (no allocation, for
/// layers that need only this).
pub(crate) fn inbound_deadline(headers: &HeaderMap, now: Instant) -> Option<Instant> {
    let grpc = is_grpc(headers);
    let header = if grpc { GRPC_TIMEOUT } else { REQUEST_TIMEOUT };
    let value = headers.get(header)?.to_str().ok()?;
    let timeout = if grpc {
        parse_grpc_timeout(value)
    } else {
        parse_timeout_ms(value)
    }?;
    now.checked_add(timeout)
}

/// The priority a request names in `x-criticality`, if it names one this
/// crate understands (a value it does not is no priority at all).
pub(crate) fn inbound_priority(headers: &HeaderMap) -> Option<Priority> {
    Priority::from_bytes(headers.get(PRIORITY)?.as_bytes()).ok()
}

/// The priority an outbound call sends, when it must write one: the one
/// the call names (its `CallOptions`), or else — when the request does not
/// carry its own `x-criticality` — the one the inbound request it serves
/// named.
pub(crate) fn outbound_priority(
    named: Option<Priority>,
    headers: &HeaderMap,
    inbound: Option<&Inbound>,
) -> Option<HeaderValue> {
    let p = match named {
        Some(p) => p,
        None if headers.contains_key(PRIORITY) => return None,
        None => inbound?.priority?,
    };
    Some(HeaderValue::from_static(p.as_str()))
}
