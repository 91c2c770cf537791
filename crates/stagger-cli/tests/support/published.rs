//! The folder of published third-party files beside the repository
//! (`shared/data/` next to the checkout), read by path and never copied in.
//!
//! Every test that reads a published file finds the folder here: when it is
//! absent the test says so and skips, and under CI (the `CI` variable set)
//! its absence fails the test instead of passing it silently.

use std::path::PathBuf;

/// The published folder `name` (for example `mesh-configs`), or `None`
/// when it is absent outside CI, after printing why the test skips.
///
/// # Panics
///
/// When the folder is absent and the `CI` environment variable is set.
pub fn folder(name: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data")
        .join(name);
    if dir.is_dir() {
        return Some(dir);
    }
    let why = format!(
        "the published folder {} is absent (it sits beside the checkout, in shared/data/{name})",
        dir.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why}; CI must have it");
    }
    eprintln!("skipped: {why}");
    None
}
