//! A policy file is untrusted input: property tests that no input panics,
//! that every accepted file builds a policy, and that every rejection names
//! a field.

use proptest::prelude::*;
use stagger::config::{parse_duration, Bare, PolicyFile};

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (-5i64..200).prop_map(|n| n.to_string()),
        Just("2.5".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("true".to_string()),
        Just("1979-05-27T07:32:00Z".to_string()),
        Just("[\"UNAVAILABLE\", 503, 7]".to_string()),
        "\"[0-9.]{0,6}(ns|us|ms|s|m|h|x)?\"",
        "\"(none|full|equal|decorrelated|proportional(:[0-9.]{1,4})?|ratio|token_bucket|refill|quota)\"",
    ]
}

const KEYS: [&str; 12] = [
    "name",
    "attempts",
    "base",
    "cap",
    "multiplier",
    "jitter",
    "max_retry_after",
    "attempt_timeout",
    "deadline",
    "retry_on",
    "breaker",
    "atempts",
];
const BUDGET_KEYS: [&str; 9] = [
    "kind",
    "ratio",
    "window",
    "floor",
    "max_tokens",
    "token_ratio",
    "capacity",
    "retry_cost",
    "timeout_cost",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_parsed_or_rejected_without_panic(s in ".{0,200}") {
        let _ = PolicyFile::from_toml(&s);
        let _ = PolicyFile::from_json(&s);
        let _ = parse_duration(&s, Bare::None);
    }

    /// Structured files with every key drawn from valid and invalid values:
    /// an accepted file always builds, and a rejection names a field.
    #[test]
    fn structured_files_build_or_name_a_field(
        top in proptest::collection::vec((0..KEYS.len(), value()), 0..8),
        budget in proptest::option::of(proptest::collection::vec((0..BUDGET_KEYS.len(), value()), 0..5)),
    ) {
        let mut text = String::new();
        let mut seen = std::collections::HashSet::new();
        for (k, v) in &top {
            if seen.insert(*k) {
                text.push_str(&format!("{} = {v}\n", KEYS[*k]));
            }
        }
        if let Some(b) = budget {
            text.push_str("[budget]\n");
            let mut seen = std::collections::HashSet::new();
            for (k, v) in &b {
                if seen.insert(*k) {
                    text.push_str(&format!("{} = {v}\n", BUDGET_KEYS[*k]));
                }
            }
        }
        match PolicyFile::from_toml(&text) {
            Ok(f) => {
                prop_assert!((1..=100).contains(&f.attempts));
                prop_assert!(f.policy_builder().unwrap().build().is_ok(), "{}", text);
            }
            Err(e) => prop_assert!(!e.field().is_empty() && !e.problem().is_empty()),
        }
    }
}
