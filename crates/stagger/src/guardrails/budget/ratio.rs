//! The ratio budget (Google SRE book, Finagle's `RetryBudget`).
//!
//! A retry is allowed iff `retries_in_window + 1 ≤ floor + ratio ·
//! requests_in_window`, over a sliding window (default 10 s in ten 1 s
//! buckets).
//!
//! The floor follows the client's own traffic; see [`RatioBudget`].
//!
//! The ratio is kept in parts per million and the rule is checked
//! in integers, so 0.6 allows 6 retries in 10 requests — tower's
//! `TpsBudget` turns 0.6 into "one withdrawal costs `(1/0.6) as isize` = 1
//! deposit" and allows all 10.
//!
//! Requests are counted in per-thread stripes (every call deposits, so that
//! path must not fight over one cache line). Retries are counted in one
//! central ring, and the check and the withdrawal are a single
//! compare-and-swap on the current bucket: two threads cannot both take the
//! last retry (tower checks, then withdraws in a second step). When the
//! window moves, the first withdrawal of the new bucket *seals* the buckets
//! before it, so a thread still working with the old time cannot slip one
//! more retry into a bucket that has already been summed.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{scaled, Budget, Withdrawal};
use crate::guardrails::sync::{atomics, nanos, AtomicU64, Ordering::*, Padded};
use crate::guardrails::window::{ahead_by, count, is_ahead, is_epoch, pack, Timebase, Window};
use crate::outcome::error::ConfigError;
use crate::outcome::Failure;

const BUCKETS: usize = if cfg!(loom) { 2 } else { 10 };
const PPM: u128 = 1_000_000;
/// In a retry slot, the top bit of the count: the bucket is closed.
const SEALED: u64 = 1 << 31;
/// `floor_ppr` of a fixed floor.
const FIXED: u64 = u64::MAX;

/// The ratio budget: retries may be at most `ratio` of the requests in a
/// sliding window, plus a floor of retries per window so a quiet client can
/// still retry. Cheap to clone; clones share the budget.
///
/// **The floor follows the client's own traffic.** A fixed floor of 10
/// retries per window is what lets a quiet client retry at all, but it is
/// also what makes the budget inert when a service runs as many thin
/// processes: 400 pods sending half a request per second each see about 5
/// requests per window, so a floor of 10 lets every one of them retry every
/// failure to the last attempt, and a fleet-wide stall gets the full retry
/// storm. By default the floor is therefore `floor_per_request · requests`
/// (0.1 per request), never below one retry per window and never above
/// `floor`:
///
/// ```text
/// allowance = clamp(0.1 · requests, 1, 10) + 0.1 · requests
/// ```
///
/// A client making 100 or more requests per window gets exactly the fixed
/// floor of 10, as before; a lone client still gets one retry per window, so
/// a rare transient failure against a healthy dependency is still retried;
/// a thin client gets one retry and then fails fast for the rest of the
/// window. That is the trade-off: a client that sees one failure cannot tell
/// a blip from a fleet-wide stall, so it spends its one retry on the blip
/// and treats the next failure in the same window as the stall.
/// A [`floor_per_request`](RatioBudgetConfig::floor_per_request) of `None`
/// restores a floor that ignores traffic.
///
/// ```
/// use stagger::guardrails::budget::{Budget, RatioBudget, RatioBudgetConfig};
/// use stagger::Failure;
/// use std::time::Instant;
///
/// // 60 %, no floor: 10 requests allow 6 retries, not 10.
/// let budget = RatioBudget::new(RatioBudgetConfig { ratio: 0.6, floor: 0, ..Default::default() })?;
/// let now = Instant::now();
/// for _ in 0..10 {
///     budget.on_request(now);
/// }
/// let granted = (0..10)
///     .filter(|_| budget.try_withdraw(&Failure::transient(), now).is_some())
///     .count();
/// assert_eq!(granted, 6);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RatioBudget {
    inner: Arc<Inner>,
}

