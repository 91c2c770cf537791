//! Test support shared by this crate's integration tests.

/// The published data folder, found as every crate's tests find it (one
/// file, in the library's tests).
#[path = "../../../stagger/tests/support/published.rs"]
pub mod published;
