//! The crate's integration tests in one binary: each file is a module, so the crate graph is
//! linked once instead of once per file. Every test takes a turn from `support` first: the storms
//! and game-days on real sockets, the browser and Prometheus take `support::storm` and run beside
//! each other (two at a time on two cores, as when each suite was a binary of its own); tests
//! that time their own run take `support::quiet`, shared with each other and never with a storm;
//! tests that time nothing and read no rate off the machine (usage errors, the audit, the
//! simulations in virtual time) take `support::any` and run beside either; the soak, judged by
//! its own memory and descriptors, takes `support::alone`.

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
#[path = "../../stagger-gameday/tests/support/nginx.rs"]
mod nginx;
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
mod gameday;
mod gameday_hosts;
mod gameday_limit;
mod gameday_long;
mod gameday_priority;
mod gameday_target;
mod grpc_health;
mod grpc_health_interop;
mod grpc_through_proxy;
mod http;
mod http_curl;
mod http_hostile;
mod idempotency_gameday;
mod jitter;
mod lab_api;
mod lab_browser;
mod lab_story;
mod prometheus_alert;
mod proxy;
mod run;
mod run_signals;
mod schedule;
mod simulate;
mod simulate_hedging;
mod simulate_server;
