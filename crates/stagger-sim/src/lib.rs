//! # stagger-sim — retry storms in virtual time, on stagger's own policies
//!
//! A retry policy is easy to argue about and hard to see. This crate
//! simulates fleets of clients retrying against a dependency that stumbles,
//! and measures what their retries do to it: attempts, amplification,
//! success, peak load against capacity, and how long the dependency takes to
//! recover ([`recovery`]: one definition, shared with the game-day). It
//! never re-implements a rule: every failed attempt is handed to
//! the library's [`Policy::decide`](stagger::Policy::decide) with a per-request
//! [`Call`](stagger::Call) seeded from the run's seed, guardrails are the
//! library's own objects (one set per simulated client process), and time is
//! virtual — `Instant`s derived from one origin, which the library takes as
//! frozen clocks. What the simulator shows is what ships. A strategy name
//! such as `full+budget+breaker` becomes library objects in one place,
//! [`Strategy::policy`] and [`Strategy::guardrails`], which the game-day
//! uses too.
//!
//! The tools read a person's durations through [`duration`] (bare seconds,
//! or the library's one duration grammar), here beside the strategy names.
//!
//! Models (see each module): [`failover`] (a burst around a short
//! outage), [`contention`] (AWS's optimistic-concurrency race),
//! [`metastable`] (a saturated server kept down by retries, or not, per
//! [`Server`] strategy), [`layers`]
//! (retries multiplied through a call chain).
//!
//! Runs are spread over threads and combined in run order, so the same seed
//! gives byte-identical results whatever the thread count.
//!
//! ```
//! use stagger_sim::{simulate, Model, Options, Params, RetryKind, Strategy};
//!
//! let mut p = Params::defaults(Model::Failover);
//! p.runs = 3;
//! let strategies: Vec<Strategy> = ["none", "full", "full+budget"]
//!     .iter()
//!     .map(|s| s.parse().unwrap())
//!     .collect();
//! let r = simulate(&p, &strategies, &Options::default()).unwrap();
//! let [none, full, budget] = &r.strategies[..] else { unreachable!() };
//! // No Retry makes exactly one attempt per request: 240 ticks × 8 + 200.
//! assert_eq!(none.attempts, 2120.0);
//! // Under these defaults, full jitter's retry load outlives the outage…
//! assert_eq!(full.recovery_s, None);
//! // …and a retry budget per client process ends it.
//! assert_eq!(budget.recovery_s, Some(0.0));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

pub mod contention;
mod engine;
pub mod failover;
mod guard;
pub mod hedging;
pub mod layers;
pub mod metastable;
mod params;
pub mod priority;
pub mod recovery;
mod result;
mod server;
mod strategy;

mod duration;

pub use duration::duration;

/// Rounds `x` to `decimals` decimal places: the precision the toolkit's
/// reports give an estimate (a rate, a ratio, a mean of attempts), so a
/// report reads the same from run to run. Exact counts are left as
/// computed.
///
/// ```
/// assert_eq!(stagger_sim::rounded(2.0 / 3.0, 3), 0.667);
/// assert_eq!(stagger_sim::rounded(41.26, 1), 41.3);
/// ```
pub fn rounded(x: f64, decimals: i32) -> f64 {
    let by = 10f64.powi(decimals);
    (x * by).round() / by
}
pub use layers::RetryAt;
pub use metastable::Server;
pub use params::{
    ClientRange, Model, Params, SuccessModel, DRILL_PROCESSES, DRILL_STRATEGIES, MAX_CLIENTS,
};
pub use result::{ParamsOut, Results, Row, Series};
pub use strategy::{guardrail_settings, RetryKind, Schedule, Strategy};

/// A bad simulation parameter, named by its command-line flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimError {
    flag: &'static str,
    problem: String,
}

impl SimError {
    /// An error about flag `--flag`.
    pub fn new(flag: &'static str, problem: String) -> Self {
        SimError { flag, problem }
    }

    /// The flag's name, without dashes.
    pub fn flag(&self) -> &'static str {
        self.flag
    }

    /// What is wrong with it.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--{}: {}", self.flag, self.problem)
    }
}

impl std::error::Error for SimError {}

/// How to run (never changes a result).
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Called once per finished work item (see [`work_items`]).
    pub progress: Option<&'a (dyn Fn() + Sync)>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            threads: 1,
            progress: None,
        }
    }
}

impl fmt::Debug for Options<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("threads", &self.threads)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// A finished simulation: the results and how much was simulated.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The rows, ready for JSON.
    pub results: Results,
    /// Simulated events (model-specific: contention counts message
    /// deliveries and backoff timers; metastable every processed event;
    /// failover and layers the attempts made).
    pub events: u64,
}

/// The most runs (summed over rows) one simulation accepts.
pub const MAX_WORK_ITEMS: u64 = 20_000_000;

/// How many work items (one run of one row) [`simulate`] will report
/// through [`Options::progress`].
pub fn work_items(p: &Params, strategies: &[Strategy]) -> u64 {
    let runs = p.run_seeds().len() as u64;
    let rows: u64 = match p.model {
        Model::Failover => strategies.len() as u64,
        Model::Metastable => (strategies.len() * p.server_list().len()) as u64,
        Model::Contention => strategies.len() as u64 * p.clients.count() as u64,
        Model::Layers => strategies
            .iter()
            .map(|s| (RetryAt::for_strategy(s).len() * p.failure_rates.len()) as u64)
            .sum(),
    };
    rows * runs
}

