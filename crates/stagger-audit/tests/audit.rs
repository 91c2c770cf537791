//! `stagger audit`: every finding id has a config that triggers it and one
//! that does not, and the amplification numbers agree with the closed forms.

use serde_json::{json, Value};
use stagger_audit::{audit, Input, Report};

fn good_grpc() -> Value {
    json!({
        "methodConfig": [{
            "name": [{ "service": "shop.Cart", "method": "Get" }],
            "timeout": "2s",
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.1s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"]
            }
        }],
        "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
    })
}

const GOOD_POLICY: &str = r#"
name = "shop.Cart/Get"
attempts = 3
base = "100ms"
cap = "2s"
jitter = "full"
max_retry_after = "30s"
deadline = "2s"
retry_on = ["UNAVAILABLE", 503]
breaker = true

[budget]
kind = "ratio"
ratio = 0.1
"#;

fn run_json(v: &Value) -> Report {
    audit(&[Input::new("svc.json", &v.to_string())]).unwrap()
}

fn run_toml(text: &str) -> Report {
    audit(&[Input::new("policy.toml", text)]).unwrap()
}

fn ids(r: &Report) -> Vec<&'static str> {
    r.findings.iter().map(|f| f.id).collect()
}

fn has(r: &Report, id: &str) -> bool {
    r.findings.iter().any(|f| f.id == id)
}

/// The good gRPC config with `f` applied to its retry policy.
fn grpc_with(f: impl FnOnce(&mut Value)) -> Value {
    let mut v = good_grpc();
    f(&mut v);
    v
}

fn retry(v: &mut Value) -> &mut Value {
    &mut v["methodConfig"][0]["retryPolicy"]
}

#[test]
fn good_configs_have_no_finding() {
    let r = run_json(&good_grpc());
    assert!(r.is_clean(), "{:?}", r.findings);
    assert_eq!(r.methods[0].method, "shop.Cart/Get");
    let r = run_toml(GOOD_POLICY);
    assert!(r.is_clean(), "{:?}", r.findings);
    // The same keys in JSON are read as a policy file too.
    let json = json!({"name": "x/y", "attempts": 2, "deadline": "1s", "breaker": true,
        "budget": {"kind": "token_bucket"}});
    let r = audit(&[Input::new("policy.json", &json.to_string())]).unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
}

#[test]
fn non_transient_codes() {
    let r = run_json(&grpc_with(|v| {
        retry(v)["retryableStatusCodes"] = json!(["UNAVAILABLE", "INTERNAL", 2])
    }));
    assert_eq!(ids(&r), ["non_transient_codes"]);
    let f = &r.findings[0];
    assert_eq!(f.method, "shop.Cart/Get");
    assert!(f.message.contains("UNKNOWN, INTERNAL"), "{}", f.message);
    let r = run_json(&grpc_with(|v| {
        retry(v)["retryableStatusCodes"] = json!(["UNAVAILABLE", "RESOURCE_EXHAUSTED", 4])
    }));
    assert!(!has(&r, "non_transient_codes"));
    // ABORTED is permanent by the library's classification.
    let r = run_json(&grpc_with(|v| {
        retry(v)["retryableStatusCodes"] = json!(["UNAVAILABLE", "ABORTED"])
    }));
    assert_eq!(ids(&r), ["non_transient_codes"]);

    let r = run_toml(&GOOD_POLICY.replace("[\"UNAVAILABLE\", 503]", "[500, \"DATA_LOSS\"]"));
    assert_eq!(ids(&r), ["non_transient_codes"]);
    assert!(r.findings[0].message.contains("500, DATA_LOSS"));
    let r = run_toml(&GOOD_POLICY.replace("[\"UNAVAILABLE\", 503]", "[429, 502, 504, 408]"));
    assert!(!has(&r, "non_transient_codes"));
}

