//! Retries multiplied through a chain of layers.
//!
//! A user request enters the top of a chain of `layers` services; each layer
//! calls the next through its own client (its own policy and guardrails), and
//! the bottom layer calls a dependency that fails with probability `f`. The
//! model counts the attempts that reach the dependency per user request when:
//!
//! - `every_layer`: every layer's client retries (3 layers × 4 attempts is
//!   64 at f = 1);
//! - `one_layer`: the one-layer rule as the library's HTTP front-ends apply
//!   it (a client layer with `one_layer` and a server's deadline layer that
//!   marks a failure given up below): a layer serving an inbound retry does
//!   not retry, and a failure a layer below already retried (or held back)
//!   comes back marked, so the upper layers pass it up — 4 at f = 1;
//! - `hop_rule`: docs/behaviour.md §8's rule applied hop by hop and nothing more: a layer
//!   serving an inbound retry (`x-retry-attempt` > 1) does not retry, but a
//!   layer serving a first attempt still does — 19 at f = 1 for 3 layers.
//!
//! Every decision is the library's, and the model tells it only facts: a
//! layer serving an inbound retry sets [`Call::serving_retry`], a failure
//! that comes back marked is a transient [`Failure::gave_up_below`], and
//! the policy decides (its budgets and breakers count those failures as the
//! failures they are, as a real stack's do). A layer marks its failure when
//! it made more than one attempt or held one back for those facts — the
//! rule of the library's front-ends. Backoff delays are drawn but do not
//! move the clock within one user request: each request's call tree is
//! evaluated at its arrival instant (requests arrive evenly at `rate` per
//! second), which is what a budget's window sees to within the few seconds
//! a tree's waits add up to.
//!
//! [`Failure::gave_up_below`]: stagger::Failure::gave_up_below

use std::time::Instant;

use stagger::random::{FastRng, RandomSource};
use stagger::{Call, Decision, Failure, NotRetried, Outcome, Policy};

use crate::engine::{mix, VirtualTime};
use crate::guard::ClientPolicies;
use crate::params::Params;
use crate::result::{ratio, Row};
use crate::strategy::{Schedule, Strategy};
use crate::SimError;

/// Where retries are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAt {
    /// Every layer retries.
    EveryLayer,
    /// Only the layer closest to the dependency retries.
    OneLayer,
    /// docs/behaviour.md §8's per-hop rule alone.
    HopRule,
}

impl RetryAt {
    /// The JSON name.
    pub const fn as_str(&self) -> &'static str {
        match self {
            RetryAt::EveryLayer => "every_layer",
            RetryAt::OneLayer => "one_layer",
            RetryAt::HopRule => "hop_rule",
        }
    }

    /// The modes reported for a strategy: all three for a plain one, only
    /// `every_layer` for one with guardrails (their effect is the point).
    pub(crate) fn for_strategy(s: &Strategy) -> &'static [RetryAt] {
        if s.has_guardrails() {
            &[RetryAt::EveryLayer]
        } else {
            &[RetryAt::EveryLayer, RetryAt::OneLayer, RetryAt::HopRule]
        }
    }
}

/// The largest number of dependency attempts one user request may cause.
const MAX_TREE: f64 = 1e7;

/// What one run produced.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunOut {
    pub(crate) requests: u64,
    pub(crate) succeeded: u64,
    pub(crate) bottom: u64,
    pub(crate) budget_refusals: u64,
    pub(crate) breaker_opens: u64,
}

struct Ctx<'a, 'p> {
    policies: &'a [&'p Policy],
    fails: &'a mut dyn FnMut() -> bool,
    mode: RetryAt,
    call_seeds: &'a mut FastRng,
    now: Instant,
    bottom: u64,
}

/// Layer `layer` serves a request that is attempt `inbound` of its caller;
/// returns whether it succeeded and whether its failure comes back marked
/// as given up (the one-layer rule's mark).
fn serve(ctx: &mut Ctx<'_, '_>, layer: usize, inbound: u32) -> (bool, bool) {
    let policy = ctx.policies[layer];
    let mut call = Call::with_rng(ctx.call_seeds.fork())
        .idempotent(true)
        .serving_retry(ctx.mode != RetryAt::EveryLayer && inbound > 1);
    loop {
        if policy.start_attempt(&mut call, ctx.now).is_err() {
            return (false, false);
        }
        let attempt = call.attempts();
        let (ok, marked) = if layer + 1 == ctx.policies.len() {
            ctx.bottom += 1;
            (!(ctx.fails)(), false)
        } else {
            serve(ctx, layer + 1, attempt)
        };
        if ok {
            let _ = policy.decide(&mut call, Outcome::Success, ctx.now);
            return (true, false);
        }
        let mut failure = Failure::transient();
        failure.gave_up_below = marked && ctx.mode == RetryAt::OneLayer;
        if let Decision::Stop(_) = policy.decide(&mut call, failure, ctx.now) {
            let held_back = matches!(
                call.not_retried(),
                Some(NotRetried::ServingRetry | NotRetried::ServerSaidNo)
            );
            return (false, call.attempts() > 1 || held_back);
        }
    }
}

