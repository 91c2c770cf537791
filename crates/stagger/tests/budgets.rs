//! Every budget rule pinned at its boundary, on a manual clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use proptest::prelude::*;
use stagger::guardrails::budget::{
    Budget, QuotaBudget, QuotaBudgetConfig, RatioBudget, RatioBudgetConfig, RefillBudget,
    RefillBudgetConfig, TokenBucket, TokenBucketConfig, Withdrawal,
};
use stagger::time::{Clock, ManualClock};
use stagger::Failure;

fn retry(b: &dyn Budget, clock: &ManualClock) -> bool {
    b.try_withdraw(&Failure::transient(), clock.now()).is_some()
}

fn grants(b: &dyn Budget, clock: &ManualClock, tries: usize) -> usize {
    (0..tries).filter(|_| retry(b, clock)).count()
}

// ---- token_bucket (gRPC A6) ----

#[test]
fn token_bucket_refuses_at_exactly_half_and_allows_one_success_later() {
    let clock = ManualClock::new();
    let b = TokenBucket::default(); // max 10, ratio 0.1
    let f = Failure::transient();
    for _ in 0..4 {
        b.on_failure(&f, clock.now());
    }
    assert_eq!(b.tokens_milli(), 6_000);
    assert!(retry(&b, &clock), "6 > 5");
    b.on_failure(&f, clock.now());
    assert_eq!(b.tokens_milli(), 5_000);
    assert!(
        !retry(&b, &clock),
        "5 is not above 10/2: equal is not enough"
    );
    b.on_success(None, clock.now());
    assert_eq!(b.tokens_milli(), 5_100);
    assert!(retry(&b, &clock), "5.1 > 5");
    assert_eq!(
        b.tokens_milli(),
        5_100,
        "A6 retries do not spend tokens; failures do"
    );
}

#[test]
fn token_bucket_stays_within_zero_and_max() {
    let clock = ManualClock::new();
    let b = TokenBucket::default();
    for _ in 0..50 {
        b.on_failure(&Failure::transient(), clock.now());
    }
    assert_eq!(b.tokens_milli(), 0);
    for _ in 0..500 {
        b.on_success(None, clock.now());
    }
    assert_eq!(b.tokens_milli(), 10_000);
}

#[test]
fn token_bucket_ignores_failures_no_policy_would_retry() {
    let clock = ManualClock::new();
    let b = TokenBucket::default();
    b.on_failure(&Failure::permanent(), clock.now());
    b.on_failure(&Failure::new(stagger::Class::Cancelled), clock.now());
    assert_eq!(b.tokens_milli(), 10_000);
    b.on_failure(&Failure::timeout(), clock.now());
    assert_eq!(b.tokens_milli(), 9_000);
}

#[test]
fn token_bucket_with_an_odd_max_compares_exactly() {
    let clock = ManualClock::new();
    // max 3: the threshold is 1.5 tokens, which integer halving would make 1.
    let b = TokenBucket::new(TokenBucketConfig {
        max_tokens: 3.0,
        token_ratio: 0.5,
    })
    .unwrap();
    b.on_failure(&Failure::transient(), clock.now()); // 2
    assert!(retry(&b, &clock));
    b.on_success(None, clock.now()); // 2.5
    b.on_failure(&Failure::transient(), clock.now()); // 1.5
    assert!(!retry(&b, &clock), "1.5 is not above 1.5");
}

// ---- ratio (Google SRE / Finagle) ----

/// Regression for tower's `TpsBudget`: it turns 0.6 into "one deposit pays
/// `(1/0.6) as isize` = 1 withdrawal", so a 60 % budget allows 10 retries
/// in 10 requests. Ours allows 6.
#[test]
fn tower_tps_budget_truncation_ratio_0_6_allows_at_most_6_of_10() {
    use tower::retry::budget::{Budget as _, TpsBudget};

    let tower = TpsBudget::new(Duration::from_secs(10), 0, 0.6);
    for _ in 0..10 {
        tower.deposit();
    }
    let tower_granted = (0..10).filter(|_| tower.withdraw()).count();
    assert_eq!(
        tower_granted, 10,
        "the peer's defect this test is named after"
    );

    let clock = ManualClock::new();
    let ours = RatioBudget::new(RatioBudgetConfig {
        ratio: 0.6,
        floor: 0,
        ..Default::default()
    })
    .unwrap();
    for _ in 0..10 {
        ours.on_request(clock.now());
    }
    assert_eq!(grants(&ours, &clock, 10), 6);
    assert_eq!(ours.counts(clock.now()), (10, 6));
}

