//! The hedging model: how much of the latency tail a hedge cuts, what it
//! costs, and when it turns into a storm.
//!
//! Each attempt's service time is independent: with probability
//! `1 − stall_prob` LogNormal with median `latency_median` and shape
//! `latency_sigma`, otherwise the same plus `stall`. Requests arrive as a
//! Poisson stream. With unlimited capacity every attempt is served at once
//! (requests arrive at 1,000/s, which only paces the sliding windows); with
//! `N` servers, each serves one attempt at a time from one FIFO queue, and
//! requests arrive at `utilisation · N / E[service]` — the utilisation the
//! servers would see without hedges.
//!
//! Every request is a call of the library's own [`HedgePolicy`], driven in
//! virtual time ([`HedgePolicy::poll`] and [`HedgePolicy::report`]): the
//! percentile delay reads the policy's own latency window, the budget is the
//! policy's own. When a call ends (its first attempt answers), its other
//! attempts leave the queue; with [`Cancel::Running`] attempts already being
//! served stop too, with [`Cancel::Queued`] they run to completion and keep
//! their server busy.
//!
//! **The closed form it is tested against.** With unlimited capacity, no
//! budget, `K` attempts and a fixed delay `d`, attempt `j` goes out at
//! `(j−1)·d` unless the call has ended, and the call ends at
//! `T = min_j ((j−1)·d + S_j)` with `S_j` independent. So
//! `P(T > t) = Π_{j=1..K} F̄(t − (j−1)·d)`, where `F̄(x) = 1` for `x ≤ 0` and
//! otherwise `F̄(x) = (1−p)·Q(x) + p·Q(x − stall)`,
//! `Q(x) = ½·erfc((ln x − ln median) / (σ·√2))` (with `Q(x) = 1` for
//! `x ≤ 0`). For two attempts: `P(T > t) = F̄(t)` for `t < d` and
//! `F̄(t)·F̄(t − d)` for `t ≥ d`. [`survival`] computes it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;
use stagger::hedging::{HedgePolicyConfig, HedgeStep, HedgedCall};
use stagger::random::{FastRng, RandomSource};
use stagger::{Call, HedgeDelay, HedgePolicy, Outcome};

use crate::engine::{exponential_ns, mix, ns, par_map};
use crate::{Options, SimError};

/// Requests per second with unlimited capacity (paces the windows only).
const UNLIMITED_RATE: f64 = 1_000.0;
/// The most servers a run may have.
pub const MAX_SERVERS: u32 = 100_000;
/// The most requests one run may simulate.
pub const MAX_REQUESTS: u64 = 20_000_000;

/// What happens to a call's other attempts when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cancel {
    /// Queued attempts leave the queue; attempts being served run to
    /// completion (most servers never hear of the cancellation).
    Queued,
    /// Queued attempts leave the queue and attempts being served stop,
    /// freeing their server (cancellation reaches the handler).
    Running,
}

impl Cancel {
    /// `queued` or `running`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Cancel::Queued => "queued",
            Cancel::Running => "running",
        }
    }
}

impl FromStr for Cancel {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        match s {
            "queued" => Ok(Cancel::Queued),
            "running" => Ok(Cancel::Running),
            _ => Err(SimError::new(
                "cancel",
                format!("`{s}` is not queued or running"),
            )),
        }
    }
}

/// The parameters of the hedging model (defaults as the CLI's).
#[derive(Debug, Clone, PartialEq)]
pub struct HedgingParams {
    /// Median service time of an attempt (default 10 ms).
    pub latency_median: Duration,
    /// LogNormal shape σ (default 0.3).
    pub latency_sigma: f64,
    /// Probability that an attempt stalls (default 0.02).
    pub stall_prob: f64,
    /// Added to a stalled attempt's service time (default 200 ms).
    pub stall: Duration,
    /// Servers, or `None` for unlimited capacity (the default).
    pub capacity: Option<u32>,
    /// Utilisation of the servers without hedges (default 0.7; with
    /// servers only).
    pub utilisation: f64,
    /// What a call's end does to its other attempts (default queued).
    pub cancel: Cancel,
    /// Requests per strategy (default 200,000).
    pub requests: u64,
    /// Attempts per call, the first included (default 2).
    pub hedge_attempts: u32,
    /// The seed (default 1).
    pub seed: u64,
}

