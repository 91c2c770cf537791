//! Differential tests against grpcio's own A6 client, the implementation
//! nobody here wrote.
//!
//! Each scenario scripts a grpcio health server (`interop/fault_server.py`)
//! and runs two clients against two fresh copies of it with the same
//! service config: grpcio's client (`interop/a6_client.py`, retries on) and
//! stagger's `RetryLayer` over a tonic channel. Then it compares what the
//! two servers saw — how many attempts, each attempt's
//! `grpc-previous-rpc-attempts`, in order — and the final status of every
//! call, and checks both clients' spacing between attempts against A6's
//! bounds (`min(initial · multiplier^(n-1), max)` scaled by `U(0.8, 1.2)`,
//! or exactly the pushback). Where grpcio and A6 part ways (it implements
//! no `hedgingPolicy`) the test says so and checks each against its own
//! rule; docs/behaviour.md names the difference.

use crate::interop;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use interop::{python, script, FaultServer};
use stagger::config::ServiceConfig;
use stagger::tower::grpc::RetryLayer;
use tonic::body::Body;
use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::ServiceBuilder;

/// What one client's server saw, and how its calls ended.
#[derive(Debug)]
struct Run {
    /// `grpc-previous-rpc-attempts` of each attempt, `-` when absent.
    prev: Vec<String>,
    /// When each attempt arrived, in ms since the server started.
    at_ms: Vec<f64>,
    /// The final status name of each call.
    statuses: Vec<String>,
}

impl Run {
    fn gaps_ms(&self) -> Vec<f64> {
        self.at_ms.windows(2).map(|w| w[1] - w[0]).collect()
    }
}

struct Scenario {
    /// The server's script (`fault_server.py` steps).
    steps: &'static str,
    /// The service config both clients get.
    config: String,
    /// Calls made one after another on one channel.
    calls: usize,
    /// Each call's own deadline.
    timeout: Duration,
}

const HEALTH: &str = r#""name":[{"service":"grpc.health.v1.Health"}]"#;

fn retry_config(max_attempts: u32, initial: &str, max: &str, mult: &str, codes: &str) -> String {
    with_throttling(max_attempts, initial, max, mult, codes, "")
}

/// A retry policy for the health service, and `extra` top-level fields.
fn with_throttling(
    max_attempts: u32,
    initial: &str,
    max: &str,
    mult: &str,
    codes: &str,
    extra: &str,
) -> String {
    format!(
        r#"{{"methodConfig":[{{{HEALTH},"retryPolicy":{{"maxAttempts":{max_attempts},
        "initialBackoff":"{initial}","maxBackoff":"{max}","backoffMultiplier":{mult},
        "retryableStatusCodes":{codes}}}}}]{extra}}}"#
    )
}

fn scenario(steps: &'static str, config: String) -> Scenario {
    Scenario {
        steps,
        config,
        calls: 1,
        timeout: Duration::from_secs(10),
    }
}

fn parse_requests(lines: &[String]) -> (Vec<String>, Vec<f64>) {
    let field = |l: &str, k: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k).map(str::to_owned))
            .unwrap_or_default()
    };
    let prev = lines.iter().map(|l| field(l, "prev=")).collect();
    let at = lines
        .iter()
        .map(|l| field(l, "t=").parse().unwrap_or(f64::NAN))
        .collect();
    (prev, at)
}

