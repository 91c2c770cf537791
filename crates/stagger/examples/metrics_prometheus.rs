//! Retry signals through the `metrics` facade, rendered as Prometheus text.
//!
//! A policy with a `MetricsObserver` for the dependency "payments" retries a
//! flaky operation; the retry budget and breaker report to the same
//! observer. The program prints the exposition a `/metrics` endpoint would
//! serve: attempts, retries by cause, stops by reason, time slept.
//!
//! Run: `cargo run -p stagger --example metrics_prometheus --features metrics`

use stagger::Backoff;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use stagger::export::MetricsObserver;
use stagger::guardrails::budget::RatioBudget;
use stagger::guardrails::Guardrails;
use stagger::{Breaker, Policy, RetryExt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    MetricsObserver::describe();

    let observer = Arc::new(MetricsObserver::for_dependency("payments"));
    let guardrails = Guardrails::new()
        .budget(RatioBudget::default())
        .breaker(Breaker::default())
        .observer(observer.clone());
    let policy = Policy::builder()
        .max_attempts(4)
        .backoff(Backoff {
            base: Duration::from_millis(1),
            ..Backoff::new()
        })
        .guardrail(Arc::new(guardrails))
        .observer(observer)
        .build()?;

    // One call in ten fails once before it succeeds: the budget (10 % of
    // requests plus a floor) pays for those retries.
    let mut succeeded = 0;
    for call in 0..50 {
        let mut left = u32::from(call % 10 == 9);
        let report = (|| {
            if left > 0 {
                left -= 1;
                Err("503 Service Unavailable")
            } else {
                Ok(())
            }
        })
        .retry(&policy)
        .report();
        succeeded += u32::from(report.result.is_ok());
    }
    println!("50 calls, {succeeded} succeeded; the exposition:");
    println!("\n{}", handle.render());
    Ok(())
}
