//! Test support shared by this crate's integration tests.

/// The published data folder, found as every crate's tests find it (one
/// file, in the library's tests).
#[path = "../../../stagger/tests/support/published.rs"]
pub mod published;

/// A test's hold on the machine, released when it is dropped.
pub enum Turn {
    /// Alone: no other turn-taking test runs.
    Alone(#[allow(dead_code)] std::sync::RwLockWriteGuard<'static, ()>),
    /// Beside other quiet tests, never beside one that runs alone.
    Quiet(#[allow(dead_code)] std::sync::RwLockReadGuard<'static, ()>),
}

static FLOOR: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Takes the machine alone, for the tests whose load or numbers are the
/// point: the storms and game-days on real sockets, the fault proxy, signal
/// delivery, the browser and Prometheus, and the CPU-heavy simulations.
/// They run one at a time and beside no other test of the binary, as they
/// did when each suite was a binary of its own, run after the rest. A test
/// that panicked leaves the floor usable.
pub fn turn() -> Turn {
    Turn::Alone(FLOOR.write().unwrap_or_else(|e| e.into_inner()))
}

/// Takes the machine beside the binary's other quick tests (every test
/// that is not a storm takes it), never beside one that runs alone: a test
/// that times its own run (a timeout, a sleep, a deadline) is not slowed by
/// a storm, and a storm's numbers are not moved by the quick tests.
pub fn quiet() -> Turn {
    Turn::Quiet(FLOOR.read().unwrap_or_else(|e| e.into_inner()))
}
