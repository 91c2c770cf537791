//! Budget sizing by Little's law (concurrent retries = retries/s × latency):
//! what a cap on retries in flight lets through at a stated rate and
//! latency, and the largest cap that keeps the path under a bound. Every
//! expected figure is worked out by hand in the comment above it.
//!
//! Istio's `connectionPool.http.maxRetries` is "the maximum number of
//! retries that can be outstanding to all hosts in a cluster at a given
//! time" and `retryBudget` caps retries at a percent of active requests
//! with `minRetryConcurrency` as a floor (Istio's DestinationRule
//! reference); Envoy's `retry_budget` likewise (its circuit-breaking docs).

use std::time::Duration;

use stagger_audit::path::{audit_path, Options, PathInput, PathReport};

fn vs(attempts: u32) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: cart}}\nspec:\n  hosts: [cart]\n  http:\n  - route:\n    - destination: {{host: cart}}\n    retries: {{attempts: {attempts}, retryOn: connect-failure}}\n")
}

fn with_max_retries(attempts: u32, max: u32) -> String {
    format!("{}---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: cart}}\nspec:\n  host: cart\n  trafficPolicy: {{connectionPool: {{http: {{maxRetries: {max}}}}}}}\n", vs(attempts))
}

fn with_budget(attempts: u32, percent: u32, min: u32) -> String {
    format!("{}---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: cart}}\nspec:\n  host: cart\n  trafficPolicy: {{retryBudget: {{percent: {percent}, minRetryConcurrency: {min}}}}}\n", vs(attempts))
}

fn sized(files: &[(&str, &str)], rate: f64, latency_ms: u64, bound: f64) -> PathReport {
    let inputs: Vec<PathInput<'_>> = files
        .iter()
        .map(|(n, t)| PathInput::new(n, t, None))
        .collect();
    let o = Options {
        rate: Some(rate),
        latency: Some(Duration::from_millis(latency_ms)),
        bound,
        ..Options::default()
    };
    audit_path(&inputs, &o).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(r: &PathReport) -> Vec<&str> {
    r.findings.iter().map(|f| f.id).collect()
}

#[test]
fn max_retries_10_at_100_per_second_and_half_a_second_lets_20_retries_a_second_through() {
    // attempts 2: 3 tries; 100 req/s want 100 × 2 = 200 retries/s.
    // 10 in flight / 0.5 s = 20 retries/s; tries 1 + 20/100 = 1.2.
    // 100 × 0.5 = 50 in flight; bound 1.5: (1.5 − 1) × 50 = 25.
    let text = with_max_retries(2, 10);
    let r = sized(&[("dr.yaml", &text)], 100.0, 500, 1.5);
    let [z] = r.sizing.as_slice() else {
        panic!("{:?}", r.sizing)
    };
    assert_eq!(z.layer, 0);
    assert_eq!(z.rate, 100.0);
    assert_eq!(z.active, 50.0);
    assert_eq!(z.cap, 10.0);
    assert_eq!(z.allowed_per_second, 20.0);
    assert_eq!(z.wanted_per_second, 200.0);
    assert_eq!(z.tries, 1.2);
    assert_eq!(z.bottom_attempts, 1.2);
    assert_eq!(z.floor, Some(25));
    assert!(
        !ids(&r).contains(&"budget_concurrency_floor"),
        "1.2 is under 1.5"
    );
}

#[test]
fn a_cap_that_passes_the_bound_is_a_finding_naming_the_floor() {
    // As above with bound 1.1: 1.2 > 1.1; floor (1.1 − 1) × 50 = 5.
    let text = with_max_retries(2, 10);
    let r = sized(&[("dr.yaml", &text)], 100.0, 500, 1.1);
    assert_eq!(r.sizing[0].floor, Some(5));
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "budget_concurrency_floor")
        .expect("a finding");
    assert!(
        f.message.contains("at most 5 retries in flight"),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("lets 20 retries/s through of the 200"),
        "{}",
        f.message
    );
}

