//! The priority game-day's CPU-trigger run: the library's [`CpuTrigger`],
//! fed by the upstream's own worker threads, holding a CPU-bound server
//! near its threshold.
//!
//! The game-day's fleet, its servers and the upstream share one process,
//! so the process's CPU use (what
//! [`start`](stagger::limit::CpuTriggerBuilder::start) reads) would count
//! the callers' work too. The trigger is built
//! [`manual`](stagger::limit::CpuTriggerBuilder::manual) instead, and a
//! sampler thread here gives it, every 100 ms, the share of the upstream's
//! cores its worker threads used: for each thread, the time it ran plus
//! the time it waited for a core (`/proc/self/task/<tid>/schedstat`), over
//! the time passed. On a machine of its own that is the threads' CPU time;
//! on one shared with other work it also counts the time another process
//! held the core while the upstream had work to do, which is when the
//! upstream is busiest (its CPU time alone would read 50 % on a contended
//! core that never stops being wanted, and the trigger would never fire).
//! Without `schedstat`, the threads' CPU time from
//! `/proc/self/task/<tid>/stat` (in clock ticks) is used.
//!
//! The run records the reading, the trigger's smoothed utilisation and its
//! shed rate at every sample: the trace in the report. [`Holding`] sums
//! it up after the trigger has had time to settle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagger::limit::{CpuController, CpuTrigger};

use super::upstream::{own_tid, start, Cpu};
use super::{shed_layer, total, unloaded, Drive, PriorityParams, ServerRun};
use crate::Error;

/// The row's name in the report.
pub const SERVER: &str = "ShedLayer + priorities + CPU";

/// The CPU-trigger run: its row beside the other servers, the trace of
/// every sample and how the trigger held.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CpuRun {
    /// The CPU one request of this run burns, in ms.
    pub work_ms: f64,
    /// Its upstream's capacity as built, requests a second: cores ÷ the
    /// CPU of one request.
    pub capacity_rps: f64,
    /// Arrivals a second offered.
    pub rate_rps: f64,
    /// Its bare upstream's p99 at a quarter of its capacity (30 calls), in
    /// ms.
    pub unloaded_p99_ms: f64,
    /// How long the server was driven.
    pub duration_s: f64,
    /// The server's row, as the others'.
    pub server: ServerRun,
    /// Requests the CPU trigger shed (whole run).
    pub shed_by_cpu: u64,
    /// The settled trace, summed up.
    pub holding: Holding,
    /// Every sample.
    pub trace: Vec<TracePoint>,
}

/// How much heavier a request of this run is than the others': the
/// upstream's threads, not the callers and servers sharing the process's
/// runtime (slow in a debug build, or on a machine shared with other
/// work), must be what runs out at twice the capacity, or its CPU never
/// reaches the threshold.
pub const HEAVIER: u32 = 4;

/// Drives the ShedLayer by priority with a CPU trigger (threshold 80 %)
/// fed by the upstream's threads for `duration`, on an upstream of its own
/// whose requests burn [`HEAVIER`] × `iterations` (its unloaded p99
/// measured again), at `p.load` × its capacity as built.
pub(super) async fn run(
    p: &PriorityParams,
    iterations: u64,
    duration: Duration,
) -> Result<CpuRun, Error> {
    let heavy = PriorityParams {
        work: p.work * HEAVIER,
        duration,
        ..p.clone()
    };
    let cpu = Cpu::start(iterations.saturating_mul(u64::from(HEAVIER)), p.cores);
    let out = drive(&heavy, &cpu).await;
    // The threads end once the server's clones are gone.
    tokio::task::spawn_blocking(move || cpu.stop()).await.ok();
    out
}

async fn drive(p: &PriorityParams, cpu: &Cpu) -> Result<CpuRun, Error> {
    // The upstream's capacity as built: its cores ÷ the CPU of a request.
    // A closed-loop measurement on a shared machine can catch a moment
    // when other work holds the core and then offers too little to load
    // it; when other work takes CPU during the run, the upstream is only
    // the more overloaded, and its reading (time run or waiting for a
    // core) says so.
    let capacity = f64::from(p.cores) / p.work.as_secs_f64();
    // Its p99 at a quarter of that: 30 calls (the slowest is the p99).
    let unloaded_ms = unloaded(cpu, p, capacity / 4.0, 30).await?;
    let rate = capacity * p.load;
    let duration = p.duration;
    let controller = CpuController::new();
    let threshold = 0.8;
    let trigger = CpuTrigger::builder()
        .controller(controller)
        .manual()
        .map_err(|e| Error::usage(format!("--cpu-trigger: {e}")))?;
    let shed = shed_layer(p, true, Some(trigger.clone()))?;
    let drive = Drive::new(p, rate);
    let server = start(shed.clone(), cpu).await?;
    let sampler = Sampler::start(trigger, cpu.tids(), cpu.cores())?;
    let count = || total(shed.stats());
    let measured = drive.against(server, &count).await;
    let trace = sampler.stop();
    let stats = shed.stats();
    Ok(CpuRun {
        work_ms: p.work.as_secs_f64() * 1e3,
        capacity_rps: stagger_sim::rounded(capacity, 1),
        rate_rps: stagger_sim::rounded(rate, 1),
        unloaded_p99_ms: stagger_sim::rounded(unloaded_ms, 3),
        duration_s: duration.as_secs_f64(),
        server: ServerRun {
            server: SERVER,
            critical_p99_ratio: stagger_sim::rounded(measured.critical.p99_ms / unloaded_ms, 2),
            critical: measured.critical,
            sheddable: measured.sheddable,
            layer_shed: measured.layer_shed,
        },
        shed_by_cpu: stats.shed_cpu,
        holding: Holding::of(&trace, duration, threshold),
        trace,
    })
}

