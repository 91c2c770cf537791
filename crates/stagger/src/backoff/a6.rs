//! gRPC's retry design ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)) in numbers: every constant A6 fixes is defined
//! here once, and the service-config import, the gRPC layer and the audit
//! read it from here.
//!
//! The values are the ones grpc-go and grpc-java apply today:
//! - `maxAttempts` above 5 is silently treated as 5, for retries and for
//!   hedging alike;
//! - the delay before retry n is `min(initialBackoff · multiplier^(n-1),
//!   maxBackoff)` scaled by `U(0.8, 1.2)` (the ±20 % jitter A6 adopted in
//!   2024);
//! - a client retries transparently (an attempt that never left it) at most
//!   10 times per call, outside `maxAttempts`;
//! - `retryThrottling.maxTokens` is in (0, 1000] and both it and
//!   `tokenRatio` keep three decimals: further digits are dropped, not
//!   rounded.

// Without the service-config import or the gRPC layer only the token
// arithmetic is used.
#![cfg_attr(not(any(feature = "serde", feature = "grpc")), allow(dead_code))]

use crate::backoff::Jitter;

/// [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s ceiling on `maxAttempts` (retries and hedges): larger values are
/// treated as this.
pub const MAX_ATTEMPTS: u32 = 5;

/// [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s jitter: each capped backoff scaled by `U(0.8, 1.2)`.
pub const JITTER: Jitter = Jitter::Proportional(0.2);

/// Transparent retries per call (attempts that never left the client),
/// counted apart from `maxAttempts`.
pub const MAX_TRANSPARENT_RETRIES: u32 = 10;

/// The largest `retryThrottling.maxTokens`.
pub(crate) const MAX_TOKENS: f64 = 1000.0;

/// `maxAttempts` as a client applies it: values above [`MAX_ATTEMPTS`]
/// count as [`MAX_ATTEMPTS`].
pub(crate) fn effective_attempts(n: u64) -> u32 {
    u32::try_from(n.min(u64::from(MAX_ATTEMPTS))).unwrap_or(MAX_ATTEMPTS)
}

/// A token count in thousandths with the digits past the third decimal
/// dropped ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md): "0.5466" is 0.546, not 0.547). `None` for a value that is
/// not a finite non-negative number or does not fit.
pub(crate) fn truncated_thousandths(x: f64) -> Option<u64> {
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    // A decimal such as 0.546 is stored a hair below itself in binary
    // (0.54599999…); a tolerance far below a thousandth keeps it whole.
    let scaled = x * 1000.0;
    let t = (scaled + 1e-6).floor();
    (t <= u64::MAX as f64 / 2.0).then_some(t as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_digits_past_the_third_are_dropped_not_rounded() {
        assert_eq!(truncated_thousandths(0.5466), Some(546));
        assert_eq!(truncated_thousandths(0.546), Some(546));
        assert_eq!(truncated_thousandths(0.1), Some(100));
        assert_eq!(truncated_thousandths(0.0009), Some(0));
        assert_eq!(truncated_thousandths(999.9999), Some(999_999));
        assert_eq!(truncated_thousandths(-1.0), None);
        assert_eq!(truncated_thousandths(f64::NAN), None);
    }

    #[test]
    fn attempts_above_five_count_as_five() {
        assert_eq!(effective_attempts(2), 2);
        assert_eq!(effective_attempts(5), 5);
        assert_eq!(effective_attempts(10), 5);
        assert_eq!(effective_attempts(u64::MAX), 5);
    }
}