#[test]
fn attempts_high() {
    let r = run_json(&grpc_with(|v| retry(v)["maxAttempts"] = json!(4)));
    assert_eq!(ids(&r), ["attempts_high"]);
    // Above 5 gRPC caps silently: the audit says so and measures the cap.
    let v = grpc_with(|v| {
        retry(v)["maxAttempts"] = json!(10);
        v.as_object_mut().unwrap().remove("retryThrottling");
        v["methodConfig"][0]
            .as_object_mut()
            .unwrap()
            .remove("timeout");
    });
    let r = run_json(&v);
    let f = r.findings.iter().find(|f| f.id == "attempts_high").unwrap();
    assert!(
        f.message.contains("is 10") && f.message.contains("as 5"),
        "{}",
        f.message
    );
    assert_eq!(r.methods[0].amplification.dead, 5.0);
    assert_eq!(r.bottom_attempts, 5);
    assert!(!has(&run_json(&good_grpc()), "attempts_high"));

    let r = run_toml(&GOOD_POLICY.replace("attempts = 3", "attempts = 4"));
    assert_eq!(ids(&r), ["attempts_high"]);
}

#[test]
fn no_jitter() {
    let r = run_toml(&GOOD_POLICY.replace("jitter = \"full\"", "jitter = \"none\""));
    assert_eq!(ids(&r), ["no_jitter"]);
    let r = run_toml(&GOOD_POLICY.replace("jitter = \"full\"", "jitter = \"proportional:0\""));
    assert_eq!(ids(&r), ["no_jitter"]);
    let r = run_toml(&GOOD_POLICY.replace("jitter = \"full\"", "jitter = \"decorrelated\""));
    assert!(r.is_clean());
}

#[test]
fn no_backoff() {
    let r = run_json(&grpc_with(|v| retry(v)["backoffMultiplier"] = json!(1)));
    assert_eq!(ids(&r), ["no_backoff"]);
    assert!(r.findings[0].message.contains("backoffMultiplier 1"));
    let r = run_json(&grpc_with(|v| retry(v)["maxBackoff"] = json!("0.1s")));
    assert_eq!(ids(&r), ["no_backoff"]);
    let r = run_json(&grpc_with(|v| retry(v)["backoffMultiplier"] = json!(1.5)));
    assert!(r.is_clean());

    let r = run_toml(&format!("multiplier = 1\n{GOOD_POLICY}"));
    assert_eq!(ids(&r), ["no_backoff"]);
    let r = run_toml(&GOOD_POLICY.replace("base = \"100ms\"", "base = \"0s\""));
    assert_eq!(ids(&r), ["no_backoff"]);
    let r = run_toml(&GOOD_POLICY.replace("cap = \"2s\"", "cap = \"100ms\""));
    assert_eq!(ids(&r), ["no_backoff"]);
}

#[test]
fn hedging_is_read_from_the_raw_file() {
    let hedged = |policy: Value| {
        grpc_with(|v| {
            let m = v["methodConfig"][0].as_object_mut().unwrap();
            m.remove("retryPolicy");
            m.insert("hedgingPolicy".into(), policy);
        })
    };
    // A zero delay sends every hedge at once: maxAttempts whatever the answers.
    let v = hedged(json!({ "maxAttempts": 3 }));
    let mut v2 = v.clone();
    v2.as_object_mut().unwrap().remove("retryThrottling");
    let r = run_json(&v2);
    assert!(has(&r, "no_backoff"), "{:?}", r.findings);
    assert_eq!(r.methods[0].amplification.dead, 3.0);
    assert_eq!(r.methods[0].amplification.half, 3.0);
    // A delay and no non-fatal codes: the first failure is final.
    let r = run_json(&hedged(json!({ "maxAttempts": 3, "hedgingDelay": "0.5s" })));
    assert!(r.is_clean(), "{:?}", r.findings);
    assert_eq!(r.methods[0].amplification.dead, 1.0);
    // Non-fatal INTERNAL: resent at once, on a code that will not pass.
    let r = run_json(&hedged(json!({ "maxAttempts": 6, "hedgingDelay": "0.5s",
        "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL"] })));
    assert_eq!(
        ids(&r),
        ["non_transient_codes", "no_backoff", "attempts_high"]
    );
    // Invalid hedging fields name the field.
    let r = run_json(&hedged(json!({ "maxAttempts": 1 })));
    assert_eq!(ids(&r), ["invalid"]);
    assert!(r.findings[0].message.contains("hedgingPolicy.maxAttempts"));
}

