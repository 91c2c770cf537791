//! The metrics contract: what a Prometheus exporter renders from a policy's
//! `MetricsObserver` is exactly the set of names `docs/metrics.md` documents,
//! with the documented labels, so the shipped rules and dashboard query
//! names that exist.

use stagger::Backoff;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use stagger::export::MetricsObserver;
use stagger::export::SliWindow;
use stagger::guardrails::budget::{RatioBudget, RatioBudgetConfig};
use stagger::guardrails::BreakerConfig;
use stagger::guardrails::Guardrails;
use stagger::time::ManualClock;
use stagger::{Breaker, Call, Class, Decision, Failure, Hint, Observer, Outcome, Policy};

/// The documented contract: `name -> (kind, label keys)`, read from the
/// table of `docs/metrics.md` (rows that start with "| `stagger_").
fn documented() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
    let doc = std::fs::read_to_string(path).expect("docs/metrics.md");
    let mut out = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `stagger_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | name | kind | unit | labels | meaning |
        let name = cells[1].trim_matches('`').to_string();
        let kind = cells[2].to_string();
        let labels = backticked(cells[4]);
        let dup = out.insert(name.clone(), (kind, labels));
        assert!(dup.is_none(), "{name} documented twice");
    }
    assert!(!out.is_empty(), "no metric rows in docs/metrics.md");
    out
}

/// The `code` spans of a table cell.
fn backticked(cell: &str) -> BTreeSet<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A rendered exposition: `family -> (TYPE, label keys seen)`.
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE line");
            out.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
        }
    }
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).expect("sample line");
        let sample = &line[..name_end];
        let family = out
            .keys()
            .find(|f| {
                sample == f.as_str()
                    || ["_sum", "_count", "_bucket"]
                        .iter()
                        .any(|s| sample.strip_suffix(s) == Some(f.as_str()))
            })
            .unwrap_or_else(|| panic!("sample {sample} has no # TYPE line"))
            .clone();
        if let Some(labels) = line[name_end..].strip_prefix('{') {
            let labels = &labels[..labels.rfind('}').expect("closing brace")];
            let keys = labels
                .split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_string()))
                .filter(|k| k != "quantile" && k != "le");
            out.get_mut(&family).unwrap().1.extend(keys);
        }
    }
    out
}

/// Drives calls through a policy whose observer is `observer` so that every
/// kind of event happens at least once: retries, every stop reason the
/// setup can reach, a budget refusal, breaker transitions, hints.
fn drive(observer: Arc<MetricsObserver>) {
    let clock = ManualClock::new();
    let guard = Arc::new(
        Guardrails::new()
            .budget(
                RatioBudget::new(RatioBudgetConfig {
                    ratio: 0.0,
                    floor: 3,
                    ..Default::default()
                })
                .unwrap(),
            )
            .breaker(Breaker::default())
            .observer(observer.clone()),
    );
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(10),
            ..Backoff::new()
        })
        .observer(observer.clone() as Arc<dyn Observer>)
        .guardrail(guard)
        .build()
        .unwrap();
    let mut seed = 0;
    let mut call = |outcomes: &mut dyn Iterator<Item = Outcome>| {
        seed += 1;
        let mut call = Call::seeded(seed).idempotent(true);
        loop {
            if policy.start_attempt(&mut call, &clock).is_err() {
                return;
            }
            let outcome = outcomes.next().unwrap_or(Outcome::Success);
            match policy.decide(&mut call, outcome, &clock) {
                Decision::Retry { after } => clock.advance(after),
                Decision::Stop(_) => return,
            }
        }
    };
    // A retry with a hint used, then success.
    call(
        &mut [Failure::transient()
            .with_hint(Hint::RetryAfter(Duration::from_millis(5)))
            .into()]
        .into_iter(),
    );
    // A retry after an invalid hint, then a permanent failure.
    call(
        &mut [
            Failure::transient().with_hint(Hint::Invalid).into(),
            Class::Permanent.into(),
        ]
        .into_iter(),
    );
    // Failures until the budget's floor is spent and it refuses; then
    // enough failures to open the breaker.
    for _ in 0..30 {
        call(&mut std::iter::repeat_n(Outcome::from(Class::Transient), 3));
    }
    // The breaker's open period passes; a probe succeeds and closes it.
    clock.advance(Duration::from_secs(10));
    call(&mut std::iter::empty());

    let sli = SliWindow::with_clock(clock.clone());
    sli.on_event(&stagger::Event::AttemptStarted { attempt: 1 });
    observer.record_sli(&sli.snapshot());
}