impl Default for HedgingParams {
    fn default() -> Self {
        HedgingParams {
            latency_median: Duration::from_millis(10),
            latency_sigma: 0.3,
            stall_prob: 0.02,
            stall: Duration::from_millis(200),
            capacity: None,
            utilisation: 0.7,
            cancel: Cancel::Queued,
            requests: 200_000,
            hedge_attempts: 2,
            seed: 1,
        }
    }
}

impl HedgingParams {
    /// Checks every parameter, naming the flag of the first bad one.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |flag: &'static str, why: String| Err(SimError::new(flag, why));
        if self.latency_median.is_zero() {
            return bad("latency-median", "must be above zero".into());
        }
        if !(self.latency_sigma.is_finite() && (0.0..=5.0).contains(&self.latency_sigma)) {
            return bad(
                "latency-sigma",
                format!("must be between 0 and 5, got {}", self.latency_sigma),
            );
        }
        if !(self.stall_prob.is_finite() && (0.0..=1.0).contains(&self.stall_prob)) {
            return bad(
                "stall-prob",
                format!("must be between 0 and 1, got {}", self.stall_prob),
            );
        }
        if self.stall > Duration::from_secs(3600) {
            return bad("stall", "must be at most 1h".into());
        }
        if let Some(n) = self.capacity {
            if n == 0 || n > MAX_SERVERS {
                return bad(
                    "capacity",
                    format!("must be `inf` or 1 to {MAX_SERVERS} servers, got {n}"),
                );
            }
        }
        if !(self.utilisation.is_finite() && self.utilisation > 0.0 && self.utilisation < 1.0) {
            return bad(
                "utilisation",
                format!("must be above 0 and below 1, got {}", self.utilisation),
            );
        }
        if self.requests == 0 || self.requests > MAX_REQUESTS {
            return bad(
                "requests",
                format!("must be 1 to {MAX_REQUESTS}, got {}", self.requests),
            );
        }
        if self.hedge_attempts == 0 || self.hedge_attempts > stagger::hedging::MAX_HEDGE_ATTEMPTS {
            return bad(
                "hedge-attempts",
                format!(
                    "must be 1 to {}, got {}",
                    stagger::hedging::MAX_HEDGE_ATTEMPTS,
                    self.hedge_attempts
                ),
            );
        }
        Ok(())
    }

    /// Mean service time of one attempt, in nanoseconds.
    pub fn mean_service_ns(&self) -> f64 {
        let m = ns(self.latency_median) as f64;
        let s = self.latency_sigma;
        m * (s * s / 2.0).exp() + self.stall_prob * ns(self.stall) as f64
    }
}

/// A hedging strategy: `none`, a fixed delay (`20ms`), a percentile of the
/// client's own latencies (`p95`, `p99.9`), each optionally `+budget`
/// (extra load at most 5 % of requests).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HedgeStrategy {
    /// The delay, or `None` for no hedging.
    pub delay: Option<HedgeDelay>,
    /// Whether hedges are capped at 5 % of requests.
    pub budget: bool,
}

impl HedgeStrategy {
    /// The default comparison.
    pub const DEFAULTS: &'static str = "none,20ms,20ms+budget,p95,p95+budget";

    /// A comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<HedgeStrategy>, SimError> {
        let v: Vec<_> = s
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        if v.is_empty() {
            return Err(SimError::new("strategy", "no strategy given".into()));
        }
        Ok(v)
    }

    /// The library policy this strategy is, for `p`.
    pub fn policy(&self, p: &HedgingParams) -> Result<HedgePolicy, SimError> {
        let d = HedgePolicyConfig::default();
        let (max_attempts, delay) = match self.delay {
            None => (1, d.delay),
            Some(delay) => (p.hedge_attempts, delay),
        };
        HedgePolicy::new(HedgePolicyConfig {
            max_attempts,
            delay,
            max_extra_load: self.budget.then_some(0.05),
            ..d
        })
        .map_err(|e| SimError::new("strategy", format!("{self}: {e}")))
    }
}

