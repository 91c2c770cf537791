//! Feature `opentelemetry`: one client span per attempt under the HTTP
//! semantic conventions, read back from the SDK's in-memory exporter. The
//! conventions (https://opentelemetry.io/docs/specs/semconv/http/http-spans/)
//! say: `http.request.resend_count` is "the ordinal number of request
//! resending attempt (for any reason, including redirects)", set on every
//! request sent again; a client span's status is Error for a 4xx or 5xx
//! answer, with `error.type` the status code; and a span's context travels
//! to the server in the request's headers (W3C `traceparent`), so the
//! server's span is the attempt's child.

mod common;

use stagger::Backoff;
use std::time::Duration;

use bytes::Bytes;
use common::scripted::Scripted;
use common::status;
use http::Request;
use http_body_util::Full;
use opentelemetry::trace::{FutureExt, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{global, Context, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use stagger::http::Settings;
use stagger::tower::RetryLayer;
use stagger::Policy;
use tower::{Layer, Service, ServiceExt};

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

#[tokio::test(start_paused = true)]
async fn a_retried_call_has_one_client_span_per_attempt_with_its_resend_count() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_tracer_provider(provider.clone());
    global::set_text_map_propagator(TraceContextPropagator::new());

    let server = Scripted::new(vec![status(503), status(502)]);
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(10),
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let settings = Settings {
        policy,
        trace_attempts: true,
        ..Default::default()
    };
    let mut svc = RetryLayer::new(settings).layer(server.clone());
    let url = server.url("/orders?id=7");
    let req = Request::get(&url).body(Full::<Bytes>::default()).unwrap();
    // The application's own span for the operation: every attempt is its
    // child, so the call's attempts are one trace.
    let tracer = global::tracer("checkout");
    let parent = Context::current_with_span(tracer.start("place order"));
    let parent_id = parent.span().span_context().span_id();
    let resp = async {
        let ready = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
            .await
            .unwrap();
        ready.call(req).await.unwrap()
    }
    .with_context(parent.clone())
    .await;
    parent.span().end();
    assert_eq!(resp.status(), 200);
    provider.force_flush().unwrap();

    let mut spans: Vec<SpanData> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.instrumentation_scope.name() == "stagger")
        .collect();
    spans.sort_by_key(|s| s.start_time);
    assert_eq!(spans.len(), 3, "one span per attempt: {spans:#?}");
    let hits = server.hits();
    assert_eq!(hits.len(), 3);
    for (i, (span, hit)) in spans.iter().zip(&hits).enumerate() {
        assert_eq!(span.name, "GET");
        assert_eq!(span.span_kind, SpanKind::Client);
        assert_eq!(attr(span, "http.request.method"), Some(&Value::from("GET")));
        assert_eq!(attr(span, "url.full"), Some(&Value::from(url.clone())));
        let resend = attr(span, "http.request.resend_count");
        match i {
            0 => assert_eq!(resend, None, "the first request is not a resend"),
            n => assert_eq!(resend, Some(&Value::I64(n as i64))),
        }
        // The attempt's own context reached the server.
        let traceparent = hit.header("traceparent").expect("traceparent sent");
        let span_id = format!("{}", span.span_context.span_id());
        assert!(
            traceparent.contains(&span_id),
            "attempt {} sent {traceparent}, its span is {span_id}",
            i + 1
        );
        // Every attempt of the call is a child of the caller's span.
        assert_eq!(span.parent_span_id, parent_id);
        assert_eq!(
            span.span_context.trace_id(),
            spans[0].span_context.trace_id()
        );
    }
    let codes: Vec<_> = spans
        .iter()
        .map(|s| attr(s, "http.response.status_code").cloned())
        .collect();
    assert_eq!(
        codes,
        [
            Some(Value::I64(503)),
            Some(Value::I64(502)),
            Some(Value::I64(200))
        ]
    );
    assert_eq!(attr(&spans[0], "error.type"), Some(&Value::from("503")));
    assert!(matches!(spans[0].status, Status::Error { .. }));
    assert_eq!(attr(&spans[2], "error.type"), None);
    assert_eq!(spans[2].status, Status::Unset);

    // Tracing is the layer's setting: without it, no span is made.
    exporter.reset();
    let server = Scripted::new(vec![status(503)]);
    let mut plain = RetryLayer::new(Policy::default()).layer(server.clone());
    let req = Request::get(server.url("/"))
        .body(Full::<Bytes>::default())
        .unwrap();
    let ready = ServiceExt::<Request<Full<Bytes>>>::ready(&mut plain)
        .await
        .unwrap();
    assert_eq!(ready.call(req).await.unwrap().status(), 200);
    provider.force_flush().unwrap();
    let made = exporter.get_finished_spans().unwrap();
    assert!(made.is_empty(), "{made:#?}");
    assert_eq!(server.hits()[0].header("traceparent"), None);
}
