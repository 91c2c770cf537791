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
use crate::guardrails::sync::{AtomicU64, Ordering::*, Padded};
use crate::outcome::error::ConfigError;
use crate::outcome::{Class, Failure};

/// AWS's standard retry quota (docs/behaviour.md §5 `quota`). Cheap to clone; clones
/// share the quota.
///
/// ```
/// use stagger::guardrails::budget::{Budget, QuotaBudget};
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
        QuotaBudgetConfig::default().build_unchecked()
    }
}

impl QuotaBudget {
    /// Validates `config` and builds the quota; the error names the first
    /// bad field.
    ///
    /// ```
    /// use stagger::guardrails::budget::{QuotaBudget, QuotaBudgetConfig};
    /// let q = QuotaBudget::new(QuotaBudgetConfig { capacity: 100, retry_cost: 2, ..Default::default() })?;
    /// assert_eq!(q.available(), 100);
    /// let bad = QuotaBudgetConfig { retry_cost: 0, ..Default::default() };
    /// assert_eq!(QuotaBudget::new(bad).unwrap_err().field(), "retry_cost");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new(config: QuotaBudgetConfig) -> Result<Self, ConfigError> {
        config.build()
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

/// The settings of a [`QuotaBudget`], checked by [`QuotaBudget::new`]: a
/// capacity of at least 1, costs in `[1, capacity]`, a first-attempt refund
/// in `[0, capacity]`. [`Default`] gives the AWS defaults: 500, 5, 10, 1.
#[derive(Debug, Clone, Copy)]
pub struct QuotaBudgetConfig {
    /// The quota's size and starting amount.
    pub capacity: u32,
    /// What a retry costs.
    pub retry_cost: u32,
    /// What a retry after a timeout (an unknown result) costs.
    pub timeout_cost: u32,
    /// What a call that succeeds at its first attempt pays back.
    pub success_refund: u32,
}

impl Default for QuotaBudgetConfig {
    fn default() -> Self {
        QuotaBudgetConfig {
            capacity: 500,
            retry_cost: 5,
            timeout_cost: 10,
            success_refund: 1,
        }
    }
}

impl QuotaBudgetConfig {
    fn build(self) -> Result<QuotaBudget, ConfigError> {
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
