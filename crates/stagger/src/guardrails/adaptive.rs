//! The AWS SDKs' adaptive client rate limiter: pace the sends, not only the
//! retries, of a client that a server throttles.
//!
//! Backoff spaces out the retries of one call; it does nothing about the
//! rate at which a busy client starts calls. Against an API that answers
//! 429 above a fixed rate, a client retrying with backoff goes on sending
//! at the rate being refused, and most of its work is throttles. The AWS
//! SDKs' *adaptive* retry mode adds a client-side token bucket in front of
//! every attempt whose rate follows TCP CUBIC: it cuts the rate to 0.7× the
//! measured send rate at each throttle and grows it back along a cubic
//! curve, waiting *before* sending, so the client settles on the rate the
//! server accepts.
//!
//! [`AdaptiveLimiter`] runs the algorithm exactly as botocore's
//! `ClientRateLimiter` does (checked against botocore's own classes by a
//! differential test), sans-IO: every method takes `now`, and a wait comes
//! back as a [`Duration`] for the caller to sleep.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How far a throttle cuts the rate (CUBIC's β).
const BETA: f64 = 0.7;
/// How fast the rate grows back (CUBIC's C).
const SCALE: f64 = 0.4;
/// The weight of the newest measurement of the send rate.
const SMOOTHING: f64 = 0.8;
/// Buckets per second of the send-rate measurement (0.5 s buckets).
const BUCKETS_PER_SECOND: f64 = 2.0;
/// The bucket never fills slower than this, tokens per second.
const MIN_FILL_RATE: f64 = 0.5;
/// The bucket always holds at least one token's room.
const MIN_CAPACITY: f64 = 1.0;
/// The new rate is never more than this times the measured send rate.
const MAX_RATE_SCALE: f64 = 2.0;

/// The error codes the AWS SDKs treat as throttling (botocore's
/// `ThrottledRetryableChecker`), matched exactly.
const THROTTLING_CODES: [&str; 14] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Whether an AWS-style error code is one the SDKs treat as a throttle
/// (`ThrottlingException`, `SlowDown`, `RequestLimitExceeded`…). With HTTP
/// 429 and gRPC `RESOURCE_EXHAUSTED`, and whatever else the caller's own
/// classifier names, it is what [`AdaptiveLimiter::record`] should be told
/// is a throttle.
///
/// ```
/// use stagger::guardrails::is_throttling_error_code;
/// assert!(is_throttling_error_code("ThrottlingException"));
/// assert!(!is_throttling_error_code("InternalError"));
/// ```
pub fn is_throttling_error_code(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// The adaptive client rate limiter of the AWS SDKs' adaptive retry mode,
/// shared by every call of one client (clones share it).
///
/// Call [`acquire`](Self::acquire) before every attempt, first attempts
/// included, and sleep what it returns; call [`record`](Self::record)
/// with every response, saying whether it was a throttle. Until the first
/// throttle the limiter only measures (every acquire returns at once);
/// from then on:
///
/// - **Measured send rate**: responses counted in 0.5 s buckets, smoothed
///   `0.8 · latest + 0.2 · previous`.
/// - **Rate** (CUBIC, β = 0.7, C = 0.4): a throttle sets
///   `W_max = min(measured, fill rate)` (the measured rate alone for the
///   first throttle), `K = ∛(W_max · (1 − β) / C)` and the rate to
///   `β · W_max`; a success sets it to `C · (t − t_throttle − K)³ + W_max`.
///   Either way it is capped at twice the measured rate.
/// - **Token bucket**: fills at `max(rate, 0.5)` tokens per second and
///   holds `max(rate, 1)`; each attempt takes one token, waiting for it if
///   the bucket is empty.
///
/// Time is measured from the limiter's creation (the send-rate buckets
/// start there).
///
/// ```
/// use stagger::guardrails::AdaptiveLimiter;
/// use std::time::{Duration, Instant};
///
/// let t0 = Instant::now();
/// let limiter = AdaptiveLimiter::new(t0);
/// assert_eq!(limiter.acquire(t0), Ok(()), "no throttle yet: no pacing");
/// // The server throttled a burst of 20 calls in its first second.
/// for i in 0..20 {
///     let at = t0 + Duration::from_millis(50 * i);
///     limiter.record(i >= 15, at);
/// }
/// let rate = limiter.snapshot().fill_rate;
/// assert!(rate < 20.0, "paced below the rate that was throttled: {rate}");
/// // Ten sends at once: each waits for its token.
/// let mut now = t0 + Duration::from_secs(1);
/// for _ in 0..10 {
///     while let Err(wait) = limiter.acquire(now) {
///         now += wait;
///     }
/// }
/// assert!(now > t0 + Duration::from_secs(1), "the sends were spread out");
/// ```
#[derive(Clone)]
pub struct AdaptiveLimiter {
    shared: Arc<Shared>,
}

struct Shared {
    origin: Instant,
    /// Set at the first throttle; read without the lock on every acquire.
    enabled: AtomicBool,
    state: Mutex<State>,
}

/// botocore's three parts (`CubicCalculator`, `RateClocker`,
/// `TokenBucket`) in one place, times in seconds since the origin.
#[derive(Debug, Clone, Copy)]
struct State {
    w_max: f64,
    k: f64,
    last_throttle: f64,
    measured: f64,
    last_bucket: f64,
    count: f64,
    fill_rate: f64,
    capacity: f64,
    tokens: f64,
    last_refill: f64,
    enabled: bool,
}

/// What the limiter holds at one moment (for a dashboard or a test).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LimiterSnapshot {
    /// Whether a throttle has been seen (before it, nothing waits).
    pub enabled: bool,
    /// Tokens added per second: the send rate the limiter allows.
    pub fill_rate: f64,
    /// The most tokens the bucket holds.
    pub capacity: f64,
    /// Tokens in the bucket at the last update.
    pub tokens: f64,
    /// The smoothed rate of responses, per second.
    pub measured_rate: f64,
}