#[test]
fn ratio_boundary_is_exact_for_every_count() {
    let clock = ManualClock::new();
    for requests in 0..40u64 {
        let b = RatioBudget::new(RatioBudgetConfig {
            ratio: 0.1,
            floor: 2,
            floor_per_request: None,
            ..Default::default()
        })
        .unwrap();
        for _ in 0..requests {
            b.on_request(clock.now());
        }
        // retries + 1 <= 2 + 0.1 * requests  <=>  retries <= 1 + floor(requests / 10)
        let expected = 2 + requests / 10;
        assert_eq!(
            grants(&b, &clock, 100) as u64,
            expected,
            "requests {requests}"
        );
    }
}

/// The default floor follows traffic: `clamp(0.1 · requests, 1, 10)`, on
/// top of the 10 % ratio, checked exactly at every count.
#[test]
fn ratio_traffic_floor_is_exact_for_every_count() {
    let clock = ManualClock::new();
    for requests in 0..250u64 {
        let b = RatioBudget::default();
        for _ in 0..requests {
            b.on_request(clock.now());
        }
        let floor = (requests * 100_000).clamp(1_000_000, 10_000_000);
        let expected = (floor + requests * 100_000) / 1_000_000;
        assert_eq!(
            grants(&b, &clock, 100) as u64,
            expected,
            "requests {requests}"
        );
    }
    // Busy clients keep the whole fixed floor.
    let b = RatioBudget::default();
    for _ in 0..100 {
        b.on_request(clock.now());
    }
    assert_eq!(grants(&b, &clock, 100), 20);
    // A floor of 0 stays 0.
    let b = RatioBudget::new(RatioBudgetConfig {
        floor: 0,
        ..Default::default()
    })
    .unwrap();
    b.on_request(clock.now());
    assert_eq!(grants(&b, &clock, 10), 0);
}

#[test]
fn ratio_fixed_floor_allows_a_quiet_client_its_retries_per_window() {
    let clock = ManualClock::new();
    let b = RatioBudget::new(RatioBudgetConfig {
        floor_per_request: None,
        ..Default::default()
    })
    .unwrap(); // 10 %, floor 10, 10 s
    assert_eq!(grants(&b, &clock, 20), 10);
    clock.advance(Duration::from_millis(9_999));
    assert!(
        !retry(&b, &clock),
        "the first bucket is still in the window"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        grants(&b, &clock, 20),
        10,
        "ten seconds later the window is fresh"
    );
}

#[test]
fn ratio_window_slides_bucket_by_bucket() {
    let clock = ManualClock::new();
    let b = RatioBudget::new(RatioBudgetConfig {
        ratio: 1.0,
        floor: 0,
        ..Default::default()
    })
    .unwrap();
    for second in 0..10 {
        clock.set(Duration::from_secs(second));
        b.on_request(clock.now());
    }
    assert_eq!(b.available(clock.now()), 10);
    clock.set(Duration::from_secs(12)); // requests of seconds 0..=2 left
    assert_eq!(b.counts(clock.now()), (7, 0));
    assert_eq!(grants(&b, &clock, 20), 7);
}

#[test]
fn ratio_available_reports_what_try_withdraw_grants() {
    let clock = ManualClock::new();
    let b = RatioBudget::new(RatioBudgetConfig {
        ratio: 0.25,
        floor: 3,
        floor_per_request: None,
        ..Default::default()
    })
    .unwrap();
    for _ in 0..17 {
        b.on_request(clock.now());
    }
    let available = b.available(clock.now());
    assert_eq!(available, 3 + 4);
    assert_eq!(grants(&b, &clock, 100) as u64, available);
    assert_eq!(b.available(clock.now()), 0);
}

// ---- refill (seed 002) ----

