//! `stagger schedule`'s numbers: the delays a backoff draws before each
//! retry, sampled as whole chains (decorrelated jitter carries the previous
//! delay), with each retry's capped backoff and its range.

use std::time::Duration;

use serde::Serialize;
use stagger::random::FastRng;
use stagger::{Backoff, Jitter};

/// One row of the schedule, as printed in JSON.
#[derive(Debug, Serialize)]
pub struct Row {
    /// The retry (1 is the first).
    pub retry: u32,
    /// Its capped backoff.
    pub backoff_ms: f64,
    /// The least delay the jitter can draw.
    pub min_ms: f64,
    /// The most: excluded for the random jitters, except that decorrelated
    /// jitter reaches the cap itself (`min(cap, …)`). For decorrelated
    /// jitter these are the rule's widest range at this retry,
    /// `[base, min(cap, base · 3^n))`, not the samples' (one sample would
    /// make an empty range).
    pub max_ms: f64,
    /// The samples drawn.
    pub samples_ms: Vec<f64>,
}

/// A whole schedule, as `--format json` prints it.
#[derive(Debug, Serialize)]
pub struct Schedule {
    /// One row per retry.
    pub retries: Vec<Row>,
}

/// At most this many samples of each retry.
pub const MAX_SAMPLES: usize = 10_000_000;
/// At most this many retries in one schedule's table; a longer schedule
/// shows its first ones and says so.
pub const MAX_ROWS: u32 = 10_000;

/// At most this many delays in one schedule (400 MB of samples).
pub const MAX_DRAWS: usize = 50_000_000;

/// Whether the top of retry `n`'s range can itself be drawn: `none` draws
/// only `b_n`, and decorrelated jitter reaches the cap (`min(cap, …)`).
pub fn top_included(backoff: &Backoff, n: u32) -> bool {
    match backoff.jitter {
        Jitter::None => true,
        Jitter::Decorrelated => backoff.range(n).1 >= backoff.cap,
        _ => false,
    }
}

/// A duration in milliseconds, fractions kept.
pub fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Builds the schedule: samples are whole chains (decorrelated jitter carries
/// the previous delay), each drawn from its own stream forked from `seed`.
pub fn schedule(backoff: &Backoff, retries: u32, samples: usize, seed: u64) -> Schedule {
    let mut root = FastRng::seeded(seed);
    let mut columns: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); retries as usize];
    for _ in 0..samples {
        let chain = backoff.delays(root.fork());
        for (col, d) in columns.iter_mut().zip(chain) {
            col.push(ms(d));
        }
    }
    let rows = columns
        .into_iter()
        .zip(1..)
        .map(|(samples_ms, n)| {
            let (lo, hi) = backoff.range(n);
            Row {
                retry: n,
                backoff_ms: ms(backoff.backoff(n)),
                min_ms: ms(lo),
                max_ms: ms(hi),
                samples_ms,
            }
        })
        .collect();
    Schedule { retries: rows }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_samples_obey_bounds() {
        let b = Backoff::new();
        let s = schedule(&b, 6, 2000, 3);
        assert_eq!(s.retries.len(), 6);
        for r in &s.retries {
            assert_eq!(r.min_ms, 0.0);
            assert_eq!(r.max_ms, r.backoff_ms);
            assert!(r.samples_ms.iter().all(|x| *x >= 0.0 && *x < r.backoff_ms));
        }
    }

    #[test]
    fn same_seed_same_samples() {
        let b = Backoff {
            jitter: Jitter::Decorrelated,
            ..Backoff::new()
        };
        let a = serde_json::to_string(&schedule(&b, 4, 50, 9)).unwrap();
        let c = serde_json::to_string(&schedule(&b, 4, 50, 9)).unwrap();
        let d = serde_json::to_string(&schedule(&b, 4, 50, 10)).unwrap();
        assert_eq!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn decorrelated_range_is_the_rules_not_the_samples() {
        let b = Backoff {
            jitter: Jitter::Decorrelated,
            ..Backoff::new()
        };
        // One sample once made `[162.0, 162.0)`, an empty range.
        let s = schedule(&b, 7, 1, 1);
        let ranges: Vec<(f64, f64)> = s.retries.iter().map(|r| (r.min_ms, r.max_ms)).collect();
        assert_eq!(ranges[0], (100.0, 300.0));
        assert_eq!(ranges[1], (100.0, 900.0));
        assert_eq!(ranges[6], (100.0, 10_000.0), "the cap");
        assert!(!top_included(&b, 1) && top_included(&b, 7));
        for r in &s.retries {
            assert!(r
                .samples_ms
                .iter()
                .all(|x| *x >= r.min_ms && *x <= r.max_ms));
        }
    }
}