#[test]
fn the_exposition_holds_exactly_the_documented_metrics() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        MetricsObserver::describe();
        drive(Arc::new(MetricsObserver::for_dependency("payments")));
    });
    let text = handle.render();
    let seen = families(&text);
    let doc = documented();

    let seen_names: BTreeSet<_> = seen.keys().collect();
    let doc_names: BTreeSet<_> = doc.keys().collect();
    assert_eq!(
        seen_names, doc_names,
        "rendered vs documented metric names\n{text}"
    );
    for (name, (kind, labels)) in &doc {
        let (seen_kind, seen_labels) = &seen[name];
        // The exporter renders a histogram as a summary unless buckets are
        // configured; the contract names the histogram.
        let expected_kind = if kind == "histogram" { "summary" } else { kind };
        assert_eq!(seen_kind, expected_kind, "{name}: kind");
        let mut want = labels.clone();
        want.insert("dependency".to_string());
        assert_eq!(seen_labels, &want, "{name}: label keys");
    }
    assert!(
        text.contains("stagger_retry_delay_seconds_sum{dependency=\"payments\"}"),
        "time slept is the histogram's sum\n{text}"
    );
    assert!(
        text.contains("# HELP stagger_retries_total"),
        "describe() gives help texts"
    );
}

#[test]
fn the_observer_and_the_docs_list_the_same_names() {
    let from_code: BTreeSet<String> = MetricsObserver::metric_names().map(String::from).collect();
    let from_docs: BTreeSet<String> = documented().into_keys().collect();
    assert_eq!(from_code, from_docs);
}

#[test]
fn counters_add_up_to_the_amplification() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let o = Arc::new(MetricsObserver::for_dependency("db"));
        let policy = Policy::builder()
            .max_attempts(4)
            .backoff(Backoff {
                base: Duration::ZERO,
                ..Backoff::new()
            })
            .observer(o as Arc<dyn Observer>)
            .build()
            .unwrap();
        let clock = ManualClock::new();
        // 10 calls, each failing twice then succeeding: 30 attempts, 20 retries.
        for seed in 0..10 {
            let mut call = Call::seeded(seed);
            let mut failures = 2;
            loop {
                policy.start_attempt(&mut call, &clock).unwrap();
                let outcome = if failures > 0 {
                    failures -= 1;
                    Outcome::from(Class::Transient)
                } else {
                    Outcome::Success
                };
                if let Decision::Stop(_) = policy.decide(&mut call, outcome, &clock) {
                    break;
                }
            }
        }
    });
    let text = handle.render();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} missing\n{text}"))
    };
    assert_eq!(
        value("stagger_logical_requests_total{dependency=\"db\"}"),
        10.0
    );
    assert_eq!(value("stagger_attempts_total{dependency=\"db\"}"), 30.0);
    assert_eq!(
        value("stagger_retries_total{dependency=\"db\",cause=\"transient\"}"),
        20.0
    );
    assert_eq!(
        value("stagger_stops_total{dependency=\"db\",reason=\"success\"}"),
        10.0
    );
}