#[test]
fn refill_spends_one_per_retry_and_refills_by_ratio() {
    let clock = ManualClock::new();
    let b = RefillBudget::default(); // capacity 10, ratio 0.1
    assert_eq!(grants(&b, &clock, 20), 10, "starts full");
    assert!(!retry(&b, &clock), "empty: fail fast");
    for _ in 0..9 {
        b.on_success(None, clock.now());
    }
    assert!(!retry(&b, &clock), "0.9 tokens is not a retry");
    b.on_success(None, clock.now());
    assert!(retry(&b, &clock), "ten successes buy one retry");
    for _ in 0..1_000 {
        b.on_success(None, clock.now());
    }
    assert_eq!(b.tokens_milli(), 10_000, "capped at capacity");
}

// ---- quota (AWS standard) ----

#[test]
fn quota_goes_500_495_485_and_refunds_as_aws_does() {
    let clock = ManualClock::new();
    let q = QuotaBudget::default();
    assert_eq!(q.available(), 500);
    let first = q.try_withdraw(&Failure::transient(), clock.now()).unwrap();
    assert_eq!((first.cost(), q.available()), (5, 495));
    let second = q.try_withdraw(&Failure::timeout(), clock.now()).unwrap();
    assert_eq!((second.cost(), q.available()), (10, 485));
    // The call whose last retry followed a timeout succeeds: refund 10.
    q.on_success(Some(second), clock.now());
    assert_eq!(q.available(), 495);
    // A call that succeeds at its first attempt: refund 1.
    q.on_success(None, clock.now());
    assert_eq!(q.available(), 496);
    for _ in 0..10 {
        q.on_success(None, clock.now());
    }
    assert_eq!(q.available(), 500, "never above capacity");
}

#[test]
fn quota_refuses_a_retry_it_cannot_pay_for() {
    let clock = ManualClock::new();
    let q = QuotaBudget::new(QuotaBudgetConfig {
        capacity: 14,
        ..Default::default()
    })
    .unwrap();
    assert!(q.try_withdraw(&Failure::timeout(), clock.now()).is_some()); // 4 left
    assert!(
        q.try_withdraw(&Failure::transient(), clock.now()).is_none(),
        "5 > 4"
    );
    assert_eq!(q.available(), 4, "a refusal takes nothing");
    q.on_success(Some(Withdrawal::new(1)), clock.now());
    assert!(q.try_withdraw(&Failure::transient(), clock.now()).is_some());
    assert_eq!(q.available(), 0);
}

// ---- concurrency ----

