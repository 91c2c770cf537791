//! The crate's integration tests in one binary: each file is a module, so
//! the crate graph is linked once instead of once per file.

#[path = "support/nginx.rs"]
mod nginx;

mod proxy_failover;
mod proxy_nginx;
mod proxy_streams;
