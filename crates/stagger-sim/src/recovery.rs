//! What "recovered" means: one definition for every model and the game-day.
//!
//! A retry storm is over when the dependency's clients are served again and
//! the retries have died down, and both stay so — not when the trigger is
//! gone. Neither half is enough alone: a dependency can answer everyone
//! while retries still double its load (one more stumble and the storm is
//! back), and a dependency whose load is back to normal can still be
//! answering nobody (every breaker open, failing calls fast).
//!
//! **The definition.** Count, per bin of time, the *demand* (new requests
//! that arrived; retries are not demand), the *load* (every attempt made,
//! first or retry, counted when it is sent) and the *goodput* (requests
//! answered successfully, in time). A window of consecutive bins is *healthy* when
//!
//! 1. its goodput is at least [`SERVED_SHARE`] (95 %) of its demand, and
//! 2. its load is at most [`BASELINE_LOAD`] (1.25) × its demand: at most
//!    one retry for every four new requests.
//!
//! The dependency has *recovered* at the first bin starting at or after the
//! fault's end from which every window — sliding one bin at a time, up to
//! the last window that fits in the observation — is healthy. The recovery
//! time is from the fault's end to the start of that bin. It has *not
//! recovered* when the last window is unhealthy (it is still down, or still
//! stormed, at the end) or when no whole window fits after the fault.
//!
//! The window only smooths noise, and each front-end picks the narrowest
//! that does: 1 s where new requests arrive at a steady pace (the failover
//! model's ticks, the game-day's paced clients) and 5 s where they arrive as
//! a Poisson stream (the metastable model), whose 1 s counts swing by about
//! 6 % at 280 requests per second.
//!
//! ```
//! use std::time::Duration;
//! use stagger_sim::recovery::{recovery_s, Observed};
//!
//! // 1 s bins; the fault ends at 3 s; answers catch up from 5 s on, and
//! // the retries are gone from then on too.
//! let demand = [10, 10, 10, 10, 10, 10, 10, 10];
//! let load = [10, 30, 30, 30, 20, 11, 10, 10];
//! let goodput = [10, 0, 0, 4, 7, 10, 10, 10];
//! let seen = Observed { bin: Duration::from_secs(1), demand: &demand, load: &load, goodput: &goodput };
//! assert_eq!(recovery_s(&seen, 1, Duration::from_secs(3)), Some(2.0));
//! // Still short of demand in the last bin: not recovered.
//! let goodput = [10, 0, 0, 4, 7, 10, 10, 9];
//! assert_eq!(recovery_s(&Observed { goodput: &goodput, ..seen }, 1, Duration::from_secs(3)), None);
//! // Served, but still retried twice over at the end: not recovered either.
//! let load = [10, 30, 30, 30, 20, 11, 10, 20];
//! assert_eq!(recovery_s(&Observed { load: &load, ..seen }, 1, Duration::from_secs(3)), None);
//! ```

use std::time::Duration;

/// The share of demand a healthy window answers successfully.
pub const SERVED_SHARE: f64 = 0.95;

/// The most load a healthy window carries, as a multiple of its demand.
pub const BASELINE_LOAD: f64 = 1.25;

/// The window of a front-end whose new requests arrive at a steady pace.
pub const PACED_WINDOW: Duration = Duration::from_secs(1);

/// The window of a front-end whose new requests arrive as a Poisson stream.
pub const POISSON_WINDOW: Duration = Duration::from_secs(5);

/// What one run observed, per bin from the run's start.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The width of one bin.
    pub bin: Duration,
    /// New requests arriving in each bin (first attempts, never retries).
    pub demand: &'a [u32],
    /// Attempts made in each bin, first attempts and retries, counted when
    /// they are sent (a backlog that a network outage held and released at
    /// once is not load of the bin it is released in).
    pub load: &'a [u32],
    /// Requests answered successfully in each bin. The observation ends
    /// with the shortest of the three series.
    pub goodput: &'a [u32],
}

/// Whole bins covering `window` (at least one).
pub fn window_bins(bin: Duration, window: Duration) -> usize {
    let bin = bin.as_nanos().max(1);
    (window.as_nanos().div_ceil(bin) as usize).max(1)
}

