//! Test support shared by this crate's integration tests.

/// The published data folder, found as every crate's tests find it (one
/// file, in the library's tests).
#[path = "../../../stagger/tests/support/published.rs"]
pub mod published;

/// What a test does to the machine, and so what it may run beside.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Quick, and may time its own run (a timeout, a sleep, a deadline):
    /// runs beside other quick tests, never beside a storm.
    Quiet,
    /// A storm or game-day on real sockets, a browser, a Prometheus: runs
    /// beside other storms (at most as many as the binary's test threads,
    /// two on a two-core machine, as when each suite was a binary of its
    /// own), never beside a quick test.
    Storm,
    /// Times nothing and reads no rate or count off the machine (a usage
    /// error, an audit, a simulation in virtual time): beside quick tests
    /// and storms alike, so a thread that reaches it during a storm is not
    /// left idle. Beside a storm it weighs what another storm would.
    Any,
    /// A test whose numbers are its own process's memory and descriptors
    /// over a minute (the soak): beside nothing.
    Alone,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Quiet, Kind::Storm, Kind::Any, Kind::Alone];

    /// Whether a test of this kind may run while one of `other` runs.
    fn beside(self, other: Kind) -> bool {
        use Kind::*;
        match (self, other) {
            (Alone, _) | (_, Alone) => false,
            (Any, _) | (_, Any) => true,
            (a, b) => a == b,
        }
    }
}

/// How many tests of each kind hold the floor, and which wait (by ticket,
/// in the order they came).
struct Floor {
    holding: [usize; 4],
    waiting: Vec<(u64, Kind)>,
    tickets: u64,
}

static FLOOR: std::sync::Mutex<Floor> = std::sync::Mutex::new(Floor {
    holding: [0; 4],
    waiting: Vec::new(),
    tickets: 0,
});
static CHANGED: std::sync::Condvar = std::sync::Condvar::new();

fn floor() -> std::sync::MutexGuard<'static, Floor> {
    // A test that panicked while holding the floor leaves it usable.
    FLOOR.lock().unwrap_or_else(|e| e.into_inner())
}

/// A test's hold on the machine, released when it is dropped.
pub struct Turn(Kind);

impl Drop for Turn {
    fn drop(&mut self) {
        floor().holding[self.0 as usize] -= 1;
        CHANGED.notify_all();
    }
}

impl Floor {
    /// The test with `ticket`, of `kind`, may start: everything running may
    /// run beside it, and no test that came before it waits for a kind it
    /// would keep out (so each kind gets its turn, and the oldest waiter
    /// waits only for what runs).
    fn fits(&self, ticket: u64, kind: Kind) -> bool {
        let beside_running = Kind::ALL
            .iter()
            .all(|&k| self.holding[k as usize] == 0 || kind.beside(k));
        let kept_out = self
            .waiting
            .iter()
            .any(|&(t, k)| t < ticket && !kind.beside(k));
        beside_running && !kept_out
    }
}

fn take(kind: Kind) -> Turn {
    let mut f = floor();
    let ticket = f.tickets;
    f.tickets += 1;
    f.waiting.push((ticket, kind));
    while !f.fits(ticket, kind) {
        f = CHANGED.wait(f).unwrap_or_else(|e| e.into_inner());
    }
    f.waiting.retain(|&(t, _)| t != ticket);
    f.holding[kind as usize] += 1;
    drop(f);
    CHANGED.notify_all();
    Turn(kind)
}

/// The floor's rule, on floors built here rather than the binary's own.
#[test]
fn a_kind_starts_only_beside_what_it_may_run_beside_and_after_older_waiters() {
    use Kind::*;
    let floor = |running: &[Kind], waiting: &[(u64, Kind)]| {
        let mut f = Floor {
            holding: [0; 4],
            waiting: waiting.to_vec(),
            tickets: 10,
        };
        for &k in running {
            f.holding[k as usize] += 1;
        }
        f
    };
    // An empty floor takes anything; a kind joins its own.
    for k in Kind::ALL {
        assert!(floor(&[], &[]).fits(10, k));
    }
    assert!(floor(&[Quiet], &[]).fits(10, Quiet));
    assert!(floor(&[Storm], &[]).fits(10, Storm));
    // Storms and quick tests keep each other out; a usage error runs beside
    // both.
    assert!(!floor(&[Storm], &[]).fits(10, Quiet));
    assert!(!floor(&[Quiet], &[]).fits(10, Storm));
    assert!(floor(&[Storm], &[]).fits(10, Any));
    assert!(!floor(&[Any, Quiet], &[]).fits(10, Storm));
    assert!(floor(&[Any], &[]).fits(10, Quiet));
    assert!(floor(&[Any], &[]).fits(10, Storm));
    // Alone is alone, both ways.
    assert!(!floor(&[Any], &[]).fits(10, Alone));
    assert!(!floor(&[Alone], &[]).fits(10, Any));
    assert!(!floor(&[Alone], &[]).fits(10, Alone));
    // An older waiter of a kind that would keep this one out goes first; a
    // younger one does not hold an older back.
    assert!(!floor(&[Quiet], &[(3, Storm)]).fits(10, Quiet));
    assert!(floor(&[Quiet], &[(11, Storm)]).fits(10, Quiet));
    assert!(floor(&[], &[(3, Quiet)]).fits(10, Quiet));
    assert!(!floor(&[], &[(3, Alone)]).fits(10, Any));
}

/// Takes the machine beside the binary's other quick tests (every test
/// that is none of the kinds below takes it): a test that times its own
/// run is not slowed by a storm, and a storm's numbers are not moved by
/// the quick tests.
pub fn quiet() -> Turn {
    take(Kind::Quiet)
}

/// Takes the machine beside other storms only: the storms and game-days on
/// real sockets, the fault proxy, the browser and Prometheus.
pub fn storm() -> Turn {
    take(Kind::Storm)
}

/// Takes the machine beside any test but one that runs alone: a test that
/// times nothing and reads no rate or count off the machine (a usage error,
/// an audit, a simulation in virtual time).
pub fn any() -> Turn {
    take(Kind::Any)
}

/// Takes the machine alone, for the soak, whose numbers are its memory and
/// descriptors: a moment of CPU starvation beside it opens connections its
/// pool then keeps.
pub fn alone() -> Turn {
    take(Kind::Alone)
}
