//! Where stagger's gRPC layer disagreed with A6 as grpc-go and grpc-java
//! implement it, one regression test per behaviour, each named for the
//! behaviour and citing the rule (gRPC proposal A6, "Retry Throttling",
//! "Transparent Retries", "Hedging Policy", "Validation of retryPolicy").
//! Scripted tower service, paused tokio time: every wait is exact.

use crate::grpc_scripted;

use std::time::Duration;

use grpc_scripted::{a6, call, request, unavailable, Scripted, Seen, Step};
use stagger::config::ServiceConfig;
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::RetryLayer;
use stagger::StopReason;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn previous(s: &Seen) -> Option<u32> {
    s.headers
        .get("grpc-previous-rpc-attempts")
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

fn hedging(max_attempts: u32, delay_ms: u64, non_fatal: &[u32]) -> RetryLayer {
    RetryLayer::builder()
        .default_policy(
            MethodPolicy::hedging(max_attempts, ms(delay_ms), non_fatal.iter().copied()).unwrap(),
        )
        .build()
        .unwrap()
}

fn layer_from(json: &str) -> RetryLayer {
    RetryLayer::from_service_config(&ServiceConfig::from_json(json).unwrap()).unwrap()
}

// 1. A6, "Retry Throttling": "each failed RPC whose status is one of the
// method's retryableStatusCodes (or nonFatalStatusCodes) decrements the
// token count", as does a pushback that says not to retry. Nothing else.

#[tokio::test(start_paused = true)]
async fn throttling_takes_no_token_for_a_method_without_a_retry_policy() {
    let layer = RetryLayer::builder().throttling(10.0, 0.1).build().unwrap();
    let bucket = layer.throttling_bucket().unwrap().clone();
    let svc = Scripted::new([], unavailable());
    for _ in 0..3 {
        let (status, _) = call(&layer, &svc, request(b"x")).await;
        assert_eq!(status, Some(14));
    }
    let svc = Scripted::new(
        [],
        Step::TrailersOnly(14, &[("grpc-retry-pushback-ms", "-1")]),
    );
    call(&layer, &svc, request(b"x")).await;
    assert_eq!(bucket.tokens_milli(), 10_000, "no policy, no token");
}

#[tokio::test(start_paused = true)]
async fn throttling_takes_no_token_for_the_callers_own_deadline() {
    let layer = layer_from(
        r#"{"methodConfig":[{"name":[{}],"timeout":"0.2s","retryPolicy":{"maxAttempts":3,
        "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
        "retryableStatusCodes":["UNAVAILABLE","DEADLINE_EXCEEDED"]}}],
        "retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}"#,
    );
    let bucket = layer.throttling_bucket().unwrap().clone();
    let svc = Scripted::new([], Step::SlowOk(ms(5_000)));
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(4));
    assert_eq!(report.get().reason, Some(StopReason::Deadline));
    assert_eq!(
        bucket.tokens_milli(),
        10_000,
        "the caller's deadline costs nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn throttling_takes_a_token_for_a_listed_status_and_for_do_not_retry_only() {
    let layer = RetryLayer::builder()
        .default_policy(a6(2, &[14]))
        .throttling(10.0, 0.1)
        .build()
        .unwrap();
    let bucket = layer.throttling_bucket().unwrap().clone();
    // INTERNAL is not listed: no token.
    call(
        &layer,
        &Scripted::new([], Step::TrailersOnly(13, &[])),
        request(b"x"),
    )
    .await;
    assert_eq!(bucket.tokens_milli(), 10_000);
    // UNAVAILABLE is: one token per failed attempt (two attempts).
    call(&layer, &Scripted::new([], unavailable()), request(b"x")).await;
    assert_eq!(bucket.tokens_milli(), 8_000);
    // A "do not retry" pushback costs one, listed or not.
    let no = Step::TrailersOnly(13, &[("grpc-retry-pushback-ms", "-1")]);
    call(&layer, &Scripted::new([], no), request(b"x")).await;
    assert_eq!(bucket.tokens_milli(), 7_000);
}

