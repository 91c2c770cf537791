//! Retry decisions as `tracing` events.
//!
//! A policy with a `TracingObserver` retries an operation that fails twice;
//! a `tracing-subscriber` formatter prints each decision (attempt failed,
//! retry scheduled with its delay and cause, stopped with the reason) under
//! the `stagger` target.
//!
//! Run: `cargo run -p stagger --example tracing_events --features tracing`

use stagger::Backoff;
use std::sync::Arc;
use std::time::Duration;

use stagger::export::TracingObserver;
use stagger::{Policy, RetryExt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_target(true)
        .init();

    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(20),
            ..Backoff::new()
        })
        .observer(Arc::new(TracingObserver))
        .build()?;

    let mut failures = 2;
    let report = (|| {
        if failures > 0 {
            failures -= 1;
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        } else {
            Ok("connected")
        }
    })
    .retry(&policy)
    .when_classified()
    .report();
    println!("{} after {} attempts", report.reason, report.attempts);
    Ok(())
}