struct Inner {
    ratio_ppm: u64,
    floor: u64,
    /// Floor retries granted per request, in millionths; [`FIXED`] for a
    /// floor that ignores traffic.
    floor_ppr: u64,
    window: Duration,
    time: Timebase,
    requests: Window<BUCKETS, 1>,
    /// Retries per bucket: `[epoch tag | sealed | count]`.
    retries: Padded<[AtomicU64; BUCKETS]>,
    /// `[epoch tag | sum]`: the retries of the sealed buckets before the
    /// newest epoch any withdrawal reached.
    past: Padded<AtomicU64>,
}

impl fmt::Debug for RatioBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RatioBudget")
            .field("ratio_ppm", &self.inner.ratio_ppm)
            .field("floor", &self.inner.floor)
            .field("floor_per_request_ppm", &self.floor_per_request_ppm())
            .field("window", &self.inner.window)
            .finish()
    }
}

/// The settings in words, as a report prints them: "retries up to 10 % of
/// requests over 10 s, plus a floor of 0.1 per request (1 to 10)" for the
/// defaults.
///
/// ```
/// let said = stagger::guardrails::budget::RatioBudget::default().to_string();
/// assert_eq!(said, "retries up to 10 % of requests over 10 s, plus a floor of 0.1 per request (1 to 10)");
/// ```
impl fmt::Display for RatioBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::outcome::describe::{Percent, Spoken, Trimmed};
        write!(
            f,
            "retries up to {} of requests over {}, plus a floor of ",
            Percent(self.ratio_ppm()),
            Spoken(self.window())
        )?;
        match self.floor_per_request_ppm() {
            Some(ppr) => write!(
                f,
                "{} per request (1 to {})",
                Trimmed(ppr as f64 / 1e6),
                self.floor()
            ),
            None => write!(f, "{} per window", self.floor()),
        }
    }
}

impl Default for RatioBudget {
    /// 10 % over 10 s; a floor of 0.1 retries per request in the window,
    /// at least 1 and at most 10.
    fn default() -> Self {
        RatioBudgetConfig::default().build_unchecked()
    }
}

impl RatioBudget {
    /// Validates `config` and builds the budget; the error names the first
    /// bad field.
    ///
    /// ```
    /// use stagger::guardrails::budget::{RatioBudget, RatioBudgetConfig};
    /// use std::time::Duration;
    ///
    /// let b = RatioBudget::new(RatioBudgetConfig {
    ///     ratio: 0.2,
    ///     floor: 5,
    ///     window: Duration::from_secs(30),
    ///     ..Default::default()
    /// })?;
    /// assert_eq!(b.to_string(), "retries up to 20 % of requests over 30 s, plus a floor of 0.1 per request (1 to 5)");
    /// let fixed = RatioBudget::new(RatioBudgetConfig { floor: 5, floor_per_request: None, ..Default::default() })?;
    /// assert_eq!(fixed.to_string(), "retries up to 10 % of requests over 10 s, plus a floor of 5 per window");
    /// let bad = RatioBudgetConfig { ratio: f64::NAN, ..Default::default() };
    /// assert_eq!(RatioBudget::new(bad).unwrap_err().field(), "ratio");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new(config: RatioBudgetConfig) -> Result<Self, ConfigError> {
        config.build()
    }

    /// The ratio in parts per million.
    pub(crate) fn ratio_ppm(&self) -> u64 {
        self.inner.ratio_ppm
    }

    /// The most retries the floor grants per window (all of them with a
    /// fixed floor, [`floor_per_request`](RatioBudgetConfig::floor_per_request) `None`).
    pub(crate) fn floor(&self) -> u64 {
        self.inner.floor
    }

    /// Floor retries granted per request in the window, in millionths, or
    /// `None` for a fixed floor.
    pub(crate) fn floor_per_request_ppm(&self) -> Option<u64> {
        (self.inner.floor_ppr != FIXED).then_some(self.inner.floor_ppr)
    }

    /// The window's length.
    pub(crate) fn window(&self) -> Duration {
        self.inner.window
    }

    /// `(requests, retries)` in the window ending at `now`.
    pub fn counts(&self, now: Instant) -> (u64, u64) {
        let e = self.inner.time.epoch(now);
        let requests = self.inner.requests.total(e, 0);
        let mut retries = 0;
        for back in 0..(BUCKETS as u64).min(e.saturating_add(1)) {
            let w = self.inner.retries[((e - back) % BUCKETS as u64) as usize].load(Acquire);
            if is_epoch(w, e - back) {
                retries += count(w) & (SEALED - 1);
            }
        }
        (requests, retries)
    }

    /// How many more retries the budget would allow at `now`.
    pub fn available(&self, now: Instant) -> u64 {
        let (requests, retries) = self.counts(now);
        let allowance = self.inner.allowance(requests) / PPM;
        u64::try_from(allowance.saturating_sub(u128::from(retries))).unwrap_or(u64::MAX)
    }
}

