//! An operator's transitions reach the metrics contract: the
//! `stagger_breaker_state` gauge shows each forced state as its own value,
//! and the transitions counter names it.

#![cfg(feature = "metrics")]

use std::sync::Arc;
use std::time::Instant;

use metrics_exporter_prometheus::PrometheusBuilder;
use stagger::export::MetricsObserver;
use stagger::guardrails::{BreakerConfig, Transition};
use stagger::Breaker;

#[test]
fn the_breaker_state_gauge_shows_each_operator_state() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let gauge = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("stagger_breaker_state{"))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let mut seen = Vec::new();
    metrics::with_local_recorder(&recorder, || {
        let breaker = Breaker::new(BreakerConfig {
            observer: Some(Arc::new(MetricsObserver::for_dependency("payments"))),
            ..Default::default()
        })
        .unwrap();
        let now = Instant::now();
        for t in [
            Transition::ForceOpen,
            Transition::Disable,
            Transition::MetricsOnly,
            Transition::CloseAndReset,
        ] {
            breaker.transition(t, now);
            seen.push(gauge(&handle.render()));
        }
    });
    assert_eq!(seen, ["3", "-1", "-2", "0"]);
    let text = handle.render();
    assert!(
        text.contains(
            "stagger_breaker_transitions_total{dependency=\"payments\",from=\"closed\",to=\"forced_open\"} 1"
        ),
        "{text}"
    );
}
