//! Invariants of the models, pinned on small runs.

use std::time::Duration;

use stagger_sim::{
    simulate, ClientRange, Model, Options, Params, RetryAt, RetryKind, Row, Strategy,
};

fn plain(k: RetryKind) -> Strategy {
    Strategy::plain(k)
}

fn run(p: &Params, s: &[Strategy]) -> Vec<Row> {
    simulate(p, s, &Options::default()).unwrap().strategies
}

#[test]
fn failover_no_retry_attempts_equal_arrivals_plus_burst() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 5;
    let rows = run(&p, &[plain(RetryKind::None)]);
    // 60 s / 250 ms = 240 ticks of 8 arrivals, plus the burst of 200.
    assert_eq!(rows[0].attempts, 240.0 * 8.0 + 200.0);
    assert_eq!(rows[0].requests, rows[0].attempts);
    assert_eq!(rows[0].amplification, 1.0);
    // Exactly the requests that hit the outage fail: 12 ticks × 8 + 200.
    let failed = (12.0 * 8.0 + 200.0) / 2120.0;
    assert!((rows[0].request_success - (1.0 - failed)).abs() < 1e-12);
    assert_eq!(rows[0].recovery_s, Some(0.0));
}

#[test]
fn failover_invariants_hold_for_other_shapes() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 2;
    p.duration = Duration::from_secs(10);
    p.tick = Duration::from_millis(100);
    p.arrivals = 3;
    p.burst = 17;
    let rows = run(&p, &[plain(RetryKind::None), plain(RetryKind::Full)]);
    assert_eq!(rows[0].attempts, 100.0 * 3.0 + 17.0);
    assert!(rows[1].attempts > rows[0].attempts);
    let series = &rows[1].series;
    assert_eq!(series.t_s.len(), 100);
    let total: f64 = series.load.iter().sum();
    assert!((total - rows[1].attempts).abs() < 1e-9);
}

#[test]
fn failover_defaults_retry_load_sustains_itself() {
    // With (C/L)² success, 8 arrivals per tick and 5 attempts, a load of
    // about 33 attempts per tick is self-sustaining: after the outage every
    // retrying strategy stays above capacity, while No Retry is back at once.
    let mut p = Params::defaults(Model::Failover);
    p.runs = 5;
    let rows = run(&p, &[plain(RetryKind::None), plain(RetryKind::Full)]);
    assert_eq!(rows[0].recovery_s, Some(0.0));
    assert_eq!(rows[1].recovery_s, None);
    assert!(rows[1].request_success < 0.5 * rows[0].request_success);
    let tail = &rows[1].series.load[200..];
    assert!(tail.iter().all(|l| *l > 2.0 * p.capacity), "{tail:?}");
}

#[test]
fn failover_jitter_flattens_the_lockstep_wave_when_backoff_outlasts_the_outage() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 20;
    p.base = Duration::from_secs(1);
    p.capacity = 20.0;
    let rows = run(&p, &[plain(RetryKind::Exponential), plain(RetryKind::Full)]);
    let (exp, full) = (&rows[0], &rows[1]);
    let (pe, pf) = (
        exp.post_outage_peak_over_capacity.unwrap(),
        full.post_outage_peak_over_capacity.unwrap(),
    );
    assert!(pe > 3.0 * pf, "{pe} vs {pf}");
    assert!(full.request_success > exp.request_success);
    assert!(full.recovery_s.unwrap() < exp.recovery_s.unwrap());
}

#[test]
fn failover_budget_caps_retries_and_breaker_stops_them_at_a_dead_dependency() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 5;
    let s: Vec<Strategy> = ["full", "full+budget", "full+breaker"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let rows = run(&p, &s);
    assert!(rows[1].budget_refusals > 0.0);
    assert!(rows[1].amplification < 1.2, "{}", rows[1].amplification);
    assert_eq!(rows[1].recovery_s, Some(0.0));
    p.outage_start = Duration::ZERO;
    p.outage_end = Duration::from_secs(60);
    let rows = run(&p, &s);
    assert!(rows[0].amplification > 4.0);
    // Plainly down: the breakers open and almost nothing is sent.
    assert!(rows[2].breaker_opens >= 10.0);
    assert!(rows[2].amplification < 0.3, "{}", rows[2].amplification);
}

