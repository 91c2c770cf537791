//! `stagger gameday --soak`: one long run with the process's resident memory
//! and open file descriptors sampled from `/proc/self`, to show that what
//! lives for the whole run — budgets, breakers, windows, per-thread state,
//! connection pools — holds its memory flat under a steady stream of calls.
//!
//! Both readings saw-tooth with the traffic (connections open and close,
//! the allocator takes and gives back), so the verdict compares averages,
//! not single samples: the quarter of the run just after the warm-up (two
//! minutes, or half a shorter run) against the last quarter. Resident
//! memory and open descriptors must each grow by less than
//! [`MAX_GROWTH_PCT`] (descriptors also get [`FD_SLACK`], for small counts).
//! The harness keeps its own memory bounded too: the server's idempotency
//! ledger forgets old keys, and the fleet keeps a uniform sample of at most
//! [`Reservoir::CAP`] latencies ([`Reservoir`]).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The most resident memory and open descriptors may grow after the
/// warm-up, in percent.
pub const MAX_GROWTH_PCT: f64 = 5.0;
/// Open descriptors that may come and go on top of [`MAX_GROWTH_PCT`].
pub const FD_SLACK: f64 = 4.0;
/// The longest warm-up.
const MAX_WARMUP: Duration = Duration::from_secs(120);

/// One reading of `/proc/self`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since sampling started.
    pub t_s: f64,
    /// Resident set size, KiB (`VmRSS`).
    pub rss_kb: u64,
    /// Open file descriptors (entries of `/proc/self/fd`).
    pub fds: u64,
}

/// Reads `/proc/self` now; `None` where there is no procfs.
pub fn sample(t_s: f64) -> Option<Sample> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let rss_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    let fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(Sample { t_s, rss_kb, fds })
}

/// A thread sampling every `every` until [`Sampler::finish`].
pub struct Sampler {
    stop: mpsc::Sender<()>,
    thread: thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Starts sampling now.
    pub fn start(every: Duration) -> Sampler {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            let start = Instant::now();
            let mut samples = Vec::new();
            loop {
                if let Some(s) = sample(start.elapsed().as_secs_f64()) {
                    samples.push(s);
                }
                match stopped.recv_timeout(every) {
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    _ => return samples,
                }
            }
        });
        Sampler { stop, thread }
    }

    /// Stops sampling and returns the samples.
    pub fn finish(self) -> Vec<Sample> {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// How often a soak of `duration` samples: 60 samples or so, every 1 to 5 s.
pub fn interval(duration: Duration) -> Duration {
    (duration / 60).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// The warm-up of a soak of `duration`: two minutes, or half a shorter
/// run (the allocator and the pools are still settling in the first
/// minute).
pub fn warmup(duration: Duration) -> Duration {
    (duration / 2).min(MAX_WARMUP)
}

/// The latencies of successful calls, for the percentiles: every one up to
/// [`Reservoir::CAP`], then a uniform sample of that many (reservoir
/// sampling), so the memory they take stops growing however long the run.
/// No ordinary game-day (at most 100 000 requests) reaches the cap.
#[derive(Debug, Default)]
pub struct Reservoir {
    kept: Vec<u32>,
    seen: u64,
}

impl Reservoir {
    /// The most latencies kept (400 KB).
    pub const CAP: usize = 100_000;

    /// Offers one latency.
    pub fn add(&mut self, ms: u32) {
        self.seen += 1;
        if self.kept.len() < Self::CAP {
            self.kept.push(ms);
            return;
        }
        // Keep the n-th with probability CAP / n, in a uniform slot. The
        // index comes from a hash of n (SplitMix64): no RNG state to share.
        let mut z = self.seen.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = z % self.seen;
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.kept.get_mut(j)) {
            *slot = ms;
        }
    }

    /// The latencies kept.
    pub fn into_vec(self) -> Vec<u32> {
        self.kept
    }
}

/// What a soak showed.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The window just after the warm-up, s since the start: `[from, to]`.
    pub warm_window_s: [f64; 2],
    /// The last window of the traffic period.
    pub end_window_s: [f64; 2],
    /// Mean resident memory over the first window, KiB.
    pub rss_warm_kb: f64,
    /// Over the last window, KiB.
    pub rss_end_kb: f64,
    /// The most after the warm-up, KiB.
    pub rss_max_kb: u64,
    /// `(end − warm) ÷ warm`, percent.
    pub rss_growth_pct: f64,
    /// Mean open descriptors over the first window.
    pub fds_warm: f64,
    /// Over the last window.
    pub fds_end: f64,
    /// The most after the warm-up.
    pub fds_max: u64,
    /// `(end − warm) ÷ warm`, percent.
    pub fds_growth_pct: f64,
    /// Both grew by less than [`MAX_GROWTH_PCT`] (descriptors: plus
    /// [`FD_SLACK`]).
    pub flat: bool,
    /// Every sample.
    pub samples: Vec<Sample>,
}

