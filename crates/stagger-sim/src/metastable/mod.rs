//! Bronson et al.'s metastable failure (HotOS 2021), as a discrete-event
//! simulation.
//!
//! Requests arrive as a Poisson stream at `rate` to a FIFO server completing
//! `capacity` per second (a fixed service time). A client gives up on an
//! attempt after `timeout` and asks the library's policy whether and when to
//! retry (one retry by default). What the server does with the work it is
//! sent is the [`Server`] strategy: `fifo` works on everything it dequeues,
//! even work whose client has already given up; `deadline-drop` drops any
//! request whose deadline has passed before starting it (deadline
//! propagation); `adaptive` (and `aimd`, `gradient`, `static:N`) also puts
//! the library's [`Limiter`] in front of the queue,
//! in virtual time: work beyond the limit is answered at once (at no cost
//! to the server) with a `Retry-After` of 1 to 5 s, retries before first
//! attempts, and the limit learns from each answer's latency and from work
//! that ended after its caller's deadline. A network outage holds every
//! request sent during it and delivers them all when it ends: the trigger.
//! Network hops otherwise take no time.
//!
//! Goodput is answers delivered in time, counted per second; recovery is
//! judged on it as everywhere else ([`crate::recovery`]), over 5 s windows
//! because arrivals are a Poisson stream.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use stagger::limit::{Completion, Limiter, Token};
use stagger::random::FastRng;
use stagger::{Call, Decision, Failure, Outcome, Policy};

use crate::engine::{exponential_ns, mix, ns, shed_answer, VirtualTime};
use crate::guard::ClientPolicies;
use crate::params::Params;
use crate::recovery::{self, window_bins, Observed, POISSON_WINDOW};
use crate::result::{ratio, Row, SeriesSum};
use crate::strategy::Strategy;
use crate::SimError;

pub use crate::server::Server;

const SECOND: u64 = 1_000_000_000;
/// Seconds at the end of the run averaged for `goodput_after`.
const TAIL_S: usize = 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Backoff,
    Done,
}

struct Req {
    call: Call<FastRng>,
    state: State,
}

#[derive(Clone, Copy)]
struct Job {
    id: u32,
    attempt: u32,
    sent: u64,
}

/// Buffers reused from run to run by one thread.
#[derive(Default)]
pub(crate) struct Scratch {
    reqs: Vec<Req>,
    /// Waiting work, with its place in the limiter if there is one.
    queue: VecDeque<(Job, Option<Token>)>,
    held: Vec<Job>,
    /// Attempts shed on arrival, to be answered to their clients.
    shed: Vec<Job>,
    timeouts: VecDeque<(u64, Job)>,
    retries: BinaryHeap<Reverse<(u64, u32)>>,
}

/// What one run produced, per second and in total.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunOut {
    pub(crate) load: Vec<u32>,
    pub(crate) retries: Vec<u32>,
    pub(crate) goodput: Vec<u32>,
    pub(crate) arrivals: Vec<u32>,
    /// Attempts sent per second, first attempts and retries (`load` counts
    /// them when they reach the server, after any outage held them).
    pub(crate) sent: Vec<u32>,
    pub(crate) attempts: u64,
    /// Attempts the server answered at once without working on them.
    pub(crate) shed: u64,
    pub(crate) budget_refusals: u64,
    pub(crate) breaker_opens: u64,
    pub(crate) events: u64,
}

struct World<'a> {
    s: &'a mut Scratch,
    out: RunOut,
    timeout: u64,
    service: u64,
    outage: (u64, u64),
    skips_expired: bool,
    limiter: Option<Limiter>,
    vt: VirtualTime,
    busy: Option<(u64, Job, Option<Token>)>,
}

impl Scratch {
    fn clear(&mut self) {
        self.reqs.clear();
        self.queue.clear();
        self.held.clear();
        self.shed.clear();
        self.timeouts.clear();
        self.retries.clear();
    }
}

