//! A gRPC service config is untrusted input: property tests that no input
//! panics, that every accepted retry policy is within A6's limits, and that
//! every rejection names a field.

use proptest::prelude::*;
use stagger::config::{parse_proto_duration, ServiceConfig};
use std::time::Duration;

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (-5i64..12).prop_map(|n| n.to_string()),
        Just("2.5".to_string()),
        Just("\"3\"".to_string()),
        Just("null".to_string()),
        "\"[0-9.]{0,6}s?\"",
        ".{0,8}".prop_map(|s| serde_json::to_string(&s).unwrap()),
    ]
}

fn codes() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("[]".to_string()),
        Just("[\"UNAVAILABLE\"]".to_string()),
        Just("[14, \"deadline_exceeded\", 8]".to_string()),
        Just("[99]".to_string()),
        Just("[\"NOT_A_CODE\"]".to_string()),
        Just("\"UNAVAILABLE\"".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_parsed_or_rejected_without_panic(s in ".{0,200}") {
        let _ = ServiceConfig::from_json(&s);
        let _ = parse_proto_duration(&s);
    }

    /// Structured configs with every field drawn from valid and invalid
    /// values: an accepted policy is within A6's limits and builds a policy;
    /// a rejected one names a field of the config.
    #[test]
    fn accepted_policies_are_within_a6_and_rejections_name_a_field(
        max_attempts in value(),
        initial in value(),
        max in value(),
        mult in value(),
        codes in codes(),
        max_tokens in value(),
        ratio in value(),
    ) {
        let json = format!(
            r#"{{"methodConfig":[{{"name":[{{"service":"s","method":"m"}}],"retryPolicy":{{
                "maxAttempts":{max_attempts},"initialBackoff":{initial},"maxBackoff":{max},
                "backoffMultiplier":{mult},"retryableStatusCodes":{codes}}}}}],
                "retryThrottling":{{"maxTokens":{max_tokens},"tokenRatio":{ratio}}}}}"#
        );
        match ServiceConfig::from_json(&json) {
            Ok(c) => {
                let r = &c.methods[0].policy;
                prop_assert!(r.has_retry_policy());
                prop_assert!((2..=5).contains(&r.max_attempts()), "{}", r.max_attempts());
                prop_assert!(r.backoff().base > Duration::ZERO);
                prop_assert!(r.backoff().cap > Duration::ZERO);
                let m = r.backoff().multiplier;
                prop_assert!(m > 0.0 && m.is_finite());
                prop_assert!(!r.retryable_codes().unwrap_or(&[]).is_empty());
                prop_assert!(c.policy("s", "m").is_ok());
            }
            Err(e) => {
                let f = e.field();
                prop_assert!(
                    f.starts_with("retryPolicy") || f.starts_with("retryThrottling")
                        || f.starts_with("methodConfig") || f == "json",
                    "unexpected field {:?} for {}", f, json
                );
            }
        }
    }
}