/// Before the first retry, refusal or breaker change, a game-day's first
/// scrapes used to hold no `stagger_retries_total`,
/// `stagger_budget_refusals_total` or `stagger_breaker_state` at all, so
/// the shipped rules saw no data.
#[test]
fn every_series_known_in_advance_is_exported_at_zero_from_the_first_scrape() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let o = Arc::new(MetricsObserver::for_dependency("payments").label("pod", "a"));
        let guard = Arc::new(
            Guardrails::new()
                .budget(RatioBudget::default())
                .breaker(Breaker::default())
                .observer(o.clone()),
        );
        let _policy = Policy::builder()
            .observer(o as Arc<dyn Observer>)
            .guardrail(guard)
            .build()
            .unwrap();
    });
    let text = handle.render();
    let value = |series: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    };
    let labels = "dependency=\"payments\",pod=\"a\"";
    for series in [
        format!("stagger_logical_requests_total{{{labels}}}"),
        format!("stagger_attempts_total{{{labels}}}"),
        format!("stagger_retries_total{{{labels},cause=\"transient\"}}"),
        format!("stagger_retries_total{{{labels},cause=\"unknown\"}}"),
        format!("stagger_budget_refusals_total{{{labels}}}"),
        format!("stagger_breaker_state{{{labels}}}"),
        format!("stagger_stops_total{{{labels},reason=\"budget\"}}"),
        format!("stagger_breaker_transitions_total{{{labels},from=\"closed\",to=\"open\"}}"),
        format!("stagger_hints_total{{{labels},outcome=\"used\"}}"),
    ] {
        assert_eq!(value(&series), Some(0.0), "{series}\n{text}");
    }
    // Only the observer's full set of labels: no series without `pod`.
    assert!(
        !text.contains("{dependency=\"payments\"}"),
        "a series with part of the labels\n{text}"
    );
}

/// Registering again (a second policy on the same observer) leaves what
/// was counted, and the breaker's state, as they were.
#[test]
fn attaching_again_keeps_the_counts_and_the_breaker_state() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let o = Arc::new(MetricsObserver::for_dependency("db"));
        o.on_attach();
        o.on_event(&stagger::Event::BudgetRefused { attempt: 1 });
        o.on_event(&stagger::Event::BreakerStateChanged {
            from: stagger::guardrails::BreakerState::Closed,
            to: stagger::guardrails::BreakerState::Open,
        });
        o.on_attach();
    });
    let text = handle.render();
    assert!(
        text.contains("stagger_budget_refusals_total{dependency=\"db\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("stagger_breaker_state{dependency=\"db\"} 1"),
        "{text}"
    );
}