/// What one user request did to a chain of layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tree {
    /// Whether the top layer's call succeeded.
    pub succeeded: bool,
    /// Attempts that reached the dependency.
    pub bottom: u64,
}

/// Drives one user request arriving at `now` through a chain of layers
/// whose clients run `policies` (top first), in mode `mode`; the
/// dependency's answer to each attempt is a failure when `fails()` says so.
/// This is the model's whole rule: the tests drive it against a real stack
/// of the library's tower layers.
pub fn one_request(
    policies: &[&Policy],
    mode: RetryAt,
    now: Instant,
    fails: &mut dyn FnMut() -> bool,
) -> Tree {
    let mut seeds = FastRng::seeded(0x001A_7E25);
    let mut ctx = Ctx {
        policies,
        fails,
        mode,
        call_seeds: &mut seeds,
        now,
        bottom: 0,
    };
    let succeeded = !policies.is_empty() && serve(&mut ctx, 0, 1).0;
    Tree {
        succeeded,
        bottom: ctx.bottom,
    }
}

/// Checks that one request's call tree stays bounded.
pub(crate) fn check(strategy: &Strategy, p: &Params) -> Result<(), SimError> {
    let a = f64::from(strategy.max_attempts(&Schedule::from(p)));
    if a.powi(p.layers as i32) > MAX_TREE {
        return Err(SimError::new(
            "attempts",
            format!(
                "{} attempts at each of {} layers could make more than {MAX_TREE} dependency attempts per request",
                if p.attempts.is_none() { "unlimited".to_string() } else { a.to_string() },
                p.layers
            ),
        ));
    }
    Ok(())
}

/// Runs one seed of one strategy for one mode and failure rate.
pub(crate) fn run(
    strategy: &Strategy,
    p: &Params,
    mode: RetryAt,
    f: f64,
    seed: u64,
) -> Result<RunOut, SimError> {
    check(strategy, p)?;
    let vt = VirtualTime::new();
    let layers = p.layers as usize;
    let policies = ClientPolicies::new(strategy, p, layers, seed)?;
    let n = ((p.rate * p.duration.as_secs_f64()).round() as u64).max(1);
    let gap = 1e9 / p.rate;
    let chain: Vec<&Policy> = (0..layers).map(|l| policies.get(l)).collect();
    let mut rng = FastRng::seeded(mix(seed, 7));
    let mut fails = || rng.next_f64() < f;
    let mut call_seeds = FastRng::seeded(mix(seed, 8));
    let mut out = RunOut {
        requests: n,
        ..RunOut::default()
    };
    let mut bottom = 0;
    for k in 0..n {
        let mut ctx = Ctx {
            policies: &chain,
            fails: &mut fails,
            mode,
            call_seeds: &mut call_seeds,
            now: vt.at((k as f64 * gap) as u64),
            bottom: 0,
        };
        if serve(&mut ctx, 0, 1).0 {
            out.succeeded += 1;
        }
        bottom += ctx.bottom;
    }
    out.bottom = bottom;
    out.budget_refusals = policies.budget_refusals();
    out.breaker_opens = policies.breaker_opens();
    Ok(out)
}

/// Folds the runs of one (strategy, mode, f) cell into its row.
pub(crate) fn summarize(strategy: &Strategy, mode: RetryAt, f: f64, runs: &[RunOut]) -> Row {
    let n = runs.len().max(1) as f64;
    let requests: u64 = runs.iter().map(|r| r.requests).sum();
    let bottom: u64 = runs.iter().map(|r| r.bottom).sum();
    let ok: u64 = runs.iter().map(|r| r.succeeded).sum();
    Row {
        strategy: strategy.to_string(),
        retry_at: Some(mode.as_str()),
        failure_rate: Some(f),
        runs: runs.len(),
        attempts: bottom as f64 / n,
        requests: requests as f64 / n,
        amplification: ratio(bottom, requests),
        request_success: ratio(ok, requests),
        budget_refusals: runs.iter().map(|r| r.budget_refusals).sum::<u64>() as f64 / n,
        breaker_opens: runs.iter().map(|r| r.breaker_opens).sum::<u64>() as f64 / n,
        bottom_attempts_per_request: Some(ratio(bottom, requests)),
        ..Row::default()
    }
}
