//! Feature `opentelemetry`: the gRPC layer's call and attempt spans, read
//! back from the SDK's in-memory span exporter (a binary of its own: the
//! metrics test beside it reads every call the process makes).

mod grpc_scripted;

use std::time::Duration;

use grpc_scripted::{request, Scripted, Step};
use opentelemetry::global;
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::{CallReport, RetryLayer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One call's report (the scripted peers' `call`, whose status is not needed here).
async fn call(layer: &RetryLayer, svc: &Scripted) -> CallReport {
    grpc_scripted::call(layer, svc, request(b"x")).await.1
}

/// gRFC A72's shape (https://github.com/grpc/proposal/blob/master/A72-open-telemetry-tracing.md):
/// the client "creates a child span with the parent span from the current
/// context, and further creates attempt spans ... for each attempt", and
/// on each attempt span adds "attribute `previous-rpc-attempts` that
/// captures the number of preceding attempts for the RPC, and attribute
/// `transparent-retry` that shows whether stream is a transparent retry".
#[tokio::test(start_paused = true)]
async fn a_grpc_call_has_a_call_span_and_one_attempt_span_per_attempt() {
    use opentelemetry::trace::{SpanKind, Status};
    use opentelemetry::Value;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_tracer_provider(provider.clone());
    global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());

    let layer = RetryLayer::builder()
        .default_policy(
            MethodPolicy::builder()
                .max_attempts(3)
                .initial_backoff(ms(10))
                .max_backoff(ms(10))
                .multiplier(1.0)
                .retryable_codes([14])
                .build()
                .unwrap(),
        )
        .trace_attempts(true)
        .build()
        .unwrap();
    // Attempt 1 never reaches the server (a refused stream): attempt 2 is
    // a transparent retry; it answers UNAVAILABLE; attempt 3 succeeds.
    let svc = Scripted::new(
        [Step::RefusedStream, Step::TrailersOnly(14, &[])],
        Step::TrailersOnly(0, &[]),
    );
    assert_eq!(call(&layer, &svc).await.get().attempts, 3);
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let find = |name: &str| -> Vec<_> { spans.iter().filter(|s| s.name == name).collect() };
    let sent = find("Sent.shop.Cart.Add");
    assert_eq!(sent.len(), 1, "{spans:#?}");
    assert_eq!(sent[0].span_kind, SpanKind::Client);
    let mut attempts = find("Attempt.shop.Cart.Add");
    attempts.sort_by_key(|s| s.start_time);
    assert_eq!(attempts.len(), 3, "{spans:#?}");
    let attr = |s: &opentelemetry_sdk::trace::SpanData, k: &str| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == k)
            .map(|kv| kv.value.clone())
    };
    let seen: Vec<_> = attempts
        .iter()
        .map(|s| {
            (
                attr(s, "previous-rpc-attempts"),
                attr(s, "transparent-retry"),
                attr(s, "rpc.response.status_code"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (Some(Value::I64(0)), Some(Value::Bool(false)), None),
            (
                Some(Value::I64(1)),
                Some(Value::Bool(true)),
                Some(Value::from("UNAVAILABLE"))
            ),
            (
                Some(Value::I64(2)),
                Some(Value::Bool(false)),
                Some(Value::from("OK"))
            ),
        ]
    );
    for a in &attempts {
        assert_eq!(a.parent_span_id, sent[0].span_context.span_id());
    }
    assert!(matches!(attempts[1].status, Status::Error { .. }));
    assert_eq!(
        attr(sent[0], "rpc.response.status_code"),
        Some(Value::from("OK"))
    );
    // Each request that reached the server carried its own attempt's
    // context in its metadata.
    let ids: Vec<String> = attempts
        .iter()
        .map(|s| format!("{}", s.span_context.span_id()))
        .collect();
    let seen = svc.seen();
    assert!(seen.len() >= 2, "{} requests seen", seen.len());
    let mut carried: Vec<String> = seen
        .iter()
        .map(|hit| {
            let tp = hit.headers.get("traceparent").and_then(|v| v.to_str().ok());
            let id = tp.and_then(|t| t.split('-').nth(2)).unwrap_or_default();
            assert!(
                ids.iter().any(|i| i == id),
                "{tp:?} names no attempt of {ids:?}"
            );
            id.to_owned()
        })
        .collect();
    carried.dedup();
    assert_eq!(carried.len(), seen.len(), "every request its own span");
}