/// Hedges, transparent retries, calls an open breaker refused and shed
/// requests add or remove load; the contract had no count of any of them.
/// Each is there at 0 from the first scrape and counts what happened.
#[test]
fn every_load_mechanism_is_counted_from_zero() {
    use stagger::export::ShedReason;
    use stagger::hedging::HedgePolicyConfig;
    use stagger::hedging::HedgeStep;
    use stagger::{HedgeDelay, HedgePolicy};
    use std::time::Instant;

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let before = metrics::with_local_recorder(&recorder, || {
        let o = Arc::new(MetricsObserver::for_dependency("db"));
        o.on_attach();
        let before = handle.render();
        let policy = |breaker: Option<Breaker>| {
            let mut b = Policy::builder().observer(o.clone() as Arc<dyn Observer>);
            if let Some(br) = breaker {
                b = b.breaker(br);
            }
            b.build().unwrap()
        };
        let now = Instant::now();
        // A hedge: attempt 2 goes out 10 ms after attempt 1 and wins.
        let hedging = HedgePolicy::new(HedgePolicyConfig {
            max_attempts: 2,
            delay: HedgeDelay::Fixed(Duration::from_millis(10)),
            max_extra_load: None,
            policy: Some(policy(None)),
            ..Default::default()
        })
        .unwrap();
        let mut h = hedging.call(Call::seeded(1).idempotent(true));
        assert!(matches!(
            hedging.poll(&mut h, now),
            HedgeStep::Send { attempt: 1, .. }
        ));
        let later = now + Duration::from_millis(10);
        assert!(matches!(
            hedging.poll(&mut h, later),
            HedgeStep::Send { attempt: 2, .. }
        ));
        hedging.report(&mut h, 2, Outcome::Success, later);
        // A transparent retry: the first attempt never left.
        let p = policy(None);
        let mut call = Call::seeded(2).transparent_retries(3);
        p.start_attempt(&mut call, now).unwrap();
        let refused = Failure::transient().not_sent();
        assert!(matches!(
            p.decide(&mut call, refused, now),
            Decision::Retry { .. }
        ));
        p.start_attempt(&mut call, now).unwrap();
        let _ = p.decide(&mut call, Outcome::Success, now);
        // One failure opens this breaker; the next two calls are refused.
        let p = policy(Some(
            Breaker::new(BreakerConfig {
                min_calls: 1,
                ..Default::default()
            })
            .unwrap(),
        ));
        let mut call = Call::seeded(3);
        p.start_attempt(&mut call, now).unwrap();
        let mut said_no = Failure::permanent();
        said_no.should_retry = Some(false);
        let _ = p.decide(&mut call, said_no, now);
        let mut call = Call::seeded(4);
        p.start_attempt(&mut call, now).unwrap();
        let _ = p.decide(&mut call, Class::Transient, now);
        for seed in 5..7 {
            assert!(p.start_attempt(&mut Call::seeded(seed), now).is_err());
        }
        // A server layer's sheds.
        for reason in [ShedReason::Retry, ShedReason::Retry, ShedReason::Deadline] {
            o.on_event(&stagger::Event::Shed {
                reason,
                priority: None,
            });
        }
        before
    });
    let value = |text: &str, series: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    };
    let expected = [
        ("stagger_hedges_total{dependency=\"db\"}", 1.0),
        ("stagger_hedges_won_total{dependency=\"db\"}", 1.0),
        ("stagger_transparent_retries_total{dependency=\"db\"}", 1.0),
        (
            "stagger_breaker_refused_calls_total{dependency=\"db\"}",
            2.0,
        ),
        (
            "stagger_shed_total{dependency=\"db\",reason=\"retry\"}",
            2.0,
        ),
        (
            "stagger_shed_total{dependency=\"db\",reason=\"first_attempt\"}",
            0.0,
        ),
        (
            "stagger_shed_total{dependency=\"db\",reason=\"deadline\"}",
            1.0,
        ),
    ];
    let after = handle.render();
    for (series, n) in expected {
        assert_eq!(value(&before, series), Some(0.0), "{series} at 0\n{before}");
        assert_eq!(value(&after, series), Some(n), "{series}\n{after}");
    }
    // The refused calls are logical requests too: 4 calls ran, 2 refused.
    assert_eq!(
        value(&after, "stagger_logical_requests_total{dependency=\"db\"}"),
        Some(6.0)
    );
}

/// A server shedding by priority counts its sheds by level and reason,
/// and the CPU trigger's readings set the utilisation and shed-rate
/// gauges.
#[test]
fn priority_sheds_and_the_cpu_trigger_are_exported() {
    use stagger::export::ShedReason;
    use stagger::limit::CpuTrigger;
    use stagger::priority::Priority;
    use std::time::Instant;

    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || {
        let o = Arc::new(MetricsObserver::for_dependency("db"));
        let trigger = CpuTrigger::builder()
            .observer(o.clone() as Arc<dyn Observer>)
            .manual()
            .unwrap();
        let mut now = Instant::now();
        for _ in 0..30 {
            now += Duration::from_millis(100);
            trigger.observe(now, 1.0);
        }
        for reason in [ShedReason::Cpu, ShedReason::Cpu, ShedReason::FirstAttempt] {
            o.on_event(&stagger::Event::Shed {
                reason,
                priority: Some(Priority::SHEDDABLE),
            });
        }
    });
    let text = handle.render();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{series} missing\n{text}"))
    };
    assert!(value("stagger_cpu_utilisation{dependency=\"db\"}") > 0.95);
    assert!(value("stagger_shed_rate{dependency=\"db\"}") > 0.3);
    let by = |p: &str, r: &str| {
        value(&format!(
            "stagger_shed_by_priority_total{{dependency=\"db\",priority=\"{p}\",reason=\"{r}\"}}"
        ))
    };
    assert_eq!(by("sheddable", "cpu"), 2.0);
    assert_eq!(by("sheddable", "first_attempt"), 1.0);
    assert_eq!(
        by("critical", "cpu"),
        0.0,
        "the named levels are there from the start"
    );
    assert_eq!(
        value("stagger_shed_total{dependency=\"db\",reason=\"cpu\"}"),
        2.0
    );
}
