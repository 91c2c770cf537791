//! A hedge "wins" when the call's answer comes from an attempt that started
//! as a hedge; an answer from the first attempt, or from a follow-up sent
//! after a failure (a retry, not a hedge), is not a hedge's win.

use stagger::Backoff;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stagger::export::Stats;
use stagger::hedging::HedgePolicyConfig;
use stagger::hedging::{HedgeStep, HedgedCall};
use stagger::{Call, Class, HedgeDelay, HedgePolicy, Outcome, Policy};

fn hedging(stats: &Arc<Stats>) -> HedgePolicy {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .observer(stats.clone())
        .build()
        .unwrap();
    HedgePolicy::new(HedgePolicyConfig {
        max_attempts: 3,
        delay: HedgeDelay::Fixed(Duration::from_millis(10)),
        max_extra_load: None,
        policy: Some(policy),
        ..Default::default()
    })
    .unwrap()
}

fn send<R: stagger::random::RandomSource>(
    h: &HedgePolicy,
    call: &mut HedgedCall<R>,
    at: Instant,
) -> u32 {
    match h.poll(call, at) {
        HedgeStep::Send { attempt, .. } => attempt,
        other => panic!("expected an attempt at {at:?}, got {other:?}"),
    }
}

#[test]
fn a_hedge_that_answers_first_is_counted_as_won() {
    let stats = Arc::new(Stats::new());
    let h = hedging(&stats);
    let t0 = Instant::now();
    let mut call = h.call(Call::seeded(1).idempotent(true));
    assert_eq!(send(&h, &mut call, t0), 1);
    let later = t0 + Duration::from_millis(10);
    assert_eq!(send(&h, &mut call, later), 2);
    h.report(
        &mut call,
        2,
        Outcome::Success,
        later + Duration::from_millis(1),
    );
    let s = stats.snapshot();
    assert_eq!((s.hedges, s.hedges_won), (1, 1));
}

#[test]
fn the_first_attempt_answering_before_its_hedge_is_no_hedge_win() {
    let stats = Arc::new(Stats::new());
    let h = hedging(&stats);
    let t0 = Instant::now();
    let mut call = h.call(Call::seeded(2).idempotent(true));
    assert_eq!(send(&h, &mut call, t0), 1);
    let later = t0 + Duration::from_millis(10);
    assert_eq!(send(&h, &mut call, later), 2);
    h.report(
        &mut call,
        1,
        Outcome::Success,
        later + Duration::from_millis(1),
    );
    let s = stats.snapshot();
    assert_eq!((s.hedges, s.hedges_won), (1, 0));
}

#[test]
fn a_follow_up_after_a_failure_that_succeeds_is_a_retry_not_a_hedge_win() {
    let stats = Arc::new(Stats::new());
    let h = hedging(&stats);
    let t0 = Instant::now();
    let mut call = h.call(Call::seeded(3).idempotent(true));
    assert_eq!(send(&h, &mut call, t0), 1);
    // Attempt 1 fails before the hedge delay: attempt 2 goes out at once,
    // as the follow-up to a failure.
    let failed = t0 + Duration::from_millis(2);
    h.report(&mut call, 1, Outcome::from(Class::Transient), failed);
    assert_eq!(send(&h, &mut call, failed), 2);
    h.report(
        &mut call,
        2,
        Outcome::Success,
        failed + Duration::from_millis(1),
    );
    let s = stats.snapshot();
    assert_eq!((s.hedges, s.hedges_won, s.retries), (0, 0, 1));
}