// 2. A6, "Transparent Retries": an attempt that never left the client does
// not count toward maxAttempts and is not reported in
// grpc-previous-rpc-attempts.

#[tokio::test(start_paused = true)]
async fn a_transparent_retry_does_not_raise_grpc_previous_rpc_attempts() {
    let layer = RetryLayer::builder()
        .default_policy(a6(3, &[14]))
        .build()
        .unwrap();
    let svc = Scripted::new(
        [Step::RefusedStream, unavailable()],
        Step::TrailersOnly(0, &[]),
    );
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    let seen: Vec<_> = svc.seen().iter().map(previous).collect();
    assert_eq!(seen, vec![None, None, Some(1)]);
}

#[tokio::test(start_paused = true)]
async fn a_transparent_retry_uses_up_no_hedge_attempt() {
    let layer = hedging(2, 50, &[14]);
    let svc = Scripted::new(
        [Step::RefusedStream, Step::SlowOk(ms(500))],
        Step::SlowOk(ms(10)),
    );
    let t0 = tokio::time::Instant::now();
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    let seen = svc.seen();
    assert_eq!(seen.len(), 3, "the refused attempt is not one of the two");
    assert_eq!(
        seen.iter().map(previous).collect::<Vec<_>>(),
        vec![None, None, Some(1)]
    );
    assert_eq!(t0.elapsed(), ms(60), "the hedge sent at 50 ms won");
}

// 3. A6, "Hedging Policy": a non-fatal status only affects whether more
// hedges are sent; the call ends when an attempt succeeds, a fatal status
// arrives, or every attempt has answered.

fn hedged_config(timeout: &str) -> RetryLayer {
    layer_from(&format!(
        r#"{{"methodConfig":[{{"name":[{{}}],{timeout}"hedgingPolicy":{{"maxAttempts":3,
        "hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    ))
}

#[tokio::test(start_paused = true)]
async fn a_pushback_past_the_deadline_only_holds_back_the_next_hedge() {
    let layer = hedged_config(r#""timeout":"1s","#);
    let svc = Scripted::new(
        [
            Step::SlowOk(ms(300)),
            Step::Late(ms(10), 14, &[("grpc-retry-pushback-ms", "5000")]),
        ],
        Step::SlowOk(ms(1)),
    );
    let t0 = tokio::time::Instant::now();
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0), "attempt 1 answers OK at 300 ms");
    assert_eq!(t0.elapsed(), ms(300));
    assert_eq!(svc.seen().len(), 2, "no third hedge after the pushback");
    assert_eq!(report.get().reason, Some(StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn a_pushback_past_max_retry_after_only_holds_back_the_next_hedge() {
    let layer = hedged_config("");
    let svc = Scripted::new(
        [
            Step::SlowOk(ms(300)),
            Step::Late(ms(10), 14, &[("grpc-retry-pushback-ms", "3600000")]),
        ],
        Step::SlowOk(ms(1)),
    );
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(svc.seen().len(), 2);
}

// 4. A fatal status ends the call and is returned, whatever hints came
// before it.

#[tokio::test(start_paused = true)]
async fn a_fatal_status_after_a_do_not_retry_pushback_ends_the_call() {
    let layer = hedging(3, 50, &[14]);
    let svc = Scripted::new(
        [
            Step::SlowOk(ms(1_000)),
            Step::Late(ms(100), 13, &[]),
            Step::Late(ms(10), 14, &[("grpc-retry-pushback-ms", "-1")]),
        ],
        Step::SlowOk(ms(1)),
    );
    let t0 = tokio::time::Instant::now();
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(13), "INTERNAL from attempt 2 at 150 ms");
    assert_eq!(t0.elapsed(), ms(150));
    assert_eq!(svc.answered(), 2, "attempt 1 was cancelled");
}

// 5. A code listed in nonFatalStatusCodes is non-fatal, whatever its class
// without a policy.

#[tokio::test(start_paused = true)]
async fn a_listed_non_fatal_resource_exhausted_sends_the_next_hedge() {
    let layer = hedging(3, 50, &[8]);
    let svc = Scripted::new([Step::Late(ms(10), 8, &[])], Step::SlowOk(ms(10)));
    let t0 = tokio::time::Instant::now();
    let (status, _) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(svc.seen().len(), 2);
    assert_eq!(t0.elapsed(), ms(20), "the next hedge went out at once");
}

// 7. A6, "Validation of retryPolicy" as grpc-go (service_config.go) and
// grpc-java apply it: initialBackoff and maxBackoff > 0, backoffMultiplier
// > 0, maxTokens in (0, 1000], tokenRatio > 0, three decimals kept.

fn policy_json(initial: &str, max: &str, mult: &str) -> String {
    format!(
        r#"{{"methodConfig":[{{"name":[{{"service":"s.S"}}],"retryPolicy":{{"maxAttempts":5,
        "initialBackoff":"{initial}","maxBackoff":"{max}","backoffMultiplier":{mult},
        "retryableStatusCodes":["UNAVAILABLE"]}}}}]}}"#
    )
}