#[test]
fn a_retry_budget_caps_at_its_floor_when_few_requests_are_active() {
    // attempts 4: 5 tries. 10 req/s × 0.1 s = 1 active; 20 % of 1 is
    // 0.2, so the floor of 3 holds: 3 / 0.1 = 30 retries/s of 10 × 4 = 40
    // wanted; tries 1 + 30/10 = 4. Bound 2: (2 − 1) × 1 = 1.
    let text = with_budget(4, 20, 3);
    let r = sized(&[("dr.yaml", &text)], 10.0, 100, 2.0);
    let z = &r.sizing[0];
    assert_eq!(z.cap, 3.0);
    assert_eq!(z.allowed_per_second, 30.0);
    assert_eq!(z.wanted_per_second, 40.0);
    assert_eq!(z.tries, 4.0);
    assert_eq!(z.floor, Some(1));
    assert!(ids(&r).contains(&"budget_concurrency_floor"));
}

#[test]
fn a_retry_budget_caps_at_its_percent_when_many_requests_are_active() {
    // 1000 req/s × 0.1 s = 100 active; 20 % is 20 > 3: 20 / 0.1 = 200
    // retries/s of 4000 wanted; tries 1 + 200/1000 = 1.2.
    let text = with_budget(4, 20, 3);
    let r = sized(&[("dr.yaml", &text)], 1000.0, 100, 2.0);
    let z = &r.sizing[0];
    assert_eq!(z.active, 100.0);
    assert_eq!(z.cap, 20.0);
    assert_eq!(z.allowed_per_second, 200.0);
    assert_eq!(z.tries, 1.2);
    assert!(!ids(&r).contains(&"budget_concurrency_floor"));
}

#[test]
fn the_layers_above_multiply_the_rate_a_cap_sees() {
    // A client of 3 tries above the mesh: the mesh sees 3 × 100 = 300
    // req/s, 150 in flight at 0.5 s; 10 in flight allow 20 retries/s:
    // tries 1 + 20/300 = 16/15; bottom 3 × 16/15 = 3.2. Bound 4: the
    // mesh may try 4/3 times, (4/3 − 1) × 150 = 50 in flight.
    let client = r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
    let text = with_max_retries(2, 10);
    let r = sized(&[("svc.json", client), ("dr.yaml", &text)], 100.0, 500, 4.0);
    assert_eq!(r.dead.layers[0].tries, 3.0, "{:?}", r.dead);
    let z = r
        .sizing
        .iter()
        .find(|z| z.layer == 1)
        .expect("the mesh layer");
    assert_eq!(z.rate, 300.0);
    assert_eq!(z.active, 150.0);
    assert!((z.tries - 16.0 / 15.0).abs() < 1e-12, "{}", z.tries);
    assert!(
        (z.bottom_attempts - 3.2).abs() < 1e-12,
        "{}",
        z.bottom_attempts
    );
    assert_eq!(z.floor, Some(50));
}

#[test]
fn without_a_rate_nothing_is_sized() {
    let text = with_max_retries(2, 10);
    let r = audit_path(
        &[PathInput::new("dr.yaml", &text, None)],
        &Options::default(),
    )
    .unwrap();
    assert!(r.sizing.is_empty());
}

#[test]
fn a_rate_of_zero_or_a_bound_under_one_is_refused_by_name() {
    let text = vs(2);
    let input = [PathInput::new("vs.yaml", &text, None)];
    let zero = Options {
        rate: Some(0.0),
        latency: Some(Duration::from_millis(1)),
        ..Options::default()
    };
    assert_eq!(audit_path(&input, &zero).unwrap_err().file, "--rate");
    let low = Options {
        bound: 0.5,
        ..Options::default()
    };
    assert_eq!(audit_path(&input, &low).unwrap_err().file, "--bound");
}
