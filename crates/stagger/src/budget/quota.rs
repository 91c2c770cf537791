//! The AWS SDKs' "standard" retry quota.
//!
//! A client holds a quota of 500 units. A retry costs 5, or 10 when the
//! failure was a timeout (the result is unknown and the dependency is
//! probably slow, so retrying it is dearer); a call that succeeds at its
//! first attempt pays 1 back, and a call that succeeds after retries pays
//! back what its last retry cost. A retry that finds too little left is not
//! made. The check and the withdrawal are one compare-and-swap.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use super::{refill, take, Budget, Withdrawal};
use crate::error::ConfigError;
use crate::outcome::{Class, Failure};
use crate::sync::{AtomicU64, Ordering::*, Padded};

/// AWS's standard retry quota (docs/behaviour.md §5 `quota`). Cheap to clone; clones
/// share the quota.
///
/// ```
/// use stagger::budget::{Budget, QuotaBudget};
/// use stagger::Failure;
/// use std::time::Instant;
///
/// let q = QuotaBudget::default();
/// let now = Instant::now();
/// let a = q.try_withdraw(&Failure::transient(), now).unwrap();
/// assert_eq!(q.available(), 495);
/// let b = q.try_withdraw(&Failure::timeout(), now).unwrap();
/// assert_eq!(q.available(), 485);
/// q.on_success(Some(b), now); // the call that retried after a timeout succeeded
/// assert_eq!(q.available(), 495);
/// # let _ = a;
/// ```
#[derive(Clone)]
pub struct QuotaBudget {
    inner: Arc<Inner>,
}

struct Inner {
    left: Padded<AtomicU64>,
    capacity: u64,
    retry_cost: u64,
    timeout_cost: u64,
    success_refund: u64,
}

impl fmt::Debug for QuotaBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaBudget")
            .field("available", &self.available())
            .field("capacity", &self.inner.capacity)
            .field("retry_cost", &self.inner.retry_cost)
            .field("timeout_cost", &self.inner.timeout_cost)
            .field("success_refund", &self.inner.success_refund)
            .finish()
    }
}

impl Default for QuotaBudget {
    /// Capacity 500, retry 5, timeout retry 10, first-attempt success +1.
    fn default() -> Self {
        QuotaBudgetBuilder::new().build_unchecked()
    }
}

impl QuotaBudget {
    /// A builder starting from the AWS defaults.
    pub const fn builder() -> QuotaBudgetBuilder {
        QuotaBudgetBuilder::new()
    }

    /// Units left.
    pub fn available(&self) -> u64 {
        self.inner.left.load(Acquire)
    }

    /// What a retry after `failure` costs.
    pub(crate) fn cost_of(&self, failure: &Failure) -> u64 {
        if failure.class == Class::Unknown {
            self.inner.timeout_cost
        } else {
            self.inner.retry_cost
        }
    }
}

impl Budget for QuotaBudget {
    fn kind(&self) -> &'static str {
        "quota"
    }

    #[inline]
    fn on_success(&self, spent: Option<Withdrawal>, _now: Instant) {
        let refund = spent.map_or(self.inner.success_refund, |w| u64::from(w.cost()));
        refill(&self.inner.left, refund, self.inner.capacity);
    }

    #[inline]
    fn try_withdraw(&self, failure: &Failure, _now: Instant) -> Option<Withdrawal> {
        let cost = self.cost_of(failure);
        take(&self.inner.left, cost).then_some(Withdrawal(cost as u32))
    }
}

/// Configures a [`QuotaBudget`]: a capacity of at least 1, costs in
/// `[1, capacity]`, a first-attempt refund in `[0, capacity]`.
///
/// ```
/// use stagger::budget::QuotaBudget;
/// let q = QuotaBudget::builder().capacity(100).retry_cost(2).build()?;
/// assert_eq!(q.available(), 100);
/// assert_eq!(QuotaBudget::builder().retry_cost(0).build().unwrap_err().field(), "retry_cost");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct QuotaBudgetBuilder {
    capacity: u32,
    retry_cost: u32,
    timeout_cost: u32,
    success_refund: u32,
}

impl Default for QuotaBudgetBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl QuotaBudgetBuilder {
    /// The AWS defaults: 500, 5, 10, 1.
    pub(crate) const fn new() -> Self {
        QuotaBudgetBuilder {
            capacity: 500,
            retry_cost: 5,
            timeout_cost: 10,
            success_refund: 1,
        }
    }

    /// The quota's size and starting amount.
    pub const fn capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// What a retry costs.
    pub const fn retry_cost(mut self, cost: u32) -> Self {
        self.retry_cost = cost;
        self
    }

    /// What a retry after a timeout (an unknown result) costs.
    pub const fn timeout_cost(mut self, cost: u32) -> Self {
        self.timeout_cost = cost;
        self
    }

    /// What a call that succeeds at its first attempt pays back.
    pub const fn success_refund(mut self, refund: u32) -> Self {
        self.success_refund = refund;
        self
    }

    /// Validates and builds.
    pub fn build(self) -> Result<QuotaBudget, ConfigError> {
        if self.capacity == 0 {
            return Err(ConfigError::new("capacity", "must be at least 1"));
        }
        for (field, cost) in [
            ("retry_cost", self.retry_cost),
            ("timeout_cost", self.timeout_cost),
        ] {
            if cost == 0 || cost > self.capacity {
                return Err(ConfigError::new(field, "must be between 1 and capacity"));
            }
            // A call remembers its last cost in 31 bits of its ticket.
            if cost > (1 << 31) - 1 {
                return Err(ConfigError::new(field, "must be below 2^31"));
            }
        }
        if self.success_refund > self.capacity {
            return Err(ConfigError::new(
                "success_refund",
                "must be at most capacity",
            ));
        }
        Ok(self.build_unchecked())
    }

    fn build_unchecked(self) -> QuotaBudget {
        QuotaBudget {
            inner: Arc::new(Inner {
                left: Padded(AtomicU64::new(u64::from(self.capacity))),
                capacity: u64::from(self.capacity),
                retry_cost: u64::from(self.retry_cost),
                timeout_cost: u64::from(self.timeout_cost),
                success_refund: u64::from(self.success_refund),
            }),
        }
    }
}