#[test]
fn an_initial_backoff_above_max_backoff_is_accepted_and_capped() {
    let c = ServiceConfig::from_json(&policy_json("5s", "1s", "2")).unwrap();
    let p = c.policy("s.S", "M").unwrap().unwrap();
    for n in 1..=4 {
        assert_eq!(p.backoff().backoff(n), Duration::from_secs(1), "retry {n}");
    }
}

#[test]
fn a_backoff_multiplier_below_one_is_accepted_and_shrinks() {
    let c = ServiceConfig::from_json(&policy_json("1s", "2s", "0.5")).unwrap();
    let p = c.policy("s.S", "M").unwrap().unwrap();
    let steps: Vec<_> = (1..=4).map(|n| p.backoff().backoff(n)).collect();
    assert_eq!(steps, vec![ms(1000), ms(500), ms(250), ms(125)]);
    // Zero and negative multipliers stay errors, naming the field.
    for bad in ["0", "-1"] {
        let e = ServiceConfig::from_json(&policy_json("1s", "2s", bad)).unwrap_err();
        assert_eq!(e.field(), "retryPolicy.backoffMultiplier", "{bad}");
    }
}

#[test]
fn a_token_ratio_above_max_tokens_is_accepted() {
    let c = ServiceConfig::from_json(r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":20}}"#)
        .unwrap();
    assert_eq!(c.throttling_bucket().unwrap().max_milli(), 10_000);
}

#[test]
fn token_ratio_digits_past_the_third_are_dropped_not_rounded() {
    use stagger::guardrails::budget::Budget;
    let c = ServiceConfig::from_json(r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":0.5466}}"#)
        .unwrap();
    let b = c.throttling_bucket().unwrap();
    let now = std::time::Instant::now();
    b.on_failure(&stagger::Failure::transient(), now);
    b.on_success(None, now);
    assert_eq!(b.tokens_milli(), 9_546, "0.5466 is 0.546");
}

// 8. A6: "retryableStatusCodes: the set of status codes which may be
// retried" — a listed code is retried, pushback or not.

#[tokio::test(start_paused = true)]
async fn a_listed_resource_exhausted_is_retried_without_pushback() {
    let layer = RetryLayer::builder()
        .default_policy(a6(3, &[8]))
        .build()
        .unwrap();
    let svc = Scripted::new([Step::TrailersOnly(8, &[])], Step::TrailersOnly(0, &[]));
    let (status, report) = call(&layer, &svc, request(b"x")).await;
    assert_eq!(status, Some(0));
    assert_eq!(svc.seen().len(), 2);
    assert_eq!(report.get().attempts, 2);
}
