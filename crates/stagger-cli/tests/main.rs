//! The crate's integration tests in one binary: each file is a module, so the crate graph is
//! linked once instead of once per file. Files that must run in a process of their own are
//! separate `[[test]]` targets in Cargo.toml, each with its reason.

#[allow(unused_imports)]
mod common;
#[allow(unused_imports)]
#[path = "../../stagger/tests/grpc_support/mod.rs"]
mod grpc_support;
#[allow(unused_imports)]
#[path = "../../stagger/tests/interop/mod.rs"]
mod interop;
#[allow(unused_imports)]
mod lab_util;
#[allow(dead_code, unused_imports)]
mod support;
#[allow(dead_code, unused_imports)]
#[path = "lab_browser/webdriver.rs"]
mod webdriver;

mod audit;
mod audit_ci;
mod audit_kinds;
mod audit_repo;
mod audit_sarif;
mod busy_port;
mod conventions;
mod grpc_health;
mod grpc_health_interop;
mod http;
mod http_curl;
mod http_hostile;
mod jitter;
mod lab_api;
mod lab_story;
mod run;
mod schedule;
