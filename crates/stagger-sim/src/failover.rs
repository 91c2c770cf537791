//! The classic failover model (a burst of clients meets an outage), in discrete ticks.
//!
//! Every tick `arrivals` new requests make their first attempt; ticks that
//! start inside the outage fail every attempt, and in the first of them a
//! burst of extra requests makes its first attempt too. The load `L` of a
//! tick is every attempt in it; outside the outage an attempt succeeds with
//! probability 1 when `L ≤ C`, else `(C/L)²` (or `C/L`). Results are known at
//! the end of the tick; a retry after delay `d` runs in the tick containing
//! `end + d`. Requests are spread round-robin over the client processes.
//!
//! With [`server_sheds_retries`](crate::Params::server_sheds_retries), an
//! overloaded server (outside the outage) serves first attempts first:
//! retries get only the capacity first attempts leave, and the others are
//! answered at once with a 503 and a `Retry-After` of 1 to 5 s — they count
//! as attempts that arrived, but not in the load that decides who succeeds,
//! since turning one away costs the server next to nothing. (The model has
//! no queue that outlives a tick, so there is no expired work to drop.)
//!
//! Every failed attempt goes to the library's [`Policy::decide`] with a
//! per-request [`Call`] whose random stream is forked from the run's seed;
//! ticks are a calendar of reusable buckets, so a run allocates nothing per
//! attempt once its buffers have grown.
//!
//! [`Policy::decide`]: stagger::Policy::decide

use stagger::random::{FastRng, RandomSource};
use stagger::{Call, Class, Decision, Outcome, StopReason};

use crate::engine::{mix, ns, shed_answer, VirtualTime};
use crate::guard::ClientPolicies;
use crate::params::{Params, SuccessModel};
use crate::recovery::{self, window_bins, Observed, PACED_WINDOW};
use crate::result::{ratio, Row, SeriesSum};
use crate::strategy::Strategy;
use crate::SimError;

/// Buffers reused from run to run by one thread.
#[derive(Default)]
pub(crate) struct Scratch {
    buckets: Vec<Vec<u32>>,
    calls: Vec<Call<FastRng>>,
    admitted: Vec<u32>,
    shed: Vec<u32>,
}

/// What one run produced.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunOut {
    pub(crate) load: Vec<u32>,
    pub(crate) retries: Vec<u32>,
    pub(crate) successes: Vec<u32>,
    /// New requests per tick (the burst included).
    pub(crate) arrivals: Vec<u32>,
    pub(crate) requests: u64,
    pub(crate) succeeded: u64,
    pub(crate) attempts: u64,
    pub(crate) budget_refusals: u64,
    pub(crate) breaker_opens: u64,
}

impl Scratch {
    /// Starts the attempts of the calls `due` whose policy lets them, into
    /// `admitted`; returns how many of them are retries.
    fn admit(
        &mut self,
        due: &[u32],
        policies: &ClientPolicies,
        clients: usize,
        now: std::time::Instant,
    ) -> u32 {
        self.admitted.clear();
        let mut retries = 0;
        for &id in due {
            let call = &mut self.calls[id as usize];
            let policy = policies.get(id as usize % clients);
            if policy.start_attempt(call, now).is_ok() {
                self.admitted.push(id);
                if call.attempts() > 1 {
                    retries += 1;
                }
            }
        }
        retries
    }

    /// Empties the buffers for a run of `n_ticks`, keeping their capacity.
    fn reset(&mut self, n_ticks: usize) {
        if self.buckets.len() < n_ticks {
            self.buckets.resize_with(n_ticks, Vec::new);
        }
        for b in &mut self.buckets[..n_ticks] {
            b.clear();
        }
        self.calls.clear();
    }
}

impl RunOut {
    fn new(n_ticks: usize) -> Self {
        RunOut {
            load: vec![0; n_ticks],
            retries: vec![0; n_ticks],
            successes: vec![0; n_ticks],
            arrivals: vec![0; n_ticks],
            ..RunOut::default()
        }
    }
}

/// The chance an attempt served in a tick with `load` attempts succeeds:
/// none in the outage, all within the capacity, and past it as the success
/// model says.
fn success_probability(p: &Params, in_outage: bool, load: usize) -> f64 {
    let cap = p.capacity;
    if in_outage {
        0.0
    } else if load as f64 <= cap {
        1.0
    } else {
        let r = cap / load as f64;
        match p.success_model {
            SuccessModel::Square => r * r,
            SuccessModel::Linear => r,
        }
    }
}

/// Number of ticks in the run.
pub(crate) fn ticks(p: &Params) -> usize {
    let t = ns(p.tick);
    ns(p.duration).div_ceil(t) as usize
}

