//! From raw counts to the numbers a game-day reports.
//!
//! Load is what arrives at the server: every attempt, first or retry.
//! Windowed numbers use 1 s windows sliding by one 100 ms bin, so a single
//! lucky or unlucky bin does not decide anything.

use std::collections::BTreeMap;
use std::time::Duration;

use stagger_sim::recovery::{self, window_bins, Observed, PACED_WINDOW};

use crate::results::{Latency, Row, Series};

use crate::bins::BIN;

/// Bins per 1 s window.
const WINDOW: usize = 10;

/// Everything one strategy's run measured.
#[derive(Debug, Clone, Default)]
pub struct Raw {
    /// The strategy's name.
    pub strategy: String,
    /// Server capacity, jobs per second.
    pub capacity: f64,
    /// Bins of traffic (the run's duration); later bins are the drain.
    pub traffic_bins: usize,
    /// Bin where the fault ends, if it ends inside the run.
    pub fault_end_bin: Option<usize>,
    /// When the fault ends, if it ends inside the run.
    pub fault_end: Option<Duration>,
    /// Server: first attempts arriving, per bin.
    pub first: Vec<u32>,
    /// Server: retries arriving, per bin.
    pub retries: Vec<u32>,
    /// Server: jobs completed, per bin.
    pub completed: Vec<u32>,
    /// Server: jobs completed after their client gave up, per bin.
    pub abandoned: Vec<u32>,
    /// Server: requests rejected (503/429), per bin.
    pub rejected: Vec<u32>,
    /// Server: orders applied more than once.
    pub duplicates: u64,
    /// Server: attempts whose key was already applied.
    pub deduplicated: u64,
    /// Clients: logical requests started, per bin.
    pub sent: Vec<u32>,
    /// Clients: requests that succeeded, per bin of their end.
    pub successes: Vec<u32>,
    /// Clients: logical requests made.
    pub requests: u64,
    /// Clients: attempts made, reaching the server or not.
    pub client_attempts: u64,
    /// Clients: requests that ended, by stop reason.
    pub stops: BTreeMap<String, u64>,
    /// Clients: latency of each request, ms (a failed one's to the moment
    /// it failed).
    pub latencies_ms: Vec<u32>,
    /// Retries refused by the pods' budgets.
    pub budget_refusals: u64,
    /// Times the pods' breakers opened.
    pub breaker_opens: u64,
    /// Attempts the server's `ShedLayer` answered at once (`None`: no
    /// such layer).
    pub shed: Option<u64>,
}

/// Puts the clients' count of the attempts they started in place of the
/// server's in the bins of `span` (a blackhole, where the server sees
/// nothing of what is sent), and returns the first attempts and retries
/// so counted. A first attempt sent into the blackhole is a first attempt
/// of that second, not missing while its retry after the fault counts as
/// a retry.
pub(super) fn arrivals_from_clients(
    (first, retries): (&mut [u32], &mut [u32]),
    (started_first, started_retries): (&[u32], &[u32]),
    span: std::ops::Range<usize>,
) -> (u64, u64) {
    let mut counted = (0, 0);
    for i in span {
        if let (Some(f), Some(&s)) = (first.get_mut(i), started_first.get(i)) {
            *f = s;
            counted.0 += u64::from(s);
        }
        if let (Some(r), Some(&s)) = (retries.get_mut(i), started_retries.get(i)) {
            *r = s;
            counted.1 += u64::from(s);
        }
    }
    counted
}

fn sum(v: &[u32]) -> u64 {
    v.iter().map(|x| u64::from(*x)).sum()
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted.get(i.min(sorted.len() - 1)).copied()
}

/// Sum of `v` over the 1 s window starting at bin `i` (shorter at the end).
fn window(v: &[u32], i: usize) -> u64 {
    sum(&v[i.min(v.len())..(i + WINDOW).min(v.len())])
}

