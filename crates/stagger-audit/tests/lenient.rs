//! Published service configs read through the audit's lenient front to the import:
//! the forms real files use are read and named, never silently accepted.

use crate::support;

use serde_json::{json, Value};
use stagger::config::ServiceConfig;
use stagger_audit::lenient::{
    choices, duplicate_names, normalize, read, take_retry_without_max_attempts, Leniency,
};

/// The folder of published configs beside the repository, or `None` (with a
/// note) where it is absent; under CI its absence fails.
fn published() -> Option<Vec<(String, String)>> {
    let dir = support::published::folder("service-configs")?;
    let read =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: cannot list: {e}", dir.display()));
    let mut out: Vec<(String, String)> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no config in {}", dir.display());
    Some(out)
}

#[test]
fn every_published_config_reads_once_its_policies_without_max_attempts_are_set_aside() {
    let Some(files) = published() else { return };
    for (name, text) in files {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        normalize(&mut v);
        if let Some(list) = v["methodConfig"].as_array_mut() {
            for e in list.iter_mut().filter_map(Value::as_object_mut) {
                if let Some(r) = take_retry_without_max_attempts(e) {
                    r.unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
        }
        ServiceConfig::from_json(&v.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn keys_in_another_case_are_read_and_named() {
    let mut v = json!({"methodConfig":[{"Name":[{"Service":"a.A"}],"RetryPolicy":{
        "MaxAttempts":4,"InitialBackoff":"0.01s","MaxBackoff":"0.01s",
        "BackoffMultiplier":1.0,"RetryableStatusCodes":["UNAVAILABLE"]}}]});
    let seen = normalize(&mut v);
    assert!(seen.contains(&Leniency::KeyCase {
        written: "MaxAttempts".into(),
        key: "maxAttempts"
    }));
    assert!(seen[0].who_accepts().contains("grpc-go reads it"));
    let c = ServiceConfig::from_json(&v.to_string()).unwrap();
    assert_eq!(c.methods[0].policy.max_attempts(), 4);
    assert_eq!(c.methods[0].names, [("a.A".to_string(), String::new())]);
}

#[test]
fn snake_case_keys_are_read_and_named_apart_from_case() {
    let (c, seen) = read(
        r#"{"method_config":[{"name":[{"service":"a.A"}],"retry_policy":{"max_attempts":3,
        "initial_backoff":"0.1s","max_backoff":"1s","backoff_multiplier":2,
        "retryable_status_codes":[14]}}],"retry_throttling":{"max_tokens":10,"token_ratio":0.1}}"#,
    )
    .unwrap();
    assert!(seen.iter().all(|l| matches!(l, Leniency::SnakeCase { .. })));
    assert_eq!(seen.len(), 10);
    assert_eq!(c.methods[0].policy.max_attempts(), 3);
    assert!(c.throttling.is_some());
}

#[test]
fn a_duration_without_a_leading_digit_is_read_and_named() {
    let (c, seen) = read(r#"{"methodConfig":[{"name":[{}],"timeout":".25s"}]}"#).unwrap();
    assert_eq!(
        c.methods[0].policy.timeout(),
        Some(std::time::Duration::from_millis(250))
    );
    assert_eq!(
        seen,
        [Leniency::BareFraction {
            key: "timeout",
            written: ".25s".into()
        }]
    );
    assert!(seen[0]
        .who_accepts()
        .contains("grpc-java's parser refuses it"));
    // The strict parse alone still refuses it.
    assert!(
        ServiceConfig::from_json(r#"{"methodConfig":[{"name":[{}],"timeout":".25s"}]}"#).is_err()
    );
}

#[test]
fn a_retry_policy_without_max_attempts_is_set_aside_and_validated() {
    let mut e = json!({"name":[{"service":"a.A"}],"timeout":"60s","retryPolicy":{
        "initialBackoff":"0.250s","maxBackoff":"32s","backoffMultiplier":1.3,
        "retryableStatusCodes":["UNAVAILABLE"]}});
    let e = e.as_object_mut().unwrap();
    let r = take_retry_without_max_attempts(e).unwrap().unwrap();
    assert_eq!(r.max_backoff, std::time::Duration::from_secs(32));
    assert_eq!(r.retryable, [14]);
    assert!(!e.contains_key("retryPolicy"));
    // A bad field is still an error naming it.
    let mut bad = json!({"retryPolicy":{"initialBackoff":"x","maxBackoff":"1s",
        "backoffMultiplier":2,"retryableStatusCodes":[14]}});
    let err = take_retry_without_max_attempts(bad.as_object_mut().unwrap())
        .unwrap()
        .unwrap_err();
    assert_eq!(err.field, "retryPolicy.initialBackoff");
    // With maxAttempts there is nothing to set aside.
    let mut ok = json!({"retryPolicy":{"maxAttempts":2}});
    assert!(take_retry_without_max_attempts(ok.as_object_mut().unwrap()).is_none());
}

#[test]
fn the_dns_txt_choice_list_is_read_choice_by_choice() {
    let text = r#"grpc_config=[{"clientLanguage":["go"],"percentage":50,
        "serviceConfig":{"methodConfig":[]}},{"serviceConfig":{}}]"#;
    let list = choices(text).unwrap().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].client_language, ["go"]);
    assert_eq!(list[0].percentage, Some(50));
    assert_eq!(list[1].service_config, json!({}));
    assert!(choices("{}").unwrap().is_none());
    let err = choices(r#"[{"percentage":50}]"#).unwrap_err();
    assert_eq!(err.field, "serviceConfig");
    let err = choices(r#"[{"percentage":500,"serviceConfig":{}}]"#).unwrap_err();
    assert_eq!(err.field, "percentage");
}

#[test]
fn duplicate_names_across_entries_are_listed() {
    let c = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{"service":"a.A","method":"Get"},{"service":"b.B"}]},
        {"name":[{"service":"a.A","method":"Get"}]},{"name":[{"service":"a.A"}]}]}"#,
    )
    .unwrap();
    assert_eq!(
        duplicate_names(&c),
        [("a.A".to_string(), "Get".to_string())]
    );
}

#[test]
fn an_empty_object_is_an_empty_service_config() {
    let (c, seen) = read("{}").unwrap();
    assert!(c.methods.is_empty() && c.throttling.is_none() && seen.is_empty());
}

/// grpc-go's published retry example spells its fields `MaxAttempts` and
/// so on (grpc-go matches JSON keys without regard to case); the strict
/// reader refused it with "`retryPolicy.maxAttempts` is required" and never
/// said that a lenient reader exists.
#[test]
fn grpc_go_example_refused_by_the_strict_reader_names_the_lenient_one() {
    let Some(dir) = support::published::folder("service-configs") else {
        return;
    };
    let text =
        std::fs::read_to_string(dir.join("grpc-go_examples_retry_client_embedded.json")).unwrap();
    let e = ServiceConfig::from_json(&text).unwrap_err();
    assert_eq!(e.field(), "retryPolicy.maxAttempts");
    let said = e.to_string();
    assert!(said.contains("`MaxAttempts`"), "{said}");
    assert!(said.contains("`stagger audit`"), "{said}");
    let (c, _) = read(&text).unwrap();
    assert_eq!(c.methods[0].policy.max_attempts(), 4);
    // A field that is missing in every spelling keeps the short message.
    let e = ServiceConfig::from_json(
        r#"{"methodConfig":[{"name":[{}],"retryPolicy":{"initialBackoff":"1s"}}]}"#,
    )
    .unwrap_err();
    assert!(!e.to_string().contains("stagger audit"), "{e}");
}