impl Inner {
    /// `(floor + ratio · requests)` in millionths of a retry, the floor
    /// being `clamp(floor_per_request · requests, 1, floor)` unless fixed.
    #[inline]
    fn allowance(&self, requests: u64) -> u128 {
        let fixed = u128::from(self.floor) * PPM;
        let floor = if self.floor_ppr == FIXED {
            fixed
        } else {
            (u128::from(self.floor_ppr) * u128::from(requests)).clamp(fixed.min(PPM), fixed)
        };
        floor + u128::from(self.ratio_ppm) * u128::from(requests)
    }

    #[inline]
    fn withdraw(&self, now: Instant) -> bool {
        let e = self.time.epoch(now);
        // Fast path: the bucket is open and the cached sums are current.
        let cached = self.past.load(Acquire);
        if is_epoch(cached, e) {
            let slot = &self.retries[(e % BUCKETS as u64) as usize];
            let word = slot.load(Acquire);
            if is_epoch(word, e) && count(word) < SEALED - 1 {
                let need = u128::from(count(cached) + count(word) + 1) * PPM;
                if need <= self.allowance(self.requests.past(e, 0))
                    && slot
                        .compare_exchange(word, word + 1, AcqRel, Acquire)
                        .is_ok()
                {
                    return true;
                }
            }
        }
        self.withdraw_slow(e)
    }