/// The sampler's period, the library's default.
pub const SAMPLE: Duration = Duration::from_millis(100);
/// The share of the run before the trigger counts as settled: its
/// controller moves the shed rate at most 0.5 a second and by 1 a second
/// per unit of error, so from cold to the 60 % that twice the capacity
/// needs takes a few seconds.
pub const SETTLING: f64 = 0.4;

/// A thread's time running and waiting for a core, if it can be read.
fn thread_busy(tid: u32) -> Option<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) {
        let mut f = s.split_whitespace().map(|v| v.parse::<u64>().ok());
        if let (Some(Some(run)), Some(Some(wait))) = (f.next(), f.next()) {
            return Some(Duration::from_nanos(run.saturating_add(wait)));
        }
    }
    // utime and stime, in clock ticks (100 a second on Linux), after the
    // command name in parentheses.
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// An error, before anything runs, where a thread's CPU cannot be read.
pub(super) fn readable() -> Result<(), Error> {
    match own_tid().and_then(|t| busy(&[t])) {
        Some(_) => Ok(()),
        None => Err(unreadable()),
    }
}

fn unreadable() -> Error {
    Error::usage(
        "--cpu-trigger: the upstream's threads' CPU cannot be read here \
         (/proc/self/task/<tid>/schedstat or stat; Linux only)",
    )
}

/// The busy time of all of `tids`, or none if one cannot be read.
pub(super) fn busy(tids: &[u32]) -> Option<Duration> {
    if tids.is_empty() {
        return None;
    }
    tids.iter().map(|&t| thread_busy(t)).sum()
}

/// One sample of the trace.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct TracePoint {
    /// Seconds since the run began.
    pub t_s: f64,
    /// This sample's reading: the upstream's busy share of its cores.
    pub reading: f64,
    /// The trigger's smoothed utilisation after the reading.
    pub utilisation: f64,
    /// The trigger's shed rate after the reading (0 to 1).
    pub shed_rate: f64,
}

/// The trace after [`SETTLING`], summed up: how near the threshold the
/// trigger held the upstream and how steady its shed rate was.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Holding {
    /// The trigger's threshold.
    pub threshold: f64,
    /// Seconds into the run from which the trace counts as settled.
    pub settled_from_s: f64,
    /// The mean smoothed utilisation, settled.
    pub mean_utilisation: f64,
    /// The mean shed rate, settled.
    pub mean_shed_rate: f64,
    /// The shed rate's highest minus its lowest value, settled.
    pub shed_rate_peak_to_peak: f64,
    /// Settled samples at which the shed rate was 0 (the trigger let go).
    pub samples_not_shedding: usize,
    /// Times the settled shed rate turned back after moving at least
    /// [`SWING`] one way: a controller flapping between "shed" and "do
    /// not" swings every few samples; one following the load (which other
    /// processes on a shared machine change) a few times a run.
    pub swings: usize,
    /// Settled samples.
    pub samples: usize,
}

impl Holding {
    /// Sums up `trace` from [`SETTLING`] of `run` on.
    pub fn of(trace: &[TracePoint], run: Duration, threshold: f64) -> Holding {
        let from = run.as_secs_f64() * SETTLING;
        let settled: Vec<&TracePoint> = trace.iter().filter(|p| p.t_s >= from).collect();
        let n = settled.len().max(1) as f64;
        let rates = settled.iter().map(|p| p.shed_rate);
        let (lo, hi) = rates
            .clone()
            .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(r), h.max(r)));
        Holding {
            threshold,
            settled_from_s: from,
            mean_utilisation: settled.iter().map(|p| p.utilisation).sum::<f64>() / n,
            mean_shed_rate: rates.sum::<f64>() / n,
            shed_rate_peak_to_peak: if settled.is_empty() { 0.0 } else { hi - lo },
            samples_not_shedding: settled.iter().filter(|p| p.shed_rate == 0.0).count(),
            swings: swings(settled.iter().map(|p| p.shed_rate)),
            samples: settled.len(),
        }
    }
}

/// How far the shed rate must move one way before turning back counts as
/// a swing.
pub const SWING: f64 = 0.1;

