//! A CPU-bound server asked for more than it can do, in virtual time: does
//! shedding by priority keep the work that matters served?
//!
//! Requests arrive as a Poisson stream, a share of them `critical` and the
//! rest `sheddable`; each needs a few milliseconds of one core's CPU (not a
//! sleep: a core is busy for that long) and its caller waits at most a
//! deadline. The server admits through the library's own pieces — the
//! [`Limiter`] (plain, or deciding by priority with [`Ceilings`]) and the
//! [`CpuTrigger`], fed every 100 ms with the share of core time that was
//! busy — and runs admitted work first in, first out on its cores,
//! dropping work whose caller's deadline passed before it starts. Shedding
//! costs no CPU here (a real server pays a little for each refusal).
//!
//! ```
//! use stagger_sim::priority::{run, Shedding, Workload};
//!
//! let w = Workload { seconds: 10.0, ..Workload::default() }; // 2× capacity
//! let plain = run(&w, Shedding::Limit, 1);
//! let by_priority = run(&w, Shedding::Priorities, 1);
//! assert!(by_priority.critical.success() > 0.99);
//! assert!(by_priority.critical.success() > plain.critical.success() + 0.2);
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use stagger::limit::{Completion, CpuTrigger, Limiter, Token};
use stagger::priority::{Ceilings, Class, Priority};
use stagger::random::{FastRng, RandomSource};

/// What arrives and what the server can do.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// Cores serving requests.
    pub cores: u32,
    /// CPU time one request needs, drawn uniformly from ±20 % around this.
    pub cpu: Duration,
    /// Arrivals per second as a multiple of the server's capacity
    /// (`cores ÷ cpu`).
    pub load: f64,
    /// The share of arrivals that is `critical` (the rest is `sheddable`).
    pub critical: f64,
    /// How long each caller waits.
    pub deadline: Duration,
    /// Virtual time simulated; the first fifth is a warm-up, not counted.
    pub seconds: f64,
    /// The limiter's limit, per core: requests in flight (running or
    /// waiting for a core).
    pub limit_per_core: u32,
}

impl Default for Workload {
    /// 2 cores, 10 ms a request (200 a second), twice that arriving, 20 %
    /// critical, a 1 s deadline, 30 s, a limit of 4 in flight per core.
    fn default() -> Self {
        Workload {
            cores: 2,
            cpu: Duration::from_millis(10),
            load: 2.0,
            critical: 0.2,
            deadline: Duration::from_secs(1),
            seconds: 30.0,
            limit_per_core: 4,
        }
    }
}

/// How the server decides what to take on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shedding {
    /// Everything is queued; only work whose deadline passed is dropped.
    Queue,
    /// Today's limited `ShedLayer`: a fixed limit
    /// ([`limit_per_core`](Workload::limit_per_core)), blind to priorities.
    Limit,
    /// The same limit deciding by priority (the default [`Ceilings`]).
    Priorities,
    /// Priorities and the CPU trigger (80 %) beside the limit.
    PrioritiesCpu,
}

impl Shedding {
    /// Every way, in the order a report shows them.
    pub const ALL: [Shedding; 4] = [
        Shedding::Queue,
        Shedding::Limit,
        Shedding::Priorities,
        Shedding::PrioritiesCpu,
    ];

    /// Its name in a report.
    pub const fn name(self) -> &'static str {
        match self {
            Shedding::Queue => "queue + deadline drop",
            Shedding::Limit => "limit (no priorities)",
            Shedding::Priorities => "limit by priority",
            Shedding::PrioritiesCpu => "limit by priority + CPU trigger",
        }
    }
}

/// What became of one level's requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcomes {
    /// Requests that arrived (after the warm-up).
    pub offered: u64,
    /// Answered within their deadline.
    pub served: u64,
    /// Turned away at once (by the limit or the CPU trigger).
    pub shed: u64,
    /// Dropped unstarted or finished after their caller gave up.
    pub late: u64,
    latencies: Vec<Duration>,
}

impl Outcomes {
    /// The share served in time.
    pub fn success(&self) -> f64 {
        if self.offered == 0 {
            return 1.0;
        }
        self.served as f64 / self.offered as f64
    }

