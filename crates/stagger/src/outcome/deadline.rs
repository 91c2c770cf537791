//! Deadlines: one budget of time over every attempt of a call.
//!
//! A deadline is absolute and covers the whole call, waits included. Before
//! sleeping `d` the engine stops if `now + d + typical_attempt ≥ deadline`
//! — there is no point waking up with too little time left for an attempt to
//! succeed — and each attempt's timeout is `min(attempt_timeout, remaining)`.
//! The remaining time travels downstream so the next service does not work
//! on a request its caller has already given up on: as `grpc-timeout` for
//! gRPC and `x-request-timeout-ms` for HTTP.
//!
//! ```
//! use stagger::deadline::format_grpc_timeout;
//! use stagger::{Call, Policy};
//! use std::time::{Duration, Instant};
//!
//! // Each attempt's timeout is min(attempt_timeout, remaining).
//! let policy = Policy::builder().attempt_timeout(Duration::from_secs(1)).build().unwrap();
//! let now = Instant::now();
//! let mut call = Call::new().deadline(now + Duration::from_millis(700));
//! assert_eq!(policy.start_attempt(&mut call, now), Ok(Some(Duration::from_millis(700))));
//!
//! // The finest unit that fits in 8 digits.
//! assert_eq!(format_grpc_timeout(Duration::from_millis(1500)), "1500000u");
//! assert_eq!(format_grpc_timeout(Duration::from_secs(200)), "200000m");
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time left before `deadline` (zero once it has passed).
#[inline]
pub(crate) fn remaining(deadline: Instant, now: Instant) -> Duration {
    deadline.saturating_duration_since(now)
}

/// A call's deadline: the earliest of the absolute `deadlines` and of
/// `now + t` for each relative timeout in `timeouts` (the clock is read
/// only if one is given; a timeout past what a clock can hold bounds
/// nothing). `None` when none bounds the call. Every front-end's deadline
/// comes from here: the caller's, the method's or layer's own, and the
/// inbound request's, whichever ends first.
pub(crate) fn earliest(
    deadlines: &[Option<Instant>],
    timeouts: &[Option<Duration>],
    now: impl FnOnce() -> Instant,
) -> Option<Instant> {
    let absolute = deadlines.iter().flatten().min().copied();
    if timeouts.iter().all(Option::is_none) {
        return absolute;
    }
    let now = now();
    let relative = timeouts
        .iter()
        .flatten()
        .filter_map(|t| now.checked_add(*t))
        .min();
    match (absolute, relative) {
        (Some(a), Some(r)) => Some(a.min(r)),
        (a, r) => a.or(r),
    }
}

/// The timeout of the next attempt: `min(attempt_timeout, remaining)`, or
/// `None` when neither bounds it.
#[inline]
pub(crate) fn attempt_timeout(
    attempt_timeout: Option<Duration>,
    deadline: Option<Instant>,
    now: Instant,
) -> Option<Duration> {
    match (attempt_timeout, deadline) {
        (None, None) => None,
        (Some(t), None) => Some(t),
        (None, Some(d)) => Some(remaining(d, now)),
        (Some(t), Some(d)) => Some(t.min(remaining(d, now))),
    }
}

/// A running estimate of how long an attempt takes: an
/// exponentially weighted mean (weight 1/8) of the latencies it is shown,
/// shared by every call of a policy. Lock-free; a racing update may be lost,
/// which only makes the estimate a little slower to move.
#[derive(Debug, Default)]
pub(crate) struct LatencyEstimate {
    mean_ns: AtomicU64,
}

impl LatencyEstimate {
    /// An estimate with no samples yet (reads as zero).
    pub const fn new() -> Self {
        LatencyEstimate {
            mean_ns: AtomicU64::new(0),
        }
    }

    /// Adds one finished attempt's latency.
    pub fn observe(&self, latency: Duration) {
        let x = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let old = self.mean_ns.load(Ordering::Relaxed);
        let new = if old == 0 {
            x
        } else if x >= old {
            old + (x - old) / 8
        } else {
            old - (old - x) / 8
        };
        self.mean_ns.store(new.max(1), Ordering::Relaxed);
    }

    /// The current estimate (zero before the first sample).
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.mean_ns.load(Ordering::Relaxed))
    }
}

/// The header that carries the remaining time of an HTTP call, in whole
/// milliseconds.
#[cfg(feature = "http")]
pub(crate) const REQUEST_TIMEOUT_HEADER: &str = "x-request-timeout-ms";