/// Runs `strategies` under `p` and returns one row per strategy (per client
/// count for contention, per mode and failure rate for layers).
pub fn simulate(
    p: &Params,
    strategies: &[Strategy],
    opts: &Options<'_>,
) -> Result<Results, SimError> {
    simulate_counted(p, strategies, opts).map(|o| o.results)
}

/// One simulation's runs: the parameters, the strategies, its seeds (`r` of
/// them) and how to run them.
struct Batch<'a> {
    p: &'a Params,
    strategies: &'a [Strategy],
    seeds: &'a [u64],
    r: usize,
    threads: usize,
    progress: &'a (dyn Fn() + Sync),
}

impl Batch<'_> {
    /// One row per strategy, from the failover model.
    fn failover(&self) -> Result<(Vec<Row>, u64), SimError> {
        let outs = engine::par_map(
            self.strategies.len() * self.r,
            self.threads,
            failover::Scratch::default,
            |sc, i| {
                failover::run(
                    sc,
                    &self.strategies[i / self.r],
                    self.p,
                    self.seeds[i % self.r],
                )
            },
            self.progress,
        )
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let events = outs.iter().map(|o| o.attempts).sum();
        let rows = self
            .strategies
            .iter()
            .zip(outs.chunks(self.r))
            .map(|(s, runs)| failover::summarize(s, self.p, runs))
            .collect();
        Ok((rows, events))
    }

    /// One row per strategy and client count, from the contention model.
    fn contention(&self) -> Result<(Vec<Row>, u64), SimError> {
        let counts: Vec<u32> = self.p.clients.iter().collect();
        let per_strategy = counts.len() * self.r;
        let outs = engine::par_map(
            self.strategies.len() * per_strategy,
            self.threads,
            contention::Scratch::default,
            |sc, i| {
                let s = &self.strategies[i / per_strategy];
                let c = counts[(i % per_strategy) / self.r];
                contention::run(
                    sc,
                    s,
                    self.p,
                    c,
                    engine::mix(self.seeds[i % self.r], u64::from(c)),
                )
            },
            self.progress,
        )
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let events = outs.iter().map(|o| o.events).sum();
        let mut rows = Vec::new();
        for (s, cells) in self.strategies.iter().zip(outs.chunks(per_strategy)) {
            for (c, runs) in counts.iter().zip(cells.chunks(self.r)) {
                rows.push(contention::summarize(s, *c, runs));
            }
        }
        Ok((rows, events))
    }

    /// One row per server strategy × client strategy, servers outer.
    fn metastable(&self) -> Result<(Vec<Row>, u64), SimError> {
        let cells: Vec<(metastable::Server, Strategy)> = self
            .p
            .server_list()
            .into_iter()
            .flat_map(|sv| self.strategies.iter().map(move |s| (sv, *s)))
            .collect();
        let outs = engine::par_map(
            cells.len() * self.r,
            self.threads,
            metastable::Scratch::default,
            |sc, i| {
                let (sv, s) = &cells[i / self.r];
                metastable::run(sc, s, sv, self.p, self.seeds[i % self.r])
            },
            self.progress,
        )
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let events = outs.iter().map(|o| o.events).sum();
        let rows = cells
            .iter()
            .zip(outs.chunks(self.r))
            .map(|((sv, s), runs)| metastable::summarize(s, sv, self.p, runs))
            .collect();
        Ok((rows, events))
    }

    /// One row per strategy, retry placement and failure rate, from the layers model.
    fn layers(&self) -> Result<(Vec<Row>, u64), SimError> {
        let cells: Vec<(Strategy, RetryAt, f64)> = self
            .strategies
            .iter()
            .flat_map(|s| {
                RetryAt::for_strategy(s)
                    .iter()
                    .flat_map(move |m| self.p.failure_rates.iter().map(move |f| (*s, *m, *f)))
            })
            .collect();
        let outs = engine::par_map(
            cells.len() * self.r,
            self.threads,
            || (),
            |_, i| {
                let (s, m, f) = cells[i / self.r];
                layers::run(&s, self.p, m, f, self.seeds[i % self.r])
            },
            self.progress,
        )
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let events = outs.iter().map(|o| o.bottom).sum();
        let rows = cells
            .iter()
            .zip(outs.chunks(self.r))
            .map(|((s, m, f), runs)| layers::summarize(s, *m, *f, runs))
            .collect();
        Ok((rows, events))
    }
}

/// [`simulate`], also counting simulated events (for benchmarks).
pub fn simulate_counted(
    p: &Params,
    strategies: &[Strategy],
    opts: &Options<'_>,
) -> Result<Outcome, SimError> {
    p.validate()?;
    if strategies.is_empty() {
        return Err(SimError::new("strategy", "no strategy given".into()));
    }
    for s in strategies {
        s.check(&Schedule::from(p))?;
        if p.model == Model::Layers {
            layers::check(s, p)?;
        }
    }
    let items = work_items(p, strategies);
    if items > MAX_WORK_ITEMS {
        return Err(SimError::new(
            "runs",
            format!("{items} runs in all (rows × runs) is more than the limit of {MAX_WORK_ITEMS}"),
        ));
    }
    let seeds = p.run_seeds();
    let noop = || {};
    let batch = Batch {
        p,
        strategies,
        r: seeds.len(),
        seeds: &seeds,
        threads: opts.threads.max(1),
        progress: opts.progress.unwrap_or(&noop),
    };
    let (rows, events) = match p.model {
        Model::Failover => batch.failover()?,
        Model::Contention => batch.contention()?,
        Model::Metastable => batch.metastable()?,
        Model::Layers => batch.layers()?,
    };
    Ok(Outcome {
        results: Results {
            model: p.model.as_str(),
            params: ParamsOut::new(p),
            strategies: rows,
        },
        events,
    })
}