impl fmt::Display for HedgeStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.delay {
            None => f.write_str("none")?,
            Some(HedgeDelay::Fixed(d)) => {
                let ms = d.as_secs_f64() * 1e3;
                write!(f, "{ms}ms")?
            }
            Some(HedgeDelay::Percentile(q)) => write!(f, "p{q}")?,
        }
        if self.budget {
            f.write_str("+budget")?;
        }
        Ok(())
    }
}

impl FromStr for HedgeStrategy {
    type Err = SimError;
    fn from_str(s: &str) -> Result<Self, SimError> {
        let err = |why: &str| SimError::new("strategy", format!("`{s}`: {why}"));
        let (base, budget) = match s.strip_suffix("+budget") {
            Some(b) => (b, true),
            None => (s, false),
        };
        let delay = if base == "none" {
            None
        } else if let Some(q) = base.strip_prefix('p') {
            let q: f64 = q
                .parse()
                .map_err(|_| err("a percentile is p and a number, e.g. p95"))?;
            if !(q > 0.0 && q <= 100.0) {
                return Err(err("the percentile must be in (0, 100]"));
            }
            Some(HedgeDelay::Percentile(q))
        } else if let Some(ms) = base.strip_suffix("ms") {
            let ms: f64 = ms
                .parse()
                .map_err(|_| err("a fixed delay is a number of ms, e.g. 20ms"))?;
            if !(ms.is_finite() && (0.0..=3.6e6).contains(&ms)) {
                return Err(err("the delay must be between 0ms and 1h"));
            }
            Some(HedgeDelay::Fixed(Duration::from_secs_f64(ms / 1e3)))
        } else {
            return Err(err("expected none, a delay such as 20ms, or a percentile such as p95, optionally +budget"));
        };
        if delay.is_none() && budget {
            return Err(err("none has no hedges to budget"));
        }
        Ok(HedgeStrategy { delay, budget })
    }
}

/// One strategy's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HedgingRow {
    /// The strategy's name.
    pub strategy: String,
    /// Median call latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Attempts ÷ requests − 1.
    pub extra_load: f64,
}

/// The parameters as printed in the JSON document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HedgingParamsOut {
    /// `--latency-median`, ms.
    pub latency_median_ms: f64,
    /// `--latency-sigma`.
    pub latency_sigma: f64,
    /// `--stall-prob`.
    pub stall_prob: f64,
    /// `--stall`, ms.
    pub stall_ms: f64,
    /// `--capacity`: a number of servers or `"inf"`.
    pub capacity: serde_json::Value,
    /// `--utilisation` (with servers only; `null` with unlimited capacity).
    pub utilisation: Option<f64>,
    /// `--cancel`.
    pub cancel: Cancel,
    /// `--requests`.
    pub requests: u64,
    /// `--hedge-attempts`.
    pub hedge_attempts: u32,
    /// `--seed`.
    pub seed: u64,
}

impl HedgingParamsOut {
    fn new(p: &HedgingParams) -> Self {
        HedgingParamsOut {
            latency_median_ms: p.latency_median.as_secs_f64() * 1e3,
            latency_sigma: p.latency_sigma,
            stall_prob: p.stall_prob,
            stall_ms: p.stall.as_secs_f64() * 1e3,
            capacity: match p.capacity {
                Some(n) => n.into(),
                None => "inf".into(),
            },
            utilisation: p.capacity.map(|_| p.utilisation),
            cancel: p.cancel,
            requests: p.requests,
            hedge_attempts: p.hedge_attempts,
            seed: p.seed,
        }
    }
}

/// The JSON document of `stagger simulate --model hedging`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HedgingResults {
    /// Always `hedging`.
    pub model: &'static str,
    /// The parameters.
    pub params: HedgingParamsOut,
    /// One row per strategy, in the order given.
    pub strategies: Vec<HedgingRow>,
}

