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