/// Seconds from `fault_end` until the dependency recovered (see the
/// [module docs](self)), judged on windows of `window` bins; `None` if it
/// did not recover within the observation.
pub fn recovery_s(seen: &Observed<'_>, window: usize, fault_end: Duration) -> Option<f64> {
    let n = seen
        .demand
        .len()
        .min(seen.goodput.len())
        .min(seen.load.len());
    let w = window.max(1);
    let bin = seen.bin.as_nanos().max(1);
    let from = fault_end.as_nanos().div_ceil(bin) as usize;
    if n < w || from + w > n {
        return None;
    }
    let sum = |v: &[u32], s: usize| v[s..s + w].iter().map(|x| u64::from(*x)).sum::<u64>();
    let healthy = |s: usize| {
        let demand = sum(seen.demand, s) as f64;
        sum(seen.goodput, s) as f64 >= SERVED_SHARE * demand
            && sum(seen.load, s) as f64 <= BASELINE_LOAD * demand
    };
    // Windows start at 0..=last; walk back from the last while healthy.
    let last = n - w;
    let mut s = last + 1;
    while s > from && healthy(s - 1) {
        s -= 1;
    }
    if s == last + 1 {
        return None;
    }
    let start = seen.bin.saturating_mul(s as u32);
    Some(start.saturating_sub(fault_end).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn at(demand: &[u32], goodput: &[u32], window: usize, end_s: u64) -> Option<f64> {
        let seen = Observed {
            bin: S,
            demand,
            load: demand,
            goodput,
        };
        recovery_s(&seen, window, Duration::from_secs(end_s))
    }

    #[test]
    fn served_from_the_fault_end_is_zero() {
        assert_eq!(at(&[5; 6], &[5; 6], 1, 2), Some(0.0));
        assert_eq!(at(&[5; 6], &[5; 6], 2, 2), Some(0.0));
    }

    #[test]
    fn a_relapse_restarts_the_clock() {
        // Healthy at 2 s, down again at 4 s, healthy for good from 5 s.
        let g = [5, 0, 5, 5, 0, 5, 5];
        assert_eq!(at(&[5; 7], &g, 1, 1), Some(4.0));
    }

    #[test]
    fn windows_smooth_one_short_bin() {
        // 95 % of 20 is 19: one bin at 4 in a 2-bin window of 20 fails,
        // one at 9.5 would not; 10 + 9 = 19 passes.
        let g = [10, 0, 10, 9, 10, 10];
        assert_eq!(at(&[10; 6], &g, 2, 1), Some(1.0));
        let g = [10, 0, 10, 4, 10, 10];
        assert_eq!(at(&[10; 6], &g, 2, 1), Some(3.0));
    }

    #[test]
    fn no_room_after_the_fault_is_not_recovered() {
        assert_eq!(at(&[5; 4], &[5; 4], 2, 3), None);
        assert_eq!(at(&[5; 4], &[5; 4], 1, 4), None);
        assert_eq!(at(&[], &[], 1, 0), None);
    }

    #[test]
    fn fault_ends_inside_a_bin_count_from_the_next_bin() {
        let seen = Observed {
            bin: Duration::from_millis(250),
            demand: &[8; 12],
            load: &[8; 12],
            goodput: &[8; 12],
        };
        // Ends at 1.1 s: the first whole bin after it starts at 1.25 s.
        let r = recovery_s(&seen, 4, Duration::from_millis(1100)).unwrap();
        assert!((r - 0.15).abs() < 1e-9, "{r}");
    }

    #[test]
    fn served_while_still_retried_is_not_recovered() {
        // Everyone answered from 1 s on, but retries double the load until
        // 3 s: the storm is over at 3 s.
        let seen = Observed {
            bin: S,
            demand: &[10; 6],
            load: &[10, 20, 20, 20, 12, 10],
            goodput: &[10; 6],
        };
        assert_eq!(recovery_s(&seen, 1, S), Some(3.0));
        // 12.5 per 10 new requests is the edge of baseline: 13 in the last
        // bin is over it, 12 + 13 in the last 2-bin window is not.
        let seen = Observed {
            load: &[10, 20, 20, 12, 12, 13],
            ..seen
        };
        assert_eq!(recovery_s(&seen, 1, S), None);
        assert_eq!(recovery_s(&seen, 2, S), Some(2.0));
    }

    #[test]
    fn no_demand_is_healthy() {
        assert_eq!(at(&[0; 4], &[0; 4], 1, 1), Some(0.0));
    }

    #[test]
    fn window_bins_round_up() {
        assert_eq!(window_bins(Duration::from_millis(250), PACED_WINDOW), 4);
        assert_eq!(window_bins(Duration::from_millis(300), PACED_WINDOW), 4);
        assert_eq!(window_bins(S, POISSON_WINDOW), 5);
        assert_eq!(window_bins(Duration::from_secs(2), PACED_WINDOW), 1);
    }
}
