use super::*;

fn opts() -> Options<'static> {
    Options {
        threads: 2,
        progress: None,
    }
}

fn strategies(s: &str) -> Vec<HedgeStrategy> {
    HedgeStrategy::parse_list(s).unwrap()
}

/// Survival of the simulated latencies at `t`, against the closed form.
fn check_closed_form(k: u32, delay_ms: u64, seed: u64) {
    let p = HedgingParams {
        hedge_attempts: k,
        seed,
        ..HedgingParams::default()
    };
    let delay = Duration::from_millis(delay_ms);
    let policy = HedgePolicy::new(HedgePolicyConfig {
        max_attempts: k,
        delay: HedgeDelay::Fixed(delay),
        max_extra_load: None,
        ..Default::default()
    })
    .unwrap();
    let out = run(&p, &policy, seed);
    let n = out.latencies.len() as f64;
    assert_eq!(n, p.requests as f64);
    for t_ms in [
        5.0, 9.0, 10.0, 12.0, 15.0, 19.0, 21.0, 25.0, 30.0, 35.0, 50.0, 205.0, 215.0, 230.0,
    ] {
        let t = Duration::from_secs_f64(t_ms / 1e3);
        let want = survival(&p, k, delay, t);
        let got = out.latencies.iter().filter(|&&l| l > ns(t)).count() as f64 / n;
        // Four standard errors of a binomial proportion, plus the
        // approximation error of erfc.
        let tol = 4.0 * (want * (1.0 - want) / n).sqrt() + 1e-5;
        assert!(
            (got - want).abs() <= tol,
            "k={k} d={delay_ms}ms t={t_ms}ms: simulated {got:.6}, closed form {want:.6}, tolerance {tol:.6}"
        );
    }
}

#[test]
fn unlimited_capacity_matches_the_closed_form_for_two_attempts() {
    check_closed_form(2, 20, 1);
}

#[test]
fn unlimited_capacity_matches_the_closed_form_for_three_attempts() {
    check_closed_form(3, 12, 7);
}

#[test]
fn the_closed_form_is_the_single_attempt_tail_times_the_shifted_one() {
    let p = HedgingParams::default();
    let d = Duration::from_millis(20);
    let s = |ms: f64| survival(&p, 1, d, Duration::from_secs_f64(ms / 1e3));
    // Before the hedge, one attempt; after it, the product.
    let t = Duration::from_millis(15);
    assert_eq!(survival(&p, 2, d, t), s(15.0));
    let t = Duration::from_millis(230);
    let want = s(230.0) * s(210.0);
    let got = survival(&p, 2, d, t);
    // (to the nanosecond the durations are rounded to)
    assert!((got - want).abs() <= 1e-6 * want, "{got} {want}");
    // The median of a LogNormal is its median; a stall doubles nothing below it.
    assert!((s(10.0) - (0.98 * 0.5 + 0.02)).abs() < 1e-6);
}

#[test]
fn with_unlimited_capacity_a_hedge_cuts_the_tail_for_a_few_percent_more_load() {
    let r = simulate(
        &HedgingParams::default(),
        &strategies("none,20ms,p95"),
        &opts(),
    )
    .unwrap();
    let [none, fixed, p95] = &r.strategies[..] else {
        unreachable!()
    };
    assert!(none.p99_ms > 200.0, "{none:?}");
    assert!(fixed.p99_ms < 40.0 && fixed.p999_ms < 50.0, "{fixed:?}");
    assert!(p95.p99_ms < 40.0, "{p95:?}");
    assert!(
        fixed.extra_load < 0.05 && p95.extra_load < 0.08,
        "{fixed:?} {p95:?}"
    );
}

fn at(u: f64, cancel: Cancel) -> HedgingParams {
    HedgingParams {
        capacity: Some(10),
        utilisation: u,
        cancel,
        requests: 50_000,
        ..HedgingParams::default()
    }
}

#[test]
fn near_saturation_a_fixed_hedge_whose_losers_keep_running_storms_and_the_budget_stops_it() {
    let r = simulate(
        &at(0.95, Cancel::Queued),
        &strategies("none,20ms,20ms+budget"),
        &opts(),
    )
    .unwrap();
    let [none, fixed, budget] = &r.strategies[..] else {
        unreachable!()
    };
    assert!(
        fixed.extra_load > 0.5,
        "hedges fire on queueing delay: {fixed:?}"
    );
    assert!(
        fixed.p50_ms > 2.0 * none.p50_ms,
        "and make every call slower: {fixed:?} vs {none:?}"
    );
    assert!(budget.extra_load <= 0.051, "{budget:?}");
    assert!(budget.p50_ms < 1.2 * none.p50_ms, "{budget:?} vs {none:?}");
}

#[test]
fn when_cancellation_frees_the_server_hedging_frees_capacity() {
    let r = simulate(
        &at(0.95, Cancel::Running),
        &strategies("none,20ms"),
        &opts(),
    )
    .unwrap();
    let [none, fixed] = &r.strategies[..] else {
        unreachable!()
    };
    assert!(fixed.p50_ms < none.p50_ms / 2.0, "{fixed:?} vs {none:?}");
    assert!(fixed.p99_ms < none.p99_ms / 4.0, "{fixed:?} vs {none:?}");
    assert!(fixed.extra_load < 0.1, "{fixed:?}");
}

#[test]
fn the_same_seed_gives_the_same_rows_whatever_the_threads() {
    let p = at(0.8, Cancel::Queued);
    let s = strategies("none,20ms,p95+budget");
    let one = simulate(
        &p,
        &s,
        &Options {
            threads: 1,
            progress: None,
        },
    )
    .unwrap();
    let two = simulate(&p, &s, &opts()).unwrap();
    assert_eq!(one, two);
}

#[test]
fn strategies_parse_and_print_back() {
    for s in [
        "none",
        "20ms",
        "20ms+budget",
        "p95",
        "p99.9+budget",
        "2.5ms",
    ] {
        assert_eq!(s.parse::<HedgeStrategy>().unwrap().to_string(), s);
    }
    for bad in [
        "",
        "fast",
        "p0",
        "p101",
        "none+budget",
        "-5ms",
        "20s",
        "pabc",
    ] {
        let e = bad.parse::<HedgeStrategy>().unwrap_err();
        assert_eq!(e.flag(), "strategy", "{bad}");
    }
}

#[test]
fn bad_parameters_name_their_flag() {
    let d = HedgingParams::default;
    let cases = [
        (
            HedgingParams {
                latency_median: Duration::ZERO,
                ..d()
            },
            "latency-median",
        ),
        (
            HedgingParams {
                latency_sigma: f64::NAN,
                ..d()
            },
            "latency-sigma",
        ),
        (
            HedgingParams {
                stall_prob: 1.5,
                ..d()
            },
            "stall-prob",
        ),
        (
            HedgingParams {
                capacity: Some(0),
                ..d()
            },
            "capacity",
        ),
        (
            HedgingParams {
                utilisation: 1.0,
                ..d()
            },
            "utilisation",
        ),
        (HedgingParams { requests: 0, ..d() }, "requests"),
        (
            HedgingParams {
                hedge_attempts: 9,
                ..d()
            },
            "hedge-attempts",
        ),
    ];
    for (p, flag) in cases {
        assert_eq!(p.validate().unwrap_err().flag(), flag);
    }
}