    /// The 99th percentile latency of the requests served in time.
    pub fn p99(&self) -> Duration {
        let mut l = self.latencies.clone();
        l.sort_unstable();
        l.get((l.len() * 99 / 100).min(l.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    }
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The critical requests.
    pub critical: Outcomes,
    /// The sheddable requests.
    pub sheddable: Outcomes,
    /// The share of core time busy after the warm-up.
    pub utilisation: f64,
    /// The CPU trigger's shed rate at each reading after the warm-up
    /// (empty without a trigger).
    pub shed_rate: Vec<f64>,
}

/// A request in the server.
struct Job {
    critical: bool,
    arrived: u64,
    cpu: u64,
    token: Option<Token>,
}

/// Runs `workload` under `shedding` with the seed `seed`.
pub fn run(workload: &Workload, shedding: Shedding, seed: u64) -> Report {
    Sim::new(workload, shedding, seed).run()
}

/// Nanoseconds.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

const SAMPLE: u64 = 100_000_000;

struct Sim<'w> {
    w: &'w Workload,
    rng: FastRng,
    base: Instant,
    limiter: Option<Limiter>,
    ceilings: Option<Ceilings>,
    cpu: Option<CpuTrigger>,
    queue: VecDeque<Job>,
    /// (finish time, core) of the work running.
    running: BinaryHeap<Reverse<(u64, u32)>>,
    on_core: Vec<Option<Job>>,
    busy_ns: u64,
    warm: u64,
    report: Report,
}

impl<'w> Sim<'w> {
    fn new(w: &'w Workload, shedding: Shedding, seed: u64) -> Self {
        let cores = w.cores.max(1);
        let limited = shedding != Shedding::Queue;
        let by_priority = matches!(shedding, Shedding::Priorities | Shedding::PrioritiesCpu);
        Sim {
            w,
            rng: FastRng::seeded(seed),
            base: Instant::now(),
            limiter: limited.then(|| Limiter::fixed(w.limit_per_core.max(1) * cores)),
            ceilings: by_priority.then(Ceilings::default),
            cpu: (shedding == Shedding::PrioritiesCpu)
                .then(|| CpuTrigger::builder().manual().ok())
                .flatten(),
            queue: VecDeque::new(),
            running: BinaryHeap::new(),
            on_core: (0..cores).map(|_| None).collect(),
            busy_ns: 0,
            // A whole number of readings.
            warm: (w.seconds * 0.2 * 1e9) as u64 / SAMPLE * SAMPLE,
            report: Report {
                critical: Outcomes::default(),
                sheddable: Outcomes::default(),
                utilisation: 0.0,
                shed_rate: Vec::new(),
            },
        }
    }

    fn at(&self, t: u64) -> Instant {
        self.base + Duration::from_nanos(t)
    }

    fn outcomes(&mut self, critical: bool) -> &mut Outcomes {
        if critical {
            &mut self.report.critical
        } else {
            &mut self.report.sheddable
        }
    }

