//! The files `stagger audit` reads are untrusted: no input panics, and a
//! file is either audited or refused with its name and a field.

use proptest::prelude::*;
use stagger_audit::{audit, Input};

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (-3i64..12).prop_map(|n| n.to_string()),
        Just("1.5".to_string()),
        Just("null".to_string()),
        Just("{}".to_string()),
        Just("[\"UNAVAILABLE\", \"INTERNAL\", 99]".to_string()),
        "\"[0-9.]{0,4}s?\"",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_text_is_audited_or_refused_without_panic(s in ".{0,120}", toml in any::<bool>()) {
        let name = if toml { "p.toml" } else { "s.json" };
        if let Err(e) = audit(&[Input::new(name, &s)]) {
            prop_assert_eq!(e.file, name);
            prop_assert!(!e.field.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Service configs whose every retry, hedging and throttling field is
    /// drawn from valid and invalid values.
    #[test]
    fn structured_service_configs_never_panic(
        fields in proptest::collection::vec(value(), 10),
        hedge in any::<bool>(),
    ) {
        let f = &fields;
        let policy = if hedge {
            format!(r#""hedgingPolicy": {{"maxAttempts": {}, "hedgingDelay": {}, "nonFatalStatusCodes": {}}}"#, f[0], f[1], f[2])
        } else {
            format!(r#""retryPolicy": {{"maxAttempts": {}, "initialBackoff": {}, "maxBackoff": {}, "backoffMultiplier": {}, "retryableStatusCodes": {}}}"#, f[0], f[1], f[2], f[3], f[4])
        };
        let json = format!(
            r#"{{"methodConfig": [{{"name": [{{"service": "s"}}], "timeout": {}, {policy}}}], "retryThrottling": {{"maxTokens": {}, "tokenRatio": {}}}}}"#,
            f[5], f[6], f[7]
        );
        let report = audit(&[Input::new("s.json", &json)]).unwrap();
        for m in &report.methods {
            prop_assert!(m.amplification.dead >= 0.0 && m.amplification.dead <= 5.0);
            prop_assert!(m.amplification.half >= 0.0 && m.amplification.half <= 5.0);
        }
    }
}