/// The turns of `rates` after a move of at least [`SWING`]: from each
/// turning point, the rate must go [`SWING`] beyond it the other way.
fn swings(rates: impl Iterator<Item = f64>) -> usize {
    let mut n = 0;
    // The extreme of the current move, and its direction (+1 up, -1 down,
    // 0 not yet known), and where the move started.
    let (mut start, mut extreme, mut dir) = (f64::NAN, f64::NAN, 0.0f64);
    for r in rates {
        if start.is_nan() {
            (start, extreme) = (r, r);
            continue;
        }
        if dir == 0.0 {
            if (r - start).abs() >= SWING {
                dir = (r - start).signum();
                extreme = r;
            }
            continue;
        }
        if (r - extreme) * dir > 0.0 {
            extreme = r;
        } else if (extreme - r) * dir >= SWING {
            n += 1;
            dir = -dir;
            extreme = r;
        }
    }
    n
}

/// Feeds `trigger` with the upstream's busy share every [`SAMPLE`] until
/// stopped, recording the trace.
pub(super) struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<TracePoint>>,
}

impl Sampler {
    /// Starts sampling the threads `tids` (`cores` of them count as the
    /// whole allowance); an error if their CPU cannot be read.
    pub(super) fn start(trigger: CpuTrigger, tids: Vec<u32>, cores: u32) -> Result<Sampler, Error> {
        if busy(&tids).is_none() {
            return Err(unreadable());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gameday-cpu".into())
            .spawn(move || sample(&trigger, &tids, f64::from(cores.max(1)), &flag))
            .map_err(|e| Error::with(crate::ErrorKind::Run, "the CPU sampler", e))?;
        Ok(Sampler { stop, thread })
    }

    /// Stops sampling; the trace.
    pub(super) fn stop(self) -> Vec<TracePoint> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

fn sample(trigger: &CpuTrigger, tids: &[u32], cores: f64, stop: &AtomicBool) -> Vec<TracePoint> {
    let begin = Instant::now();
    let mut trace = Vec::new();
    let mut last = (begin, busy(tids));
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(SAMPLE);
        let now = Instant::now();
        let used = busy(tids);
        if let (Some(before), Some(after)) = (last.1, used) {
            let wall = now.saturating_duration_since(last.0).as_secs_f64();
            if wall > 0.0 {
                let reading = after.saturating_sub(before).as_secs_f64() / wall / cores;
                trigger.observe(now, reading);
                trace.push(TracePoint {
                    t_s: now.saturating_duration_since(begin).as_secs_f64(),
                    reading,
                    utilisation: trigger.utilisation(),
                    shed_rate: trigger.shed_rate(),
                });
            }
        }
        last = (now, used);
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_s: f64, utilisation: f64, shed_rate: f64) -> TracePoint {
        TracePoint {
            t_s,
            reading: utilisation,
            utilisation,
            shed_rate,
        }
    }

    #[test]
    fn holding_counts_only_the_settled_trace() {
        // 10 s: cold and climbing for the first 4 s, then steady near 80 %.
        let trace: Vec<TracePoint> = (1..=100)
            .map(|i| {
                let t = f64::from(i) / 10.0;
                if t < 4.0 {
                    point(t, 1.0, t / 8.0)
                } else {
                    point(
                        t,
                        0.8 + if i % 2 == 0 { 0.02 } else { -0.02 },
                        0.55 + 0.05 * (t / 10.0),
                    )
                }
            })
            .collect();
        let h = Holding::of(&trace, Duration::from_secs(10), 0.8);
        assert_eq!(h.samples, 61);
        assert!((h.mean_utilisation - 0.8).abs() < 0.01, "{h:?}");
        assert!(h.shed_rate_peak_to_peak < 0.04, "{h:?}");
        assert_eq!(h.samples_not_shedding, 0);
    }

    #[test]
    fn swings_count_turns_not_noise() {
        // A flapping rate, 0 ↔ 0.6 every other sample: every turn counts.
        let flapping = (0..20).map(|i| if i % 2 == 0 { 0.0 } else { 0.6 });
        assert_eq!(swings(flapping), 18);
        // A steady rate with ±0.04 of noise: none.
        let steady = (0..60).map(|i| 0.6 + if i % 2 == 0 { 0.04 } else { -0.04 });
        assert_eq!(swings(steady), 0);
        // Up from 0.3 to 0.8 and back down to 0.5: one.
        let once = (0..=10)
            .map(|i| 0.3 + 0.05 * f64::from(i))
            .chain((1..=6).map(|i| 0.8 - 0.05 * f64::from(i)));
        assert_eq!(swings(once), 1);
    }

    #[test]
    fn this_threads_cpu_is_read_while_it_works() {
        let Some(tid) = own_tid() else {
            return; // not Linux: the run says so instead
        };
        let before = busy(&[tid]).expect("a reading of this thread");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(60) {
            std::hint::black_box(super::super::upstream::burn(10_000));
        }
        let after = busy(&[tid]).unwrap();
        // 60 ms of work, read to the nanosecond (schedstat) or the tick.
        assert!(after > before, "{before:?} → {after:?}");
        assert!(busy(&[]).is_none());
    }
}