impl<'a> World<'a> {
    fn new(s: &'a mut Scratch, server: &Server, p: &Params, seed: u64, vt: VirtualTime) -> Self {
        let bins = ns(p.duration).div_ceil(SECOND) as usize;
        World {
            s,
            out: RunOut {
                load: vec![0; bins],
                retries: vec![0; bins],
                goodput: vec![0; bins],
                arrivals: vec![0; bins],
                sent: vec![0; bins],
                ..RunOut::default()
            },
            timeout: ns(p.timeout),
            service: ((1e9 / p.capacity) as u64).max(1),
            outage: (ns(p.outage_start), ns(p.outage_end)),
            skips_expired: server.drops_expired(),
            limiter: server.limiter(mix(seed, 8)),
            vt,
            busy: None,
        }
    }

    fn bin(t: u64) -> usize {
        (t / SECOND) as usize
    }

    fn bump(v: &mut [u32], t: u64) {
        if let Some(x) = v.get_mut(Self::bin(t)) {
            *x += 1;
        }
    }

    /// Sends attempt `attempt` of request `id` at `t`.
    fn send(&mut self, id: u32, attempt: u32, t: u64) {
        let job = Job {
            id,
            attempt,
            sent: t,
        };
        self.out.attempts += 1;
        Self::bump(&mut self.out.sent, t);
        self.s
            .timeouts
            .push_back((t.saturating_add(self.timeout), job));
        if t >= self.outage.0 && t < self.outage.1 {
            self.s.held.push(job);
        } else {
            self.arrive(job, t);
        }
    }

    fn expired(&self, job: &Job, t: u64) -> bool {
        t > job.sent.saturating_add(self.timeout)
    }

    /// A request reaches the server at `t`.
    fn arrive(&mut self, job: Job, t: u64) {
        // Retries are counted where `load` is, as they reach the server, so
        // they are never more than the attempts arriving in any second.
        Self::bump(&mut self.out.load, t);
        if job.attempt > 1 {
            Self::bump(&mut self.out.retries, t);
        }
        let mut token = None;
        if let Some(limiter) = &self.limiter {
            if self.expired(&job, t) {
                return;
            }
            match limiter.try_acquire(job.attempt > 1, self.vt.at(t)) {
                Ok(tok) => token = Some(tok),
                Err(_) => {
                    self.out.shed += 1;
                    self.s.shed.push(job);
                    return;
                }
            }
        }
        self.s.queue.push_back((job, token));
        if self.busy.is_none() {
            self.start_next(t);
        }
    }

    fn start_next(&mut self, t: u64) {
        while let Some((job, token)) = self.s.queue.pop_front() {
            if self.skips_expired && self.expired(&job, t) {
                self.release(token, Completion::Overloaded, t);
                continue;
            }
            self.busy = Some((t.saturating_add(self.service), job, token));
            return;
        }
        self.busy = None;
    }

    /// A new request arrives from its client at `t`: its first attempt is
    /// sent if the client's policy lets it start.
    fn new_call(&mut self, policy: &Policy, mut call: Call<FastRng>, t: u64) {
        let id = self.s.reqs.len() as u32;
        Self::bump(&mut self.out.arrivals, t);
        let admitted = policy.start_attempt(&mut call, self.vt.at(t)).is_ok();
        self.s.reqs.push(Req {
            call,
            state: if admitted {
                State::Waiting
            } else {
                State::Done
            },
        });
        if admitted {
            self.send(id, 1, t);
        }
    }

    /// The server finished `job` at `t`: a success for its call if it is
    /// still the call's attempt and in time; the next queued job starts.
    fn finished(&mut self, policy: &Policy, job: Job, token: Option<Token>, t: u64) {
        let in_time = !self.expired(&job, t);
        let how = if in_time {
            Completion::Served
        } else {
            Completion::Overloaded
        };
        self.release(token, how, t);
        let req = &mut self.s.reqs[job.id as usize];
        if req.state == State::Waiting && req.call.attempts() == job.attempt && in_time {
            req.state = State::Done;
            Self::bump(&mut self.out.goodput, t);
            let _ = policy.decide(&mut req.call, Outcome::Success, self.vt.at(t));
        }
        self.start_next(t);
    }