/// grpcio's client against a fresh server.
fn grpcio(py: &Path, s: &Scenario, expected: usize) -> Run {
    let server = FaultServer::start(py, s.steps);
    let out = Command::new(py)
        .arg(script("a6_client.py"))
        .arg(server.port.to_string())
        .arg(&s.config)
        .arg(s.calls.to_string())
        .arg(s.timeout.as_secs_f64().to_string())
        .output()
        .expect("run a6_client.py");
    assert!(
        out.status.success(),
        "a6_client.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("[]");
    let statuses = line
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    let (prev, at_ms) = parse_requests(&server.requests(expected));
    Run {
        prev,
        at_ms,
        statuses,
    }
}

/// stagger's `RetryLayer`, configured from the same service config, over
/// a tonic channel against a fresh server.
async fn stagger(py: &Path, s: &Scenario, expected: usize) -> Run {
    let server = FaultServer::start(py, s.steps);
    let config = ServiceConfig::from_json(&s.config).expect("the scenario's config");
    let layer = RetryLayer::from_service_config(&config)
        .unwrap()
        .body(Body::new as fn(stagger::tower::ReplayBody<Body>) -> Body);
    let channel = Endpoint::from_shared(format!("http://127.0.0.1:{}", server.port))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(ServiceBuilder::new().layer(layer).service(channel));
    let mut statuses = Vec::new();
    for _ in 0..s.calls {
        let mut req = tonic::Request::new(HealthCheckRequest::default());
        req.set_timeout(s.timeout);
        let name = match client.check(req).await {
            Ok(_) => "OK".to_owned(),
            Err(status) => stagger::classify::GRPC_CODE_NAMES
                .get(status.code() as usize)
                .copied()
                .unwrap_or("?")
                .to_owned(),
        };
        statuses.push(name);
    }
    let (prev, at_ms) = parse_requests(&server.requests(expected));
    Run {
        prev,
        at_ms,
        statuses,
    }
}

/// Both clients on `s`; asserts they agree on the attempts and statuses
/// and returns both runs for the scenario's own checks.
async fn both(s: &Scenario, expected_attempts: usize) -> Option<(Run, Run)> {
    let py = python()?;
    let theirs = grpcio(&py, s, expected_attempts);
    let ours = tokio::time::timeout(Duration::from_secs(30), stagger(&py, s, expected_attempts))
        .await
        .expect("stagger's calls end within 30 s");
    assert_eq!(
        ours.prev, theirs.prev,
        "grpc-previous-rpc-attempts per attempt: stagger {ours:?} vs grpcio {theirs:?}"
    );
    assert_eq!(
        ours.statuses, theirs.statuses,
        "final statuses: stagger {ours:?} vs grpcio {theirs:?}"
    );
    assert_eq!(ours.prev.len(), expected_attempts, "{ours:?}");
    Some((ours, theirs))
}

/// How late the server's clock may see an attempt arrive: a handler thread
/// of a fresh grpcio server can start a first request some tens of
/// milliseconds after it arrived, which makes the next gap look shorter.
const HANDLER_LAG_MS: f64 = 25.0;

/// Every gap within `nominal · [0.8, 1.2]` (A6's jitter), with `slack_ms`
/// for scheduling and the round trip on loopback, and the server's handler
/// lag below.
fn within_jitter(who: &str, run: &Run, nominal_ms: &[f64], slack_ms: f64) {
    let gaps = run.gaps_ms();
    assert_eq!(gaps.len(), nominal_ms.len(), "{who}: {run:?}");
    for (i, (g, b)) in gaps.iter().zip(nominal_ms).enumerate() {
        assert!(
            *g >= 0.8 * b - HANDLER_LAG_MS && *g <= 1.2 * b + slack_ms,
            "{who}: gap {} is {g:.1} ms, outside {b} ms ±20 %: {run:?}",
            i + 1
        );
    }
}

#[tokio::test]
async fn flaky_then_ok_agrees_with_grpcio() {
    let s = scenario(
        "unavailable,unavailable",
        retry_config(5, "0.1s", "1s", "2", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, theirs)) = both(&s, 3).await else {
        return;
    };
    assert_eq!(ours.prev, ["-", "1", "2"]);
    assert_eq!(ours.statuses, ["OK"]);
    within_jitter("stagger", &ours, &[100.0, 200.0], 40.0);
    within_jitter("grpcio", &theirs, &[100.0, 200.0], 40.0);
}

#[tokio::test]
async fn pushback_is_waited_exactly_as_grpcio_waits_it() {
    let s = scenario(
        "pushback:250",
        retry_config(3, "0.01s", "0.05s", "2", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, theirs)) = both(&s, 2).await else {
        return;
    };
    for (who, run) in [("stagger", &ours), ("grpcio", &theirs)] {
        let gap = run.gaps_ms()[0];
        let lowest = 250.0 - HANDLER_LAG_MS;
        assert!((lowest..330.0).contains(&gap), "{who}: {gap} ms: {run:?}");
    }
}

#[tokio::test]
async fn a_negative_pushback_stops_as_in_grpcio() {
    let s = scenario(
        "pushback:-1",
        retry_config(5, "0.01s", "0.05s", "2", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, _)) = both(&s, 1).await else {
        return;
    };
    assert_eq!(ours.statuses, ["UNAVAILABLE"]);
}

#[tokio::test]
async fn a_failure_after_response_headers_is_committed_as_in_grpcio() {
    let s = scenario(
        "after_headers",
        retry_config(5, "0.01s", "0.05s", "2", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, _)) = both(&s, 1).await else {
        return;
    };
    assert_eq!(ours.statuses, ["UNAVAILABLE"]);
}

#[tokio::test]
async fn an_unlisted_status_is_not_retried_as_in_grpcio() {
    let s = scenario(
        "internal",
        retry_config(5, "0.01s", "0.05s", "2", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, _)) = both(&s, 1).await else {
        return;
    };
    assert_eq!(ours.statuses, ["INTERNAL"]);
}

#[tokio::test]
async fn max_attempts_ten_counts_as_five_as_in_grpcio() {
    let s = scenario(
        "unavailable,unavailable,unavailable,unavailable,unavailable,unavailable,unavailable",
        retry_config(10, "0.01s", "0.05s", "2", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, theirs)) = both(&s, 5).await else {
        return;
    };
    assert_eq!(ours.prev, ["-", "1", "2", "3", "4"]);
    within_jitter("stagger", &ours, &[10.0, 20.0, 40.0, 50.0], 30.0);
    within_jitter("grpcio", &theirs, &[10.0, 20.0, 40.0, 50.0], 30.0);
}

#[tokio::test]
async fn a_listed_resource_exhausted_is_retried_as_in_grpcio() {
    let s = scenario(
        "exhausted",
        retry_config(3, "0.05s", "1s", "2", r#"["RESOURCE_EXHAUSTED"]"#),
    );
    let Some((ours, _)) = both(&s, 2).await else {
        return;
    };
    assert_eq!(ours.statuses, ["OK"]);
}

#[tokio::test]
async fn a_shrinking_multiplier_agrees_with_grpcio() {
    let s = scenario(
        "unavailable,unavailable,unavailable,unavailable",
        retry_config(5, "0.2s", "1s", "0.5", r#"["UNAVAILABLE"]"#),
    );
    let Some((ours, theirs)) = both(&s, 5).await else {
        return;
    };
    within_jitter("stagger", &ours, &[200.0, 100.0, 50.0, 25.0], 30.0);
    within_jitter("grpcio", &theirs, &[200.0, 100.0, 50.0, 25.0], 30.0);
}

#[tokio::test]
async fn throttling_drained_and_refilled_agrees_with_grpcio() {
    // maxTokens 4, tokenRatio 1: retries while tokens > 2. Call 1 fails
    // twice (4 → 3, retried; 3 → 2, not), call 2 once (→ 1), calls 3 and 4
    // succeed (→ 2, → 3), call 5 fails once (→ 2, not retried), call 6 is OK.
    let config = with_throttling(
        5,
        "0.01s",
        "0.05s",
        "2",
        r#"["UNAVAILABLE"]"#,
        r#","retryThrottling":{"maxTokens":4,"tokenRatio":1}"#,
    );
    let s = Scenario {
        calls: 6,
        ..scenario(
            "unavailable,unavailable,unavailable,ok,ok,unavailable",
            config,
        )
    };
    let Some((ours, _)) = both(&s, 7).await else {
        return;
    };
    assert_eq!(
        ours.statuses,
        [
            "UNAVAILABLE",
            "UNAVAILABLE",
            "OK",
            "OK",
            "UNAVAILABLE",
            "OK"
        ]
    );
    assert_eq!(ours.prev, ["-", "1", "-", "-", "-", "-", "-"]);
}

#[tokio::test]
async fn a_method_without_a_policy_spends_no_token_as_in_grpcio() {
    // The policy names another service: Health calls have none, so their
    // UNAVAILABLE answers cost nothing and a later listed method could
    // still retry (checked through the bucket on our side).
    let config = r#"{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
        "maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,
        "retryableStatusCodes":["UNAVAILABLE"]}}],
        "retryThrottling":{"maxTokens":2,"tokenRatio":0.1}}"#
        .to_owned();
    let s = Scenario {
        calls: 4,
        ..scenario("unavailable,unavailable,unavailable,unavailable", config)
    };
    let Some((ours, _)) = both(&s, 4).await else {
        return;
    };
    assert_eq!(ours.statuses, ["UNAVAILABLE"; 4]);
}

