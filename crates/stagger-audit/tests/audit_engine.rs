//! The call path's own layers — a stagger policy file and a gRPC service
//! config's method — are the library: their tries on each failure are the
//! engine's answer for the facts the library reads from that failure, not
//! a rulebook of the audit's. Each test is named for what the audit said
//! before it asked the engine.

use std::time::Instant;

use stagger::config::{PolicyFile, ServiceConfig};
use stagger::{Call, Class, Decision, Failure, Idempotency, Policy};
use stagger_audit::path::{audit_path, Dead, Options, PathInput, PathReport, Protocol};

fn run(files: &[(&str, &str)], o: &Options) -> PathReport {
    let inputs: Vec<PathInput<'_>> = files
        .iter()
        .map(|(n, t)| PathInput::new(n, t, None))
        .collect();
    audit_path(&inputs, o).unwrap_or_else(|e| panic!("{e}"))
}

/// Attempts `policy` sends for one call of `idempotency` whose every
/// attempt fails with `failure`.
fn engine_attempts(policy: &Policy, idempotency: Idempotency, failure: Failure) -> u32 {
    let now = Instant::now();
    let mut call = Call::seeded(1).idempotency(idempotency);
    let mut attempts = 0;
    while policy.start_attempt(&mut call, now).is_ok() {
        attempts += 1;
        if !matches!(
            policy.decide(&mut call, failure, now),
            Decision::Retry { .. }
        ) {
            break;
        }
    }
    attempts
}

const POLICY: &str = "name = \"db\"\nattempts = 3\nbase = \"50ms\"\nattempt_timeout = \"100ms\"\n";

// The audit said a stagger policy retries every timeout (3 tries on a
// blackholed dependency). The library retries a timed-out attempt — its
// result unknown — only for a call declared idempotent, and a policy file
// declares no idempotency: one try.
#[test]
fn a_stagger_policy_no_longer_retries_a_timeout_the_library_does_not_retry() {
    let o = Options {
        dead: Dead::Blackhole,
        protocol: Some(Protocol::Http),
        ..Options::default()
    };
    let r = run(&[("db.toml", POLICY)], &o);
    let engine = PolicyFile::from_toml(POLICY)
        .unwrap()
        .policy_builder()
        .unwrap()
        .build()
        .unwrap();
    let asked = engine_attempts(&engine, Idempotency::Unspecified, Failure::timeout());
    assert_eq!(asked, 1);
    assert_eq!(r.dead.layers[0].tries, f64::from(asked));
    assert!(!r.dead.layers[0].retries);
    assert_eq!(r.dead.bottom_attempts, 1.0);
    assert!(
        r.layers[0]
            .assumes
            .iter()
            .any(|a| a.contains("idempotency")),
        "{:?}",
        r.layers[0].assumes
    );
    // A refused connection never left the client: the engine retries it.
    let r = run(&[("db.toml", POLICY)], &Options::default());
    assert_eq!(r.dead.bottom_attempts, 3.0);
}

// The audit said a stagger policy's `retry_on` replaces the library's
// classification (a file listing 500 would not retry a 503). The library
// documents `retry_on` as extra failures to retry: a 503 is still
// transient.
#[test]
fn retry_on_adds_to_the_library_classification_instead_of_replacing_it() {
    let file = format!("{POLICY}retry_on = [500]\n");
    let o = Options {
        dead: Dead::Unavailable,
        protocol: Some(Protocol::Http),
        ..Options::default()
    };
    let r = run(&[("db.toml", &file)], &o);
    assert_eq!(stagger::classify::http_status(503, false), Class::Transient);
    assert_eq!(r.dead.bottom_attempts, 3.0);
    assert!(
        r.layers[0].retry_on.contains("500"),
        "{}",
        r.layers[0].retry_on
    );
}

const SVC: &str = r#"{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"perAttemptRecvTimeout":"0.2s","retryableStatusCodes":["UNAVAILABLE"]}}]}"#;

