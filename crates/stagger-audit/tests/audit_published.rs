//! `stagger audit` on service configs as they are published: every file in
//! the folder of published configs beside the repository, and each form
//! those files use, read by the library's import and measured on its engine.

use crate::support;

use serde_json::{json, Value};
use stagger_audit::{audit, Input, Report};

/// The published configs, or `None` (with a note) where the folder is
/// absent; under CI its absence fails.
fn published() -> Option<Vec<(String, String)>> {
    let dir = support::published::folder("service-configs")?;
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: cannot list: {e}", dir.display()));
    let mut configs = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: cannot read: {e}", path.display()));
        configs.push((entry.file_name().to_string_lossy().into_owned(), text));
    }
    configs.sort();
    assert!(!configs.is_empty(), "no config in {}", dir.display());
    Some(configs)
}

fn one(name: &str, text: &str) -> Report {
    audit(&[Input::new(name, text)]).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(r: &Report) -> Vec<&'static str> {
    r.findings.iter().map(|f| f.id).collect()
}

fn retrying(attempts: Value) -> Value {
    let mut p = json!({"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
        "retryableStatusCodes":["UNAVAILABLE"]});
    if !attempts.is_null() {
        p["maxAttempts"] = attempts;
    }
    p
}

#[test]
fn every_published_config_is_audited_without_a_false_invalid() {
    let Some(files) = published() else { return };
    for (name, text) in files {
        let r = one(&name, &text);
        let invalid: Vec<_> = r.findings.iter().filter(|f| f.id == "invalid").collect();
        assert!(invalid.is_empty(), "{name}: {invalid:?}");
        assert!(!r.methods.is_empty(), "{name}: no method measured");
    }
}

#[test]
fn grpc_gos_example_is_read_with_findings_naming_who_accepts_its_spelling() {
    let Some(files) = published() else { return };
    let (name, text) = files
        .iter()
        .find(|(n, _)| n.starts_with("grpc-go"))
        .expect("grpc-go's example");
    let r = one(name, text);
    let spelling: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.id == "nonstandard_spelling")
        .collect();
    assert_eq!(spelling.len(), 2, "{:?}", r.findings);
    assert!(spelling[0]
        .message
        .contains("`MaxAttempts` for `maxAttempts`"));
    assert!(spelling[0].message.contains("grpc-go reads it"));
    assert!(spelling[0].message.contains("grpc-java's parser does not"));
    assert!(spelling[1].message.contains("\".01s\""));
    assert!(spelling[1]
        .message
        .contains("grpc-java's parser refuses it"));
    // Its MaxAttempts 4 is what gets measured: 4 dead, 1 + ½ + ¼ + ⅛ at ½.
    assert_eq!(r.methods[0].amplification.dead, 4.0);
    assert_eq!(r.methods[0].amplification.half, 1.875);
}

#[test]
fn snake_case_keys_are_read_with_a_finding() {
    let v = json!({"method_config":[{"name":[{"service":"a.A"}],"timeout":"1s",
        "retry_policy":{"max_attempts":3,"initial_backoff":"0.1s","max_backoff":"1s",
        "backoff_multiplier":2,"retryable_status_codes":["UNAVAILABLE"]}}],
        "retry_throttling":{"max_tokens":10,"token_ratio":0.1}});
    let r = one("svc.json", &v.to_string());
    assert_eq!(ids(&r), ["nonstandard_spelling"]);
    assert!(r.findings[0].message.contains("snake_case"));
    assert_eq!(r.methods[0].method, "a.A/*");
}

#[test]
fn an_empty_object_is_an_empty_service_config() {
    let r = one("svc.json", "{}");
    assert!(r.is_clean(), "{:?}", r.findings);
    assert!(r.methods.is_empty());
    assert_eq!(r.bottom_attempts, 1);
}