    /// Request `id`'s backoff ended at `t`: its next attempt is sent if its
    /// policy lets it start.
    fn retry(&mut self, policy: &Policy, id: u32, t: u64) {
        let req = &mut self.s.reqs[id as usize];
        if policy.start_attempt(&mut req.call, self.vt.at(t)).is_ok() {
            req.state = State::Waiting;
            let attempt = req.call.attempts();
            self.send(id, attempt, t);
        } else {
            req.state = State::Done;
        }
    }

    /// What request `id`'s policy decided at `t`: a retry is scheduled, a
    /// stop ends the request.
    fn decided(&mut self, id: u32, decision: Decision, t: u64) {
        let req = &mut self.s.reqs[id as usize];
        match decision {
            Decision::Retry { after } => {
                req.state = State::Backoff;
                self.s
                    .retries
                    .push(Reverse((t.saturating_add(ns(after)), id)));
            }
            Decision::Stop(_) => req.state = State::Done,
        }
    }

    /// Shed attempts are answered at once: 503 with a jittered
    /// Retry-After, which the client's policy weighs like any hint.
    fn answer_shed<'p>(
        &mut self,
        policy_of: &dyn Fn(u32) -> &'p Policy,
        hint_rng: &mut FastRng,
        t: u64,
    ) {
        for i in 0..self.s.shed.len() {
            let job = self.s.shed[i];
            let req = &mut self.s.reqs[job.id as usize];
            if req.state != State::Waiting || req.call.attempts() != job.attempt {
                continue;
            }
            let answer = shed_answer(hint_rng);
            let decision = policy_of(job.id).decide(&mut req.call, answer, self.vt.at(t));
            self.decided(job.id, decision, t);
        }
        self.s.shed.clear();
    }

    fn release(&self, token: Option<Token>, how: Completion, t: u64) {
        if let (Some(l), Some(tok)) = (&self.limiter, token) {
            l.release(tok, how, self.vt.at(t));
        }
    }
}

/// Runs one seed of one strategy against one server.
pub(crate) fn run(
    s: &mut Scratch,
    strategy: &Strategy,
    server: &Server,
    p: &Params,
    seed: u64,
) -> Result<RunOut, SimError> {
    let vt = VirtualTime::new();
    let clients = p.clients.lo as usize;
    let policies = ClientPolicies::new(strategy, p, clients, seed)?;
    // Requests are spread round-robin over the client processes.
    let policy_of = |id: u32| policies.get(id as usize % clients);
    let end = ns(p.duration);
    s.clear();
    let mut arrivals_rng = FastRng::seeded(mix(seed, 5));
    let mut call_seeds = FastRng::seeded(mix(seed, 6));
    let mut hint_rng = FastRng::seeded(mix(seed, 7));
    let mean_gap = 1e9 / p.rate;
    let mut w = World::new(s, server, p, seed, vt);
    let mut next_arrival = exponential_ns(&mut arrivals_rng, mean_gap);
    let mut released = w.outage.0 >= w.outage.1;
    loop {
        let done_at = w.busy.as_ref().map_or(u64::MAX, |(t, _, _)| *t);
        let timeout_at = w.s.timeouts.front().map_or(u64::MAX, |(t, _)| *t);
        let retry_at = w.s.retries.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
        let release_at = if released { u64::MAX } else { w.outage.1 };
        let t = done_at
            .min(timeout_at)
            .min(retry_at)
            .min(release_at)
            .min(next_arrival);
        if t >= end {
            break;
        }
        w.out.events += 1;
        if t == done_at {
            let Some((_, job, token)) = w.busy.take() else {
                break;
            };
            w.finished(policy_of(job.id), job, token, t);
        } else if t == timeout_at {
            let Some((_, job)) = w.s.timeouts.pop_front() else {
                break;
            };
            let req = &mut w.s.reqs[job.id as usize];
            if req.state != State::Waiting || req.call.attempts() != job.attempt {
                continue;
            }
            let decision = policy_of(job.id).decide(&mut req.call, Failure::timeout(), vt.at(t));
            w.decided(job.id, decision, t);
        } else if t == release_at {
            released = true;
            let held = std::mem::take(&mut w.s.held);
            for &job in &held {
                w.arrive(job, t);
            }
            w.s.held = held;
            w.s.held.clear();
        } else if t == retry_at {
            let Some(Reverse((_, id))) = w.s.retries.pop() else {
                break;
            };
            w.retry(policy_of(id), id, t);
        } else {
            next_arrival = t.saturating_add(exponential_ns(&mut arrivals_rng, mean_gap).max(1));
            let id = w.s.reqs.len() as u32;
            w.new_call(
                policy_of(id),
                Call::with_rng(call_seeds.fork()).idempotent(true),
                t,
            );
        }
        w.answer_shed(&policy_of, &mut hint_rng, t);
    }
    let mut out = w.out;
    out.budget_refusals = policies.budget_refusals();
    out.breaker_opens = policies.breaker_opens();
    Ok(out)
}

