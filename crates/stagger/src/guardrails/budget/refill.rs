//! The refill budget: a bucket of retry tokens that refills from
//! successes.
//!
//! Each retry spends one token; each success adds `ratio` of a token (up to
//! the capacity); an empty bucket fails fast. At ratio 0.1, retries can add
//! at most about 10 % load however long an outage lasts, and the full
//! bucket lets a healthy client ride out a short blip. Tokens are kept in
//! thousandths in one atomic word; the check and the spend are one
//! compare-and-swap.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use super::{refill, take, thousandths, Budget, Withdrawal};
use crate::guardrails::sync::{AtomicU64, Ordering::*, Padded};
use crate::outcome::error::ConfigError;
use crate::outcome::Failure;

/// A retry spends 1 token, a success adds `ratio`; starts full (docs/behaviour.md §5
/// `refill`). Cheap to clone; clones share the bucket.
///
/// ```
/// use stagger::guardrails::budget::{Budget, RefillBudget, RefillBudgetConfig};
/// use stagger::Failure;
/// use std::time::Instant;
///
/// let b = RefillBudget::new(RefillBudgetConfig { capacity: 2.0, ratio: 0.5 })?;
/// let (now, f) = (Instant::now(), Failure::transient());
/// assert!(b.try_withdraw(&f, now).is_some());
/// assert!(b.try_withdraw(&f, now).is_some());
/// assert!(b.try_withdraw(&f, now).is_none(), "empty: fail fast");
/// b.on_success(None, now);
/// b.on_success(None, now); // two successes at 0.5 buy one retry
/// assert!(b.try_withdraw(&f, now).is_some());
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RefillBudget {
    inner: Arc<Inner>,
}

struct Inner {
    tokens: Padded<AtomicU64>,
    capacity: u64,
    ratio: u64,
}

impl fmt::Debug for RefillBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefillBudget")
            .field("tokens_milli", &self.tokens_milli())
            .field("capacity_milli", &self.inner.capacity)
            .field("ratio_milli", &self.inner.ratio)
            .finish()
    }
}

impl Default for RefillBudget {
    /// Capacity 10, ratio 0.1.
    fn default() -> Self {
        RefillBudget::with_milli(10_000, 100)
    }
}

impl RefillBudget {
    /// Validates `config` and builds the bucket; the error names the first
    /// bad field.
    ///
    /// ```
    /// use stagger::guardrails::budget::{RefillBudget, RefillBudgetConfig};
    /// let bad = RefillBudgetConfig { ratio: -1.0, ..Default::default() };
    /// assert_eq!(RefillBudget::new(bad).unwrap_err().field(), "ratio");
    /// ```
    pub fn new(config: RefillBudgetConfig) -> Result<Self, ConfigError> {
        config.build()
    }

    fn with_milli(capacity: u64, ratio: u64) -> Self {
        RefillBudget {
            inner: Arc::new(Inner {
                tokens: Padded(AtomicU64::new(capacity)),
                capacity,
                ratio,
            }),
        }
    }

    /// The tokens left, in thousandths.
    pub fn tokens_milli(&self) -> u64 {
        self.inner.tokens.load(Acquire)
    }
}

impl Budget for RefillBudget {
    fn kind(&self) -> &'static str {
        "refill"
    }

    #[inline]
    fn on_success(&self, _spent: Option<Withdrawal>, _now: Instant) {
        refill(&self.inner.tokens, self.inner.ratio, self.inner.capacity);
    }

    #[inline]
    fn try_withdraw(&self, _failure: &Failure, _now: Instant) -> Option<Withdrawal> {
        take(&self.inner.tokens, 1_000).then_some(Withdrawal(1_000))
    }
}

/// The settings of a [`RefillBudget`], checked by [`RefillBudget::new`]:
/// `capacity` in `[1, 10¹²]` tokens, `ratio` in `[0, capacity]` tokens per
/// success (kept in thousandths). [`Default`] gives capacity 10, ratio 0.1.
#[derive(Debug, Clone, Copy)]
pub struct RefillBudgetConfig {
    /// The bucket's size and starting count, in tokens (one per retry).
    pub capacity: f64,
    /// Tokens added per success.
    pub ratio: f64,
}

impl Default for RefillBudgetConfig {
    fn default() -> Self {
        RefillBudgetConfig {
            capacity: 10.0,
            ratio: 0.1,
        }
    }
}

impl RefillBudgetConfig {
    fn build(self) -> Result<RefillBudget, ConfigError> {
        let capacity = thousandths("capacity", self.capacity, 1.0, 1e12)?;
        let ratio = thousandths("ratio", self.ratio, 0.0, self.capacity)?;
        Ok(RefillBudget::with_milli(capacity, ratio))
    }
}
