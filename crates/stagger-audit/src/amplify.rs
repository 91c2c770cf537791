//! Amplification measured by driving the real engine in virtual time.
//!
//! The engine is the library's own: a [`Policy`] for a retrying method, a
//! [`HedgePolicy`] for a hedged one. Every attempt is admitted and every
//! answer judged by it at its virtual instant; each attempt answers after
//! [`LATENCY`]. Nothing sleeps: instants are derived from one origin.
//!
//! Two ways, and the report says which was used:
//!
//! - **exact**, when calls do not share state (no budget, throttling or
//!   breaker): one call is driven alone through every outcome path — for a
//!   retry, "the first `j` attempts fail" for each `j`; for a hedge, every
//!   combination of answers of its attempts — each path weighted by its
//!   probability. Jitter can only move the deadline's cut, so each path is
//!   driven twice, with every draw at its lowest and at its highest; when
//!   both give the same attempts the sum is exact (for `maxAttempts` n and
//!   no cut: n when dead, `1 + ½ + … + ½^(n−1)` at ½).
//! - **estimated** otherwise: [`REQUESTS`] logical requests arrive every
//!   [`GAP`], interleaved in time order so the shared budget sees them as a
//!   live client would, with seeded independent failures; the figure is
//!   attempts ÷ requests over that sample.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::Fault;

use stagger::hedging::{HedgeStep, HedgedCall};
use stagger::random::{FastRng, RandomSource};
use stagger::{Call, Decision, Failure, HedgePolicy, Idempotency, Outcome, Policy};

/// Logical requests of an estimate.
pub const REQUESTS: u32 = 4000;
/// Time between two logical requests of an estimate.
pub const GAP: Duration = Duration::from_millis(10);
/// How long every attempt takes to answer.
pub const LATENCY: Duration = Duration::from_millis(5);

/// The engine a method ships with.
pub(crate) enum Engine {
    /// A retry policy.
    Retry(Policy),
    /// A hedging policy.
    Hedge(HedgePolicy),
}

impl Engine {
    fn max_attempts(&self) -> u32 {
        match self {
            Engine::Retry(p) => p.max_attempts(),
            Engine::Hedge(h) => h.max_attempts(),
        }
    }
}

/// What to measure: a fresh engine per run, the facts of the failure the
/// dependency answers with, the call's deadline, and whether calls share
/// state (a budget, throttling or a breaker).
pub(crate) struct Subject<'a> {
    pub make: &'a dyn Fn() -> Result<Engine, Fault>,
    pub failure: Failure,
    pub deadline: Option<Duration>,
    pub shared: bool,
}

/// Attempts per logical request, dead and at ½, and how they were found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Measured {
    pub dead: f64,
    pub half: f64,
    /// `None` when exact; the sample size of an estimate.
    pub sample: Option<u32>,
}

/// A random source stuck at one value: every jitter draw at an extreme, or
/// (at `u64::MAX / 2`) in the middle of its range.
pub(crate) struct Stuck(pub u64);

impl RandomSource for Stuck {
    fn next_u64(&mut self) -> u64 {
        self.0
    }
}

/// Measures `s`: exactly when it can, else an estimate.
pub(crate) fn measure(s: &Subject<'_>, seed: u64) -> Result<Measured, Fault> {
    if !s.shared {
        if let Some(m) = exact(s)? {
            return Ok(m);
        }
    }
    Ok(Measured {
        dead: estimate(s, 1.0, seed)?,
        half: estimate(s, 0.5, seed)?,
        sample: Some(REQUESTS),
    })
}

/// One outcome path of a call: whether attempt `a` (from 1) fails, the
/// path's probability at ½, and whether it is the dead path.
type OutcomePath = (Box<dyn Fn(u32) -> bool>, f64, bool);