/// Judged on load alone, a breaker that kept failing every call fast after
/// the outage counted as recovered at once: its clients sent nothing, so the
/// load was under capacity while nobody was served.
#[test]
fn failover_breakers_still_refusing_clients_after_the_outage_are_not_recovered() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 5;
    let s: Vec<Strategy> = ["full+budget", "full+breaker"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let rows = run(&p, &s);
    assert_eq!(rows[0].recovery_s, Some(0.0));
    assert!(rows[1].breaker_opens >= 10.0);
    // Open 5 s (+ up to 20 %) from the first outage tick at 2 s: clients
    // are served again about 3 s after the outage ended at 5 s.
    let r = rows[1].recovery_s.unwrap();
    assert!((2.0..=4.5).contains(&r), "{r}");
}

/// Served again, but still carrying a storm of retries, is not recovered
/// either. With headroom (capacity 20 against 8 new requests a tick) and a
/// 1 s base, full jitter's retries are answered within half a second of the
/// outage, but they keep the load above 1.25 attempts per new request for
/// several seconds more.
#[test]
fn failover_served_but_still_retried_is_not_recovered() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 5;
    p.base = Duration::from_secs(1);
    p.capacity = 20.0;
    let rows = run(&p, &[plain(RetryKind::Full)]);
    let r = rows[0].recovery_s.unwrap();
    assert!(r > 5.0, "{r}");
}

#[test]
fn failover_whole_run_outage_fails_everything() {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 2;
    p.outage_start = Duration::ZERO;
    p.outage_end = Duration::from_secs(60);
    let rows = run(&p, &[plain(RetryKind::None), plain(RetryKind::Full)]);
    assert_eq!(rows[0].request_success, 0.0);
    assert_eq!(rows[1].request_success, 0.0);
    assert_eq!(rows[1].recovery_s, None);
    assert_eq!(rows[1].post_outage_peak_over_capacity, None);
}

#[test]
fn contention_one_client_makes_exactly_one_write() {
    let mut p = Params::defaults(Model::Contention);
    p.clients = ClientRange::one(1);
    p.runs = 50;
    let all: Vec<Strategy> = RetryKind::ALL.into_iter().map(plain).collect();
    for row in run(&p, &all) {
        assert_eq!(row.calls, Some(1.0), "{}", row.strategy);
        assert_eq!(row.request_success, 1.0);
        // read + reply + write + result ≈ 40 ms.
        let c = row.completion_ms.unwrap();
        assert!((30.0..50.0).contains(&c), "{c}");
    }
}

#[test]
fn contention_everyone_finishes_and_work_grows_with_clients() {
    let mut p = Params::defaults(Model::Contention);
    p.clients = "2..20".parse().unwrap();
    p.runs = 10;
    let rows = run(&p, &[plain(RetryKind::Exponential), plain(RetryKind::Full)]);
    assert_eq!(rows.len(), 2 * 19);
    for r in &rows {
        assert_eq!(r.request_success, 1.0, "{} {:?}", r.strategy, r.clients);
        assert!(r.calls.unwrap() >= f64::from(r.clients.unwrap()));
    }
    let at = |s: &str, n: u32| {
        rows.iter()
            .find(|r| r.strategy == s && r.clients == Some(n))
            .unwrap()
            .calls
            .unwrap()
    };
    assert!(at("full", 20) > at("full", 2));
    assert!(at("exponential", 20) > at("full", 20));
}