/// Runs every strategy under `p` (one seeded run each, spread over threads;
/// the same seed gives the same rows whatever the thread count).
pub fn simulate(
    p: &HedgingParams,
    strategies: &[HedgeStrategy],
    opts: &Options<'_>,
) -> Result<HedgingResults, SimError> {
    p.validate()?;
    if strategies.is_empty() {
        return Err(SimError::new("strategy", "no strategy given".into()));
    }
    let policies = strategies
        .iter()
        .map(|s| s.policy(p))
        .collect::<Result<Vec<_>, _>>()?;
    let noop = || {};
    let progress: &(dyn Fn() + Sync) = opts.progress.unwrap_or(&noop);
    let rows = par_map(
        strategies.len(),
        opts.threads,
        || (),
        |_, i| {
            let mut out = run(p, &policies[i], p.seed);
            row(&strategies[i].to_string(), &mut out)
        },
        progress,
    );
    Ok(HedgingResults {
        model: "hedging",
        params: HedgingParamsOut::new(p),
        strategies: rows,
    })
}

/// One point of a utilisation sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Cancellation mode.
    pub cancel: Cancel,
    /// Utilisation without hedges.
    pub utilisation: f64,
    /// The strategy's row at that point.
    pub row: HedgingRow,
}

/// The utilisations a sweep visits.
pub const SWEEP: [f64; 9] = [0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.96];

/// Latency and load against utilisation, for both cancellation modes: every
/// strategy at every point of [`SWEEP`], on `p`'s servers (10 when `p` has
/// unlimited capacity), with `requests` requests per point.
pub fn sweep(
    p: &HedgingParams,
    strategies: &[HedgeStrategy],
    requests: u64,
    opts: &Options<'_>,
) -> Result<Vec<SweepPoint>, SimError> {
    p.validate()?;
    let mut cells = Vec::new();
    for cancel in [Cancel::Queued, Cancel::Running] {
        for u in SWEEP {
            for s in strategies {
                let mut q = p.clone();
                q.capacity = Some(p.capacity.unwrap_or(10));
                q.utilisation = u;
                q.cancel = cancel;
                q.requests = requests.clamp(1, MAX_REQUESTS);
                let policy = s.policy(&q)?;
                cells.push((q, *s, policy));
            }
        }
    }
    let noop = || {};
    let progress: &(dyn Fn() + Sync) = opts.progress.unwrap_or(&noop);
    Ok(par_map(
        cells.len(),
        opts.threads,
        || (),
        |_, i| {
            let (q, s, policy) = &cells[i];
            let mut out = run(q, policy, q.seed);
            SweepPoint {
                cancel: q.cancel,
                utilisation: q.utilisation,
                row: row(&s.to_string(), &mut out),
            }
        },
        progress,
    ))
}

/// What one run measured.
pub(crate) struct RunOut {
    /// Every request's latency, ns.
    pub(crate) latencies: Vec<u64>,
    /// Attempts sent.
    pub(crate) attempts: u64,
}

