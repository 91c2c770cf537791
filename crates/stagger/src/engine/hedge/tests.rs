use super::*;
use crate::guardrails::budget::{RatioBudget, RatioBudgetConfig};
use crate::outcome::Class;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fixed(k: u32, d: u64) -> HedgePolicyConfig {
    HedgePolicyConfig {
        max_attempts: k,
        delay: HedgeDelay::Fixed(ms(d)),
        max_extra_load: None,
        ..Default::default()
    }
}

fn sent(step: HedgeStep) -> u32 {
    match step {
        HedgeStep::Send { attempt, .. } => attempt,
        other => panic!("expected a send, got {other:?}"),
    }
}

#[test]
fn a_call_not_declared_idempotent_never_hedges() {
    let h = fixed(3, 10).build().unwrap();
    let t0 = Instant::now();
    for idem in [Idempotency::Unspecified, Idempotency::NotIdempotent] {
        let mut c = h.call(Call::seeded(1).idempotency(idem));
        assert_eq!(sent(h.poll(&mut c, t0)), 1);
        assert_eq!(h.poll(&mut c, t0 + ms(500)), HedgeStep::Wait);
        h.report(&mut c, 1, Outcome::Success, t0 + ms(600));
        assert_eq!(
            h.poll(&mut c, t0 + ms(600)),
            HedgeStep::Stop(StopReason::Success)
        );
        assert_eq!(c.call().attempts(), 1);
    }
}

#[test]
fn hedges_go_out_one_delay_apart_up_to_max_attempts() {
    let h = fixed(3, 10).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true));
    assert_eq!(sent(h.poll(&mut c, t0)), 1);
    assert_eq!(
        h.poll(&mut c, t0 + ms(9)),
        HedgeStep::WaitUntil(t0 + ms(10))
    );
    assert_eq!(sent(h.poll(&mut c, t0 + ms(10))), 2);
    assert_eq!(
        h.poll(&mut c, t0 + ms(10)),
        HedgeStep::WaitUntil(t0 + ms(20))
    );
    assert_eq!(sent(h.poll(&mut c, t0 + ms(25))), 3);
    assert_eq!(
        h.poll(&mut c, t0 + ms(100)),
        HedgeStep::Wait,
        "no attempt left"
    );
    assert_eq!(c.in_flight(), 3);
    assert_eq!(c.hedges(), 2);
    h.report(&mut c, 1, Outcome::Success, t0 + ms(101));
    assert_eq!(
        h.poll(&mut c, t0 + ms(101)),
        HedgeStep::Stop(StopReason::Success)
    );
    assert_eq!(c.winner(), Some(1));
    // Late answers of cancelled attempts are ignored.
    h.report(&mut c, 2, Class::Permanent, t0 + ms(102));
    assert_eq!(
        h.poll(&mut c, t0 + ms(102)),
        HedgeStep::Stop(StopReason::Success)
    );
}

#[test]
fn a_non_fatal_failure_sends_the_next_attempt_at_once() {
    let h = fixed(3, 1_000).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true));
    assert_eq!(sent(h.poll(&mut c, t0)), 1);
    h.report(&mut c, 1, Class::Transient, t0 + ms(3));
    assert_eq!(
        sent(h.poll(&mut c, t0 + ms(3))),
        2,
        "not after the 1 s delay"
    );
    h.report(&mut c, 2, Class::Transient, t0 + ms(4));
    assert_eq!(sent(h.poll(&mut c, t0 + ms(4))), 3);
    h.report(&mut c, 3, Class::Transient, t0 + ms(5));
    assert_eq!(
        h.poll(&mut c, t0 + ms(5)),
        HedgeStep::Stop(StopReason::AttemptsExhausted)
    );
}

#[test]
fn a_fatal_failure_ends_the_call_while_a_hedge_runs() {
    let h = fixed(2, 10).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true));
    sent(h.poll(&mut c, t0));
    sent(h.poll(&mut c, t0 + ms(10)));
    h.report(&mut c, 2, Class::Permanent, t0 + ms(12));
    assert_eq!(
        h.poll(&mut c, t0 + ms(12)),
        HedgeStep::Stop(StopReason::NotRetryable)
    );
    assert_eq!(
        c.in_flight(),
        1,
        "attempt 1 is left for the front-end to cancel"
    );
}

