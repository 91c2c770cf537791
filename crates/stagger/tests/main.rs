//! The crate's integration tests in one binary: each file is a module, so the crate graph is
//! linked once instead of once per file. Files that must run in a process of their own are
//! separate `[[test]]` targets in Cargo.toml, each with its reason.

#[cfg(any(
    all(feature = "reqwest", feature = "tower"),
    all(feature = "tower", feature = "reqwest"),
    all(
        feature = "tower",
        feature = "reqwest",
        feature = "grpc",
        feature = "serde"
    ),
    all(feature = "tower", feature = "serde")
))]
#[allow(dead_code, unused_imports)]
mod common;
#[allow(dead_code, unused_imports)]
mod grpc_scripted;
#[cfg(any(
    all(feature = "grpc", feature = "serde"),
    all(
        feature = "tower",
        feature = "reqwest",
        feature = "grpc",
        feature = "serde"
    )
))]
#[allow(dead_code, unused_imports)]
mod grpc_support;
#[cfg(any(all(feature = "grpc", feature = "serde")))]
#[allow(dead_code, unused_imports)]
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
#[cfg(all(feature = "tower"))]
mod cpu_trigger;
mod doc_names;
mod duration_props;
mod engine;
mod exec;
mod fleet_dashboard;
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
#[cfg(all(feature = "tower"))]
mod http_hint_props;
#[cfg(all(feature = "metrics"))]
mod metrics_contract;
#[cfg(all(feature = "tower", feature = "reqwest"))]
mod one_layer;
#[cfg(all(feature = "grpc", feature = "serde"))]
mod one_loop;
#[cfg(all(feature = "http"))]
mod openai_differential;
#[cfg(all(feature = "serde"))]
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
#[cfg(all(feature = "reqwest"))]
mod reqwest_hedge;
#[cfg(all(feature = "tower", feature = "serde"))]
mod rulebook;
#[cfg(all(feature = "tower"))]
mod server_hints;
#[cfg(all(feature = "tower", feature = "reqwest"))]
mod server_layers;
#[cfg(all(feature = "serde"))]
mod service_config;
#[cfg(all(feature = "serde"))]
mod service_config_props;
#[cfg(all(feature = "tower"))]
mod shed_limiter;
#[cfg(all(feature = "tower"))]
mod shed_priority;
mod sli;
#[cfg(all(feature = "tower", feature = "serde"))]
mod tower_client;
#[cfg(all(feature = "tower"))]
mod tower_hedge;
