//! The files `stagger audit` reads are untrusted: no input panics, and a
//! file is either audited or refused with its name and a field.

use proptest::prelude::*;
use stagger_audit::{audit, Input};

/// Literal JSON values a service config field may hold, right and wrong.
const LITERALS: [&str; 4] = ["1.5", "null", "{}", "[\"UNAVAILABLE\", \"INTERNAL\", 99]"];

/// One field's value: a small integer, a literal, or a duration-like string.
fn value() -> impl Strategy<Value = String> {
    let literal = prop::sample::select(LITERALS.to_vec()).prop_map(str::to_owned);
    let number = (-3i64..12).prop_map(|n| n.to_string());
    prop_oneof![number, literal, "\"[0-9.]{0,4}s?\""]
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

/// A route, an application or a mesh route among three hosts, with any
/// value where the attempts go: objects that connect, loop and break.
fn object() -> impl Strategy<Value = String> {
    let host = prop_oneof![Just("a"), Just("b"), Just("c")];
    (0..3u8, host.clone(), host, value()).prop_map(|(k, h, to, v)| match k {
        0 => format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r{h}}}\nspec:\n  rules:\n  - backendRefs: [{{name: {to}}}]\n    retry: {{attempts: {v}}}\n"),
        1 => format!("spring.application.name: {h}\nresilience4j.retry.instances.{to}.maxAttempts: {v}\n"),
        _ => format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {h}}}\nspec:\n  hosts: [{h}]\n  http:\n  - route:\n    - destination: {{host: {to}}}\n    retries: {{attempts: {v}}}\n"),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A repository of arbitrary files (and the same text as a dump) is a
    /// report, never a panic, its paths within the walk's bounds.
    #[test]
    fn any_repository_is_audited_without_panic(
        texts in proptest::collection::vec(object(), 1..6),
    ) {
        use stagger_audit::path::{audit_repo, split_dump, Options, Source, MAX_HOPS};
        let mut sources: Vec<Source> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| Source { name: format!("f{i}.yaml"), text: t.clone() })
            .collect();
        sources.extend(split_dump("-", &texts.join("\n---\n")));
        let r = audit_repo(&sources, &Options::default());
        for p in &r.paths {
            prop_assert!(p.hops.len() >= 2 && p.hops.len() <= MAX_HOPS);
        }
    }
}