/// Seconds after the outage until the run recovered ([`crate::recovery`]:
/// every 5 s window from then on answers in time 95 % of the requests that
/// arrived in it and carries at most 1.25 attempts per new request).
pub(crate) fn recovery_s(r: &RunOut, p: &Params) -> Option<f64> {
    let seen = Observed {
        bin: Duration::from_secs(1),
        demand: &r.arrivals,
        load: &r.sent,
        goodput: &r.goodput,
    };
    let window = window_bins(seen.bin, POISSON_WINDOW);
    recovery::recovery_s(&seen, window, p.outage_end)
}

fn mean_per_s(v: &[u32]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().map(|x| f64::from(*x)).sum::<f64>() / v.len() as f64)
}

/// Folds the runs of one strategy against one server (in run order) into
/// its row.
pub(crate) fn summarize(strategy: &Strategy, server: &Server, p: &Params, runs: &[RunOut]) -> Row {
    let n = runs.len().max(1) as f64;
    let mut sum = SeriesSum::default();
    let before_end = (ns(p.outage_start) / SECOND) as usize;
    let after_from = ns(p.outage_end).div_ceil(SECOND) as usize;
    let (mut attempts, mut requests, mut ok) = (0u64, 0u64, 0u64);
    let (mut peak, mut post, mut before, mut after, mut rec) = (0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut post_any, mut before_any, mut all_recovered) = (true, true, true);
    for r in runs {
        sum.add(&r.load, &r.retries, &r.goodput);
        sum.add_sent(&r.sent);
        attempts += r.attempts;
        requests += r.arrivals.iter().map(|x| u64::from(*x)).sum::<u64>();
        ok += r.goodput.iter().map(|x| u64::from(*x)).sum::<u64>();
        let max_of = |v: &[u32]| f64::from(v.iter().copied().max().unwrap_or(0)) / p.capacity;
        peak += max_of(&r.load);
        match r.load.get(after_from..).filter(|v| !v.is_empty()) {
            Some(v) => post += max_of(v),
            None => post_any = false,
        }
        match mean_per_s(&r.goodput[..before_end.min(r.goodput.len())]) {
            Some(x) => before += x,
            None => before_any = false,
        }
        let tail_from = r
            .goodput
            .len()
            .saturating_sub(TAIL_S)
            .max(after_from.min(r.goodput.len()));
        after += mean_per_s(&r.goodput[tail_from..]).unwrap_or(0.0);
        match recovery_s(r, p) {
            Some(x) => rec += x,
            None => all_recovered = false,
        }
    }
    let shed = runs.iter().map(|r| r.shed).sum::<u64>();
    Row {
        strategy: strategy.to_string(),
        server: Some(server.to_string()),
        shed_share: Some(ratio(shed, attempts)),
        runs: runs.len(),
        attempts: attempts as f64 / n,
        requests: requests as f64 / n,
        amplification: ratio(attempts, requests),
        request_success: ratio(ok, requests),
        peak_load_over_capacity: Some(peak / n),
        post_outage_peak_over_capacity: post_any.then_some(post / n),
        recovery_s: all_recovered.then_some(rec / n),
        budget_refusals: runs.iter().map(|r| r.budget_refusals).sum::<u64>() as f64 / n,
        breaker_opens: runs.iter().map(|r| r.breaker_opens).sum::<u64>() as f64 / n,
        goodput_before: before_any.then_some(before / n),
        goodput_after: Some(after / n),
        recovered: Some(all_recovered),
        series: sum.mean(runs.len(), 1.0),
        ..Row::default()
    }
}