/// Formats a remaining time for `x-request-timeout-ms` (whole milliseconds,
/// rounded down).
#[cfg(any(test, fuzzing))]
pub(crate) fn format_timeout_ms(remaining: Duration) -> String {
    remaining.as_millis().to_string()
}

/// Parses `x-request-timeout-ms`: ASCII digits only, else `None`. Leading
/// zeros are allowed whatever their number; a value of more than 12
/// significant digits (over 31 years) is refused as nonsense rather than
/// taken as "no deadline".
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn parse_timeout_ms(value: &str) -> Option<Duration> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = v.trim_start_matches('0');
    if significant.len() > 12 {
        return None;
    }
    Some(Duration::from_millis(significant.parse().unwrap_or(0)))
}

/// Formats `grpc-timeout`: at most 8 digits and a unit (`n u m S M H`),
/// choosing the finest unit that fits and rounding down.
pub fn format_grpc_timeout(remaining: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let ns = remaining.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (per, unit) in units {
        let v = ns / per;
        if v <= MAX {
            return format!("{v}{unit}");
        }
    }
    format!("{MAX}H")
}

/// Parses `grpc-timeout` (1 to 8 ASCII digits then one of `H M S m u n`),
/// else `None`.
#[cfg(any(feature = "http", test, fuzzing))]
pub(crate) fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let v = value.trim_matches(|c| c == ' ' || c == '\t');
    let unit_at = v.len().checked_sub(1)?;
    if !v.is_char_boundary(unit_at) {
        return None;
    }
    let (digits, unit) = v.split_at(unit_at);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let d = match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_deadline_wins_and_the_clock_is_read_only_for_a_timeout() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let never = || -> Instant { panic!("no timeout: the clock must not be read") };
        assert_eq!(earliest(&[None, None], &[None], never), None);
        assert_eq!(
            earliest(&[Some(t0 + s(5)), Some(t0 + s(3))], &[None], never),
            Some(t0 + s(3))
        );
        assert_eq!(
            earliest(&[Some(t0 + s(5))], &[Some(s(2)), Some(s(9))], || t0),
            Some(t0 + s(2))
        );
        assert_eq!(
            earliest(&[Some(t0 + s(1))], &[Some(s(2))], || t0),
            Some(t0 + s(1))
        );
        // A timeout past what a clock holds bounds nothing.
        assert_eq!(earliest(&[None], &[Some(Duration::MAX)], || t0), None);
    }

    #[test]
    fn attempt_timeout_is_the_smaller_bound() {
        let now = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(attempt_timeout(None, None, now), None);
        assert_eq!(attempt_timeout(Some(s(2)), None, now), Some(s(2)));
        assert_eq!(
            attempt_timeout(Some(s(2)), Some(now + s(5)), now),
            Some(s(2))
        );
        assert_eq!(
            attempt_timeout(Some(s(9)), Some(now + s(5)), now),
            Some(s(5))
        );
        assert_eq!(
            attempt_timeout(None, Some(now), now + s(1)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn estimate_moves_toward_samples() {
        let e = LatencyEstimate::new();
        assert_eq!(e.get(), Duration::ZERO);
        e.observe(Duration::from_millis(80));
        assert_eq!(e.get(), Duration::from_millis(80));
        for _ in 0..100 {
            e.observe(Duration::from_millis(160));
        }
        let got = e.get().as_millis();
        assert!((159..=160).contains(&got), "{got}");
    }

    #[test]
    fn grpc_timeout_round_trips_within_unit() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos(7),
            Duration::from_millis(1500),
            Duration::from_secs(86_400 * 365),
            Duration::MAX,
        ] {
            let s = format_grpc_timeout(d);
            let back = parse_grpc_timeout(&s).unwrap();
            assert!(back <= d, "{s}");
        }
        for bad in ["", "m", "123456789m", "5x", "-5m", "5 m", "١m", "5١"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timeout_ms_header() {
        assert_eq!(parse_timeout_ms("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout_ms("0"), Some(Duration::ZERO));
        assert_eq!(format_timeout_ms(Duration::from_micros(2500)), "2");
        for bad in ["", "-1", "1.5", "1e3", "9999999999999"] {
            assert_eq!(parse_timeout_ms(bad), None, "{bad:?}");
        }
    }
}
