//! # stagger — retries that help a recovering dependency
//!
//! **The floor plan**, in import order (each part uses only those above it):
//!
//! | part | what it holds |
//! |---|---|
//! | the vocabulary, at the root | [`Outcome`], [`Failure`], [`StopReason`] … and the errors, how settings are put in words; [`hint`] (server hints), [`deadline`] (deadline propagation), [`classify`], [`Backoff`] and [`scheduled`] jitter, [`time`], [`random`], [`priority`] |
//! | [`guardrails`] | budgets, the breaker and its operator controls, the throttle, the adaptive limiter; the [`Observer`] seam and its [`Event`]s |
//! | the engine | [`Policy`], [`HedgePolicy`] ([`hedging`]), the per-call [`Call`], and the attempt loop every driver runs |
//! | `config` | service configs and policy files read into policies and the layers' settings (feature `serde`) |
//! | the fact readers | `http` and `grpc`: what an answer says, as the engine's facts |
//! | the drivers | `tower` (with the breaker's admin endpoint and `tower::grpc`, the layer for tonic channels), `reqwest`, [`exec`]: they send what the engine says and wait what it says |
//! | the server side | [`limit`] (adaptive concurrency limits, the CPU trigger), and `tower`'s shedding and deadline layers |
//! | observing | the retry-ratio SLI and the [`export`]s of the events (metrics, tracing, OpenTelemetry) |
//!
//! The engine and the guardrails never touch a socket, a runtime, a timer or
//! the system clock of their own accord: they are told the time and the
//! facts, and answer what to do next. The crate builds without any of its
//! transport features, and CI checks that it does.
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
//! | cap retries at a share of real traffic | [`guardrails::budget`] (`RatioBudget`, [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)'s `TokenBucket`, …) on [`PolicyBuilder::budget`] |
//! | stop calling a dependency that is plainly down | [`Breaker`], [`Throttle`]; their builders in [`guardrails`] |
//! | cut the latency tail without a storm | [`HedgePolicy`], [`HedgeDelay`], [`HedgeExt`]; the sans-IO protocol in [`hedging`] |
//! | retry (or hedge) HTTP through tower or reqwest | `tower::RetryLayer` (feature `tower`), `reqwest::RetryMiddleware` (feature `reqwest`); hedging is their `http::Settings::hedging` setting |
//! | retry gRPC as A6 says, from a service config | `tower::grpc::RetryLayer` (feature `grpc`), `config::ServiceConfig` (feature `serde`) |
//! | shed load on the server, retries first | [`limit`], `tower::ShedLayer`, `tower::DeadlineLayer` |
//! | shed the least important work first, or when the CPU runs hot | [`priority`] (levels, `x-criticality`), `tower::ShedBuilder::priorities`, [`limit::CpuTrigger`] |
//! | drive the engine from my own front-end | [`exec::Plan`] (`poll` → [`exec::Step`], `report`), or per attempt [`Policy::start_attempt`], [`Policy::decide`] with a [`Call`] and a [`Failure`] → [`Decision`] |
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

mod backoff;
pub mod classify;
#[cfg(feature = "serde")]
pub mod config;
mod engine;
pub mod exec;
#[cfg(any(feature = "grpc", feature = "serde", feature = "http"))]
pub mod grpc;
pub mod guardrails;
#[cfg(feature = "http")]
pub mod http;
pub mod limit;
mod observe;
mod outcome;
pub mod priority;
pub mod random;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod time;
#[cfg(feature = "tower")]
pub mod tower;

pub use backoff::scheduled;
pub use engine::hedging;
pub use observe::export;
pub use outcome::{deadline, hint};

pub use backoff::{Backoff, Jitter};
pub use engine::call::Call;
pub use engine::hedge::{HedgeDelay, HedgePolicy};
pub use engine::policy::{Policy, PolicyBuilder};
pub use exec::future::AsyncRetryExt;
pub use exec::hedge::HedgeExt;
pub use exec::sync::{RetryAttemptExt, RetryExt};
pub use guardrails::breaker::Breaker;
pub use guardrails::event::{Event, Observer};
pub use guardrails::throttle::Throttle;
pub use outcome::error::{ConfigError, RetryError};
pub use outcome::{Class, Decision, Failure, Hint, Idempotency, NotRetried, Outcome, StopReason};

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