/// Judges `samples` of a run whose traffic lasted `duration`; `None` without
/// samples in both windows.
pub fn verdict(samples: Vec<Sample>, duration: Duration) -> Option<Verdict> {
    let warm_s = warmup(duration).as_secs_f64();
    let end_s = duration.as_secs_f64();
    let quarter = (end_s - warm_s) / 4.0;
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s >= warm_s && s.t_s <= end_s)
        .collect();
    let window = |from: f64, to: f64| -> Option<(f64, f64)> {
        let w: Vec<&&Sample> = after
            .iter()
            .filter(|s| s.t_s >= from && s.t_s <= to)
            .collect();
        let k = w.len() as f64;
        let rss = w.iter().map(|s| s.rss_kb as f64).sum::<f64>() / k;
        let fds = w.iter().map(|s| s.fds as f64).sum::<f64>() / k;
        (!w.is_empty()).then_some((rss, fds))
    };
    let warm_window = [warm_s, warm_s + quarter];
    let end_window = [end_s - quarter, end_s];
    let (rss_warm, fds_warm) = window(warm_window[0], warm_window[1])?;
    let (rss_end, fds_end) = window(end_window[0], end_window[1])?;
    let pct = |a: f64, b: f64| (b - a) / a.max(1.0) * 100.0;
    let rss_growth_pct = pct(rss_warm, rss_end);
    let fds_growth_pct = pct(fds_warm, fds_end);
    let flat = rss_growth_pct < MAX_GROWTH_PCT
        && fds_end < fds_warm * (1.0 + MAX_GROWTH_PCT / 100.0) + FD_SLACK;
    Some(Verdict {
        warm_window_s: warm_window,
        end_window_s: end_window,
        rss_warm_kb: rss_warm,
        rss_end_kb: rss_end,
        rss_max_kb: after.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        rss_growth_pct,
        fds_warm,
        fds_end,
        fds_max: after.iter().map(|s| s.fds).max().unwrap_or(0),
        fds_growth_pct,
        flat,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_s: f64, rss_kb: u64, fds: u64) -> Sample {
        Sample { t_s, rss_kb, fds }
    }

    /// Samples every 5 s of a 600 s run: `rss(t)` and `fds(t)`.
    fn run(rss: impl Fn(f64) -> u64, fds: impl Fn(f64) -> u64) -> Vec<Sample> {
        (0..=120)
            .map(|i| {
                let t = f64::from(i) * 5.0;
                s(t, rss(t), fds(t))
            })
            .collect()
    }

    #[test]
    fn growth_compares_the_quarter_after_the_warm_up_with_the_last() {
        let d = Duration::from_secs(600);
        // A big warm-up, then a saw-tooth around a flat line: flat.
        let v = verdict(
            run(
                |t| {
                    if t < 120.0 {
                        1000
                    } else {
                        5000 + (t as u64 % 60) * 5
                    }
                },
                |t| 480 + (t as u64 % 45),
            ),
            d,
        )
        .unwrap();
        assert!(v.flat, "{v:?}");
        assert_eq!(v.warm_window_s, [120.0, 240.0]);
        assert_eq!(v.end_window_s, [480.0, 600.0]);
        // A slow leak: 1 KiB a second on 5 MiB is 8 % over 8 minutes.
        let v = verdict(run(|t| 5000 + t as u64, |_| 50), d).unwrap();
        assert!(!v.flat && v.rss_growth_pct > 5.0, "{v:?}");
        // Descriptors that pile up, one every 20 s: grew.
        let v = verdict(run(|_| 5000, |t| 50 + t as u64 / 20), d).unwrap();
        assert!(!v.flat && v.fds_growth_pct > 5.0, "{v:?}");
        // Samples after the traffic period do not count.
        let mut late = run(|_| 5000, |_| 50);
        late.push(s(601.0, 90_000, 900));
        assert!(verdict(late, d).unwrap().flat);
        assert!(verdict(vec![s(10.0, 1, 1)], d).is_none());
    }

    #[test]
    fn short_soaks_warm_up_for_half() {
        assert_eq!(warmup(Duration::from_secs(120)), Duration::from_secs(60));
        assert_eq!(warmup(Duration::from_secs(600)), Duration::from_secs(120));
        assert_eq!(interval(Duration::from_secs(600)), Duration::from_secs(5));
        assert_eq!(interval(Duration::from_secs(30)), Duration::from_secs(1));
    }

    #[test]
    fn the_reservoir_keeps_all_then_a_uniform_sample() {
        let mut r = Reservoir::default();
        for i in 0..1000 {
            r.add(i);
        }
        assert_eq!(r.kept.len(), 1000);
        let n = 4 * Reservoir::CAP as u32;
        for i in 0..n {
            r.add(i);
        }
        let kept = r.into_vec();
        assert_eq!(kept.len(), Reservoir::CAP);
        // Uniform: the mean of a sample of 0..n is close to n / 2.
        let mean = kept.iter().map(|&x| f64::from(x)).sum::<f64>() / kept.len() as f64;
        assert!((mean / f64::from(n) - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn this_process_can_be_sampled() {
        let x = sample(0.0).unwrap();
        assert!(x.rss_kb > 0 && x.fds >= 3);
    }
}