#[test]
fn the_dns_txt_choice_list_is_audited_choice_by_choice() {
    let v = json!([
        {"clientLanguage":["go"],"serviceConfig":{"methodConfig":[{"name":[{"service":"a.A"}],
            "timeout":"1s","retryPolicy":retrying(json!(3))}],
            "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}},
        {"percentage":10,"serviceConfig":{"methodConfig":[{"name":[{"service":"a.A"}],
            "retryPolicy":retrying(json!(4))}]}}
    ]);
    let r = one("dns.txt", &format!("grpc_config={v}"));
    assert_eq!(r.methods.len(), 2);
    assert_eq!(r.methods[0].method, "[choice 1 go] a.A/*");
    assert_eq!(r.methods[1].method, "[choice 2] a.A/*");
    assert!(r
        .findings
        .iter()
        .all(|f| f.method.starts_with("[choice 2]")));
    assert_eq!(
        ids(&r),
        ["attempts_high", "no_budget", "no_deadline"],
        "{:?}",
        r.findings
    );
    assert_eq!(r.bottom_attempts, 4);
}

#[test]
fn duplicate_names_across_entries_are_a_finding() {
    let entry = json!({"name":[{"service":"a.A","method":"Get"}],"timeout":"1s",
        "retryPolicy":retrying(json!(3))});
    let v = json!({"methodConfig":[entry, entry],
        "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}});
    let r = one("svc.json", &v.to_string());
    assert_eq!(ids(&r), ["duplicate_names"]);
    assert_eq!(r.findings[0].method, "a.A/Get");
    assert!(r.findings[0].message.contains("gRPC rejects"));
}

/// Attempts of a client that retries until `timeout` at the nominal
/// backoff, each attempt answering after 5 ms: it retries while the wait
/// ends before the deadline.
fn until_timeout(initial: f64, mult: f64, max: f64, timeout: f64) -> u64 {
    let (mut t, mut attempts, mut k) = (0.005, 1, 0);
    loop {
        let wait = (initial * mult.powi(k)).min(max);
        if t + wait >= timeout {
            return attempts;
        }
        t += wait + 0.005;
        attempts += 1;
        k += 1;
    }
}

#[test]
fn a_retry_policy_without_max_attempts_is_audited_both_ways() {
    let v = json!({"methodConfig":[{"name":[{"service":"google.spanner.v1.Spanner","method":"Commit"},
        {"service":"google.spanner.v1.Spanner","method":"ListSessions"}],"timeout":"3600s",
        "retryPolicy":{"initialBackoff":"0.250s","maxBackoff":"32s","backoffMultiplier":1.3,
        "retryableStatusCodes":["UNAVAILABLE"]}}]});
    let r = one("spanner.json", &v.to_string());
    assert_eq!(
        ids(&r),
        ["no_max_attempts", "no_budget"],
        "{:?}",
        r.findings
    );
    let m = &r.methods[0];
    assert_eq!(m.method, "google.spanner.v1.Spanner/Commit (+1)");
    assert_eq!(m.names.len(), 2);
    // gRPC's clients: one attempt.
    assert_eq!((m.amplification.dead, m.amplification.half), (1.0, 1.0));
    assert!(m.amplification.exact);
    // A timeout-bounded client: every wait that fits in 3600 s.
    let expected = until_timeout(0.25, 1.3, 32.0, 3600.0);
    assert!(expected > 100, "{expected}");
    assert_eq!(m.until_timeout, Some(expected));
    let msg = &r.findings[0].message;
    assert!(
        msg.contains(&format!("makes {expected} attempts in 3600s")),
        "{msg}"
    );
    assert!(msg.contains("reject or ignore"), "{msg}");
    // Without a timeout, it retries without end.
    let mut v = v;
    v["methodConfig"][0]
        .as_object_mut()
        .unwrap()
        .remove("timeout");
    let r = one("spanner.json", &v.to_string());
    assert_eq!(r.methods[0].until_timeout, None);
    assert!(r.findings[0].message.contains("without end"));
    // A bad field of such a policy is still invalid, naming it.
    let v = json!({"methodConfig":[{"name":[{"service":"a.A"}],"retryPolicy":{
        "initialBackoff":"soon","maxBackoff":"32s","backoffMultiplier":1.3,
        "retryableStatusCodes":["UNAVAILABLE"]}}]});
    let r = one("svc.json", &v.to_string());
    assert_eq!(ids(&r), ["invalid"]);
    assert!(r.findings[0].message.contains("retryPolicy.initialBackoff"));
}

#[test]
fn aborted_is_non_transient_as_the_library_classifies_it() {
    assert_eq!(
        stagger::classify::grpc_code(10),
        stagger::Class::Permanent,
        "the library's own classification"
    );
    let mut p = retrying(json!(3));
    p["retryableStatusCodes"] = json!(["UNAVAILABLE", "ABORTED"]);
    let v = json!({"methodConfig":[{"name":[{"service":"a.A"}],"timeout":"1s","retryPolicy":p}],
        "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}});
    let r = one("svc.json", &v.to_string());
    assert_eq!(ids(&r), ["non_transient_codes"]);
    assert!(r.findings[0].message.contains("lists ABORTED"));
}

#[test]
fn thousands_of_names_in_one_entry_are_one_row() {
    let names: Vec<Value> = (0..3000)
        .map(|i| json!({"service":"google.cloud.kms.v1.KeyManagementService","method":format!("M{i}")}))
        .collect();
    let v =
        json!({"methodConfig":[{"name":names,"timeout":"60s","retryPolicy":retrying(json!(3))}]});
    let r = one("kms.json", &v.to_string());
    assert_eq!(r.methods.len(), 1);
    assert_eq!(
        r.methods[0].method,
        "google.cloud.kms.v1.KeyManagementService/M0 (+2999)"
    );
    assert_eq!(r.methods[0].names.len(), 3000);
    assert!(r.findings.iter().all(|f| f.method.len() < 80));
}

#[test]
fn exact_figures_are_the_closed_form_and_estimates_carry_their_sample() {
    let v = json!({"methodConfig":[{"name":[{"service":"a.A"}],"retryPolicy":retrying(json!(5))}]});
    let a = one("svc.json", &v.to_string()).methods[0].amplification;
    assert!(a.exact && a.sample.is_none());
    assert_eq!(a.dead, 5.0);
    assert_eq!(a.half, 1.0 + 0.5 + 0.25 + 0.125 + 0.0625);
    let mut v = v;
    v["retryThrottling"] = json!({"maxTokens":10,"tokenRatio":0.1});
    let a = one("svc.json", &v.to_string()).methods[0].amplification;
    assert!(!a.exact);
    assert_eq!(a.sample, Some(stagger_audit::amplify::REQUESTS));
}

#[test]
fn hedged_methods_are_measured_on_the_hedging_engine() {
    let hedged = |non_fatal: Value| {
        let v = json!({"methodConfig":[{"name":[{"service":"a.A"}],"timeout":"1s",
            "hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.05s","nonFatalStatusCodes":non_fatal}}],
            "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}});
        let mut r = one("svc.json", &v.to_string());
        // Without throttling the figures are exact.
        r.methods.push(
            one(
                "svc.json",
                &json!({"methodConfig": v["methodConfig"].clone()}).to_string(),
            )
            .methods[0]
                .clone(),
        );
        r
    };
    // UNAVAILABLE fatal, answers (5 ms) before the 50 ms hedge: one attempt.
    let r = hedged(json!([]));
    let exact = r.methods[1].amplification;
    assert!(exact.exact);
    assert_eq!((exact.dead, exact.half), (1.0, 1.0));
    // UNAVAILABLE non-fatal: the next hedge at once, up to 3.
    let r = hedged(json!(["UNAVAILABLE"]));
    let exact = r.methods[1].amplification;
    assert_eq!((exact.dead, exact.half), (3.0, 1.75));
    // With throttling: estimated, and the bucket holds a dead dependency.
    let est = r.methods[0].amplification;
    assert_eq!(est.sample, Some(stagger_audit::amplify::REQUESTS));
    assert!(est.dead < 1.05, "{}", est.dead);
}

#[test]
fn a_policy_is_never_replaced_by_the_default_one() {
    // A multiplier below 1: if the library cannot build the policy the
    // audit says so, naming the field; if it can, its own 5 attempts are
    // measured (the default policy would make 3).
    let mut p = retrying(json!(5));
    p["backoffMultiplier"] = json!(0.5);
    let v = json!({"methodConfig":[{"name":[{"service":"a.A"}],"timeout":"10s","retryPolicy":p}]});
    let r = one("svc.json", &v.to_string());
    match r.methods.first() {
        None => {
            let f = r.findings.iter().find(|f| f.id == "invalid").unwrap();
            assert!(
                f.message.contains("retryPolicy.backoffMultiplier"),
                "{}",
                f.message
            );
        }
        Some(m) => assert_eq!(m.amplification.dead, 5.0),
    }
}

#[test]
fn a_json_object_with_policy_keys_is_still_a_policy_file() {
    let r = one(
        "policy.json",
        r#"{"name":"a/Get","attempts":3,"base":"100ms"}"#,
    );
    assert!(
        r.findings.iter().any(|f| f.id == "no_breaker"),
        "{:?}",
        r.findings
    );
    assert_eq!(r.methods[0].method, "a/Get");
    // A6's keys in another spelling make it a service config.
    let r = one("svc.json", r#"{"MethodConfig":[]}"#);
    assert_eq!(ids(&r), ["nonstandard_spelling"]);
}