impl fmt::Debug for AdaptiveLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AdaptiveLimiter")
            .field(&self.snapshot())
            .finish()
    }
}

impl AdaptiveLimiter {
    /// A limiter created at `now`: not yet enabled, the bucket empty with
    /// room for one token, filling at one per second.
    pub fn new(now: Instant) -> Self {
        let mut state = State {
            w_max: 0.0,
            k: 0.0,
            last_throttle: 0.0,
            measured: 0.0,
            last_bucket: 0.0,
            count: 0.0,
            fill_rate: 0.0,
            capacity: 0.0,
            tokens: 0.0,
            last_refill: 0.0,
            enabled: false,
        };
        state.set_rate(1.0, 0.0);
        AdaptiveLimiter {
            shared: Arc::new(Shared {
                origin: now,
                enabled: AtomicBool::new(false),
                state: Mutex::new(state),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state whole before it can panic (it
        // cannot: plain arithmetic), so a poisoned lock holds good numbers.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn seconds(&self, now: Instant) -> f64 {
        now.saturating_duration_since(self.shared.origin).as_nanos() as f64 / 1e9
    }

    /// Takes the token an attempt needs at `now`: `Ok` means send now;
    /// `Err(wait)` means the bucket is empty, so sleep `wait` (when the next
    /// token is due) and ask again, as botocore's waiting loop does. Before
    /// the first throttle it is always `Ok`.
    ///
    /// Nothing is reserved while a caller sleeps, so when the rate rises the
    /// first caller to ask again gets the token, and a caller whose
    /// deadline comes before `now + wait` can stop at once: the wait could
    /// not end in time.
    ///
    /// ```
    /// use stagger::guardrails::AdaptiveLimiter;
    /// use std::time::{Duration, Instant};
    ///
    /// let t0 = Instant::now();
    /// let limiter = AdaptiveLimiter::new(t0);
    /// assert_eq!(limiter.acquire(t0), Ok(()), "no throttle yet: no pacing");
    /// limiter.record(true, t0); // throttled: now paced at 0.5 per second
    /// assert_eq!(limiter.acquire(t0), Err(Duration::from_secs(2)));
    /// assert_eq!(limiter.acquire(t0 + Duration::from_secs(2)), Ok(()));
    /// ```
    #[inline]
    pub fn acquire(&self, now: Instant) -> Result<(), Duration> {
        if !self.shared.enabled.load(Ordering::Acquire) {
            return Ok(());
        }
        let t = self.seconds(now);
        self.lock().take(t).map_err(wait_of)
    }

    /// Tells the limiter a response arrived at `now`, and whether the
    /// server throttled it (see [`is_throttling_error_code`]). Every
    /// response counts, so the limiter measures the send rate even before
    /// it paces anything.
    pub fn record(&self, throttled: bool, now: Instant) {
        let t = self.seconds(now);
        let mut state = self.lock();
        state.record(throttled, t);
        if state.enabled {
            self.shared.enabled.store(true, Ordering::Release);
        }
    }

    /// The rates and the bucket as of the last update.
    pub fn snapshot(&self) -> LimiterSnapshot {
        let s = *self.lock();
        LimiterSnapshot {
            enabled: s.enabled,
            fill_rate: s.fill_rate,
            capacity: s.capacity,
            tokens: s.tokens,
            measured_rate: s.measured,
        }
    }
}

/// A wait in seconds as a duration, rounded up to the nanosecond so the
/// token is there when the caller wakes.
fn wait_of(seconds: f64) -> Duration {
    if seconds <= 0.0 || seconds.is_nan() {
        return Duration::ZERO;
    }
    let nanos = (seconds * 1e9).ceil();
    if nanos >= u64::MAX as f64 {
        Duration::MAX
    } else {
        Duration::from_nanos(nanos as u64)
    }
}

impl State {
    /// Adds the tokens earned since the last refill (botocore `_refill`).
    fn refill(&mut self, t: f64) {
        let earned = (t - self.last_refill) * self.fill_rate;
        self.tokens = self.capacity.min(self.tokens + earned);
        self.last_refill = t;
    }

    /// Sets the bucket's rate (botocore's `max_rate` setter): tokens
    /// earned at the old rate are banked first.
    fn set_rate(&mut self, rate: f64, t: f64) {
        self.refill(t);
        self.fill_rate = rate.max(MIN_FILL_RATE);
        self.capacity = if rate >= MIN_CAPACITY {
            rate
        } else {
            MIN_CAPACITY
        };
        self.tokens = self.tokens.min(self.capacity);
    }

    /// Takes one token at `t`, or says in how many seconds one is due
    /// (botocore `_acquire` and `_sleep_amount`).
    fn take(&mut self, t: f64) -> Result<(), f64> {
        self.refill(t);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((1.0 - self.tokens) / self.fill_rate)
        }
    }

    /// botocore `ClientRateLimiter.on_receiving_response`.
    fn record(&mut self, throttled: bool, t: f64) {
        // RateClocker.record
        let bucket = (t * BUCKETS_PER_SECOND).floor() / BUCKETS_PER_SECOND;
        self.count += 1.0;
        if bucket > self.last_bucket {
            let current = self.count / (bucket - self.last_bucket);
            self.measured = current * SMOOTHING + self.measured * (1.0 - SMOOTHING);
            self.count = 0.0;
            self.last_bucket = bucket;
        }
        let rate = if throttled {
            let w_max = if self.enabled {
                self.measured.min(self.fill_rate)
            } else {
                self.measured
            };
            self.w_max = w_max;
            self.k = (w_max * (1.0 - BETA) / SCALE).powf(1.0 / 3.0);
            self.last_throttle = t;
            self.enabled = true;
            w_max * BETA
        } else {
            SCALE * (t - self.last_throttle - self.k).powf(3.0) + self.w_max
        };
        self.set_rate(rate.min(MAX_RATE_SCALE * self.measured), t);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The AWS SDKs' shared "client sending rates" vector (smithy-rs, Go
    /// v2, Kotlin and Swift carry it): a response every 0.2 s, throttles at
    /// 2.0 s and 3.2 s, the measured send rate and the bucket's fill rate
    /// after each.
    #[test]
    fn the_sdks_client_sending_rates_vector() {
        #[rustfmt::skip]
        let rows: [(f64, bool, f64, f64); 17] = [
            (0.2, false, 0.0, 0.5),
            (0.4, false, 0.0, 0.5),
            (0.6, false, 4.8, 0.5),
            (0.8, false, 4.8, 0.5),
            (1.0, false, 4.16, 0.5),
            (1.2, false, 4.16, 0.6912),
            (1.4, false, 4.16, 1.0976),
            (1.6, false, 5.632, 1.6384),
            (1.8, false, 5.632, 2.3328),
            (2.0, true, 4.3264, 3.02848),
            (2.2, false, 4.3264, 3.486_639_173_470_26),
            (2.4, false, 4.3264, 3.821_874_416_040_255),
            (2.6, false, 5.66528, 4.053_385_727_709_987),
            (2.8, false, 5.66528, 4.200_373_108_479_454),
            (3.0, false, 4.333056, 4.282_036_558_348_658),
            (3.2, true, 4.333056, 2.997_425_590_844_06),
            (3.4, false, 4.333056, 3.452_226_394_386_346_3),
        ];
        let t0 = Instant::now();
        let limiter = AdaptiveLimiter::new(t0);
        for (i, (at, throttled, measured, fill)) in rows.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(200 * (i as u64 + 1));
            assert_eq!(now - t0, Duration::from_secs_f64(at));
            limiter.record(throttled, now);
            let s = limiter.snapshot();
            assert!(
                (s.measured_rate - measured).abs() < 1e-9,
                "row {i} at {at} s: measured {} != {measured}",
                s.measured_rate
            );
            assert!(
                (s.fill_rate - fill).abs() < 1e-9,
                "row {i} at {at} s: fill {} != {fill}",
                s.fill_rate
            );
        }
    }

    /// The shared CUBIC vector: after a throttle at 5 s from a rate of 10,
    /// successes one second apart climb back along the cubic.
    #[test]
    fn the_cubic_success_curve_after_a_throttle() {
        let mut s = State {
            w_max: 10.0,
            k: (10.0 * (1.0 - BETA) / SCALE).powf(1.0 / 3.0),
            last_throttle: 5.0,
            measured: 1e9,
            last_bucket: 0.0,
            count: 0.0,
            fill_rate: 1.0,
            capacity: 1.0,
            tokens: 0.0,
            last_refill: 0.0,
            enabled: true,
        };
        for (t, want) in [
            (5.0, 7.0),
            (6.0, 9.648_936_009_66),
            (7.0, 10.000_030_849_917_364),
            (8.0, 10.453_284_520_772_092),
            (9.0, 13.408_697_022_224_185),
            (10.0, 21.266_268_354_273_64),
            (11.0, 36.425_998_516_920_465),
        ] {
            let rate = SCALE * (t - s.last_throttle - s.k).powf(3.0) + s.w_max;
            assert!((rate - want).abs() < 1e-9, "at {t}: {rate} != {want}");
            s.set_rate(rate, t);
            assert!((s.fill_rate - want).abs() < 1e-9);
        }
    }

    #[test]
    fn a_throttled_bucket_spaces_sends_at_its_fill_rate() {
        let t0 = Instant::now();
        let limiter = AdaptiveLimiter::new(t0);
        limiter.record(true, t0); // measured 0: the rate falls to the floor
        let s = limiter.snapshot();
        assert!(s.enabled);
        assert_eq!((s.fill_rate, s.capacity), (0.5, 1.0));
        // The bucket started empty: a token every two seconds.
        let mut now = t0;
        let mut sent = Vec::new();
        for _ in 0..3 {
            while let Err(wait) = limiter.acquire(now) {
                now += wait;
            }
            sent.push(now - t0);
        }
        assert_eq!(sent, [2, 4, 6].map(Duration::from_secs));
    }

    #[test]
    fn a_caller_told_to_wait_holds_nothing() {
        let t0 = Instant::now();
        let limiter = AdaptiveLimiter::new(t0);
        limiter.record(true, t0);
        let before = limiter.snapshot().tokens;
        assert_eq!(limiter.acquire(t0), Err(Duration::from_secs(2)));
        assert_eq!(limiter.acquire(t0), Err(Duration::from_secs(2)));
        assert_eq!(limiter.snapshot().tokens, before, "nothing reserved");
    }

    #[test]
    fn before_the_first_throttle_nothing_waits() {
        let t0 = Instant::now();
        let limiter = AdaptiveLimiter::new(t0);
        for i in 0..1_000 {
            let now = t0 + Duration::from_millis(i);
            assert_eq!(limiter.acquire(now), Ok(()));
            limiter.record(false, now);
        }
        assert!(!limiter.snapshot().enabled);
    }

    #[test]
    fn throttling_error_codes_are_the_sdks_list() {
        for code in [
            "Throttling",
            "SlowDown",
            "RequestLimitExceeded",
            "EC2ThrottledException",
        ] {
            assert!(is_throttling_error_code(code), "{code}");
        }
        for code in ["InternalError", "throttling", "", "ServiceUnavailable"] {
            assert!(!is_throttling_error_code(code), "{code}");
        }
    }
}
