//! The crate's integration tests in one binary: each file is a module, so the crate graph is
//! linked once instead of once per file. Files that must run in a process of their own are
//! separate `[[test]]` targets in Cargo.toml, each with its reason.

#[allow(dead_code, unused_imports)]
mod support;

mod audit;
mod audit_engine;
mod audit_objects;
mod audit_path;
mod audit_props;
mod audit_published;
mod audit_readers;
mod audit_regressions;
mod audit_repo;
mod audit_sizing;
mod checks;
mod lenient;
