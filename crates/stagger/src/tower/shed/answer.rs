//! How the [`ShedLayer`](super::ShedLayer) turns a request away: which
//! count it is, which event, and the answer that says when to come back —
//! later for lower levels.

use std::sync::atomic::Ordering;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Response, StatusCode};

use super::Shared;
use crate::grpc::wire::{GRPC_PUSHBACK, GRPC_STATUS};
use crate::guardrails::event::{Event, ShedReason};
use crate::limit::{Limiter, Token};
use crate::priority::{retry_after_factor, Class, Priority};
use crate::random::{FastRng, RandomSource};

impl Shared {
    /// A place in `limiter` for a request of `class`: by the priority
    /// order when the layer sheds by priority, by the retry rule alone
    /// otherwise.
    pub(super) fn acquire(
        &self,
        limiter: &Limiter,
        class: Class,
        now: std::time::Instant,
    ) -> Result<Token, crate::limit::Shed> {
        match &self.ceilings {
            Some(c) => limiter.try_acquire_as(class, c, now),
            None => limiter.try_acquire(class.retry, now),
        }
    }

    /// Counts a request the limit (or the queue) turned away and answers
    /// it.
    pub(super) fn shed<B: Default>(&self, class: Class, grpc: bool) -> Response<B> {
        let reason = if class.retry {
            ShedReason::Retry
        } else {
            ShedReason::FirstAttempt
        };
        self.refuse(class, reason, grpc)
    }

    /// Counts a request shed for `reason` and answers it, a lower level
    /// told to come back later.
    pub(super) fn refuse<B: Default>(
        &self,
        class: Class,
        reason: ShedReason,
        grpc: bool,
    ) -> Response<B> {
        let counter = if class.retry {
            &self.shed_retries
        } else {
            &self.shed_first
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if reason == ShedReason::Cpu {
            self.shed_cpu.fetch_add(1, Ordering::Relaxed);
        }
        let (lo, hi) = self.retry_after;
        let priority = self.ceilings.map(|_| class.priority);
        let range = match priority {
            Some(p) => {
                self.shed_by_priority[usize::from(p.rank())].fetch_add(1, Ordering::Relaxed);
                let f = retry_after_factor(p);
                (lo.saturating_mul(f), hi.saturating_mul(f))
            }
            None => (lo, hi),
        };
        self.emit(reason, priority);
        shed_response(range, grpc)
    }

    /// Counts a request dropped because its caller's deadline passed.
    pub(super) fn expire(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
        self.emit(ShedReason::Deadline, None);
    }

    fn emit(&self, reason: ShedReason, priority: Option<Priority>) {
        if let Some(o) = &self.observer {
            o.on_event(&Event::Shed { reason, priority });
        }
    }
}

/// A shed answer that says when to come back, jittered within the
/// configured range so shed clients do not return together: 503 with
/// `Retry-After` in seconds, or for gRPC a trailers-only UNAVAILABLE with
/// `grpc-retry-pushback-ms`.
fn shed_response<B: Default>((lo, hi): (u64, u64), grpc: bool) -> Response<B> {
    let mut resp = Response::new(B::default());
    let h = resp.headers_mut();
    if grpc {
        let (lo, hi) = (lo.saturating_mul(1000), hi.saturating_mul(1000));
        let span = hi.saturating_sub(lo).saturating_add(1);
        // Never 0: grpcio (1.85) waits out the whole deadline after a
        // pushback of 0 instead of retrying at once.
        let ms = lo.saturating_add(FastRng::fresh().next_u64() % span).max(1);
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert(GRPC_STATUS, HeaderValue::from_static("14"));
        h.insert(GRPC_PUSHBACK, HeaderValue::from(ms));
    } else {
        let span = hi.saturating_sub(lo).saturating_add(1);
        let secs = lo.saturating_add(FastRng::fresh().next_u64() % span);
        h.insert(RETRY_AFTER, HeaderValue::from(secs));
        *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    resp
}
