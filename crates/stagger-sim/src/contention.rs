//! AWS's optimistic-concurrency contention model ("Exponential Backoff and
//! Jitter", 2015).
//!
//! N clients start at t = 0 and each wants one successful write to one row.
//! A cycle is read → reply → write(version) → result, every one-way hop
//! taking |Normal(mean, sd)|, the server taking no time. A write fails iff
//! another write succeeded between this client's read and this write
//! reaching the server; the client then asks the library's
//! [`Policy::decide`] how long to wait, and reads again.
//!
//! Only the server's two moments of a cycle need ordering (the read arriving,
//! which fixes the version seen, and the write arriving), so each client has
//! exactly one pending event; they sit in a binary heap of packed
//! `time << 16 | client` keys, and each event replaces the heap's top in
//! place. Simulated events are counted as the four message deliveries of a
//! cycle plus one backoff timer per retry.
//!
//! [`Policy::decide`]: stagger::Policy::decide

use std::cmp::Reverse;
use std::collections::binary_heap::{BinaryHeap, PeekMut};

use stagger::random::FastRng;
use stagger::{Call, Class, Decision, Outcome};

use crate::engine::{mix, ns, At, Normal, VirtualTime};
use crate::guard::ClientPolicies;
use crate::params::Params;
use crate::result::{ratio, Row};
use crate::strategy::Strategy;
use crate::SimError;

const CLIENT_BITS: u32 = 16;
const CLIENT_MASK: u64 = (1 << CLIENT_BITS) - 1;

/// Buffers reused from run to run by one thread.
#[derive(Default)]
pub(crate) struct Scratch {
    heap: BinaryHeap<Reverse<u64>>,
    calls: Vec<Call<FastRng>>,
    seen: Vec<u64>,
    writing: Vec<bool>,
}

impl Scratch {
    /// Empties the buffers and starts `n` clients' calls at `start`: each
    /// whose policy lets it start sends its read after one hop.
    fn start(
        &mut self,
        policies: &ClientPolicies,
        n: usize,
        call_seeds: &mut FastRng,
        hops: &mut Hops,
        start: At,
    ) {
        self.heap.clear();
        self.calls.clear();
        self.seen.clear();
        self.seen.resize(n, 0);
        self.writing.clear();
        self.writing.resize(n, false);
        for i in 0..n {
            let mut call = Call::with_rng(call_seeds.fork()).idempotent(true);
            if policies.get(i).start_attempt(&mut call, start).is_ok() {
                self.heap
                    .push(Reverse((hops.next() << CLIENT_BITS) | i as u64));
            }
            self.calls.push(call);
        }
    }
}

/// What one run produced.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOut {
    pub(crate) writes: u64,
    pub(crate) succeeded: u64,
    /// When the last client learnt of its success; `None` if some client
    /// never succeeded.
    pub(crate) completion_ns: Option<u64>,
    pub(crate) budget_refusals: u64,
    pub(crate) breaker_opens: u64,
    pub(crate) events: u64,
}

struct Hops {
    rng: FastRng,
    normal: Normal,
    mean: f64,
    sd: f64,
}

impl Hops {
    #[inline]
    fn next(&mut self) -> u64 {
        (self.mean + self.sd * self.normal.sample(&mut self.rng)).abs() as u64
    }
}

/// Runs one seed of one strategy with `clients` racing clients.
pub(crate) fn run(
    s: &mut Scratch,
    strategy: &Strategy,
    p: &Params,
    clients: u32,
    seed: u64,
) -> Result<RunOut, SimError> {
    let vt = VirtualTime::new();
    let n = clients as usize;
    let policies = ClientPolicies::new(strategy, p, n, seed)?;
    let limit = ns(p.duration);
    let mut hops = Hops {
        rng: FastRng::seeded(mix(seed, 3)),
        normal: Normal::default(),
        mean: ns(p.hop_mean) as f64,
        sd: ns(p.hop_sd) as f64,
    };
    let mut call_seeds = FastRng::seeded(mix(seed, 4));
    s.start(&policies, n, &mut call_seeds, &mut hops, At(vt, 0));
    let mut out = RunOut::default();
    let mut version = 0u64;
    let mut last = 0u64;
    while let Some(mut top) = s.heap.peek_mut() {
        let key = top.0;
        let t = key >> CLIENT_BITS;
        let i = (key & CLIENT_MASK) as usize;
        if t > limit {
            break;
        }
        if !s.writing[i] {
            // The read reaches the server, the reply returns, the write goes.
            s.seen[i] = version;
            s.writing[i] = true;
            let t2 = t + hops.next() + hops.next();
            top.0 = (t2 << CLIENT_BITS) | i as u64;
            out.events += 2;
            continue;
        }
        // The write reaches the server; the result returns at `back`.
        out.writes += 1;
        out.events += 2;
        let back = t + hops.next();
        let policy = policies.get(i);
        let call = &mut s.calls[i];
        if version == s.seen[i] {
            version += 1;
            out.succeeded += 1;
            last = last.max(back);
            PeekMut::pop(top);
            let _ = policy.decide(call, Outcome::Success, At(vt, back));
            continue;
        }
        match policy.decide(call, Class::Transient, At(vt, back)) {
            Decision::Retry { after } => {
                let wake = back.saturating_add(ns(after));
                if wake > limit || policy.start_attempt(call, At(vt, wake)).is_err() {
                    PeekMut::pop(top);
                    continue;
                }
                out.events += 1;
                s.writing[i] = false;
                top.0 = ((wake + hops.next()) << CLIENT_BITS) | i as u64;
            }
            Decision::Stop(_) => {
                PeekMut::pop(top);
            }
        }
    }
    out.completion_ns = (out.succeeded == n as u64).then_some(last);
    out.budget_refusals = policies.budget_refusals();
    out.breaker_opens = policies.breaker_opens();
    Ok(out)
}

/// Folds the runs of one (strategy, clients) cell into its row.
pub(crate) fn summarize(strategy: &Strategy, clients: u32, runs: &[RunOut]) -> Row {
    let n = runs.len().max(1) as f64;
    let writes: u64 = runs.iter().map(|r| r.writes).sum();
    let ok: u64 = runs.iter().map(|r| r.succeeded).sum();
    let completion: Option<u64> = runs.iter().map(|r| r.completion_ns).sum();
    let requests = u64::from(clients) * runs.len() as u64;
    Row {
        strategy: strategy.to_string(),
        clients: Some(clients),
        runs: runs.len(),
        attempts: writes as f64 / n,
        requests: f64::from(clients),
        amplification: ratio(writes, requests),
        request_success: ratio(ok, requests),
        budget_refusals: runs.iter().map(|r| r.budget_refusals).sum::<u64>() as f64 / n,
        breaker_opens: runs.iter().map(|r| r.breaker_opens).sum::<u64>() as f64 / n,
        calls: Some(writes as f64 / n),
        completion_ms: completion.map(|c| c as f64 / n / 1e6),
        ..Row::default()
    }
}