    fn run(mut self) -> Report {
        let w = self.w;
        let end = (w.seconds * 1e9) as u64;
        let capacity = f64::from(w.cores.max(1)) / w.cpu.as_secs_f64().max(1e-6);
        let rate = (capacity * w.load).max(1e-9);
        let mut next_arrival = 0u64;
        let mut next_sample = SAMPLE;
        let mut busy_at_sample = 0u64;
        let mut busy_after_warm = 0u64;
        loop {
            let next_finish = self.running.peek().map(|Reverse((t, _))| *t);
            let t = [Some(next_arrival), next_finish, Some(next_sample)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(end);
            if t >= end {
                break;
            }
            if next_finish == Some(t) {
                self.finish(t);
            } else if t == next_sample {
                let busy = self.busy_until(t);
                let u = (busy - busy_at_sample) as f64 / (SAMPLE as f64 * f64::from(w.cores));
                busy_at_sample = busy;
                if t == self.warm {
                    busy_after_warm = busy;
                }
                if let Some(c) = &self.cpu {
                    c.observe(self.at(t), u);
                    if t > self.warm {
                        self.report.shed_rate.push(c.shed_rate());
                    }
                }
                next_sample += SAMPLE;
            } else {
                self.arrive(t);
                let gap = -(1.0 - self.rng.next_f64()).ln() / rate;
                next_arrival = t + (gap * 1e9) as u64;
            }
        }
        let busy = self.busy_until(end) - busy_after_warm;
        self.report.utilisation =
            busy as f64 / ((end - self.warm) as f64 * f64::from(self.w.cores));
        self.report
    }

    /// Core time busy up to `t` (work still running counted up to `t`).
    fn busy_until(&self, t: u64) -> u64 {
        let running: u64 = self
            .running
            .iter()
            .map(|Reverse((f, c))| {
                let job = self.on_core[*c as usize].as_ref().map_or(0, |j| j.cpu);
                job.saturating_sub(f.saturating_sub(t))
            })
            .sum();
        self.busy_ns + running
    }

    fn arrive(&mut self, t: u64) {
        let critical = self.rng.next_f64() < self.w.critical;
        let counted = t >= self.warm;
        if counted {
            self.outcomes(critical).offered += 1;
        }
        let p = if critical {
            Priority::CRITICAL
        } else {
            Priority::SHEDDABLE
        };
        let class = Class::new(p, false);
        let now = self.at(t);
        let shed_by_cpu = match &self.cpu {
            Some(c) => c.sheds(class, &mut self.rng),
            None => false,
        };
        let token = match (&self.limiter, shed_by_cpu) {
            (_, true) => Err(()),
            (None, false) => Ok(None),
            (Some(l), false) => match &self.ceilings {
                Some(c) => l.try_acquire_as(class, c, now).map(Some).map_err(|_| ()),
                None => l.try_acquire(false, now).map(Some).map_err(|_| ()),
            },
        };
        let Ok(token) = token else {
            if counted {
                self.outcomes(critical).shed += 1;
            }
            return;
        };
        let spread = 0.8 + 0.4 * self.rng.next_f64();
        let cpu = (ns(self.w.cpu) as f64 * spread) as u64;
        self.queue.push_back(Job {
            critical,
            arrived: t,
            cpu,
            token,
        });
        self.start_next(t);
    }

    /// Starts queued work on free cores, dropping work nobody waits for.
    fn start_next(&mut self, t: u64) {
        let deadline = ns(self.w.deadline);
        while let Some(core) = self.on_core.iter().position(Option::is_none) {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            if t >= job.arrived + deadline {
                self.end(job, t, false);
                continue;
            }
            self.running.push(Reverse((t + job.cpu, core as u32)));
            self.on_core[core] = Some(job);
        }
    }

    fn finish(&mut self, t: u64) {
        let Some(Reverse((_, core))) = self.running.pop() else {
            return;
        };
        if let Some(job) = self.on_core[core as usize].take() {
            self.busy_ns += job.cpu;
            let in_time = t <= job.arrived + ns(self.w.deadline);
            self.end(job, t, in_time);
        }
        self.start_next(t);
    }

    fn end(&mut self, mut job: Job, t: u64, in_time: bool) {
        let now = self.at(t);
        if let (Some(l), Some(token)) = (&self.limiter, job.token.take()) {
            let how = if in_time {
                Completion::Served
            } else {
                Completion::Overloaded
            };
            l.release(token, how, now);
        }
        if job.arrived < self.warm {
            return;
        }
        let o = self.outcomes(job.critical);
        if in_time {
            o.served += 1;
            o.latencies.push(Duration::from_nanos(t - job.arrived));
        } else {
            o.late += 1;
        }
    }
}

/// Every way of shedding run on `workload` once per seed, in
/// [`Shedding::ALL`]'s order.
pub fn compare(workload: &Workload, seeds: &[u64]) -> Vec<(Shedding, Vec<Report>)> {
    Shedding::ALL
        .iter()
        .map(|&s| {
            (
                s,
                seeds.iter().map(|&seed| run(workload, s, seed)).collect(),
            )
        })
        .collect()
}

/// `(min, max)` of `f` over `reports`.
pub fn range(reports: &[Report], f: impl Fn(&Report) -> f64) -> (f64, f64) {
    reports
        .iter()
        .map(f)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
}
