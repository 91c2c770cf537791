//! The priority game-day's settings and table.

use super::*;

#[test]
fn each_setting_out_of_range_names_itself() {
    let d = PriorityParams::default();
    assert!(d.validate().is_ok());
    let bad = [
        (
            PriorityParams {
                duration: Duration::from_millis(10),
                ..d.clone()
            },
            "--duration",
        ),
        (
            PriorityParams {
                load: f64::NAN,
                ..d.clone()
            },
            "load",
        ),
        (
            PriorityParams {
                critical: 1.5,
                ..d.clone()
            },
            "critical",
        ),
        (
            PriorityParams {
                work: Duration::ZERO,
                ..d.clone()
            },
            "work",
        ),
        (
            PriorityParams {
                cores: 0,
                ..d.clone()
            },
            "cores",
        ),
        (
            PriorityParams {
                limit: 0,
                ..d.clone()
            },
            "limit",
        ),
        (
            PriorityParams {
                cpu_trigger: Some(Duration::from_millis(500)),
                ..d.clone()
            },
            "--cpu-trigger",
        ),
    ];
    for (p, name) in bad {
        let e = p.validate().unwrap_err().to_string();
        assert!(e.starts_with(name), "{name}: {e}");
        assert!(run(&p).is_err(), "{name}");
    }
}

#[test]
fn the_table_fits_in_100_columns() {
    let level = |pct| Level {
        sent: 100,
        ok: 50,
        shed: 50,
        success_pct: pct,
        p99_ms: 999.9,
        ..Level::default()
    };
    let r = PriorityReport {
        iterations: 12_345_678,
        capacity_rps: 1234.5,
        rate_rps: 2469.0,
        unloaded_p99_ms: 12.345,
        requests: 49_999,
        servers: SERVERS
            .iter()
            .map(|&server| ServerRun {
                server,
                critical: level(100.0),
                sheddable: level(0.1),
                critical_p99_ratio: 81.1,
                layer_shed: 49_999,
            })
            .collect(),
        cpu: None,
    };
    let t = table(&PriorityParams::default(), &r);
    assert_eq!(t.lines().count(), 11, "{t}");
    for line in t.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(t.contains("tower-acc AIMD"), "{t}");
}
