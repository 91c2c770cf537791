//! # stagger — retries that help a recovering dependency
//!
//! Retries turn a blip into a non-event, or into an outage that outlasts its
//! trigger: clients that failed together retry together, layers multiply
//! attempts, and retry load keeps a dependency down after the fault is gone.
//! stagger retries with exponential backoff and *real* jitter (a fresh random
//! stream per call, applied inside the cap), honours server hints without
//! letting them break the deadline or the attempt limit, and stops for a
//! reason it names.
//!
//! ## A 30-second tour
//!
//! ```
//! use stagger::{Backoff, Policy, RetryExt, StopReason};
//! use std::time::Duration;
//!
//! // 4 attempts, 50 ms × 2 up to 1 s, full jitter (the default jitter).
//! let policy = Policy::builder()
//!     .max_attempts(4)
//!     .backoff(Backoff {
//!         base: Duration::from_millis(50),
//!         cap: Duration::from_secs(1),
//!         ..Backoff::new()
//!     })
//!     .build()?;
//!
//! let mut calls = 0;
//! let fetch = || {
//!     calls += 1;
//!     if calls < 3 { Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)) } else { Ok("ok") }
//! };
//! let report = fetch
//!     .retry(&policy)
//!     .when_classified()            // io errors know their class
//!     .timeout(Duration::from_secs(2)) // one deadline over every attempt and wait
//!     .sleep(|_d| {})               // (a doc test should not really sleep)
//!     .report();
//! assert_eq!(report.reason, StopReason::Success);
//! assert_eq!(report.attempts, 3);
//! # Ok::<(), stagger::ConfigError>(())
//! ```
//!
//! Underneath, every front-end drives one sans-IO function,
//! [`Policy::decide`]: given how an attempt ended — the [`Failure`] and the
//! facts the front-end knows (was it sent, did a layer below give up, is the
//! call [`Idempotency::Idempotent`]) — and what time it is, retry after how
//! long, or stop and why ([`StopReason`]). [`Policy`] documents the
//! protocol; `docs/behaviour.md` in the repository is the full behaviour
//! reference, with every rule and default.
//!
//! ## I want to … → use …
//!
//! | I want to … | use |
//! |---|---|
//! | retry a closure or a blocking call | [`RetryExt`] (`.retry(&policy)`), [`RetryAttemptExt`] when the closure needs the attempt number |
//! | retry an async operation | [`AsyncRetryExt`] (runtime-agnostic; tokio's timer with feature `tokio`) |
//! | say how many attempts and how long between them | [`Policy::builder`] → [`PolicyBuilder`], [`Backoff`], [`Jitter`] |
//! | cap retries at a share of real traffic | [`budget`] (`RatioBudget`, [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s `TokenBucket`, …) on [`PolicyBuilder::budget`] |
//! | stop calling a dependency that is plainly down | [`Breaker`], [`Throttle`]; their builders in [`guardrails`] |
//! | cut the latency tail without a storm | [`HedgePolicy`], [`HedgeDelay`], [`HedgeExt`]; the sans-IO protocol in [`hedging`] |
//! | retry (or hedge) HTTP through tower or reqwest | `tower::RetryLayer` (feature `tower`), `reqwest::RetryMiddleware` (feature `reqwest`); hedging is their `http::Settings::hedging` setting |
//! | retry gRPC as A6 says, from a service config | `grpc::RetryLayer` (feature `grpc`), `config::ServiceConfig` (feature `serde`) |
//! | shed load on the server, retries first | [`limit`], `tower::ShedLayer`, `tower::DeadlineLayer` |
//! | shed the least important work first, or when the CPU runs hot | [`priority`] (levels, `x-criticality`), `tower::ShedBuilder::priorities`, [`limit::CpuTrigger`] |
//! | drive the engine from my own front-end | [`Policy::start_attempt`], [`Policy::decide`] with a [`Call`] and a [`Failure`] → [`Decision`] |
//! | see what retries do | [`Observer`], [`Event`]; [`export`] (metrics, tracing, in-process stats, the retry-ratio SLI) |
//! | jitter scheduled work (TTLs, ticks, reconnects) | [`scheduled`] |
//! | test with virtual time and seeded randomness | [`time`] (`ManualClock`), [`random`] (`FastRng`) |
//!
//! The vocabulary every part speaks is at the root: [`Outcome`],
//! [`Failure`], [`Class`], [`Hint`], [`Idempotency`], [`Decision`],
//! [`StopReason`], [`NotRetried`], and the errors [`RetryError`] and
//! [`ConfigError`]. Every other item lives under one module named for its
//! concept ([`classify`], [`hint`], [`deadline`], [`exec`], …), reachable
//! by that one path.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs`: every item behind a feature then says
// which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
// Every example a user copies compiles without a warning: an unused
// import in one (the README's once had one) fails its doc test.
#![doc(test(attr(deny(unused_imports))))]