/// Derives the row.
pub fn summarize(raw: &Raw) -> Row {
    let n = raw.traffic_bins.min(raw.first.len());
    let load: Vec<u32> = raw
        .first
        .iter()
        .zip(&raw.retries)
        .map(|(a, b)| a + b)
        .collect();
    let first_attempts = sum(&raw.first);
    let retries = sum(&raw.retries);
    let attempts = first_attempts + retries;
    let cap = raw.capacity.max(1e-9);
    let peak = |from: usize| -> Option<f64> {
        (from..n.saturating_sub(WINDOW - 1))
            .map(|i| window(&load[..n], i) as f64 / cap)
            .reduce(f64::max)
    };
    let post_peak = raw.fault_end_bin.and_then(peak);
    let overloaded = raw.fault_end_bin.map(|end| {
        let over = (end..n.saturating_sub(WINDOW - 1))
            .filter(|&i| window(&load[..n], i) as f64 > cap)
            .count();
        over as f64 / WINDOW as f64
    });
    let recovery_s = recovery(raw, &load, n);
    let tail_from = n - n / 4;
    let tail_retry_ratio = ratio(
        sum(&raw.retries[tail_from..n]),
        sum(&raw.sent[tail_from..n]),
    );
    let mut lat = raw.latencies_ms.clone();
    lat.sort_unstable();
    let successes = raw.stops.get("success").copied().unwrap_or(0);
    Row {
        strategy: raw.strategy.clone(),
        requests: raw.requests,
        attempts,
        first_attempts,
        retries,
        amplification: ratio(attempts, raw.requests),
        client_attempts: raw.client_attempts,
        client_amplification: ratio(raw.client_attempts, raw.requests),
        retry_ratio: ratio(retries, raw.requests),
        tail_retry_ratio,
        request_success: ratio(successes, raw.requests),
        peak_load_over_capacity: peak(0).unwrap_or(0.0),
        post_outage_peak_over_capacity: post_peak,
        overloaded_after_fault_s: overloaded,
        recovery_s,
        recovered: raw.fault_end.map(|_| recovery_s.is_some()),
        budget_refusals: raw.budget_refusals,
        breaker_opens: raw.breaker_opens,
        duplicates: raw.duplicates,
        deduplicated: raw.deduplicated,
        completed: sum(&raw.completed),
        abandoned: sum(&raw.abandoned),
        rejected: sum(&raw.rejected),
        stops: raw.stops.clone(),
        latency: Latency {
            p50_ms: percentile(&lat, 0.5),
            p99_ms: percentile(&lat, 0.99),
        },
        goodput_after_fault: raw.fault_end_bin.filter(|&b| b < n).map(|b| {
            let ok = sum(&raw.successes[b.min(raw.successes.len())..n.min(raw.successes.len())]);
            ok as f64 / ((n - b) as f64 * BIN.as_secs_f64())
        }),
        shed_share: raw.shed.map(|shed| ratio(shed, shed + attempts)),
        series: series(raw, &load, n),
    }
}

/// Seconds from the fault's end to recovery, as the simulator defines it
/// (`None`: no fault end, or never).
fn recovery(raw: &Raw, load: &[u32], n: usize) -> Option<f64> {
    raw.fault_end.and_then(|end| {
        let seen = Observed {
            bin: BIN,
            demand: &raw.sent[..n.min(raw.sent.len())],
            load: &load[..n],
            goodput: &raw.successes[..n.min(raw.successes.len())],
        };
        recovery::recovery_s(&seen, window_bins(BIN, PACED_WINDOW), end)
    })
}