#[test]
fn layers_multiply_64_per_layer_and_4_at_one_layer() {
    let mut p = Params::defaults(Model::Layers);
    p.runs = 2;
    p.failure_rates = vec![1.0];
    let budget: Strategy = "full+budget".parse().unwrap();
    let rows = run(&p, &[plain(RetryKind::Full), budget]);
    let get = |m: RetryAt| {
        rows.iter()
            .find(|r| r.retry_at == Some(m.as_str()))
            .unwrap()
    };
    assert_eq!(
        get(RetryAt::EveryLayer).bottom_attempts_per_request,
        Some(64.0)
    );
    assert_eq!(
        get(RetryAt::OneLayer).bottom_attempts_per_request,
        Some(4.0)
    );
    // docs/behaviour.md §8's rule alone, hop by hop: 4 (first attempt) + 3 × 4 + 3.
    assert_eq!(
        get(RetryAt::HopRule).bottom_attempts_per_request,
        Some(19.0)
    );
    assert!(rows.iter().all(|r| r.request_success == 0.0));
    // A ratio budget per layer: a dead dependency costs little more than one
    // attempt per request (the floor and 10 % per layer).
    let b = rows.last().unwrap();
    assert_eq!(b.strategy, "full+budget");
    let per_request = b.bottom_attempts_per_request.unwrap();
    assert!((1.0..2.0).contains(&per_request), "{per_request}");
    assert!(b.budget_refusals > 0.0);
}

#[test]
fn layers_match_the_expected_value_for_partial_failure() {
    let mut p = Params::defaults(Model::Layers);
    p.runs = 20;
    p.failure_rates = vec![0.5];
    let rows = run(&p, &[plain(RetryKind::Full)]);
    // Per layer with 4 attempts: E = 1 + g + g² + g³ calls below, each call
    // failing with q = g⁴, where g is the failure rate one level down.
    let f: f64 = 0.5;
    let e = |g: f64| (1.0 - g.powi(4)) / (1.0 - g);
    let (e3, q3) = (e(f), f.powi(4));
    let (e2, q2) = (e(q3) * e3, q3.powi(4));
    let e1 = e(q2) * e2;
    let got = rows[0].bottom_attempts_per_request.unwrap();
    assert!((got - e1).abs() / e1 < 0.03, "{got} vs {e1}");
    // One layer: just the bottom layer's expectation.
    let one = rows[1].bottom_attempts_per_request.unwrap();
    assert!((one - e3).abs() / e3 < 0.03, "{one} vs {e3}");
}

fn metastable(strategies: &str, skip: bool, secs: u64) -> Vec<Row> {
    let mut p = Params::defaults(Model::Metastable);
    p.runs = 2;
    p.duration = Duration::from_secs(secs);
    p.server_skips_expired = skip;
    run(&p, &Strategy::parse_list(strategies).unwrap())
}

#[test]
fn metastable_backlog_of_expired_work_keeps_goodput_at_zero_unless_skipped() {
    let stuck = metastable("none", false, 60).remove(0);
    let healed = metastable("none", true, 60).remove(0);
    for r in [&stuck, &healed] {
        let before = r.goodput_before.unwrap();
        assert!((250.0..300.0).contains(&before), "{before}");
    }
    // The server works through the released backlog and then a queue of
    // requests that waited past their timeout: nothing answers in time.
    assert_eq!(stuck.recovered, Some(false));
    assert!(
        stuck.goodput_after.unwrap() < 10.0,
        "{:?}",
        stuck.goodput_after
    );
    // Dropping expired work clears the backlog at once.
    assert_eq!(healed.recovered, Some(true));
    assert!(healed.recovery_s.unwrap() < 5.0, "{:?}", healed.recovery_s);
    assert!(healed.goodput_after.unwrap() > 0.95 * 280.0);
}

/// Retries used to be counted as they were sent and attempts as they
/// reached the server: while the slowdown held attempts back, "of which
/// retries" stood above "attempts arriving".
#[test]
fn metastable_retries_are_never_more_than_the_attempts_arriving_in_a_second() {
    for skip in [false, true] {
        for row in metastable("exponential,full", skip, 40) {
            let s = &row.series;
            assert!(
                s.retries.iter().any(|r| *r > 0.0),
                "{}: no retries",
                row.strategy
            );
            for (i, (retries, load)) in s.retries.iter().zip(&s.load).enumerate() {
                assert!(
                    retries <= load,
                    "{} at {} s: {retries} retries, {load} attempts",
                    row.strategy,
                    s.t_s[i]
                );
            }
        }
    }
}