mod a6;
mod adaptive;
mod backoff;
mod breaker;
pub mod budget;
mod call;
pub mod classify;
mod clock;
#[cfg(feature = "serde")]
pub mod config;
pub mod deadline;
mod describe;
mod drive;
mod error;
mod event;
pub mod exec;
pub mod export;
#[cfg(any(feature = "grpc", feature = "serde"))]
pub mod grpc;
mod guard;
mod hedge;
pub mod hint;
#[cfg(feature = "http")]
pub mod http;
mod latency;
pub mod limit;
#[cfg(feature = "opentelemetry")]
mod otel;
mod outcome;
mod policy;
pub mod priority;
#[cfg(feature = "reqwest")]
pub mod reqwest;
mod rng;
pub mod scheduled;
mod sli;
mod sync;
mod throttle;
#[cfg(feature = "tower")]
pub mod tower;
mod window;

pub use backoff::{Backoff, Jitter};
pub use breaker::Breaker;
pub use call::Call;
pub use error::{ConfigError, RetryError};
pub use event::{Event, Observer};
pub use exec::future::AsyncRetryExt;
pub use exec::hedge::HedgeExt;
pub use exec::sync::{RetryAttemptExt, RetryExt};
pub use hedge::{HedgeDelay, HedgePolicy};
pub use outcome::{Class, Decision, Failure, Hint, Idempotency, NotRetried, Outcome, StopReason};
pub use policy::{Policy, PolicyBuilder};
pub use throttle::Throttle;

/// The shared guardrails' secondary types: builders, refusals, the breaker's
/// state, and the [`Guardrail`](guardrails::Guardrail) trait with which a
/// policy consults them. [`Breaker`], [`Throttle`] and the [`budget`]s are
/// the guardrails themselves; [`Guardrails`](guardrails::Guardrails)
/// combines them.
pub mod guardrails {
    pub use crate::adaptive::{is_throttling_error_code, AdaptiveLimiter, LimiterSnapshot};
    #[cfg(feature = "tower")]
    pub use crate::breaker::BreakerAdmin;
    pub use crate::breaker::{BreakerConfig, BreakerControl, BreakerOpen, Permit, Transition};
    pub use crate::event::BreakerState;
    pub use crate::guard::{Guardrail, Guardrails, Refusal, Ticket};
    pub use crate::throttle::ThrottleConfig;
}

/// Hedged requests' secondary types: the builder, and the sans-IO protocol
/// ([`HedgedCall`](hedging::HedgedCall) driven by
/// [`HedgePolicy::poll`] and [`HedgePolicy::report`]) a front-end speaks.
pub mod hedging {
    pub use crate::hedge::{HedgePolicyConfig, HedgeStep, HedgedCall, MAX_HEDGE_ATTEMPTS};
}

/// Time as the engine reads it: the [`Clock`](time::Clock) seam, the real
/// monotonic clock and a manual one for tests and simulations.
pub mod time {
    pub use crate::clock::{Clock, ManualClock, MonotonicClock};
}

/// Randomness as the engine draws it: the
/// [`RandomSource`](random::RandomSource) seam and the fast, seedable
/// generator every call gets by default.
pub mod random {
    pub use crate::rng::{FastRng, RandomSource};
}

/// The header parsers one by one, for the fuzz targets (`cargo fuzz` builds
/// with `--cfg fuzzing`); not part of the API, which reads them through the
/// transports' fact readers.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    use std::time::{Duration, SystemTime};

    use crate::hint::{InvalidHint, RetryAfter};
    use crate::Hint;

    pub fn format_timeout_ms(remaining: Duration) -> String {
        crate::deadline::format_timeout_ms(remaining)
    }
    pub fn parse_timeout_ms(value: &str) -> Option<Duration> {
        crate::deadline::parse_timeout_ms(value)
    }
    pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
        crate::deadline::parse_grpc_timeout(value)
    }
    pub fn parse_pushback(value: &str) -> Hint {
        crate::hint::parse_pushback(value)
    }
    pub fn parse_retry_after(value: &str) -> Result<RetryAfter, InvalidHint> {
        crate::hint::parse_retry_after(value)
    }
    pub fn retry_after_hint(value: &str, now: SystemTime) -> Hint {
        crate::hint::retry_after_hint(value, now)
    }
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The examples of `docs/library.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDoctests;

/// The examples of `docs/hedging.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/hedging.md")]
pub struct HedgingDoctests;

/// The examples of `docs/grpc.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/grpc.md")]
pub struct GrpcDoctests;

/// The examples of `docs/fleet.md`, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/fleet.md")]
pub struct FleetDoctests;