#[test]
fn no_budget() {
    let mut v = good_grpc();
    v.as_object_mut().unwrap().remove("retryThrottling");
    let r = run_json(&v);
    assert_eq!(ids(&r), ["no_budget"]);
    assert!(r.findings[0].message.contains("retryThrottling"));
    let r = run_toml(&GOOD_POLICY.replace("kind = \"ratio\"\nratio = 0.1", "kind = \"none\""));
    assert_eq!(ids(&r), ["no_budget"]);
    let r = run_toml(&GOOD_POLICY.replace("kind = \"ratio\"\nratio = 0.1", "kind = \"quota\""));
    assert!(r.is_clean());
}

#[test]
fn no_deadline() {
    let mut v = good_grpc();
    v["methodConfig"][0]
        .as_object_mut()
        .unwrap()
        .remove("timeout");
    assert_eq!(ids(&run_json(&v)), ["no_deadline"]);
    assert_eq!(
        ids(&run_toml(&GOOD_POLICY.replace("deadline = \"2s\"\n", ""))),
        ["no_deadline"]
    );
}

#[test]
fn retry_after_ignored() {
    let r = run_toml(&GOOD_POLICY.replace("\"30s\"", "\"500ms\""));
    assert_eq!(ids(&r), ["retry_after_ignored"]);
    assert!(r.findings[0].message.contains("max_retry_after"));
    assert!(run_toml(&GOOD_POLICY.replace("\"30s\"", "\"1s\"")).is_clean());
}

#[test]
fn no_breaker() {
    let r = run_toml(&GOOD_POLICY.replace("breaker = true", "breaker = false"));
    assert_eq!(ids(&r), ["no_breaker"]);
    // A service config cannot express one: no finding there.
    assert!(!has(&run_json(&good_grpc()), "no_breaker"));
}

#[test]
fn invalid() {
    let cases = [
        (
            grpc_with(|v| retry(v)["maxAttempts"] = json!(1)),
            "retryPolicy.maxAttempts",
        ),
        (
            grpc_with(|v| retry(v)["initialBackoff"] = json!("100ms")),
            "retryPolicy.initialBackoff",
        ),
        (
            grpc_with(|v| retry(v)["retryableStatusCodes"] = json!([])),
            "retryPolicy.retryableStatusCodes",
        ),
        (
            grpc_with(|v| v["methodConfig"][0]["timeout"] = json!(2)),
            "methodConfig.timeout",
        ),
        (
            grpc_with(|v| v["retryThrottling"]["maxTokens"] = json!(2000)),
            "retryThrottling.maxTokens",
        ),
        (
            grpc_with(|v| v["methodConfig"][0]["hedgingPolicy"] = json!({"maxAttempts": 2})),
            "`methodConfig` has both retryPolicy and hedgingPolicy",
        ),
    ];
    for (v, field) in cases {
        let r = run_json(&v);
        let f = r
            .findings
            .iter()
            .find(|f| f.id == "invalid")
            .unwrap_or_else(|| panic!("{field}: {:?}", r.findings));
        assert!(f.message.contains(field), "{field}: {}", f.message);
    }
    assert!(!has(&run_json(&good_grpc()), "invalid"));
}