/// The lab's chart showed 0 arrivals during the slowdown and one spike
/// as it ended: what the clients sent, beside what arrived, shows they
/// kept sending (and retrying) all along.
#[test]
fn metastable_series_shows_what_clients_sent_during_the_slowdown() {
    let p = Params::defaults(Model::Metastable);
    for row in metastable("none,exponential", false, 40) {
        let s = &row.series;
        let sent = s.sent.as_ref().expect("the metastable series has `sent`");
        assert_eq!(sent.len(), s.load.len());
        // Every attempt is counted once, when it is sent.
        let total: f64 = sent.iter().sum();
        assert!(
            (total - row.attempts).abs() < 1e-6,
            "{}: {total} sent, {} attempts",
            row.strategy,
            row.attempts
        );
        let (from, to) = (p.outage_start.as_secs_f64(), p.outage_end.as_secs_f64());
        for (i, t) in s.t_s.iter().enumerate() {
            if *t >= from && *t + 1.0 <= to {
                // Nothing arrives while the link holds it; the clients send
                // about the arrival rate (280/s, Poisson: 2 runs averaged).
                assert_eq!(s.load[i], 0.0, "{}: arrivals at {t} s", row.strategy);
                assert!(
                    sent[i] > 0.7 * p.rate,
                    "{}: sent {} at {t} s",
                    row.strategy,
                    sent[i]
                );
            }
        }
    }
    // Only the metastable model holds attempts back; the others leave it out.
    let mut f = Params::defaults(Model::Failover);
    f.runs = 1;
    assert!(run(&f, &[plain(RetryKind::Full)])[0].series.sent.is_none());
}

#[test]
fn metastable_without_retries_drains_eventually_and_with_retries_does_not() {
    // The backlog drains at capacity − rate = 20/s, so give it time.
    let rows = metastable("none,full", false, 240);
    assert_eq!(rows[0].recovered, Some(true), "{:?}", rows[0].recovery_s);
    assert_eq!(rows[1].recovered, Some(false));
    assert!(rows[1].amplification > 1.5);
}

#[test]
fn metastable_retries_sustain_overload_even_when_expired_work_is_skipped() {
    let rows = metastable("none,full,full+budget,full+breaker", true, 60);
    assert_eq!(rows[0].recovered, Some(true));
    assert_eq!(rows[1].recovered, Some(false));
    assert_eq!(
        rows[2].recovered,
        Some(true),
        "a retry budget breaks the loop"
    );
    assert_eq!(rows[3].recovered, Some(true), "so does a breaker");
}

#[test]
fn bad_parameters_name_their_flag() {
    let base = Params::defaults(Model::Failover);
    let cases: Vec<(Params, &str)> = vec![
        (
            Params {
                tick: Duration::ZERO,
                ..base.clone()
            },
            "tick",
        ),
        (
            Params {
                attempts: Some(0),
                ..base.clone()
            },
            "attempts",
        ),
        (
            Params {
                runs: 0,
                ..base.clone()
            },
            "runs",
        ),
        (
            Params {
                capacity: f64::NAN,
                ..base.clone()
            },
            "capacity",
        ),
        (
            Params {
                cap: Duration::from_millis(1),
                ..base.clone()
            },
            "cap",
        ),
        (
            Params {
                outage_end: Duration::from_secs(1),
                ..base.clone()
            },
            "outage-end",
        ),
        (
            Params {
                failure_rates: vec![1.5],
                ..base.clone()
            },
            "failure-rates",
        ),
    ];
    for (p, flag) in cases {
        let e = simulate(&p, &[plain(RetryKind::Full)], &Options::default()).unwrap_err();
        assert_eq!(e.flag(), flag, "{e}");
    }
    let mut p = Params::defaults(Model::Layers);
    p.attempts = None;
    let e = simulate(&p, &[plain(RetryKind::Full)], &Options::default()).unwrap_err();
    assert_eq!(e.flag(), "attempts");
}
