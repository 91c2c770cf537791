//! Feature `opentelemetry`: the gRPC layer records gRPC's own retry metrics
//! under the names gRFC A96 gives them
//! (https://github.com/grpc/proposal/blob/master/A96-retry-otel-stats.md):
//! per call, histograms of the retries, transparent retries and hedges it
//! made (a count of 0 is not recorded) and of the time it spent with no
//! attempt running, labelled `grpc.method` and `grpc.target` (gRFC A66).
//! Read back from the SDK's in-memory metric exporter.

mod grpc_scripted;

use std::collections::BTreeMap;
use std::time::Duration;

use grpc_scripted::{request, Scripted, Step};
use opentelemetry::global;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use stagger::grpc::MethodPolicy;
use stagger::tower::grpc::{CallReport, RetryLayer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One call's report (the scripted peers' `call`, whose status is not needed here).
async fn call(layer: &RetryLayer, svc: &Scripted) -> CallReport {
    grpc_scripted::call(layer, svc, request(b"x")).await.1
}

/// `(count, sum)` of each histogram stagger recorded, with its labels.
type Seen = BTreeMap<String, Vec<(Vec<(String, String)>, u64, f64)>>;

fn histograms(exporter: &InMemoryMetricExporter) -> Seen {
    let mut seen = Seen::new();
    for rm in exporter.get_finished_metrics().unwrap() {
        for sm in rm.scope_metrics().filter(|s| s.scope().name() == "stagger") {
            for m in sm.metrics() {
                let points: Vec<_> = match m.data() {
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => h
                        .data_points()
                        .map(|p| (labels(p.attributes()), p.count(), p.sum() as f64))
                        .collect(),
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => h
                        .data_points()
                        .map(|p| (labels(p.attributes()), p.count(), p.sum()))
                        .collect(),
                    other => panic!("{} is not a histogram: {other:?}", m.name()),
                };
                seen.insert(m.name().to_owned(), points);
            }
        }
    }
    seen
}

fn labels<'a>(kvs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Vec<(String, String)> {
    let mut v: Vec<_> = kvs
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    v.sort();
    v
}

#[tokio::test(start_paused = true)]
async fn a_retried_and_a_hedged_call_record_the_a96_metrics_under_their_names() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    global::set_meter_provider(provider.clone());

    // Two UNAVAILABLE answers, then OK: two retries.
    let retrying = RetryLayer::builder()
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
        .build()
        .unwrap();
    let svc = Scripted::new(
        [Step::TrailersOnly(14, &[]), Step::TrailersOnly(14, &[])],
        Step::Streamed(0),
    );
    let retried = call(&retrying, &svc).await;
    assert_eq!(retried.get().attempts, 3);

    // A slow first attempt; the hedge sent 50 ms later answers first.
    let hedging = RetryLayer::builder()
        .default_policy(MethodPolicy::hedging(2, ms(50), [14]).unwrap())
        .build()
        .unwrap();
    let svc = Scripted::new([Step::SlowOk(ms(500))], Step::SlowOk(ms(1)));
    let hedged = call(&hedging, &svc).await;
    assert_eq!(hedged.get().attempts, 2);

    // A call that succeeds at once records nothing (0 is not reported).
    let svc = Scripted::new([], Step::Streamed(0));
    assert_eq!(call(&retrying, &svc).await.get().attempts, 1);

    provider.force_flush().unwrap();
    let seen = histograms(&exporter);
    let labels = vec![
        ("grpc.method".to_owned(), "shop.Cart/Add".to_owned()),
        ("grpc.target".to_owned(), "http://127.0.0.1".to_owned()),
    ];
    assert_eq!(
        seen.get("grpc.client.call.retries"),
        Some(&vec![(labels.clone(), 1, 2.0)]),
        "{seen:#?}"
    );
    assert_eq!(
        seen.get("grpc.client.call.hedges"),
        Some(&vec![(labels.clone(), 1, 1.0)]),
        "{seen:#?}"
    );
    assert_eq!(
        seen.get("grpc.client.call.transparent_retries"),
        None,
        "{seen:#?}"
    );
    let delay = &seen["grpc.client.call.retry_delay"];
    assert_eq!(delay.len(), 1);
    let (l, count, sum) = &delay[0];
    assert_eq!((l, *count), (&labels, 2), "the retried and the hedged call");
    // The retried call waited its two backoffs; the hedged one waited the
    // hedge delay with an attempt running, which is no retry delay.
    assert_eq!(hedged.get().waited, Duration::ZERO);
    let waited = retried.get().waited.as_secs_f64();
    assert!(waited > 0.0);
    assert!((sum - waited).abs() < 1e-9, "{sum} vs {waited}");
}