#[test]
fn duplicate_layers_say_the_attempts_at_the_bottom() {
    let outer = good_grpc().to_string();
    let inner = grpc_with(|v| retry(v)["maxAttempts"] = json!(2)).to_string();
    let r = audit(&[
        Input::new("edge.json", &outer),
        Input::new("cart.toml", GOOD_POLICY),
        Input::new("db.json", &inner),
    ])
    .unwrap();
    assert_eq!(r.bottom_attempts, 3 * 3 * 2);
    assert_eq!(ids(&r), ["duplicate_layers", "duplicate_layers"]);
    assert!(
        r.findings[0].message.contains("3 × 3 × 2 = 18"),
        "{}",
        r.findings[0].message
    );
    assert!(r.findings[1].message.contains("db.json retries"));

    let plain =
        json!({"methodConfig": [{"name": [{"service": "db.Store"}], "timeout": "1s"}]}).to_string();
    let r = audit(&[
        Input::new("edge.json", &outer),
        Input::new("db.json", &plain),
    ])
    .unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
    assert_eq!(r.bottom_attempts, 3);
}

#[test]
fn amplification_agrees_with_the_closed_forms() {
    for n in 2..=5u32 {
        let v = json!({"methodConfig": [{"name": [{"service": "s"}], "retryPolicy": {
            "maxAttempts": n, "initialBackoff": "0.1s", "maxBackoff": "1s",
            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]});
        let a = run_json(&v).methods[0].amplification;
        assert_eq!(
            a.dead,
            f64::from(n),
            "a dead dependency gets exactly maxAttempts"
        );
        let geometric: f64 = (0..n).map(|k| 0.5f64.powi(k as i32)).sum();
        assert!(
            (a.half - geometric).abs() < 0.1,
            "n={n}: {} vs {geometric}",
            a.half
        );

        let toml = format!("attempts = {n}\n");
        let a = run_toml(&toml).methods[0].amplification;
        assert_eq!(a.dead, f64::from(n));
        assert!(
            (a.half - geometric).abs() < 0.1,
            "n={n}: {} vs {geometric}",
            a.half
        );
    }
}

#[test]
fn budgets_hold_amplification_down() {
    let a = run_json(&good_grpc()).methods[0].amplification;
    assert!(
        a.dead < 1.05,
        "gRPC throttling stops retrying a dead dependency: {}",
        a.dead
    );
    let a = run_toml(GOOD_POLICY).methods[0].amplification;
    assert!(a.dead < 1.2, "a 10 % budget and a breaker: {}", a.dead);
}

#[test]
fn unreadable_files_name_the_file_and_the_field() {
    let e = audit(&[Input::new("a.json", "{not json")]).unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.field.as_str()),
        ("a.json", "serviceConfig")
    );
    let e = audit(&[Input::new("a.json", r#"{"methodConfig": 3}"#)]).unwrap_err();
    assert_eq!(e.field, "methodConfig");
    let e = audit(&[Input::new("p.toml", "attempts = 0")]).unwrap_err();
    assert_eq!((e.file.as_str(), e.field.as_str()), ("p.toml", "attempts"));
    assert!(e.to_string().starts_with("p.toml: invalid `attempts`"));
}

#[test]
fn the_report_serialises_to_the_documented_shape() {
    let mut v = good_grpc();
    v.as_object_mut().unwrap().remove("retryThrottling");
    let r = run_json(&v);
    let j = serde_json::to_value(&r).unwrap();
    let keys: Vec<_> = j.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["bottom_attempts", "findings", "methods"]);
    assert_eq!(
        j["findings"][0],
        json!({"id": "no_budget", "file": "svc.json", "method": "shop.Cart/Get", "message": r.findings[0].message})
    );
    assert_eq!(j["methods"][0]["method"], "shop.Cart/Get");
    assert!(j["methods"][0]["amplification"]["dead"].is_number());
    assert!(j["methods"][0]["amplification"]["half"].is_number());
}

#[test]
fn a_report_replays_exactly() {
    // The good policy has a breaker, whose open periods are jittered.
    let first = run_toml(GOOD_POLICY);
    for _ in 0..3 {
        assert_eq!(run_toml(GOOD_POLICY), first);
    }
}
