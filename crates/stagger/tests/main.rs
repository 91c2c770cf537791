//! The crate's integration tests in one binary: each file is a module, so the crate graph is
//! linked once instead of once per file. Files that must run in a process of their own are
//! separate `[[test]]` targets in Cargo.toml, each with its reason.

#[cfg(any(
    all(feature = "reqwest", feature = "tower"),
    all(feature = "tower", feature = "serde")
))]
#[allow(unused_imports)]
mod common;
#[allow(unused_imports)]
mod grpc_scripted;
#[cfg(all(feature = "grpc", feature = "serde"))]
#[allow(unused_imports)]
mod grpc_support;
#[cfg(all(feature = "grpc", feature = "serde"))]
#[allow(unused_imports)]
mod interop;

#[cfg(all(feature = "grpc", feature = "serde"))]
mod a6_regressions;
mod adaptive_convergence;
mod adaptive_differential;
mod backoff_props;
mod breaker;
mod breaker_admin;
mod breaker_controls;
mod breaker_controls_metrics;
mod budgets;
mod counts_against;
#[cfg(feature = "tower")]
mod cpu_trigger;
mod doc_names;
mod duration_props;
mod engine;
mod engine_protocol;
mod exec;
mod fleet_dashboard;
mod floor_plan;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod grpc_channel;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod grpc_differential;
mod grpc_hedging;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod grpc_interop;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod grpc_rules;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod grpc_tonic;
mod guardrails;
mod hedges_won;
#[cfg(feature = "tower")]
mod http_hint_props;
#[cfg(feature = "metrics")]
mod metrics_contract;
#[cfg(all(feature = "reqwest", feature = "tower"))]
mod one_layer;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod one_loop;
#[cfg(feature = "http")]
mod openai_differential;
#[cfg(feature = "tower")]
mod pacing;
#[cfg(feature = "serde")]
mod policy_file_props;
#[cfg(all(
    feature = "tower",
    feature = "reqwest",
    feature = "grpc",
    feature = "serde"
))]
mod priority_propagation;
mod priority_props;
#[cfg(all(feature = "reqwest", feature = "tower"))]
mod reqwest_client;
#[cfg(feature = "reqwest")]
mod reqwest_hedge;
#[cfg(all(feature = "serde", feature = "tower"))]
mod rulebook;
#[cfg(feature = "tower")]
mod server_hints;
#[cfg(all(feature = "reqwest", feature = "tower"))]
mod server_layers;
#[cfg(feature = "serde")]
mod service_config;
#[cfg(feature = "serde")]
mod service_config_props;
#[cfg(feature = "tower")]
mod shed_limiter;
#[cfg(feature = "tower")]
mod shed_priority;
mod sli;
#[cfg(all(feature = "serde", feature = "tower"))]
mod tower_client;
#[cfg(feature = "tower")]
mod tower_hedge;