/// The exact figures by path enumeration, or `None` when jitter decides
/// whether an attempt fits the deadline.
fn exact(s: &Subject<'_>) -> Result<Option<Measured>, Fault> {
    let n = (s.make)()?.max_attempts();
    let hedged = matches!((s.make)()?, Engine::Hedge(_));
    // Paths: (does attempt `a` (1-based) fail?, weight at ½, is it "dead").
    let paths: Vec<OutcomePath> = if hedged {
        (0u32..1 << n)
            .map(|mask| {
                let f: Box<dyn Fn(u32) -> bool> =
                    Box::new(move |a: u32| a > n || mask & (1 << (a - 1)) != 0);
                (f, 0.5f64.powi(n as i32), mask == (1 << n) - 1)
            })
            .collect()
    } else {
        (0..=n)
            .map(|j| {
                let f: Box<dyn Fn(u32) -> bool> = Box::new(move |a: u32| a <= j);
                let w = if j < n {
                    0.5f64.powi(j as i32 + 1)
                } else {
                    0.5f64.powi(n as i32)
                };
                (f, w, j == n)
            })
            .collect()
    };
    let (mut dead, mut half) = (0.0, 0.0);
    for (fails, weight, is_dead) in &paths {
        let mut got = [0u64; 2];
        for (k, stuck) in [0, u64::MAX].into_iter().enumerate() {
            let engine = (s.make)()?;
            got[k] = drive(
                &engine,
                s,
                1,
                &mut |_| Call::with_rng(Stuck(stuck)),
                &mut |_, a| fails(a),
                &mut |_, _| {},
            );
        }
        if got[0] != got[1] {
            return Ok(None);
        }
        half += weight * got[0] as f64;
        if *is_dead {
            dead = got[0] as f64;
        }
    }
    Ok(Some(Measured {
        dead,
        half,
        sample: None,
    }))
}

