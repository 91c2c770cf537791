//! Retry budgets: how much a whole client may retry.
//!
//! Backoff decides *when* one call retries; it says nothing about *how much*
//! a fleet retries. When a dependency stumbles, every call fails at once and
//! every call retries, so a policy of 3 attempts turns into 3× load exactly
//! when the dependency can least take it. A budget is shared by all calls of
//! a client and caps retries at a small share of real traffic: once it is
//! spent, a failed call stops at once with reason `budget` — no sleep, no
//! retry — and the first attempt of a call is never blocked by a budget.
//!
//! Four kinds, one file each:
//!
//! | kind | rule | defaults |
//! |---|---|---|
//! | [`RatioBudget`] (Google SRE, Finagle) | retry iff `retries_in_window + 1 ≤ floor + ratio · requests_in_window`; the floor follows the client's traffic | 10 %, 10 s, floor 0.1 per request, between 1 and 10 |
//! | [`TokenBucket`] (gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) throttling) | −1 per failure, +ratio per success, retry iff tokens > max/2 | max 10, ratio 0.1 |
//! | [`RefillBudget`] | a retry spends 1 token, a success adds `ratio`, empty ⇒ fail fast | capacity 10, ratio 0.1 |
//! | [`QuotaBudget`] (AWS standard) | a retry costs 5 (timeout 10); success refunds 1, or the last cost after retries | capacity 500 |
//!
//! Every kind is a cheap [`Clone`] handle to shared state (an `Arc` of
//! atomics): lock-free, no allocation per call, a fixed size whatever the
//! traffic, and arithmetic in integers (ratios in parts per million, tokens
//! in thousandths) so a 60 % budget allows 6 retries in 10 requests, not 10.
//! The check and the withdrawal are one compare-and-swap, so two threads
//! can never both take the last token.
//!
//! ```
//! use stagger::guardrails::budget::{Budget, RatioBudget, RatioBudgetConfig};
//! use stagger::Failure;
//! use std::time::Instant;
//!
//! let budget = RatioBudget::new(RatioBudgetConfig { ratio: 0.5, floor: 0, ..Default::default() })?;
//! let now = Instant::now();
//! for _ in 0..4 {
//!     budget.on_request(now);
//! }
//! let failure = Failure::transient();
//! assert!(budget.try_withdraw(&failure, now).is_some());
//! assert!(budget.try_withdraw(&failure, now).is_some());
//! assert!(budget.try_withdraw(&failure, now).is_none(), "50 % of 4 requests is 2 retries");
//! # Ok::<(), stagger::ConfigError>(())
//! ```

use std::fmt;
use std::time::Instant;

use crate::outcome::error::ConfigError;
use crate::outcome::Failure;

mod quota;
mod ratio;
mod refill;
mod token_bucket;

#[cfg(all(test, loom))]
mod loom;

pub use quota::{QuotaBudget, QuotaBudgetConfig};
pub use ratio::{RatioBudget, RatioBudgetConfig};
pub use refill::{RefillBudget, RefillBudgetConfig};
pub use token_bucket::{TokenBucket, TokenBucketConfig};

/// What one retry took from a budget, in the budget's own unit (one retry
/// for [`RatioBudget`], thousandths of a token for [`TokenBucket`] and
/// [`RefillBudget`], capacity units for [`QuotaBudget`]). The engine keeps
/// it in the call so a later success can refund it.
///
/// ```
/// use stagger::guardrails::budget::{Budget, QuotaBudget};
/// use stagger::Failure;
/// use std::time::Instant;
///
/// let quota = QuotaBudget::default();
/// let spent = quota.try_withdraw(&Failure::timeout(), Instant::now()).unwrap();
/// assert_eq!(spent.cost(), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Withdrawal(u32);

impl Withdrawal {
    /// A withdrawal of `cost` units.
    pub const fn new(cost: u32) -> Self {
        Withdrawal(cost)
    }

    /// The units withdrawn.
    pub const fn cost(self) -> u32 {
        self.0
    }
}

