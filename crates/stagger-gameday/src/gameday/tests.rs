//! The plan's checks and defaults.

use super::*;

#[test]
fn faults_start_after_a_full_breaker_window_when_there_is_room() {
    let s = Duration::from_secs;
    assert_eq!(default_fault_at(s(30), s(2)), s(10));
    assert_eq!(default_fault_at(s(20), s(2)), s(10));
    assert_eq!(default_fault_at(s(12), s(2)), s(6));
    assert_eq!(default_fault_at(s(8), s(2)), s(3));
    assert_eq!(default_fault_at(s(2), s(5)), s(1));
}

fn config() -> Config {
    let ms = Duration::from_millis;
    Config {
        fault: Some(Fault::Stall),
        strategies: vec![
            "immediate".parse().unwrap(),
            "full+budget+breaker".parse().unwrap(),
        ],
        duration: Duration::from_secs(20),
        rate: 100.0,
        clients: 200,
        pods: 10,
        workers: 20,
        service_time: ms(100),
        queue: 200,
        fault_at: None,
        deadline: ms(2000),
        attempt_timeout: ms(500),
        attempts: 5,
        base: ms(100),
        cap: ms(10_000),
        seed: 1,
        metrics: false,
        shed_retries: false,
        drop_expired: false,
        server_limit: None,
        ramp_to: None,
        keys: true,
        method: None,
        soak: false,
        target: None,
        hosts: None,
    }
}

/// `--duration 1s` blamed `--fault-at`, a flag nobody typed.
#[test]
fn a_run_too_short_for_the_default_fault_start_names_duration() {
    let c = Config {
        duration: Duration::from_secs(1),
        ..config()
    };
    let Err(e) = plan(&c) else {
        panic!("a 1 s game-day was accepted")
    };
    let e = e.to_string();
    assert!(e.contains("--duration") && !e.contains("--fault-at"), "{e}");
}

#[test]
fn a_plan_reports_its_parameters_and_keeps_the_strategy_order() {
    let plan = plan(&config()).unwrap();
    let names: Vec<String> = plan.strategies().iter().map(|s| s.to_string()).collect();
    assert_eq!(names, ["immediate", "full+budget+breaker"]);
    let p = plan.params();
    assert_eq!((p.outage_start_s, p.outage_end_s), (10.0, Some(12.0)));
    assert_eq!(p.capacity, 200.0);
    assert_eq!(p.seed, 1);
}

#[test]
fn bad_settings_are_usage_errors_naming_the_flag() {
    type Spoil = fn(&mut Config);
    let cases: [(&str, Spoil); 7] = [
        ("--ramp-to", |c| c.ramp_to = Some(-1.0)),
        ("--server-limit", |c| {
            c.server_limit = Some(Algorithm::Fixed(8));
            c.shed_retries = true;
        }),
        ("--rate", |c| c.rate = 0.0),
        ("--duration", |c| c.duration = Duration::from_secs(500)),
        ("--attempts", |c| c.attempts = 0),
        ("--base", |c| c.base = Duration::from_secs(20)),
        ("--strategy", |c| c.strategies.clear()),
    ];
    for (flag, bad) in cases {
        let mut c = config();
        bad(&mut c);
        let e = plan(&c).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Usage, "{flag}");
        assert!(e.to_string().starts_with(flag), "{flag}: {e}");
    }
}
