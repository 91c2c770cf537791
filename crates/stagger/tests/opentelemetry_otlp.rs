//! Feature `opentelemetry`, end to end: a retried call's attempt spans,
//! exported by the SDK's own OTLP exporter over gRPC, arrive at a receiver
//! built from the official `opentelemetry-proto` package (Python, nobody
//! here wrote its decoder), one span per attempt with
//! `http.request.resend_count` on each request sent again, all children of
//! the caller's span.

mod common;
mod interop;

use stagger::Backoff;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::scripted::Scripted;
use common::status;
use http::Request;
use http_body_util::Full;
use opentelemetry::trace::{FutureExt, TraceContextExt, Tracer};
use opentelemetry::{global, Context};
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use stagger::http::Settings;
use stagger::tower::RetryLayer;
use stagger::Policy;
use tower::{Layer, Service, ServiceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_otlp_receiver_sees_one_span_per_attempt_with_its_resend_count() {
    let Some(python) = interop::python() else {
        return;
    };
    let has_proto = Command::new(&python)
        .args([
            "-c",
            "import opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc",
        ])
        .status()
        .is_ok_and(|s| s.success());
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    if !has_proto {
        assert!(
            !ci,
            "CI is set but {} lacks opentelemetry-proto (.ci/run installs it)",
            python.display()
        );
        eprintln!(
            "note: skipping: no opentelemetry-proto in {}",
            python.display()
        );
        return;
    }
    let mut receiver = Command::new(&python)
        .arg(interop::script("otlp_receiver.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start otlp_receiver.py");
    let stdout = receiver.stdout.take().unwrap();
    let (port_tx, port_rx) = mpsc::channel();
    let (span_tx, span_rx) = mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            match line.strip_prefix("PORT ") {
                Some(p) => {
                    let _ = port_tx.send(p.trim().parse::<u16>().unwrap());
                }
                None => {
                    let _ = span_tx.send(serde_json::from_str(&line).unwrap());
                }
            }
        }
    });
    let port = port_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the receiver printed its port");

    let exporter = SpanExporter::builder()
        .with_tonic()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .build()
        .unwrap();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    global::set_tracer_provider(provider.clone());
    global::set_text_map_propagator(TraceContextPropagator::new());

    let server = Scripted::new(vec![status(503), status(503)]);
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(5),
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let mut svc = RetryLayer::new(Settings {
        policy,
        trace_attempts: true,
        ..Default::default()
    })
    .layer(server.clone());
    let parent = Context::current_with_span(global::tracer("checkout").start("place order"));
    let parent_id = format!("{}", parent.span().span_context().span_id());
    let req = Request::get(server.url("/orders"))
        .body(Full::<Bytes>::default())
        .unwrap();
    let resp = async {
        let ready = ServiceExt::<Request<Full<Bytes>>>::ready(&mut svc)
            .await
            .unwrap();
        ready.call(req).await.unwrap()
    }
    .with_context(parent.clone())
    .await;
    assert_eq!(resp.status(), 200);
    parent.span().end();
    let flushing = provider.clone();
    tokio::task::spawn_blocking(move || flushing.force_flush())
        .await
        .unwrap()
        .expect("the spans were exported");

    // The three attempts and the caller's span, as the receiver decoded them.
    let mut attempts = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while attempts.len() < 3 && Instant::now() < until {
        if let Ok(span) = span_rx.recv_timeout(Duration::from_millis(200)) {
            if span["scope"] == "stagger" {
                attempts.push(span);
            }
        }
    }
    drop(receiver.stdin.take());
    let _ = receiver.wait();
    assert_eq!(attempts.len(), 3, "one span per attempt: {attempts:#?}");
    let mut resend: Vec<_> = attempts
        .iter()
        .map(|s| s["attributes"]["http.request.resend_count"].as_i64())
        .collect();
    resend.sort();
    assert_eq!(resend, [None, Some(1), Some(2)], "{attempts:#?}");
    for s in &attempts {
        assert_eq!(s["name"], "GET");
        assert_eq!(s["kind"], 3, "SPAN_KIND_CLIENT: {s}");
        assert_eq!(s["parent_span_id"], parent_id.as_str(), "{s}");
        assert_eq!(s["trace_id"], attempts[0]["trace_id"]);
    }
    let mut codes: Vec<_> = attempts
        .iter()
        .map(|s| {
            s["attributes"]["http.response.status_code"]
                .as_i64()
                .unwrap()
        })
        .collect();
    codes.sort();
    assert_eq!(codes, [200, 503, 503]);
}