    #[inline(never)]
    fn withdraw_slow(&self, mut e: u64) -> bool {
        loop {
            let cached = self.past.load(Acquire);
            if is_ahead(cached, e) {
                // Another withdrawal already reached a later epoch: join it.
                e += ahead_by(cached, e);
                continue;
            }
            let past = if is_epoch(cached, e) {
                count(cached)
            } else {
                self.seal_before(e)
            };
            let slot = &self.retries[(e % BUCKETS as u64) as usize];
            let word = slot.load(Acquire);
            let current = if is_epoch(word, e) {
                if word & SEALED != 0 {
                    // A later epoch closed this bucket.
                    e += 1;
                    continue;
                }
                count(word)
            } else if is_ahead(word, e) {
                e += 1;
                continue;
            } else {
                0
            };
            if current >= SEALED - 1 {
                return false; // the bucket's counter is full
            }
            let need = u128::from(past + current + 1) * PPM;
            let requests = self.requests.past(e, 0);
            if need > self.allowance(requests)
                && need > self.allowance(requests + self.requests.current(e, 0))
            {
                return false;
            }
            if slot
                .compare_exchange(word, pack(e, current + 1), AcqRel, Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// Closes the buckets before `e` in the window and returns their
    /// retries; records `e` as the newest epoch reached.
    #[cold]
    fn seal_before(&self, e: u64) -> u64 {
        let mut sum = 0u64;
        for back in 1..(BUCKETS as u64).min(e.saturating_add(1)) {
            let pe = e - back;
            let slot = &self.retries[(pe % BUCKETS as u64) as usize];
            let mut w = slot.load(Acquire);
            loop {
                let new = if is_epoch(w, pe) {
                    if w & SEALED != 0 {
                        sum += count(w) & (SEALED - 1);
                        break;
                    }
                    w | SEALED
                } else if is_ahead(w, pe) {
                    break;
                } else {
                    pack(pe, SEALED)
                };
                match slot.compare_exchange(w, new, AcqRel, Acquire) {
                    Ok(_) => {
                        sum += count(new) & (SEALED - 1);
                        break;
                    }
                    Err(seen) => w = seen,
                }
            }
        }
        let mut cached = self.past.load(Acquire);
        while !is_epoch(cached, e) && !is_ahead(cached, e) {
            match self
                .past
                .compare_exchange(cached, pack(e, sum), AcqRel, Acquire)
            {
                Ok(_) => break,
                Err(seen) => cached = seen,
            }
        }
        sum
    }
}

impl Budget for RatioBudget {
    fn kind(&self) -> &'static str {
        "ratio"
    }

    #[inline]
    fn on_request(&self, now: Instant) {
        let i = &*self.inner;
        i.requests.add(i.time.epoch(now), 0, 1);
    }

    #[inline]
    fn try_withdraw(&self, _failure: &Failure, now: Instant) -> Option<Withdrawal> {
        self.inner.withdraw(now).then_some(Withdrawal(1))
    }
}

/// The settings of a [`RatioBudget`], checked by [`RatioBudget::new`].
/// [`Default`] gives 10 %, a floor of 0.1 per request between 1 and 10,
/// and a 10 s window.
#[derive(Debug, Clone, Copy)]
pub struct RatioBudgetConfig {
    /// Retries allowed per request in the window, in `[0, 1000]`; kept to
    /// the nearest part per million.
    pub ratio: f64,
    /// The most retries the floor grants per window (at most 10⁹; default
    /// 10): all of them whatever the traffic with a fixed floor, otherwise
    /// see [`floor_per_request`](Self::floor_per_request).
    pub floor: u32,
    /// The floor grants this many retries per request in the window
    /// (`[0, 1000]`, default 0.1), but never fewer than one retry per window
    /// (unless `floor` is 0) nor more than `floor`. So a client sending 100
    /// requests per window or more has the whole floor, and a thin one has
    /// one retry per window to spend on a blip. `None` is a fixed floor of
    /// `floor` retries per window whatever the traffic (the classic rule;
    /// inert for a client sending fewer than `floor / ratio` requests per
    /// window).
    ///
    /// ```
    /// use stagger::guardrails::budget::{Budget, RatioBudget};
    /// use stagger::Failure;
    /// use std::time::Instant;
    ///
    /// let budget = RatioBudget::default();
    /// let now = Instant::now();
    /// budget.on_request(now); // a lone request…
    /// let f = Failure::transient();
    /// assert!(budget.try_withdraw(&f, now).is_some(), "…gets its retry");
    /// assert!(budget.try_withdraw(&f, now).is_none(), "but only one per window");
    /// ```
    pub floor_per_request: Option<f64>,
    /// The sliding window, between 1 s and 1 hour; it moves in tenths.
    pub window: Duration,
}

impl Default for RatioBudgetConfig {
    fn default() -> Self {
        RatioBudgetConfig {
            ratio: 0.1,
            floor: 10,
            floor_per_request: Some(0.1),
            window: Duration::from_secs(10),
        }
    }
}

impl RatioBudgetConfig {
    fn build(self) -> Result<RatioBudget, ConfigError> {
        scaled("ratio", self.ratio, 0.0, 1000.0, 1e6)?;
        if let Some(f) = self.floor_per_request {
            scaled("floor_per_request", f, 0.0, 1000.0, 1e6)?;
        }
        if self.floor > 1_000_000_000 {
            return Err(ConfigError::new("floor", "must be at most 1e9 retries"));
        }
        if self.window < Duration::from_secs(1) || self.window > Duration::from_secs(3600) {
            return Err(ConfigError::new("window", "must be between 1 s and 1 hour"));
        }
        Ok(self.build_unchecked())
    }

    fn build_unchecked(self) -> RatioBudget {
        let ratio_ppm = scaled("ratio", self.ratio, 0.0, 1000.0, 1e6).unwrap_or(100_000);
        let width = Duration::from_nanos(nanos(self.window) / BUCKETS as u64);
        RatioBudget {
            inner: Arc::new(Inner {
                ratio_ppm,
                floor: u64::from(self.floor),
                floor_ppr: match self.floor_per_request {
                    Some(f) => scaled("", f, 0.0, 1000.0, 1e6).unwrap_or(100_000),
                    None => FIXED,
                },
                window: self.window,
                time: Timebase::new(width),
                requests: Window::new(),
                retries: Padded(atomics()),
                past: Padded(AtomicU64::new(pack(u64::MAX, 0))),
            }),
        }
    }
}