// The audit said a gRPC method turns its own per-attempt timeout into
// DEADLINE_EXCEEDED and retries it only when that code is listed (1 try
// here). The library's gRPC layer reports a timed-out attempt as a timeout
// of a method its policy declares idempotent, and retries it: 3 tries.
#[test]
fn a_grpc_method_retries_its_per_attempt_timeout_as_the_library_does() {
    let o = Options {
        dead: Dead::Blackhole,
        ..Options::default()
    };
    let r = run(&[("svc.json", SVC)], &o);
    assert_eq!(r.protocol, Protocol::Grpc);
    let config = ServiceConfig::from_json(SVC).unwrap();
    let engine = config.policy("a.B", "Get").unwrap().unwrap();
    let asked = engine_attempts(&engine, Idempotency::Idempotent, Failure::timeout());
    assert_eq!(asked, 3);
    assert_eq!(r.dead.layers[0].tries, f64::from(asked));
    assert_eq!(r.dead.bottom_attempts, 3.0);
}

// A proxy's plain HTTP answer reaches a gRPC layer as the status gRPC maps
// it to (the library's map), classed by the method's listed codes.
#[test]
fn a_grpc_layer_reads_a_proxy_answer_through_the_library_map() {
    let envoy = "route_config:\n  virtual_hosts:\n  - name: b\n    domains: ['*']\n    routes:\n    - match: {prefix: /}\n      route:\n        cluster: b\n        retry_policy: {retry_on: connect-failure, num_retries: 0}\n";
    let o = Options {
        dead: Dead::Refused,
        ..Options::default()
    };
    let r = run(&[("svc.json", SVC), ("envoy.yaml", envoy)], &o);
    // Envoy answers the refused connection 503; gRPC maps it to
    // UNAVAILABLE, which the method lists.
    assert_eq!(stagger::classify::grpc_code_of_http(503), 14);
    assert_eq!(r.dead.layers[0].tries, 3.0, "{:?}", r.dead);
}

fn hedging(delay: &str, non_fatal: &str) -> String {
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"a.B"}}],"hedgingPolicy":{{"maxAttempts":3,"hedgingDelay":"{delay}","nonFatalStatusCodes":[{non_fatal}]}}}}]}}"#
    )
}

// The audit said a hedging method whose answer is fatal makes one try. The
// library's hedging engine sends a hedge every `hedgingDelay` whatever is
// still to come: with a delay of 0 all three go out before any answer.
#[test]
fn hedges_sent_before_any_answer_all_reach_the_dependency() {
    let o = Options {
        dead: Dead::Unavailable,
        protocol: Some(Protocol::Grpc),
        ..Options::default()
    };
    let at_once = hedging("0s", "");
    let r = run(&[("svc.json", &at_once)], &o);
    assert_eq!(r.dead.bottom_attempts, 3.0, "{:?}", r.dead);
    // A hedge later than the answer: the fatal UNAVAILABLE ends the call.
    let later = hedging("1s", "");
    assert_eq!(run(&[("svc.json", &later)], &o).dead.bottom_attempts, 1.0);
    // A non-fatal UNAVAILABLE sends the next at once.
    let non_fatal = hedging("1s", r#""UNAVAILABLE""#);
    assert_eq!(
        run(&[("svc.json", &non_fatal)], &o).dead.bottom_attempts,
        3.0
    );
}

// A refused connection never left the client: the engine retries it within
// maxAttempts, and the report says that the transparent retries a gRPC
// client may add on top are not counted.
#[test]
fn a_grpc_layer_on_a_refused_connection_says_transparent_retries_are_not_counted() {
    let r = run(&[("svc.json", SVC)], &Options::default());
    assert_eq!(r.dead.bottom_attempts, 3.0);
    assert!(
        r.layers[0]
            .assumes
            .iter()
            .any(|a| a.contains("transparent")),
        "{:?}",
        r.layers[0].assumes
    );
}