fn row(name: &str, out: &mut RunOut) -> HedgingRow {
    out.latencies.sort_unstable();
    let n = out.latencies.len() as f64;
    let q = |x: f64| -> f64 {
        let l = &out.latencies;
        if l.is_empty() {
            return 0.0;
        }
        let i = ((x * l.len() as f64).ceil() as usize).clamp(1, l.len()) - 1;
        crate::rounded(l[i] as f64 / 1e6, 3)
    };
    HedgingRow {
        strategy: name.to_owned(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        extra_load: crate::rounded(
            if n > 0.0 {
                out.attempts as f64 / n - 1.0
            } else {
                0.0
            },
            3,
        ),
    }
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut FastRng) -> f64 {
    let u1 = 1.0 - rng.next_f64();
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// One attempt's service time, ns.
fn service_ns(p: &HedgingParams, rng: &mut FastRng) -> u64 {
    let m = ns(p.latency_median) as f64;
    let mut t = m * (p.latency_sigma * normal(rng)).exp();
    if rng.next_f64() < p.stall_prob {
        t += ns(p.stall) as f64;
    }
    (t as u64).max(1)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival,
    /// A hedge timer of the call in `slot` with `uid`.
    Timer {
        slot: u32,
        uid: u64,
    },
    /// An attempt finished: on `server` (`u32::MAX` with unlimited
    /// capacity) whose assignment was number `gen`.
    Done {
        slot: u32,
        uid: u64,
        attempt: u32,
        server: u32,
        gen: u64,
    },
}

struct Live {
    uid: u64,
    arrived: u64,
    h: HedgedCall<FastRng>,
    /// The server serving each attempt, `u32::MAX` when none.
    servers: [u32; stagger::hedging::MAX_HEDGE_ATTEMPTS as usize],
    timer_at: u64,
}

struct Server {
    gen: u64,
    busy: bool,
}

struct Sim<'a> {
    p: &'a HedgingParams,
    policy: &'a HedgePolicy,
    origin: Instant,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    calls: Vec<Option<Live>>,
    free: Vec<u32>,
    servers: Vec<Server>,
    idle: Vec<u32>,
    queue: VecDeque<(u32, u64, u32, u64)>,
    service_rng: FastRng,
    out: RunOut,
}

/// One seeded run of `policy` under `p`.
pub(crate) fn run(p: &HedgingParams, policy: &HedgePolicy, seed: u64) -> RunOut {
    let servers = p.capacity.unwrap_or(0);
    let rate = match p.capacity {
        None => UNLIMITED_RATE,
        Some(n) => p.utilisation * f64::from(n) / (p.mean_service_ns() / 1e9),
    };
    let mean_gap = 1e9 / rate;
    let mut sim = Sim {
        p,
        policy,
        origin: Instant::now(),
        events: BinaryHeap::new(),
        seq: 0,
        calls: Vec::new(),
        free: Vec::new(),
        servers: (0..servers)
            .map(|_| Server {
                gen: 0,
                busy: false,
            })
            .collect(),
        idle: (0..servers).rev().collect(),
        queue: VecDeque::new(),
        service_rng: FastRng::seeded(mix(seed, 11)),
        out: RunOut {
            latencies: Vec::with_capacity(p.requests as usize),
            attempts: 0,
        },
    };
    let mut arrivals = FastRng::seeded(mix(seed, 12));
    let mut arrived = 0u64;
    sim.push(0, Ev::Arrival);
    while let Some(Reverse((t, _, ev))) = sim.events.pop() {
        match ev {
            Ev::Arrival => {
                arrived += 1;
                if arrived < p.requests {
                    let gap = exponential_ns(&mut arrivals, mean_gap).max(1);
                    sim.push(t + gap, Ev::Arrival);
                }
                let slot = sim.admit(t, arrived);
                sim.drive(slot, t);
            }
            Ev::Timer { slot, uid } => {
                if sim.alive(slot, uid) {
                    sim.drive(slot, t);
                }
            }
            Ev::Done {
                slot,
                uid,
                attempt,
                server,
                gen,
            } => {
                if server != u32::MAX && sim.servers[server as usize].gen != gen {
                    continue; // cancelled while running
                }
                if sim.alive(slot, uid) {
                    let at = sim.at(t);
                    if let Some(c) = sim.calls[slot as usize].as_mut() {
                        c.servers[attempt as usize - 1] = u32::MAX;
                        sim.policy.report(&mut c.h, attempt, Outcome::Success, at);
                    }
                    sim.drive(slot, t);
                }
                if server != u32::MAX {
                    sim.release(server, t);
                }
            }
        }
    }
    sim.out
}

impl Sim<'_> {
    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, ev)));
    }

    fn at(&self, t: u64) -> Instant {
        self.origin + Duration::from_nanos(t)
    }

    fn alive(&self, slot: u32, uid: u64) -> bool {
        self.calls
            .get(slot as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.uid == uid)
    }

    fn admit(&mut self, t: u64, uid: u64) -> u32 {
        let live = Live {
            uid,
            arrived: t,
            h: self.policy.call(Call::seeded(uid).idempotent(true)),
            servers: [u32::MAX; stagger::hedging::MAX_HEDGE_ATTEMPTS as usize],
            timer_at: u64::MAX,
        };
        match self.free.pop() {
            Some(s) => {
                self.calls[s as usize] = Some(live);
                s
            }
            None => {
                self.calls.push(Some(live));
                (self.calls.len() - 1) as u32
            }
        }
    }

    /// Does what the policy says for the call in `slot` until it waits.
    fn drive(&mut self, slot: u32, t: u64) {
        let at = self.at(t);
        loop {
            let Some(c) = self.calls[slot as usize].as_mut() else {
                return;
            };
            match self.policy.poll(&mut c.h, at) {
                HedgeStep::Send { attempt, .. } => {
                    let uid = c.uid;
                    self.out.attempts += 1;
                    self.dispatch(slot, uid, attempt, t);
                }
                HedgeStep::WaitUntil(when) => {
                    let w = ns(when.saturating_duration_since(self.origin));
                    if c.timer_at != w {
                        c.timer_at = w;
                        let uid = c.uid;
                        self.push(w, Ev::Timer { slot, uid });
                    }
                    return;
                }
                HedgeStep::Wait => return,
                HedgeStep::Stop(_) => {
                    self.finish(slot, t);
                    return;
                }
            }
        }
    }

    fn dispatch(&mut self, slot: u32, uid: u64, attempt: u32, t: u64) {
        let s = service_ns(self.p, &mut self.service_rng);
        if self.servers.is_empty() {
            let server = u32::MAX;
            self.push(
                t + s,
                Ev::Done {
                    slot,
                    uid,
                    attempt,
                    server,
                    gen: 0,
                },
            );
            return;
        }
        self.queue.push_back((slot, uid, attempt, s));
        self.pull(t);
    }

    /// Starts queued attempts of live calls on idle servers.
    fn pull(&mut self, t: u64) {
        while let Some(&server) = self.idle.last() {
            let Some((slot, uid, attempt, s)) = self.queue.pop_front() else {
                return;
            };
            if !self.alive(slot, uid) {
                continue; // its call ended: it left the queue
            }
            self.idle.pop();
            let srv = &mut self.servers[server as usize];
            srv.gen += 1;
            srv.busy = true;
            let gen = srv.gen;
            if let Some(c) = self.calls[slot as usize].as_mut() {
                c.servers[attempt as usize - 1] = server;
            }
            self.push(
                t + s,
                Ev::Done {
                    slot,
                    uid,
                    attempt,
                    server,
                    gen,
                },
            );
        }
    }

    fn release(&mut self, server: u32, t: u64) {
        let srv = &mut self.servers[server as usize];
        srv.gen += 1;
        srv.busy = false;
        self.idle.push(server);
        self.pull(t);
    }

    fn finish(&mut self, slot: u32, t: u64) {
        let Some(c) = self.calls[slot as usize].take() else {
            return;
        };
        self.free.push(slot);
        self.out.latencies.push(t - c.arrived);
        if self.p.cancel == Cancel::Running {
            for server in c.servers.into_iter().filter(|s| *s != u32::MAX) {
                if self.servers[server as usize].busy {
                    self.release(server, t);
                }
            }
        }
    }
}

/// `P(T > t)` for a call of `k` attempts hedged every `delay` with
/// unlimited capacity and no budget (see the module docs): the product of
/// the single-attempt survival function at `t`, `t − d`, …, `t − (k−1)·d`.
pub fn survival(p: &HedgingParams, k: u32, delay: Duration, t: Duration) -> f64 {
    let single = |x: f64| -> f64 {
        let q = |y: f64| -> f64 {
            if y <= 0.0 {
                return 1.0;
            }
            let m = p.latency_median.as_secs_f64();
            if p.latency_sigma == 0.0 {
                return if y < m { 1.0 } else { 0.0 };
            }
            0.5 * erfc((y.ln() - m.ln()) / (p.latency_sigma * std::f64::consts::SQRT_2))
        };
        if x <= 0.0 {
            return 1.0;
        }
        (1.0 - p.stall_prob) * q(x) + p.stall_prob * q(x - p.stall.as_secs_f64())
    };
    (0..k)
        .map(|j| single(t.as_secs_f64() - f64::from(j) * delay.as_secs_f64()))
        .product()
}

/// The complementary error function, by a published Chebyshev fit
/// (relative error below 1.2e-7 everywhere).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests;