#[tokio::test]
async fn a_retry_the_deadline_cannot_fit_is_where_grpcio_differs_it_starts_it() {
    // Each attempt takes 150 ms and fails; 100 ms backoff; a 300 ms
    // deadline. grpcio starts the second attempt at about 250 ms and the
    // deadline cuts it. stagger has seen an attempt take 150 ms, so with
    // 50 ms left after the backoff it starts none (the wait plus a typical
    // attempt reaches the deadline: docs/behaviour.md, the deadline's
    // bounds) and answers the first attempt's status at once: the server
    // is spared an attempt that could not have answered in time.
    let Some(py) = python() else { return };
    let s = Scenario {
        timeout: Duration::from_millis(300),
        ..scenario(
            "late:150,late:150,late:150",
            retry_config(5, "0.1s", "1s", "2", r#"["UNAVAILABLE"]"#),
        )
    };
    let theirs = grpcio(&py, &s, 2);
    assert_eq!(theirs.prev, ["-", "1"], "{theirs:?}");
    assert_eq!(theirs.statuses, ["DEADLINE_EXCEEDED"], "{theirs:?}");
    let ours = tokio::time::timeout(Duration::from_secs(30), stagger(&py, &s, 1))
        .await
        .expect("stagger's call ends within 30 s");
    assert_eq!(ours.prev, ["-"], "{ours:?}");
    assert_eq!(ours.statuses, ["UNAVAILABLE"], "{ours:?}");
}

#[tokio::test]
async fn hedging_is_where_grpcio_differs_it_sends_one_attempt() {
    // grpcio (gRPC C-core) implements no hedgingPolicy: it makes one
    // attempt. stagger follows A6 (as grpc-java does): the first attempt
    // fails late, the hedge sent 50 ms in answers.
    let Some(py) = python() else { return };
    let s = scenario(
        "late:300,slow:10",
        format!(
            r#"{{"methodConfig":[{{{HEALTH},"hedgingPolicy":{{"maxAttempts":3,
            "hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}}}}]}}"#
        ),
    );
    let theirs = grpcio(&py, &s, 1);
    assert_eq!(theirs.prev, ["-"], "{theirs:?}");
    assert_eq!(theirs.statuses, ["UNAVAILABLE"]);
    let ours = stagger(&py, &s, 3).await;
    assert_eq!(ours.statuses, ["OK"], "{ours:?}");
    assert_eq!(&ours.prev[..2], ["-", "1"], "{ours:?}");
    // The second attempt went out while the first still ran (it fails only
    // at 300 ms): a hedge, not a retry. Its exact spacing is pinned under
    // paused time in grpc_hedging.rs; here the server's clock only sees
    // when each handler started.
    let gap = ours.gaps_ms()[0];
    assert!(gap < 250.0, "hedge after {gap} ms: {ours:?}");
}
