//! loom models of every budget: concurrent withdrawals and deposits lose
//! no update and never grant more than the rule allows.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p stagger --release --lib loom`.

use std::time::{Duration, Instant};

use ::loom::thread;

use super::*;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = ::loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

fn granted(b: &dyn Budget, now: Instant) -> u64 {
    u64::from(b.try_withdraw(&Failure::transient(), now).is_some())
}

/// Regression for tower's check-then-withdraw: two threads both saw one
/// retry left and both took it.
#[test]
fn loom_ratio_last_retry_goes_to_one_thread() {
    let t0 = Instant::now();
    model(move || {
        let b = RatioBudget::new(RatioBudgetConfig {
            ratio: 0.0,
            floor: 1,
            ..Default::default()
        })
        .unwrap();
        let b2 = b.clone();
        let h = thread::spawn(move || granted(&b2, t0));
        let mine = granted(&b, t0);
        let total = mine + h.join().unwrap();
        assert_eq!(total, 1);
        assert_eq!(b.counts(t0).1, 1);
    });
}

/// A withdrawal racing a deposit sees it or not, but the grant always
/// follows the rule and no count is lost.
#[test]
fn loom_ratio_deposit_and_withdraw() {
    let t0 = Instant::now();
    model(move || {
        let b = RatioBudget::new(RatioBudgetConfig {
            ratio: 1.0,
            floor: 0,
            ..Default::default()
        })
        .unwrap();
        b.on_request(t0);
        let (b1, b2) = (b.clone(), b.clone());
        let d = thread::spawn(move || b1.on_request(t0));
        let w = thread::spawn(move || granted(&b2, t0));
        let mine = granted(&b, t0);
        d.join().unwrap();
        let total = mine + w.join().unwrap();
        assert!((1..=2).contains(&total), "{total}");
        assert_eq!(b.counts(t0), (2, total));
    });
}

/// Two withdrawals a bucket apart (the later one seals the earlier bucket)
/// still share one allowance.
#[test]
fn loom_ratio_window_move_is_atomic() {
    let t0 = Instant::now();
    model(move || {
        let b = RatioBudget::new(RatioBudgetConfig {
            ratio: 0.0,
            floor: 1,
            window: Duration::from_secs(10),
            ..Default::default()
        })
        .unwrap();
        b.on_request(t0); // fixes the origin at t0
        let b2 = b.clone();
        let later = t0 + Duration::from_secs(5); // the next bucket (two under loom)
        let h = thread::spawn(move || granted(&b2, later));
        let mine = granted(&b, t0);
        assert_eq!(mine + h.join().unwrap(), 1);
    });
}

/// The floor that follows traffic: a thin client's one retry per window
/// goes to one thread, whether or not a racing request was counted first.
#[test]
fn loom_ratio_traffic_floor_grants_one_retry_to_racing_threads() {
    let t0 = Instant::now();
    model(move || {
        let b = RatioBudget::default();
        b.on_request(t0);
        let (b1, b2) = (b.clone(), b.clone());
        let d = thread::spawn(move || b1.on_request(t0));
        let w = thread::spawn(move || granted(&b2, t0));
        let mine = granted(&b, t0);
        d.join().unwrap();
        let total = mine + w.join().unwrap();
        // 1 or 2 requests: clamp(0.1·r, 1, 10) + 0.1·r is below 2 either way.
        assert_eq!(total, 1);
        assert_eq!(b.counts(t0), (2, 1));
    });
}

#[test]
fn loom_token_bucket_loses_no_update() {
    let t0 = Instant::now();
    model(move || {
        let b = TokenBucket::default();
        let f = Failure::transient();
        for _ in 0..3 {
            b.on_failure(&f, t0); // 7 tokens: away from both bounds
        }
        let (b1, b2) = (b.clone(), b.clone());
        let h1 = thread::spawn(move || {
            b1.on_failure(&Failure::transient(), t0);
            b1.on_success(None, t0);
        });
        let h2 = thread::spawn(move || {
            b2.on_success(None, t0);
            b2.on_failure(&Failure::transient(), t0);
        });
        h1.join().unwrap();
        h2.join().unwrap();
        assert_eq!(b.tokens_milli(), 7_000 - 2_000 + 200);
    });
}

#[test]
fn loom_refill_spends_each_token_once() {
    let t0 = Instant::now();
    model(move || {
        let b = RefillBudget::new(RefillBudgetConfig {
            capacity: 2.0,
            ratio: 1.0,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(granted(&b, t0), 1); // 1 token left
        let (b1, b2) = (b.clone(), b.clone());
        let d = thread::spawn(move || b1.on_success(None, t0));
        let w = thread::spawn(move || granted(&b2, t0));
        let mine = granted(&b, t0);
        d.join().unwrap();
        let total = mine + w.join().unwrap();
        assert!((1..=2).contains(&total), "{total}");
        assert_eq!(b.tokens_milli() + total * 1_000, 2_000);
    });
}

#[test]
fn loom_quota_withdraw_and_refund() {
    let t0 = Instant::now();
    model(move || {
        let q = QuotaBudget::new(QuotaBudgetConfig {
            capacity: 10,
            retry_cost: 5,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(granted(&q, t0), 1); // 5 left
        let (q1, q2) = (q.clone(), q.clone());
        let refund = thread::spawn(move || q1.on_success(Some(Withdrawal::new(5)), t0));
        let w = thread::spawn(move || granted(&q2, t0));
        let mine = granted(&q, t0);
        refund.join().unwrap();
        let total = mine + w.join().unwrap();
        assert!((1..=2).contains(&total), "{total}");
        assert_eq!(q.available() + total * 5, 10);
    });
}
