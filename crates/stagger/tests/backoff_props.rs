//! docs/behaviour.md §1 guarantees of the backoff schedule, as property tests.

use std::time::Duration;

use proptest::prelude::*;
use stagger::random::{FastRng, RandomSource};
use stagger::{Backoff, Call, Class, Decision, Jitter, Policy};

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        (0.0f64..=1.0).prop_map(Jitter::Proportional),
    ]
}

/// Valid schedules over the whole range of durations, including 0 and
/// near-`u64::MAX` nanoseconds.
fn backoff() -> impl Strategy<Value = Backoff> {
    (
        prop_oneof![Just(0u64), 0u64..10_000_000_000, any::<u64>()],
        prop_oneof![Just(1.0f64), 1.0f64..10.0, 1.0f64..1e300],
        any::<u64>(),
        jitter(),
    )
        .prop_map(|(base, mult, cap_extra, j)| {
            let cap = base.saturating_add(cap_extra % (u64::MAX / 2));
            Backoff {
                base: Duration::from_nanos(base),
                multiplier: mult,
                cap: Duration::from_nanos(cap),
                jitter: j,
            }
        })
}

fn upper_bound(b: &Backoff) -> Duration {
    match b.jitter {
        Jitter::Proportional(f) => b.cap.mul_f64(1.0 + f),
        _ => b.cap,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No delay exceeds the cap (proportional: cap·(1+f)); none falls below
    /// its jitter's range; the chain never panics or overflows.
    #[test]
    fn delays_stay_inside_the_cap_and_the_range(b in backoff(), seed in any::<u64>(), start in any::<u32>()) {
        prop_assert!(b.validate().is_ok());
        let mut rng = FastRng::seeded(seed);
        let mut prev = None;
        for n in [1, 2, 3, 10, 63, 64, 65, 1000, start, u32::MAX] {
            let d = b.delay(n, prev, &mut rng);
            prop_assert!(d <= upper_bound(&b), "retry {} delay {:?} over cap {:?}", n, d, b.cap);
            if b.jitter != Jitter::Decorrelated {
                let (lo, hi) = b.range(n);
                // Allow one nanosecond of float rounding at the edges.
                prop_assert!(d + Duration::from_nanos(1) >= lo, "{:?} below {:?}", d, lo);
                prop_assert!(d <= hi + Duration::from_nanos(1), "{:?} above {:?}", d, hi);
            } else {
                prop_assert!(d >= b.base.min(b.cap));
            }
            prev = Some(d);
        }
    }

    /// b_n never decreases and saturates at the cap for huge n.
    #[test]
    fn schedule_is_monotone_and_saturates(b in backoff()) {
        let mut last = Duration::ZERO;
        for n in (1..200).chain([1 << 20, u32::MAX - 1, u32::MAX]) {
            let bn = b.backoff(n);
            prop_assert!(bn >= last);
            prop_assert!(bn <= b.cap);
            last = bn;
        }
        if b.multiplier > 1.0001 && b.base > Duration::ZERO {
            prop_assert_eq!(b.backoff(u32::MAX), b.cap);
        }
    }

    /// A seeded generator replays the schedule exactly: the schedule is a
    /// pure function of (config, attempt, rng).
    #[test]
    fn seeded_schedules_replay_exactly(b in backoff(), seed in any::<u64>()) {
        let a: Vec<Duration> = b.delays(FastRng::seeded(seed)).take(20).collect();
        let c: Vec<Duration> = b.delays(FastRng::seeded(seed)).take(20).collect();
        prop_assert_eq!(a, c);
    }

    /// The same through the decision engine, seeded per call.
    #[test]
    fn seeded_calls_replay_exactly(seed in any::<u64>(), j in jitter()) {
        let policy = Policy::builder().backoff(Backoff { jitter: j, ..Backoff::new() }).max_attempts(8).build().unwrap();
        let run = || {
            let mut call = Call::seeded(seed);
            let now = std::time::Instant::now();
            let mut out = vec![];
            loop {
                policy.start_attempt(&mut call, now).unwrap();
                match policy.decide(&mut call, Class::Transient, now) {
                    Decision::Retry { after } => out.push(after),
                    Decision::Stop(_) => return out,
                }
            }
        };
        prop_assert_eq!(run(), run());
    }

    /// Any multiplier, cap or jitter factor, valid or not, never panics.
    #[test]
    fn bad_configs_never_panic(base in any::<u64>(), cap in any::<u64>(), mult in any::<f64>(), f in any::<f64>(), n in any::<u32>()) {
        let b = Backoff { base: Duration::from_nanos(base), cap: Duration::from_nanos(cap), multiplier: mult, jitter: Jitter::Proportional(f) };
        let _ = b.validate();
        let mut rng = FastRng::seeded(n as u64);
        let _ = b.delay(n, Some(Duration::from_nanos(base)), &mut rng);
        let _ = b.range(n);
        let _ = Policy::builder().backoff(b).build();
    }
}

/// Regression (tower's backoff maker cloned one RNG into every request, so
/// requests that failed together retried together): 2,000 calls failing at
/// the same instant must spread their first retries over the whole window.
#[test]
fn calls_failing_together_draw_independent_delays() {
    let policy = Policy::default();
    let now = std::time::Instant::now();
    let mut buckets = [0u32; 10];
    let mut first_two = vec![];
    for _ in 0..2000 {
        let mut call = Call::new();
        policy.start_attempt(&mut call, now).unwrap();
        let Decision::Retry { after } = policy.decide(&mut call, Class::Transient, now) else {
            panic!("transient failure must be retried");
        };
        first_two.push(after);
        let i = (after.as_secs_f64() / 0.1 * 10.0) as usize;
        buckets[i.min(9)] += 1;
    }
    // Expected 200 per 100 ms / 10 bucket; binomial sd ~13.4; allow ±5 sd.
    for (i, n) in buckets.iter().enumerate() {
        assert!((133..=267).contains(n), "bucket {i} holds {n}: {buckets:?}");
    }
    // And no two consecutive calls drew the same delay.
    assert!(first_two.windows(2).all(|w| w[0] != w[1]));
}

/// Pairs of calls created at the same moment are uncorrelated.
#[test]
fn paired_calls_are_uncorrelated() {
    let n = 20_000;
    let (mut sx, mut sy, mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for _ in 0..n {
        let (mut a, mut b) = (Call::new(), Call::new());
        let x = a.rng().next_f64();
        let y = b.rng().next_f64();
        sx += x;
        sy += y;
        sxy += x * y;
        sxx += x * x;
        syy += y * y;
    }
    let n = n as f64;
    let cov = sxy / n - (sx / n) * (sy / n);
    let r = cov / ((sxx / n - (sx / n).powi(2)).sqrt() * (syy / n - (sy / n).powi(2)).sqrt());
    // Standard error of r near 0 is 1/sqrt(n) ~ 0.007; allow 5 sd.
    assert!(r.abs() < 0.035, "correlation {r}");
}

/// Full jitter's mean is half the backoff (seeded; 100k draws, tolerance 1 %).
#[test]
fn full_jitter_mean_is_half_the_backoff() {
    let b = Backoff::new();
    let mut rng = FastRng::seeded(11);
    let n = 100_000;
    let mean = (0..n)
        .map(|_| b.delay(3, None, &mut rng).as_secs_f64())
        .sum::<f64>()
        / n as f64;
    assert!((mean - 0.2).abs() < 0.002, "mean {mean}");
}

/// Equal jitter never waits less than half the backoff.
#[test]
fn equal_jitter_waits_at_least_half() {
    let b = Backoff {
        jitter: Jitter::Equal,
        ..Backoff::new()
    };
    let mut rng = FastRng::seeded(12);
    for n in 1..12 {
        for _ in 0..1000 {
            let d = b.delay(n, None, &mut rng);
            assert!(d >= b.backoff(n) / 2 && d < b.backoff(n));
        }
    }
}
