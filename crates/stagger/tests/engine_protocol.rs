//! The engine's protocol as a front-end of one's own speaks it, with no
//! runtime: a scripted transport whose answers come at instants of a
//! `ManualClock`, and a driver that steps the clock to the next thing
//! anything waits for.

use std::time::{Duration, Instant};

use stagger::exec::{Plan, Step};
use stagger::hedging::HedgePolicyConfig;
use stagger::time::{Clock, ManualClock};
use stagger::{
    Backoff, Breaker, Call, Failure, HedgeDelay, HedgePolicy, Idempotency, Jitter, Outcome, Policy,
    StopReason,
};

const MS: Duration = Duration::from_millis(1);

/// Drives `plan` to its end: attempt `k` answers `script[k - 1]` (after
/// this long, this outcome). Returns when each attempt was sent and why the
/// call stopped. Bounded: a plan that never ends fails the test.
fn run(
    plan: &mut Plan<'_>,
    clock: &ManualClock,
    script: &[(u64, Outcome)],
) -> (Vec<Duration>, StopReason) {
    let origin = clock.now();
    let mut sent = Vec::new();
    let mut running: Vec<(u32, Instant, Outcome)> = Vec::new();
    for _ in 0..1_000 {
        let wake = match plan.poll() {
            Step::Send(a) => {
                sent.push(clock.now() - origin);
                let (after, outcome) = script[a.id as usize - 1];
                running.push((a.id, clock.now() + Duration::from_millis(after), outcome));
                continue;
            }
            Step::Stop(reason) => return (sent, reason),
            Step::WaitUntil { at, .. } => Some(at),
            Step::Wait => None,
            _ => unreachable!("a step this test does not know"),
        };
        let answer = running.iter().map(|r| r.1).min();
        match (answer, wake) {
            // The next thing to happen is an answer.
            (Some(a), _) if wake.is_none_or(|w| a <= w) => {
                clock.advance(a - clock.now());
                let i = running.iter().position(|r| r.1 == a).unwrap();
                let (id, _, outcome) = running.remove(i);
                plan.report(id, outcome);
            }
            // It is the instant the plan waits for.
            (_, Some(w)) => {
                clock.advance(w.saturating_duration_since(clock.now()));
                plan.slept(w);
            }
            // (An answer with no instant is always the first arm's.)
            (_, None) => panic!("waits for an answer with none running"),
        }
    }
    panic!("the plan did not end in 1,000 steps");
}

fn fail() -> Outcome {
    Outcome::Failure(Failure::transient())
}

#[test]
fn a_retried_plan_sends_after_each_backoff() {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: 100 * MS,
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let clock = ManualClock::new();
    let mut plan = Plan::new(&policy, None, Call::new(), &clock);
    let (sent, reason) = run(
        &mut plan,
        &clock,
        &[(10, fail()), (10, fail()), (10, fail())],
    );
    assert_eq!(reason, StopReason::AttemptsExhausted);
    assert_eq!(sent, [Duration::ZERO, 110 * MS, 320 * MS]);
    assert_eq!(plan.waited(), 300 * MS);
    assert_eq!(plan.call().attempts(), 3);
}

#[test]
fn a_hedged_plan_sends_its_hedge_at_the_delay_and_the_first_answer_wins() {
    let policy = Policy::builder().max_attempts(2).build().unwrap();
    let hedging = HedgePolicy::new(HedgePolicyConfig {
        max_attempts: 2,
        delay: HedgeDelay::Fixed(50 * MS),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap();
    let clock = ManualClock::new();
    let call = Call::new().idempotency(Idempotency::Idempotent);
    let mut plan = Plan::new(&policy, Some(&hedging), call, &clock);
    let (sent, reason) = run(
        &mut plan,
        &clock,
        &[(200, Outcome::Success), (30, Outcome::Success)],
    );
    assert_eq!(reason, StopReason::Success);
    assert_eq!(sent, [Duration::ZERO, 50 * MS]);
    assert_eq!(clock.elapsed(), 80 * MS);
    // The slow first attempt was cancelled: its late answer is not heard.
    assert_eq!(plan.report(1, Outcome::Success), None);
}

// Dropping a plan mid-attempt gives the breaker its half-open probe back,
// at the plan's own (manual) time: nothing waits for a probe timeout.
#[test]
fn a_dropped_plan_frees_its_probe_at_its_own_time() {
    let breaker = Breaker::default();
    let clock = ManualClock::new();
    let policy = Policy::builder().breaker(breaker.clone()).build().unwrap();
    // Open the breaker: the default opens after 5 failures in a row.
    for _ in 0..5 {
        let mut plan = Plan::new(&policy, None, Call::new(), &clock);
        let Step::Send(a) = plan.poll() else {
            panic!("not sent")
        };
        plan.report(a.id, Outcome::Failure(Failure::transient()));
        plan.cancel();
    }
    assert!(matches!(
        Plan::new(&policy, None, Call::new(), &clock).poll(),
        Step::Stop(StopReason::BreakerOpen)
    ));
    clock.advance(Duration::from_secs(7));
    let mut plan = Plan::new(&policy, None, Call::new(), &clock);
    assert!(matches!(plan.poll(), Step::Send(_)), "the half-open probe");
    assert_eq!(breaker.probes_in_flight(), 1);
    drop(plan);
    assert_eq!(breaker.probes_in_flight(), 0, "the probe slot is back");
}
