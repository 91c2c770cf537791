//! Test support shared by this crate's integration tests.

/// The published data folder, found as every crate's tests find it (one
/// file, in the library's tests).
#[path = "../../../stagger/tests/support/published.rs"]
pub mod published;

/// A test's turn on the machine, held until it is dropped.
pub struct Turn(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

/// Takes the turn that the tests whose numbers are timings or rates share:
/// the storms and game-days on real sockets, the fault proxy, signal
/// delivery, the browser and Prometheus, and the CPU-heavy simulations
/// that would take their cores. Those run one at a time, so none measures
/// another; the quick tests of the binary run beside them, as they did
/// when each suite was a binary of its own (and the fault proxy's suites
/// pass beside two saturated CPUs in `.ci/under-load`). A test that
/// panicked leaves the turn usable.
pub fn turn() -> Turn {
    static FLOOR: std::sync::Mutex<()> = std::sync::Mutex::new(());
    Turn(FLOOR.lock().unwrap_or_else(|e| e.into_inner()))
}