/// A retry budget shared by every call of a client.
///
/// The engine calls [`on_request`](Budget::on_request) when a call's first
/// attempt is admitted, [`on_failure`](Budget::on_failure) and
/// [`on_success`](Budget::on_success) after every attempt, and
/// [`try_withdraw`](Budget::try_withdraw) before every retry — never before
/// a first attempt. Implementations must be cheap and must not block.
///
/// ```
/// use stagger::guardrails::budget::{Budget, Withdrawal};
/// use stagger::Failure;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::time::Instant;
///
/// /// At most `n` retries, ever.
/// #[derive(Debug)]
/// struct Fixed(AtomicU32);
///
/// impl Budget for Fixed {
///     fn kind(&self) -> &'static str { "fixed" }
///     fn try_withdraw(&self, _: &Failure, _: Instant) -> Option<Withdrawal> {
///         self.0
///             .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
///             .ok()
///             .map(|_| Withdrawal::new(1))
///     }
/// }
///
/// let b = Fixed(AtomicU32::new(1));
/// assert!(b.try_withdraw(&Failure::transient(), Instant::now()).is_some());
/// assert!(b.try_withdraw(&Failure::transient(), Instant::now()).is_none());
/// ```
pub trait Budget: Send + Sync + fmt::Debug {
    /// A short name for metrics and logs (`ratio`, `token_bucket`, …).
    fn kind(&self) -> &'static str;

    /// A call's first attempt was admitted (a logical request).
    fn on_request(&self, now: Instant) {
        let _ = now;
    }

    /// An attempt failed with `failure`.
    fn on_failure(&self, failure: &Failure, now: Instant) {
        let _ = (failure, now);
    }

    /// An attempt succeeded. `spent` is what the call's last retry withdrew,
    /// or `None` when it succeeded at its first attempt.
    fn on_success(&self, spent: Option<Withdrawal>, now: Instant) {
        let _ = (spent, now);
    }

    /// Checks and withdraws, atomically, what one retry after `failure`
    /// costs; `None` refuses the retry.
    fn try_withdraw(&self, failure: &Failure, now: Instant) -> Option<Withdrawal>;
}

/// Whether a failure counts against failure-driven budgets: see
/// [`Failure::counts_against_dependency`] (a failure that could clear, or a
/// server's explicit "do not retry", as gRPC's throttling charges it).
#[inline]
pub(crate) fn qualifies(failure: &Failure) -> bool {
    failure.counts_against_dependency()
}

/// `x` in thousandths, checked to be finite and within `[min, max]`.
pub(crate) fn thousandths(
    field: &'static str,
    x: f64,
    min: f64,
    max: f64,
) -> Result<u64, ConfigError> {
    scaled(field, x, min, max, 1_000.0)
}

/// `x` scaled by `scale` and rounded, checked to be finite and within
/// `[min, max]`.
pub(crate) fn scaled(
    field: &'static str,
    x: f64,
    min: f64,
    max: f64,
    scale: f64,
) -> Result<u64, ConfigError> {
    if !x.is_finite() {
        return Err(ConfigError::new(field, "must be a finite number"));
    }
    if x < min || x > max {
        return Err(ConfigError::new(
            field,
            format!("must be between {min} and {max}, got {x}"),
        ));
    }
    Ok((x * scale).round() as u64)
}

/// Adds `n` to `t` in `cell`, capped at `max`, with no write when already
/// full (a full bucket stays a read-only cache line).
#[inline]
pub(crate) fn refill(cell: &crate::guardrails::sync::AtomicU64, n: u64, max: u64) {
    use crate::guardrails::sync::Ordering::{AcqRel, Acquire};
    let mut t = cell.load(Acquire);
    loop {
        if t >= max || n == 0 {
            return;
        }
        let new = t.saturating_add(n).min(max);
        match cell.compare_exchange_weak(t, new, AcqRel, Acquire) {
            Ok(_) => return,
            Err(seen) => t = seen,
        }
    }
}

/// Takes `n` from `cell` if it holds at least `n`.
#[inline]
pub(crate) fn take(cell: &crate::guardrails::sync::AtomicU64, n: u64) -> bool {
    use crate::guardrails::sync::Ordering::{AcqRel, Acquire};
    let mut t = cell.load(Acquire);
    loop {
        if t < n {
            return false;
        }
        match cell.compare_exchange_weak(t, t - n, AcqRel, Acquire) {
            Ok(_) => return true,
            Err(seen) => t = seen,
        }
    }
}