#[test]
fn a_failure_of_the_last_attempt_waits_for_the_others() {
    let h = fixed(2, 10).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true));
    sent(h.poll(&mut c, t0));
    sent(h.poll(&mut c, t0 + ms(10)));
    h.report(&mut c, 2, Class::Transient, t0 + ms(11));
    assert_eq!(h.poll(&mut c, t0 + ms(11)), HedgeStep::Wait);
    h.report(&mut c, 1, Outcome::Success, t0 + ms(30));
    assert_eq!(
        h.poll(&mut c, t0 + ms(30)),
        HedgeStep::Stop(StopReason::Success)
    );
}

#[test]
fn an_adaptive_delay_waits_for_the_minimum_samples_and_keeps_the_floor() {
    let h = HedgePolicy::new(HedgePolicyConfig {
        delay: HedgeDelay::Percentile(90.0),
        min_samples: 10,
        floor: ms(5),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap();
    let t0 = Instant::now();
    assert_eq!(h.current_delay(t0), None);
    let mut c = h.call(Call::seeded(1).idempotent(true));
    sent(h.poll(&mut c, t0));
    assert_eq!(
        h.poll(&mut c, t0 + ms(500)),
        HedgeStep::Wait,
        "no samples: no hedge"
    );
    h.report(&mut c, 1, Outcome::Success, t0 + ms(500));
    for _ in 0..9 {
        h.observe(ms(1), t0);
    }
    // 10 samples: 9 at 1 ms and one at 500 ms; p90 is 1 ms, the floor 5 ms.
    assert_eq!(h.current_delay(t0 + ms(500)), Some(ms(5)));
    for _ in 0..90 {
        h.observe(ms(40), t0 + ms(500));
    }
    let d = h.current_delay(t0 + ms(2_000)).unwrap();
    assert!(d >= ms(40) && d <= ms(45), "{d:?}");
}

#[test]
fn the_budget_caps_hedges_at_max_extra_load() {
    let h = HedgePolicy::new(HedgePolicyConfig {
        delay: HedgeDelay::Fixed(ms(1)),
        max_extra_load: Some(0.05),
        ..Default::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let mut hedges = 0;
    for i in 0..400u64 {
        let now = t0 + Duration::from_micros(i);
        let mut c = h.call(Call::seeded(i).idempotent(true));
        sent(h.poll(&mut c, now));
        if let HedgeStep::Send { .. } = h.poll(&mut c, now + ms(1)) {
            hedges += 1;
        }
    }
    // 5 % of 400 requests plus the floor of one per window.
    assert_eq!(hedges, 21);
}

#[test]
fn hedges_and_retries_can_share_one_budget() {
    let shared = RatioBudget::new(RatioBudgetConfig {
        ratio: 0.0,
        floor: 1,
        floor_per_request: None,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder()
        .max_attempts(3)
        .budget(shared.clone())
        .build()
        .unwrap();
    let h = HedgePolicy::new(HedgePolicyConfig {
        max_attempts: 3,
        delay: HedgeDelay::Fixed(ms(10)),
        shared_budget: Some(std::sync::Arc::new(shared)),
        policy: Some(policy),
        ..Default::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true));
    sent(h.poll(&mut c, t0));
    // The one allowance goes to the timed hedge…
    assert_eq!(sent(h.poll(&mut c, t0 + ms(10))), 2);
    // …so the retry after a failure is refused by the same budget.
    h.report(&mut c, 2, Class::Transient, t0 + ms(11));
    assert_eq!(h.poll(&mut c, t0 + ms(11)), HedgeStep::Wait);
    h.report(&mut c, 1, Class::Transient, t0 + ms(12));
    assert_eq!(
        h.poll(&mut c, t0 + ms(12)),
        HedgeStep::Stop(StopReason::Budget)
    );
}

#[test]
fn bad_settings_name_their_field() {
    let d = HedgePolicyConfig::default;
    let cases = [
        (
            HedgePolicyConfig {
                max_attempts: 0,
                ..d()
            },
            "max_attempts",
        ),
        (
            HedgePolicyConfig {
                max_attempts: 9,
                ..d()
            },
            "max_attempts",
        ),
        (
            HedgePolicyConfig {
                delay: HedgeDelay::Percentile(0.0),
                ..d()
            },
            "delay",
        ),
        (
            HedgePolicyConfig {
                delay: HedgeDelay::Percentile(f64::NAN),
                ..d()
            },
            "delay",
        ),
        (
            HedgePolicyConfig {
                max_extra_load: Some(f64::INFINITY),
                ..d()
            },
            "max_extra_load",
        ),
        (
            HedgePolicyConfig {
                window: ms(10),
                ..d()
            },
            "window",
        ),
    ];
    for (b, field) in cases {
        assert_eq!(HedgePolicy::new(b).unwrap_err().field(), field);
    }
}

#[test]
fn a_server_hint_delays_the_next_attempt_after_a_failure() {
    use crate::outcome::Hint;
    let h = fixed(2, 1_000).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true));
    sent(h.poll(&mut c, t0));
    let busy = Failure::transient().with_hint(Hint::RetryAfter(ms(50)));
    h.report(&mut c, 1, busy, t0 + ms(5));
    let HedgeStep::WaitUntil(at) = h.poll(&mut c, t0 + ms(5)) else {
        panic!("expected a wait")
    };
    assert!(at >= t0 + ms(55), "never sooner than the server asked");
    assert_eq!(h.poll(&mut c, t0 + ms(30)), HedgeStep::WaitUntil(at));
    assert_eq!(sent(h.poll(&mut c, at)), 2);
}

#[test]
fn a_call_past_its_deadline_sends_nothing() {
    let h = fixed(2, 10).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true).deadline(t0));
    assert_eq!(h.poll(&mut c, t0), HedgeStep::Stop(StopReason::Deadline));
    assert_eq!(c.call().attempts(), 0);
}

#[test]
fn a_hedge_past_the_deadline_is_not_sent_but_the_running_attempt_may_still_win() {
    let h = fixed(2, 10).build().unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(1).idempotent(true).deadline(t0 + ms(8)));
    sent(h.poll(&mut c, t0));
    assert_eq!(h.poll(&mut c, t0 + ms(10)), HedgeStep::Wait);
    h.report(&mut c, 1, Outcome::Success, t0 + ms(7));
    assert_eq!(
        h.poll(&mut c, t0 + ms(7)),
        HedgeStep::Stop(StopReason::Success)
    );
}

#[test]
fn events_report_only_the_waits_that_happen() {
    use crate::guardrails::event::{Event, Observer};
    use std::sync::Mutex;
    #[derive(Default)]
    struct Waits(Mutex<Vec<Duration>>);
    impl Observer for Waits {
        fn on_event(&self, e: &Event) {
            if let Event::RetryScheduled { delay, .. } = e {
                self.0.lock().unwrap().push(*delay);
            }
        }
    }
    let waits = Arc::new(Waits::default());
    let retry = Policy::builder()
        .max_attempts(3)
        .observer(waits.clone())
        .build()
        .unwrap();
    let h = HedgePolicyConfig {
        policy: Some(retry),
        ..fixed(3, 100)
    }
    .build()
    .unwrap();
    let t0 = Instant::now();
    let mut c = h.call(Call::seeded(3).idempotent(true));
    assert_eq!(sent(h.poll(&mut c, t0)), 1);
    // A non-fatal failure: the next attempt goes out at once, and the event
    // says so (not the 100 ms ±jitter backoff a retry would have slept).
    h.report(&mut c, 1, Failure::transient(), t0 + ms(5));
    assert_eq!(sent(h.poll(&mut c, t0 + ms(5))), 2);
    assert_eq!(*waits.0.lock().unwrap(), vec![Duration::ZERO]);
}