/// Regression for check-then-withdraw (tower, tower-resilience): threads
/// that all see the last retries available must not all take them. Each
/// budget here has exactly 100 retries to give, and 4 threads ask 1 000
/// times each.
#[test]
fn check_then_withdraw_race_grants_exactly_the_allowance() {
    let clock = ManualClock::new();
    let ratio = RatioBudget::new(RatioBudgetConfig {
        ratio: 0.0,
        floor: 100,
        floor_per_request: None,
        ..Default::default()
    })
    .unwrap();
    let quota = QuotaBudget::new(QuotaBudgetConfig {
        capacity: 500,
        ..Default::default()
    })
    .unwrap();
    let refill = RefillBudget::new(RefillBudgetConfig {
        capacity: 100.0,
        ratio: 0.0,
    })
    .unwrap();
    let budgets: Vec<Arc<dyn Budget>> = vec![Arc::new(ratio), Arc::new(quota), Arc::new(refill)];
    for budget in budgets {
        let granted = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (b, g, s, now) = (budget.clone(), granted.clone(), start.clone(), clock.now());
                std::thread::spawn(move || {
                    s.wait();
                    for _ in 0..1_000 {
                        if b.try_withdraw(&Failure::transient(), now).is_some() {
                            g.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(granted.load(Ordering::Relaxed), 100, "{budget:?}");
    }
}

#[test]
fn concurrent_deposits_are_all_counted() {
    let clock = ManualClock::new();
    let b = RatioBudget::new(RatioBudgetConfig {
        ratio: 1.0,
        floor: 0,
        ..Default::default()
    })
    .unwrap();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (b, now) = (b.clone(), clock.now());
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    b.on_request(now);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(b.counts(clock.now()), (40_000, 0));
    assert_eq!(b.available(clock.now()), 40_000);
}

/// More threads than there are owned stripes: the rest share stripes with
/// compare-and-swap, and threads that exit hand their stripe on.
#[test]
fn deposits_from_many_short_and_long_lived_threads_are_all_counted() {
    let clock = ManualClock::new();
    let b = RatioBudget::new(RatioBudgetConfig {
        ratio: 1.0,
        floor: 0,
        ..Default::default()
    })
    .unwrap();
    let start = Arc::new(Barrier::new(20));
    let handles: Vec<_> = (0..20)
        .map(|_| {
            let (b, s, now) = (b.clone(), start.clone(), clock.now());
            std::thread::spawn(move || {
                s.wait();
                for _ in 0..5_000 {
                    b.on_request(now);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for _ in 0..40 {
        let (b, now) = (b.clone(), clock.now());
        std::thread::spawn(move || b.on_request(now))
            .join()
            .unwrap();
    }
    assert_eq!(b.counts(clock.now()), (100_040, 0));
}

#[test]
fn budgets_are_fixed_size_handles() {
    assert_eq!(
        std::mem::size_of::<RatioBudget>(),
        std::mem::size_of::<usize>()
    );
    assert_eq!(
        std::mem::size_of::<TokenBucket>(),
        std::mem::size_of::<usize>()
    );
    assert_eq!(
        std::mem::size_of::<RefillBudget>(),
        std::mem::size_of::<usize>()
    );
    assert_eq!(
        std::mem::size_of::<QuotaBudget>(),
        std::mem::size_of::<usize>()
    );
}

// ---- validation ----

#[test]
fn bad_configs_name_their_field() {
    let cases = [
        (
            RatioBudget::new(RatioBudgetConfig {
                ratio: -0.1,
                ..Default::default()
            })
            .unwrap_err(),
            "ratio",
        ),
        (
            RatioBudget::new(RatioBudgetConfig {
                ratio: f64::INFINITY,
                ..Default::default()
            })
            .unwrap_err(),
            "ratio",
        ),
        (
            RatioBudget::new(RatioBudgetConfig {
                window: Duration::from_millis(5),
                ..Default::default()
            })
            .unwrap_err(),
            "window",
        ),
        (
            TokenBucket::new(TokenBucketConfig {
                max_tokens: 1001.0,
                ..Default::default()
            })
            .unwrap_err(),
            "max_tokens",
        ),
        (
            TokenBucket::new(TokenBucketConfig {
                token_ratio: 0.0,
                ..Default::default()
            })
            .unwrap_err(),
            "token_ratio",
        ),
        (
            RefillBudget::new(RefillBudgetConfig {
                capacity: 0.5,
                ..Default::default()
            })
            .unwrap_err(),
            "capacity",
        ),
        (
            QuotaBudget::new(QuotaBudgetConfig {
                capacity: 0,
                ..Default::default()
            })
            .unwrap_err(),
            "capacity",
        ),
        (
            QuotaBudget::new(QuotaBudgetConfig {
                timeout_cost: 600,
                ..Default::default()
            })
            .unwrap_err(),
            "timeout_cost",
        ),
        (
            QuotaBudget::new(QuotaBudgetConfig {
                success_refund: 501,
                ..Default::default()
            })
            .unwrap_err(),
            "success_refund",
        ),
    ];
    for (err, field) in cases {
        assert_eq!(err.field(), field, "{err}");
    }
}

proptest! {
    #[test]
    fn no_config_panics(ratio in any::<f64>(), floor in any::<u32>(), ms in any::<u64>(), max in any::<f64>(), tr in any::<f64>()) {
        let _ = RatioBudget::new(RatioBudgetConfig {
            ratio,
            floor,
            window: Duration::from_millis(ms),
            ..Default::default()
        });
        let _ = TokenBucket::new(TokenBucketConfig {
            max_tokens: max,
            token_ratio: tr,
        });
        let _ = RefillBudget::new(RefillBudgetConfig { capacity: max, ratio: tr });
        let _ = QuotaBudget::new(QuotaBudgetConfig {
            capacity: floor,
            retry_cost: floor / 3,
            timeout_cost: floor / 2,
            ..Default::default()
        });
    }
}