/// Mean attempts per logical request over [`REQUESTS`] requests when each
/// attempt fails with probability `p_fail`.
pub(crate) fn estimate(s: &Subject<'_>, p_fail: f64, seed: u64) -> Result<f64, Fault> {
    let engine = (s.make)()?;
    let mut draws = FastRng::seeded(seed);
    let attempts = drive(
        &engine,
        s,
        REQUESTS,
        &mut |i| Call::seeded(seed ^ (u64::from(i) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        &mut |_, _| draws.next_f64() < p_fail,
        &mut |_, _| {},
    );
    Ok(attempts as f64 / f64::from(REQUESTS))
}

/// Attempts made by `requests` calls, one every [`GAP`], when an answer to
/// attempt `a` of call `i` is a failure iff `fails(i, a)`; `sent(i, at)` is
/// told each attempt as it goes out, `at` from the first call's start.
pub(crate) fn drive<R: RandomSource>(
    engine: &Engine,
    s: &Subject<'_>,
    requests: u32,
    new_call: &mut dyn FnMut(u32) -> Call<R>,
    fails: &mut dyn FnMut(usize, u32) -> bool,
    sent: &mut dyn FnMut(usize, Duration),
) -> u64 {
    let origin = Instant::now();
    let calls = (0..requests).map(|i| {
        let mut c = new_call(i).idempotent(true);
        if let Some(d) = s.deadline {
            c = c.deadline(origin + GAP * i + d);
        }
        c
    });
    match engine {
        Engine::Retry(p) => retry(p, s.failure, origin, calls.collect(), fails, sent),
        Engine::Hedge(h) => {
            let calls = calls.map(|c| h.call(c)).collect();
            hedge(h, s.failure, origin, calls, fails, sent)
        }
    }
}

/// One call driven alone to its end when every attempt fails with
/// `failure`: the attempts the engine sends, and the wait it chose before
/// each retry (every jitter draw in the middle of its range, so a uniform
/// jitter's wait is its mean).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Alone {
    /// Attempts sent, the first included.
    pub attempts: u32,
    /// The wait before retry `n` at index `n - 1`: from an answer to the
    /// next attempt (zero for a hedge already out).
    pub waits: Vec<Duration>,
}

/// Drives `engine` through one call, no deadline, a call of `idempotency`,
/// every attempt answering `failure` after [`LATENCY`].
pub(crate) fn alone(engine: &Engine, failure: Failure, idempotency: Idempotency) -> Alone {
    let call = Call::with_rng(Stuck(u64::MAX / 2)).idempotency(idempotency);
    let mut starts: Vec<Duration> = Vec::new();
    let origin = Instant::now();
    let fails = &mut |_: usize, _: u32| true;
    let sent = &mut |_: usize, at: Duration| starts.push(at);
    let attempts = match engine {
        Engine::Retry(p) => retry(p, failure, origin, vec![call], fails, sent),
        Engine::Hedge(h) => hedge(h, failure, origin, vec![h.call(call)], fails, sent),
    };
    let waits = starts
        .windows(2)
        .map(|w| w[1].saturating_sub(w[0] + LATENCY))
        .collect();
    Alone {
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        waits,
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Start,
    Answer(u32),
}

/// (time since origin, sequence, call, step): the sequence keeps ties in
/// insertion order, so a run replays exactly.
type Queue = BinaryHeap<Reverse<(Duration, u64, usize, Step)>>;

fn push(q: &mut Queue, seq: &mut u64, at: Duration, i: usize, step: Step) {
    q.push(Reverse((at, *seq, i, step)));
    *seq += 1;
}

fn outcome(failed: bool, failure: Failure) -> Outcome {
    if failed {
        Outcome::Failure(failure)
    } else {
        Outcome::Success
    }
}

fn retry<R: RandomSource>(
    policy: &Policy,
    failure: Failure,
    origin: Instant,
    mut calls: Vec<Call<R>>,
    fails: &mut dyn FnMut(usize, u32) -> bool,
    sent: &mut dyn FnMut(usize, Duration),
) -> u64 {
    let (mut q, mut seq, mut attempts) = (Queue::new(), 0u64, 0u64);
    for i in 0..calls.len() {
        push(&mut q, &mut seq, GAP * i as u32, i, Step::Start);
    }
    while let Some(Reverse((at, _, i, step))) = q.pop() {
        let call = &mut calls[i];
        match step {
            Step::Start => {
                if policy.start_attempt(call, origin + at).is_ok() {
                    attempts += 1;
                    sent(i, at);
                    let a = call.attempts();
                    push(&mut q, &mut seq, at + LATENCY, i, Step::Answer(a));
                }
            }
            Step::Answer(a) => {
                let o = outcome(fails(i, a), failure);
                if let Decision::Retry { after } = policy.decide(call, o, origin + at) {
                    push(&mut q, &mut seq, at + after, i, Step::Start);
                }
            }
        }
    }
    attempts
}

fn hedge<R: RandomSource>(
    policy: &HedgePolicy,
    failure: Failure,
    origin: Instant,
    mut calls: Vec<HedgedCall<R>>,
    fails: &mut dyn FnMut(usize, u32) -> bool,
    sent: &mut dyn FnMut(usize, Duration),
) -> u64 {
    let (mut q, mut seq, mut attempts) = (Queue::new(), 0u64, 0u64);
    for i in 0..calls.len() {
        push(&mut q, &mut seq, GAP * i as u32, i, Step::Start);
    }
    while let Some(Reverse((at, _, i, step))) = q.pop() {
        let h = &mut calls[i];
        let now = origin + at;
        if let Step::Answer(a) = step {
            if !h.is_running(a) {
                continue;
            }
            policy.report(h, a, outcome(fails(i, a), failure), now);
        }
        // Poll until the engine waits: every Send goes out now.
        loop {
            match policy.poll(h, now) {
                HedgeStep::Send { attempt, .. } => {
                    attempts += 1;
                    sent(i, at);
                    push(&mut q, &mut seq, at + LATENCY, i, Step::Answer(attempt));
                }
                HedgeStep::WaitUntil(t) => {
                    push(
                        &mut q,
                        &mut seq,
                        t.saturating_duration_since(origin),
                        i,
                        Step::Start,
                    );
                    break;
                }
                HedgeStep::Wait | HedgeStep::Stop(_) => break,
            }
        }
    }
    attempts
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger::guardrails::budget::TokenBucket;
    use stagger::hedging::HedgePolicyConfig;
    use stagger::{Backoff, Class, HedgeDelay, Jitter};

    fn retrying(n: u32) -> impl Fn() -> Result<Engine, Fault> {
        move || Ok(Engine::Retry(Policy::builder().max_attempts(n).build()?))
    }

    fn subject(make: &dyn Fn() -> Result<Engine, Fault>) -> Subject<'_> {
        Subject {
            make,
            failure: Class::Transient.into(),
            deadline: None,
            shared: false,
        }
    }

    #[test]
    fn without_shared_state_the_figures_are_the_closed_forms_exactly() {
        for n in 1..=6 {
            let make = retrying(n);
            let m = measure(&subject(&make), 7).unwrap();
            let geometric: f64 = (0..n).map(|k| 0.5f64.powi(k as i32)).sum();
            assert_eq!(m.sample, None);
            assert_eq!(m.dead, f64::from(n));
            assert_eq!(m.half, geometric, "n={n}");
        }
    }

    #[test]
    fn the_sampled_estimate_lands_near_the_closed_form() {
        // 4000 draws of a count whose spread is below 1.5: ±0.1 is more than
        // 4 standard errors.
        for n in 1..=6 {
            let make = retrying(n);
            let expected: f64 = (0..n).map(|k| 0.5f64.powi(k as i32)).sum();
            for seed in [1, 2, 3] {
                let got = estimate(&subject(&make), 0.5, seed).unwrap();
                assert!((got - expected).abs() < 0.1, "n={n}: {got} vs {expected}");
            }
        }
    }

    #[test]
    fn grpc_throttling_is_estimated_and_holds_a_dead_dependency_near_one_attempt() {
        let make = || {
            Ok(Engine::Retry(
                Policy::builder()
                    .max_attempts(5)
                    .budget(TokenBucket::default())
                    .build()?,
            ))
        };
        let s = Subject {
            shared: true,
            ..subject(&make)
        };
        let m = measure(&s, 1).unwrap();
        assert_eq!(m.sample, Some(REQUESTS));
        assert!(m.dead < 1.01 && m.dead > 1.0, "{}", m.dead);
    }

    #[test]
    fn a_deadline_shorter_than_the_waits_cuts_attempts_exactly() {
        let make = || {
            Ok(Engine::Retry(
                Policy::builder()
                    .max_attempts(5)
                    .backoff(Backoff {
                        base: Duration::from_secs(1),
                        jitter: Jitter::None,
                        ..Backoff::new()
                    })
                    .build()?,
            ))
        };
        let s = Subject {
            deadline: Some(Duration::from_millis(1500)),
            ..subject(&make)
        };
        // 5 ms attempt, 1 s wait, 5 ms attempt, then a 2 s wait would pass it.
        let m = measure(&s, 1).unwrap();
        assert_eq!((m.dead, m.half, m.sample), (2.0, 1.5, None));
    }

    #[test]
    fn a_deadline_that_jitter_may_or_may_not_meet_is_an_estimate() {
        let make = || {
            Ok(Engine::Retry(
                Policy::builder()
                    .max_attempts(5)
                    .backoff(Backoff {
                        base: Duration::from_secs(1),
                        jitter: Jitter::Full,
                        ..Backoff::new()
                    })
                    .build()?,
            ))
        };
        let s = Subject {
            deadline: Some(Duration::from_millis(1500)),
            ..subject(&make)
        };
        assert_eq!(measure(&s, 1).unwrap().sample, Some(REQUESTS));
    }

    fn hedging(delay: Duration) -> impl Fn() -> Result<Engine, Fault> {
        move || {
            let engine = Policy::builder()
                .max_attempts(3)
                .backoff(Backoff {
                    base: Duration::ZERO,
                    jitter: Jitter::None,
                    ..Backoff::new()
                })
                .build()?;
            Ok(Engine::Hedge(HedgePolicy::new(HedgePolicyConfig {
                max_attempts: 3,
                delay: HedgeDelay::Fixed(delay),
                policy: Some(engine),
                max_extra_load: None,
                ..Default::default()
            })?))
        }
    }

    #[test]
    fn hedges_are_measured_on_the_hedging_engine() {
        // Every hedge at once: 3 attempts whatever the answers.
        let make = hedging(Duration::ZERO);
        let m = measure(&subject(&make), 1).unwrap();
        assert_eq!((m.dead, m.half, m.sample), (3.0, 3.0, None));
        // A hedge later than the answer, fatal failures: the first answer
        // ends the call.
        let make = hedging(Duration::from_millis(50));
        let s = Subject {
            failure: Class::Permanent.into(),
            ..subject(&make)
        };
        let m = measure(&s, 1).unwrap();
        assert_eq!((m.dead, m.half), (1.0, 1.0));
        // Non-fatal failures send the next at once: the retry's numbers.
        let m = measure(&subject(&make), 1).unwrap();
        assert_eq!((m.dead, m.half), (3.0, 1.75));
    }
}