/// Runs one seed of one strategy.
pub(crate) fn run(
    s: &mut Scratch,
    strategy: &Strategy,
    p: &Params,
    seed: u64,
) -> Result<RunOut, SimError> {
    let vt = VirtualTime::new();
    let clients = p.clients.lo as usize;
    let policies = ClientPolicies::new(strategy, p, clients, seed)?;
    let n_ticks = ticks(p);
    let tick = ns(p.tick);
    let (outage_start, outage_end) = (ns(p.outage_start), ns(p.outage_end));
    s.reset(n_ticks);
    let mut outcome_rng = FastRng::seeded(mix(seed, 1));
    let mut call_seeds = FastRng::seeded(mix(seed, 2));
    let mut out = RunOut::new(n_ticks);
    let mut burst_done = false;
    let cap = p.capacity;
    for k in 0..n_ticks {
        let start = k as u64 * tick;
        let end = start + tick;
        let in_outage = start >= outage_start && start < outage_end;
        let mut due = std::mem::take(&mut s.buckets[k]);
        let mut fresh = u64::from(p.arrivals);
        if in_outage && !burst_done {
            burst_done = true;
            fresh += u64::from(p.burst);
        }
        for _ in 0..fresh {
            let id = s.calls.len() as u32;
            s.calls.push(Call::with_rng(call_seeds.fork()));
            due.push(id);
        }
        out.requests += fresh;
        out.arrivals[k] = fresh as u32;
        // Admission at the tick's start: a breaker or throttle may refuse.
        out.retries[k] += s.admit(&due, &policies, clients, vt.at(start));
        // Retries only ever land in later ticks, so the emptied bucket can
        // go back now and keep its capacity.
        due.clear();
        s.buckets[k] = due;
        let arrived = s.admitted.len();
        out.load[k] = arrived as u32;
        out.attempts += arrived as u64;
        s.shed.clear();
        if p.server_sheds_retries && !in_outage && arrived as f64 > cap {
            shed_retries(&s.calls, &mut s.admitted, &mut s.shed, cap);
        }
        let p_success = success_probability(p, in_outage, s.admitted.len());
        // Results at the tick's end.
        let now = vt.at(end);
        let served = s.admitted.len();
        s.admitted.extend_from_slice(&s.shed);
        for (i, &id) in s.admitted.iter().enumerate() {
            let outcome = if i >= served {
                shed_answer(&mut outcome_rng)
            } else if p_success >= 1.0 || (p_success > 0.0 && outcome_rng.next_f64() < p_success) {
                Outcome::Success
            } else {
                Outcome::Failure(Class::Transient.into())
            };
            let call = &mut s.calls[id as usize];
            let policy = policies.get(id as usize % clients);
            match policy.decide(call, outcome, now) {
                Decision::Retry { after } => {
                    let at = end.saturating_add(ns(after));
                    let idx = (at / tick) as usize;
                    // A retry due after the end of the run never happens.
                    if idx < n_ticks {
                        s.buckets[idx].push(id);
                    }
                }
                Decision::Stop(StopReason::Success) => {
                    out.successes[k] += 1;
                    out.succeeded += 1;
                }
                Decision::Stop(_) => {}
            }
        }
    }
    out.budget_refusals = policies.budget_refusals();
    out.breaker_opens = policies.breaker_opens();
    Ok(out)
}

/// Moves the retries that do not fit in the capacity first attempts leave
/// from `admitted` to `shed`, the latest-admitted first.
fn shed_retries(calls: &[Call<FastRng>], admitted: &mut Vec<u32>, shed: &mut Vec<u32>, cap: f64) {
    let is_retry = |id: u32| calls[id as usize].attempts() > 1;
    let retries = admitted.iter().filter(|&&id| is_retry(id)).count();
    let room = (cap.floor() as usize).saturating_sub(admitted.len() - retries);
    let mut excess = retries.saturating_sub(room);
    let mut i = admitted.len();
    while excess > 0 {
        i -= 1;
        if is_retry(admitted[i]) {
            shed.push(admitted.remove(i));
            excess -= 1;
        }
    }
}

/// Time after the outage until the run recovered ([`crate::recovery`]:
/// every 1 s window from then on answers 95 % of its new requests and
/// carries at most 1.25 attempts per new request).
pub(crate) fn recovery_s(r: &RunOut, p: &Params) -> Option<f64> {
    let seen = Observed {
        bin: p.tick,
        demand: &r.arrivals,
        load: &r.load,
        goodput: &r.successes,
    };
    let window = window_bins(p.tick, PACED_WINDOW);
    recovery::recovery_s(&seen, window, p.outage_end)
}

fn peak(load: &[u32], from: usize, cap: f64) -> Option<f64> {
    load.get(from..)
        .filter(|l| !l.is_empty())
        .map(|l| f64::from(*l.iter().max().unwrap_or(&0)) / cap)
}

/// Folds the runs of one strategy (in run order) into its row.
pub(crate) fn summarize(strategy: &Strategy, p: &Params, runs: &[RunOut]) -> Row {
    let n = runs.len().max(1) as f64;
    let mut sum = SeriesSum::default();
    let (mut attempts, mut requests, mut ok, mut refusals, mut opens) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut peak_sum, mut post_sum, mut rec_sum) = (0.0, 0.0, 0.0);
    let mut post_any = true;
    let mut recovered_all = true;
    let first_after = ns(p.outage_end).div_ceil(ns(p.tick)) as usize;
    for r in runs {
        sum.add(&r.load, &r.retries, &r.successes);
        attempts += r.attempts;
        requests += r.requests;
        ok += r.succeeded;
        refusals += r.budget_refusals;
        opens += r.breaker_opens;
        peak_sum += peak(&r.load, 0, p.capacity).unwrap_or(0.0);
        match peak(&r.load, first_after, p.capacity) {
            Some(x) => post_sum += x,
            None => post_any = false,
        }
        match recovery_s(r, p) {
            Some(x) => rec_sum += x,
            None => recovered_all = false,
        }
    }
    Row {
        strategy: strategy.to_string(),
        runs: runs.len(),
        attempts: attempts as f64 / n,
        requests: requests as f64 / n,
        amplification: ratio(attempts, requests),
        request_success: ratio(ok, requests),
        peak_load_over_capacity: Some(peak_sum / n),
        post_outage_peak_over_capacity: post_any.then_some(post_sum / n),
        recovery_s: recovered_all.then_some(rec_sum / n),
        budget_refusals: refusals as f64 / n,
        breaker_opens: opens as f64 / n,
        series: sum.mean(runs.len(), p.tick.as_secs_f64()),
        ..Row::default()
    }
}
