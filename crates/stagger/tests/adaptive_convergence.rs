//! The adaptive limiter against a server that throttles above a fixed rate,
//! in virtual time, beside plain backoff and AWS standard mode (backoff
//! plus the retry quota) in the same run.
//!
//! Eight workers call back to back (each call up to 3 attempts, 20 ms per
//! attempt); the server accepts 10 calls in any one second and throttles
//! the rest. With backoff alone the workers keep sending at the rate being
//! refused; the quota stops their retries once it is spent but not their
//! first attempts; the adaptive limiter paces every attempt and settles on
//! the accepted rate. `cargo test -p stagger --test main -- adaptive_convergence
//! --nocapture` prints the per-5-second table BENCHMARKS.md shows.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use stagger::guardrails::budget::QuotaBudget;
use stagger::guardrails::AdaptiveLimiter;
use stagger::random::FastRng;
use stagger::{Call, Class, Decision, Outcome, Policy};

const WORKERS: u64 = 8;
const ACCEPTED_PER_SECOND: usize = 10;
const LATENCY: u64 = 20_000_000;
const SECONDS: u64 = 60;
const SEC: u64 = 1_000_000_000;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Start,
    Token,
    Send,
    Answer(bool),
}

#[derive(Default, Clone, Copy)]
struct Second {
    sent: u32,
    throttled: u32,
}

/// Runs the workers for a minute; per second, the attempts sent and the
/// throttles they met.
fn run(policy: &Policy, limiter: Option<&AdaptiveLimiter>, seed: u64, t0: Instant) -> Vec<Second> {
    let at = |ns: u64| t0 + Duration::from_nanos(ns);
    let mut seconds = vec![Second::default(); SECONDS as usize];
    let mut accepted: VecDeque<u64> = VecDeque::new();
    let mut events = BinaryHeap::new();
    let mut calls: Vec<Call<FastRng>> =
        (0..WORKERS).map(|w| Call::seeded(seed * 100 + w)).collect();
    let mut fresh = vec![true; WORKERS as usize];
    let mut next_seed = seed * 100 + WORKERS;
    for w in 0..WORKERS {
        events.push(Reverse((w * 1_000_000, w, Step::Start)));
    }
    while let Some(Reverse((t, w, step))) = events.pop() {
        if t >= SECONDS * SEC {
            break;
        }
        let wi = w as usize;
        match step {
            Step::Start => {
                if fresh[wi] {
                    calls[wi] = Call::seeded(next_seed);
                    next_seed += 1;
                    fresh[wi] = false;
                }
                if policy.start_attempt(&mut calls[wi], at(t)).is_err() {
                    fresh[wi] = true;
                    events.push(Reverse((t, w, Step::Start)));
                    continue;
                }
                match limiter.map(|l| l.acquire(at(t))) {
                    // No token yet: wait for it, then ask again (the
                    // attempt has started; only its send waits).
                    Some(Err(wait)) => {
                        events.push(Reverse((t + wait.as_nanos() as u64, w, Step::Token)))
                    }
                    _ => events.push(Reverse((t, w, Step::Send))),
                }
            }
            Step::Token => match limiter.map(|l| l.acquire(at(t))) {
                Some(Err(wait)) => {
                    events.push(Reverse((t + wait.as_nanos() as u64, w, Step::Token)))
                }
                _ => events.push(Reverse((t, w, Step::Send))),
            },
            Step::Send => {
                while accepted.front().is_some_and(|&a| a + SEC <= t) {
                    accepted.pop_front();
                }
                let throttled = accepted.len() >= ACCEPTED_PER_SECOND;
                if !throttled {
                    accepted.push_back(t);
                }
                let s = &mut seconds[(t / SEC) as usize];
                s.sent += 1;
                s.throttled += u32::from(throttled);
                events.push(Reverse((t + LATENCY, w, Step::Answer(throttled))));
            }
            Step::Answer(throttled) => {
                if let Some(l) = limiter {
                    l.record(throttled, at(t));
                }
                let outcome = if throttled {
                    Outcome::from(Class::Transient)
                } else {
                    Outcome::Success
                };
                match policy.decide(&mut calls[wi], outcome, at(t)) {
                    Decision::Retry { after } => {
                        events.push(Reverse((t + after.as_nanos() as u64, w, Step::Start)));
                    }
                    Decision::Stop(_) => {
                        fresh[wi] = true;
                        events.push(Reverse((t, w, Step::Start)));
                    }
                }
            }
        }
    }
    seconds
}

fn window(s: &[Second]) -> (f64, f64) {
    let sent: u32 = s.iter().map(|x| x.sent).sum();
    let throttled: u32 = s.iter().map(|x| x.throttled).sum();
    let secs = s.len() as f64;
    (
        f64::from(sent) / secs,
        f64::from(throttled) / f64::from(sent.max(1)),
    )
}

#[test]
fn the_adaptive_limiter_settles_on_the_accepted_rate_where_backoff_does_not() {
    let plain = Policy::builder().max_attempts(3).build().unwrap();
    let standard = Policy::builder()
        .max_attempts(3)
        .budget(QuotaBudget::default())
        .build()
        .unwrap();
    let adaptive_policy = Policy::builder()
        .max_attempts(3)
        .budget(QuotaBudget::default())
        .build()
        .unwrap();
    let t0 = Instant::now();
    let limiter = AdaptiveLimiter::new(t0);
    let runs = [
        ("backoff", run(&plain, None, 1, t0)),
        ("standard", run(&standard, None, 2, t0)),
        ("adaptive", run(&adaptive_policy, Some(&limiter), 3, t0)),
    ];
    println!("| seconds | backoff sent/s | throttled | standard sent/s | throttled | adaptive sent/s | throttled |");
    println!("|---|---|---|---|---|---|---|");
    for start in (0..SECONDS as usize).step_by(5) {
        let mut row = format!("| {start}–{} |", start + 5);
        for (_, s) in &runs {
            let (rate, share) = window(&s[start..start + 5]);
            row += &format!(" {rate:.1} | {:.0} % |", share * 100.0);
        }
        println!("{row}");
    }
    let settled = |s: &[Second]| window(&s[5..]);
    let (backoff_rate, backoff_throttled) = settled(&runs[0].1);
    let (standard_rate, standard_throttled) = settled(&runs[1].1);
    let (rate, throttled) = settled(&runs[2].1);
    println!(
        "from 5 s on: backoff {backoff_rate:.1}/s {:.0} % throttled; standard {standard_rate:.1}/s {:.0} %; adaptive {rate:.1}/s {:.0} %",
        backoff_throttled * 100.0,
        standard_throttled * 100.0,
        throttled * 100.0
    );
    // Within 5 s the adaptive client sends close to the accepted rate and
    // few of its attempts are throttled; the others send far above it.
    assert!((8.0..=11.0).contains(&rate), "adaptive sends {rate:.1}/s");
    assert!(
        throttled < 0.10,
        "adaptive: {:.0} % throttled",
        throttled * 100.0
    );
    assert!(backoff_throttled > 0.5 && standard_throttled > 0.5);
    assert!(backoff_rate > 3.0 * rate && standard_rate > 3.0 * rate);
}
