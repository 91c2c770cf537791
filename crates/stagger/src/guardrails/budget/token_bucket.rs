//! gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) retry throttling as a budget.
//!
//! gRPC's retry design (proposal A6) throttles a channel's retries with a
//! token count: it starts full at `max_tokens`, every qualifying failure
//! (one the policy would retry) takes 1 token (never below 0), every success
//! gives back `token_ratio` (never above `max_tokens`), and a retry is made
//! only while the count is *strictly above* `max_tokens / 2`. Retries do not
//! spend tokens themselves: failures do. The count is kept in thousandths
//! in one atomic word, as A6 asks (`token_ratio` has at most three decimal
//! places), so the threshold test is exact: `2 · tokens > max_tokens`.
//! No other Rust crate implements it.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use super::{qualifies, refill, Budget, Withdrawal};
use crate::guardrails::sync::{AtomicU64, Ordering::*, Padded};
use crate::outcome::error::ConfigError;
use crate::outcome::Failure;

/// The gRPC [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) token bucket (docs/behaviour.md §5 `token_bucket`). Cheap to clone; clones
/// share the bucket.
///
/// ```
/// use stagger::guardrails::budget::{Budget, TokenBucket};
/// use stagger::Failure;
/// use std::time::Instant;
///
/// let bucket = TokenBucket::default(); // max 10, ratio 0.1
/// let (now, f) = (Instant::now(), Failure::transient());
/// for _ in 0..5 {
///     bucket.on_failure(&f, now); // 10 → 5 tokens
/// }
/// assert!(bucket.try_withdraw(&f, now).is_none(), "5 is not above 10/2");
/// bucket.on_success(None, now); // 5.1
/// assert!(bucket.try_withdraw(&f, now).is_some());
/// ```
#[derive(Clone)]
pub struct TokenBucket {
    inner: Arc<Inner>,
}

struct Inner {
    /// Tokens, in thousandths.
    tokens: Padded<AtomicU64>,
    max: u64,
    ratio: u64,
}

impl fmt::Debug for TokenBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("tokens_milli", &self.tokens_milli())
            .field("max_milli", &self.inner.max)
            .field("ratio_milli", &self.inner.ratio)
            .finish()
    }
}

impl Default for TokenBucket {
    /// `max_tokens` 10, `token_ratio` 0.1.
    fn default() -> Self {
        TokenBucket::with_milli(10_000, 100)
    }
}

impl TokenBucket {
    /// Validates `config` and builds the bucket; the error names the first
    /// bad field. Both numbers keep three decimals, further digits dropped
    /// (A6: a `token_ratio` of 0.5466 is 0.546); the ratio may exceed
    /// `max_tokens` (one success then refills the bucket).
    ///
    /// ```
    /// use stagger::guardrails::budget::{TokenBucket, TokenBucketConfig};
    /// let b = TokenBucket::new(TokenBucketConfig { max_tokens: 100.0, token_ratio: 0.5 })?;
    /// assert_eq!(b.tokens_milli(), 100_000);
    /// let bad = TokenBucketConfig { max_tokens: 0.0, ..Default::default() };
    /// assert_eq!(TokenBucket::new(bad).unwrap_err().field(), "max_tokens");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new(config: TokenBucketConfig) -> Result<Self, ConfigError> {
        config.build()
    }

    fn with_milli(max: u64, ratio: u64) -> Self {
        TokenBucket {
            inner: Arc::new(Inner {
                tokens: Padded(AtomicU64::new(max)),
                max,
                ratio,
            }),
        }
    }

    /// The current tokens, in thousandths.
    pub fn tokens_milli(&self) -> u64 {
        self.inner.tokens.load(Acquire)
    }

    /// `max_tokens`, in thousandths.
    pub fn max_milli(&self) -> u64 {
        self.inner.max
    }

    /// Whether a retry would be allowed now (tokens > max/2).
    #[inline]
    pub(crate) fn allows_retry(&self) -> bool {
        self.inner.tokens.load(Acquire) * 2 > self.inner.max
    }
}

impl Budget for TokenBucket {
    fn kind(&self) -> &'static str {
        "token_bucket"
    }

    #[inline]
    fn on_failure(&self, failure: &Failure, _now: Instant) {
        // A6 charges the failures a client would retry (or was told not
        // to); the caller's own deadline is not the server's doing.
        if !qualifies(failure) || failure.past_deadline {
            return;
        }
        let cell = &self.inner.tokens;
        let mut t = cell.load(Acquire);
        while t > 0 {
            match cell.compare_exchange_weak(t, t.saturating_sub(1_000), AcqRel, Acquire) {
                Ok(_) => return,
                Err(seen) => t = seen,
            }
        }
    }

    #[inline]
    fn on_success(&self, _spent: Option<Withdrawal>, _now: Instant) {
        refill(&self.inner.tokens, self.inner.ratio, self.inner.max);
    }

    #[inline]
    fn try_withdraw(&self, _failure: &Failure, _now: Instant) -> Option<Withdrawal> {
        self.allows_retry().then_some(Withdrawal(0))
    }
}

/// The settings of a [`TokenBucket`], checked by [`TokenBucket::new`] with
/// [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s
/// limits: `max_tokens` in `(0, 1000]`, `token_ratio` positive (it may
/// exceed `max_tokens`), each kept to three decimals with further digits
/// dropped. [`Default`] gives `max_tokens` 10, `token_ratio` 0.1.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucketConfig {
    /// The bucket's size and starting count.
    pub max_tokens: f64,
    /// Tokens given back per success.
    pub token_ratio: f64,
}

impl Default for TokenBucketConfig {
    fn default() -> Self {
        TokenBucketConfig {
            max_tokens: 10.0,
            token_ratio: 0.1,
        }
    }
}

impl TokenBucketConfig {
    fn build(self) -> Result<TokenBucket, ConfigError> {
        let milli = |field: &'static str, x: f64, max: f64| {
            if !(x.is_finite() && x > 0.0 && x <= max) {
                return Err(ConfigError::new(
                    field,
                    format!("must be in (0, {max}], got {x}"),
                ));
            }
            crate::backoff::a6::truncated_thousandths(x)
                .filter(|m| *m > 0)
                .ok_or_else(|| {
                    ConfigError::new(field, "must be at least 0.001 (A6 keeps three decimals)")
                })
        };
        let max = milli(
            "max_tokens",
            self.max_tokens,
            crate::backoff::a6::MAX_TOKENS,
        )?;
        let ratio = milli("token_ratio", self.token_ratio, f64::MAX)?;
        Ok(TokenBucket::with_milli(max, ratio))
    }
}
