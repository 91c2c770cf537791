//! gRPC service-config import: A6's validation rules, one test each, and
//! errors that name the field.

use stagger::config::{parse_proto_duration, ServiceConfig};
use stagger::Class;
use std::time::Duration;

fn retry(extra: &str) -> String {
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"s"}}],"retryPolicy":{{
            "maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s",
            "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]{extra}}}}}]}}"#
    )
}

fn err(json: &str) -> &'static str {
    ServiceConfig::from_json(json).unwrap_err().field()
}

#[test]
fn max_attempts_over_five_is_five_and_one_is_an_error() {
    let c = ServiceConfig::from_json(&retry("").replace("\"maxAttempts\":3", "\"maxAttempts\":9"))
        .unwrap();
    assert_eq!(c.methods[0].policy.max_attempts(), 5);
    for bad in ["1", "0", "-2", "2.5", "\"3\""] {
        let j = retry("").replace("\"maxAttempts\":3", &format!("\"maxAttempts\":{bad}"));
        assert_eq!(err(&j), "retryPolicy.maxAttempts", "{bad}");
    }
}

#[test]
fn backoffs_must_be_positive_duration_strings() {
    for (from, to, field) in [
        ("\"0.1s\"", "\"0s\"", "retryPolicy.initialBackoff"),
        ("\"0.1s\"", "0.1", "retryPolicy.initialBackoff"),
        ("\"0.1s\"", "\"100ms\"", "retryPolicy.initialBackoff"),
        ("\"1s\"", "\"-1s\"", "retryPolicy.maxBackoff"),
        (
            "\"backoffMultiplier\":2",
            "\"backoffMultiplier\":0",
            "retryPolicy.backoffMultiplier",
        ),
    ] {
        assert_eq!(err(&retry("").replacen(from, to, 1)), field, "{to}");
    }
}

#[test]
fn codes_by_name_or_number_and_never_empty() {
    let j = retry("").replace(
        "[\"UNAVAILABLE\"]",
        "[\"unavailable\", 8, 14, \"DEADLINE_EXCEEDED\"]",
    );
    let c = ServiceConfig::from_json(&j).unwrap();
    let r = &c.methods[0].policy;
    assert_eq!(r.retryable_codes(), Some(&[4, 8, 14][..]));
    assert_eq!(r.class_of(14), Class::Transient);
    // A6: a listed code is retried, pushback or not.
    assert_eq!(r.class_of(8), Class::Transient);
    assert_eq!(r.class_of(4), Class::Transient);
    assert_eq!(r.class_of(13), Class::Permanent);
    for bad in ["[]", "[\"NOPE\"]", "[17]", "[1.5]", "[true]"] {
        let j = retry("").replace("[\"UNAVAILABLE\"]", bad);
        assert_eq!(err(&j), "retryPolicy.retryableStatusCodes", "{bad}");
    }
}

#[test]
fn throttling_becomes_a_token_bucket() {
    let j = r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}"#;
    let t = ServiceConfig::from_json(j).unwrap().throttling.unwrap();
    let b = t.token_bucket().unwrap();
    assert_eq!(b.max_milli(), 10_000);
    for (bad, field) in [
        (
            r#"{"maxTokens":0,"tokenRatio":0.1}"#,
            "retryThrottling.maxTokens",
        ),
        (
            r#"{"maxTokens":1001,"tokenRatio":0.1}"#,
            "retryThrottling.maxTokens",
        ),
        (
            r#"{"maxTokens":10,"tokenRatio":0}"#,
            "retryThrottling.tokenRatio",
        ),
        (r#"{"maxTokens":10}"#, "retryThrottling.tokenRatio"),
    ] {
        assert_eq!(
            err(&format!("{{\"retryThrottling\":{bad}}}")),
            field,
            "{bad}"
        );
    }
}

#[test]
fn lookup_order_and_policy() {
    let j = r#"{"methodConfig":[
        {"name":[{}],"timeout":"5s"},
        {"name":[{"service":"a"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"0.2s",
          "maxBackoff":"2s","backoffMultiplier":1.5,"retryableStatusCodes":[14]}},
        {"name":[{"service":"a","method":"m"}],"timeout":"1s"}]}"#;
    let c = ServiceConfig::from_json(j).unwrap();
    assert_eq!(
        c.method("a", "m").unwrap().policy.timeout(),
        Some(Duration::from_secs(1))
    );
    assert!(c.method("a", "x").unwrap().policy.has_retry_policy());
    assert_eq!(
        c.method("b", "x").unwrap().policy.timeout(),
        Some(Duration::from_secs(5))
    );
    let p = c.policy("a", "x").unwrap().unwrap();
    assert_eq!(p.max_attempts(), 2);
    assert_eq!(p.backoff().backoff(1), Duration::from_millis(200));
    assert!(c.policy("a", "m").unwrap().is_none());
    let slow = j.replace("\"backoffMultiplier\":1.5", "\"backoffMultiplier\":0.5");
    // grpc-go and grpc-java accept a multiplier below 1: a shrinking schedule.
    let c = ServiceConfig::from_json(&slow).unwrap();
    let p = c.policy("a", "x").unwrap().unwrap();
    assert_eq!(p.backoff().backoff(2), Duration::from_millis(100));
}

#[test]
fn proto_durations() {
    assert_eq!(
        parse_proto_duration("1.000000001s"),
        Some(Duration::new(1, 1))
    );
    for bad in [
        "",
        "s",
        "1",
        ".5s",
        "1.s",
        "1.0000000001s",
        "+1s",
        "1e3s",
        "1 s",
    ] {
        assert_eq!(parse_proto_duration(bad), None, "{bad:?}");
    }
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for j in [
        "",
        "[]",
        "null",
        "{\"methodConfig\":{}}",
        "{\"methodConfig\":[1]}",
    ] {
        assert!(ServiceConfig::from_json(j).is_err(), "{j:?}");
    }
}
