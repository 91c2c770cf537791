//! `stagger gameday --soak`: one long run with the process's resident memory
//! and open file descriptors sampled from `/proc/self`, to show that what
//! lives for the whole run — budgets, breakers, windows, per-thread state,
//! connection pools — holds its memory flat under a steady stream of calls.
//!
//! The verdict compares the sample at the end of the warm-up (two minutes,
//! or a third of a shorter run) with the last sample of the traffic period:
//! resident memory must grow by less than [`MAX_GROWTH_PCT`], and open
//! descriptors by no more than [`FD_SLACK`] (sockets come and go with the
//! traffic in flight). The harness keeps its own memory bounded too: the
//! server's idempotency ledger forgets old keys, and the fleet keeps a
//! uniform sample of at most [`Reservoir::CAP`] latencies ([`Reservoir`]).

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

/// The most resident memory may grow after the warm-up, in percent.
pub const MAX_GROWTH_PCT: f64 = 5.0;
/// Open descriptors that may come and go with the traffic in flight.
pub const FD_SLACK: u64 = 16;
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

/// The warm-up of a soak of `duration`: two minutes, or a third of a
/// shorter run.
pub fn warmup(duration: Duration) -> Duration {
    (duration / 3).min(MAX_WARMUP)
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
    /// End of the warm-up, s.
    pub warmup_s: f64,
    /// End of the traffic period, s.
    pub end_s: f64,
    /// Resident memory at the end of the warm-up, KiB.
    pub rss_warm_kb: u64,
    /// At the end of the traffic period, KiB.
    pub rss_end_kb: u64,
    /// The most after the warm-up, KiB.
    pub rss_max_kb: u64,
    /// `(end − warm) ÷ warm`, percent.
    pub rss_growth_pct: f64,
    /// Open descriptors at the end of the warm-up.
    pub fds_warm: u64,
    /// At the end of the traffic period.
    pub fds_end: u64,
    /// The most after the warm-up.
    pub fds_max: u64,
    /// Growth below [`MAX_GROWTH_PCT`] and descriptors within [`FD_SLACK`].
    pub flat: bool,
    /// Every sample.
    pub samples: Vec<Sample>,
}

/// Judges `samples` of a run whose traffic lasted `duration`; `None` when
/// there is no sample at or after the warm-up.
pub fn verdict(samples: Vec<Sample>, duration: Duration) -> Option<Verdict> {
    let warm_s = warmup(duration).as_secs_f64();
    let end_s = duration.as_secs_f64();
    let during: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s >= warm_s && s.t_s <= end_s)
        .collect();
    let warm = **during.first()?;
    let end = **during.last()?;
    let rss_growth_pct =
        (end.rss_kb as f64 - warm.rss_kb as f64) / (warm.rss_kb.max(1) as f64) * 100.0;
    let flat = rss_growth_pct < MAX_GROWTH_PCT && end.fds <= warm.fds + FD_SLACK;
    Some(Verdict {
        warmup_s: warm.t_s,
        end_s: end.t_s,
        rss_warm_kb: warm.rss_kb,
        rss_end_kb: end.rss_kb,
        rss_max_kb: during.iter().map(|s| s.rss_kb).max().unwrap_or(0),
        rss_growth_pct,
        fds_warm: warm.fds,
        fds_end: end.fds,
        fds_max: during.iter().map(|s| s.fds).max().unwrap_or(0),
        flat,
        samples,
    })
}

/// The verdict in a few lines, for the table output.
pub fn text(v: &Verdict) -> String {
    let mb = |kb: u64| kb as f64 / 1024.0;
    format!(
        "soak: resident memory {:.1} MiB at {:.0} s (end of warm-up), {:.1} MiB at {:.0} s \
         (end of traffic), most {:.1} MiB: {:+.1} % (bound {MAX_GROWTH_PCT} %)\n\
         soak: open descriptors {} → {} (most {}; bound +{FD_SLACK})\n\
         soak: {}",
        mb(v.rss_warm_kb),
        v.warmup_s,
        mb(v.rss_end_kb),
        v.end_s,
        mb(v.rss_max_kb),
        v.rss_growth_pct,
        v.fds_warm,
        v.fds_end,
        v.fds_max,
        if v.flat { "flat" } else { "GREW" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t_s: f64, rss_kb: u64, fds: u64) -> Sample {
        Sample { t_s, rss_kb, fds }
    }

    #[test]
    fn growth_is_measured_from_the_end_of_the_warm_up() {
        let d = Duration::from_secs(600);
        // A big warm-up then flat: flat.
        let v = verdict(
            vec![s(0.0, 1000, 10), s(120.0, 5000, 30), s(600.0, 5100, 32)],
            d,
        )
        .unwrap();
        assert!(v.flat, "{v:?}");
        assert_eq!((v.rss_warm_kb, v.rss_end_kb), (5000, 5100));
        // 6 % after the warm-up: grew.
        let v = verdict(vec![s(120.0, 5000, 30), s(600.0, 5300, 30)], d).unwrap();
        assert!(!v.flat);
        // Descriptors that pile up: grew.
        let v = verdict(vec![s(120.0, 5000, 30), s(600.0, 5000, 47)], d).unwrap();
        assert!(!v.flat);
        // Samples after the traffic period do not count.
        let v = verdict(vec![s(120.0, 5000, 30), s(601.0, 9000, 30)], d).unwrap();
        assert!(v.flat);
        assert!(verdict(vec![s(10.0, 1, 1)], d).is_none());
    }

    #[test]
    fn short_soaks_warm_up_for_a_third() {
        assert_eq!(warmup(Duration::from_secs(90)), Duration::from_secs(30));
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