/// The per-bin series over the traffic period's `n` bins.
fn series(raw: &Raw, load: &[u32], n: usize) -> Series {
    Series {
        t_s: (0..n).map(|i| i as f64 / WINDOW as f64).collect(),
        load: load[..n].to_vec(),
        first_attempts: raw.first[..n].to_vec(),
        retries: raw.retries[..n].to_vec(),
        successes: raw.successes[..n.min(raw.successes.len())].to_vec(),
        completed: raw.completed[..n].to_vec(),
        abandoned: raw.abandoned[..n].to_vec(),
        rejected: raw.rejected[..n].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 s of 100 requests/s against capacity 200/s; `extra` retries per
    /// bin arrive in bins `from..to`.
    fn raw(extra: u32, from: usize, to: usize) -> Raw {
        let n = 100;
        let mut retries = vec![0; n];
        for r in &mut retries[from..to] {
            *r = extra;
        }
        let mut successes = vec![10; n];
        for s in &mut successes[20..to.max(40)] {
            *s = 0;
        }
        Raw {
            strategy: "x".into(),
            capacity: 200.0,
            traffic_bins: n,
            fault_end_bin: Some(40),
            fault_end: Some(Duration::from_secs(4)),
            first: vec![10; n],
            retries,
            completed: vec![10; n],
            abandoned: vec![0; n],
            rejected: vec![0; n],
            sent: vec![10; n],
            successes,
            requests: 1000,
            stops: BTreeMap::from([("success".to_string(), 800)]),
            ..Raw::default()
        }
    }

    #[test]
    fn a_storm_that_never_ends_never_recovers() {
        let row = summarize(&raw(40, 20, 100));
        assert_eq!(row.recovered, Some(false));
        assert_eq!(row.recovery_s, None);
        // 50 per bin = 500/s against 200/s.
        assert!((row.peak_load_over_capacity - 2.5).abs() < 1e-9);
        assert_eq!(row.post_outage_peak_over_capacity, Some(2.5));
        assert_eq!(row.overloaded_after_fault_s, Some(5.1));
        assert!((row.tail_retry_ratio - 4.0).abs() < 1e-9);
    }

    #[test]
    fn a_storm_that_ends_recovers_when_successes_are_back_for_good() {
        let row = summarize(&raw(40, 20, 55));
        assert_eq!(row.recovered, Some(true));
        // Successes come back at bin 55, the fault ended at bin 40; every
        // 1 s window from [55, 65) on serves all its new requests.
        assert_eq!(row.recovery_s, Some(1.5));
        assert_eq!(row.tail_retry_ratio, 0.0);
        assert!((row.request_success - 0.8).abs() < 1e-9);
    }

    #[test]
    fn a_fault_that_never_clears_has_no_recovery() {
        let mut r = raw(0, 0, 0);
        r.fault_end_bin = None;
        r.fault_end = None;
        let row = summarize(&r);
        assert_eq!(row.recovered, None);
        assert_eq!(row.post_outage_peak_over_capacity, None);
    }

    /// Under a blackhole the histogram showed 0 arrivals in the fault's
    /// second and a request whose first attempt went into it was counted as
    /// "0 first attempts, 1 retry": the server saw only the retry.
    #[test]
    fn a_blackholed_first_attempt_is_a_first_attempt_in_its_second() {
        let mut r = raw(0, 0, 0);
        // The server saw nothing in 2–3 s; the retries of what went into
        // the hole arrive at 3–4 s.
        for b in 20..30 {
            r.first[b] = 0;
        }
        for b in 30..40 {
            r.retries[b] = 10;
        }
        let before = summarize(&r);
        assert_eq!(
            before.series.first_attempts[25], 0,
            "the bug: an empty second"
        );
        let started_first = vec![10; 100];
        let mut started_retries = vec![0; 100];
        started_retries[30..40].fill(10);
        let (f, rt) = arrivals_from_clients(
            (&mut r.first, &mut r.retries),
            (&started_first, &started_retries),
            20..30,
        );
        assert_eq!((f, rt), (100, 0));
        let row = summarize(&r);
        assert_eq!(
            row.series.first_attempts[25], 10,
            "arrivals in the hole's second"
        );
        assert_eq!(
            row.first_attempts, 1000,
            "every request has its first attempt"
        );
        assert_eq!(row.retries, 100);
    }
}
