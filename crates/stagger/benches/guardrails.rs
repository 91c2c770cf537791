//! Guardrails against their peers, in one run: median ns per operation with
//! 1 thread and with 2 threads hammering one shared instance.
//!
//! ```text
//! cargo bench -p stagger --bench guardrails -- --warm-up-time 1 --measurement-time 3
//! cargo bench -p stagger --bench guardrails -- --warm-up-time 1 --measurement-time 3 'breaker call by state|pacing vs withdraw'
//! ```
//!
//! Each measurement runs `iters` operations on every thread at once (they
//! start together behind a barrier) and reports the slowest thread's time
//! divided by `iters`: the latency of one operation while the other thread
//! does the same to the same instance. Our guardrails take `now` as an
//! argument (the engine reads the clock once per decision); they get a fixed
//! instant here, and the `+ Instant::now()` rows show the cost with a clock
//! read added. Peers read the clock themselves where they need it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use stagger::guardrails::budget::{
    Budget, QuotaBudget, QuotaBudgetConfig, RatioBudget, RatioBudgetConfig, RefillBudget,
    RefillBudgetConfig, TokenBucket,
};
use stagger::guardrails::{AdaptiveLimiter, BreakerConfig, Transition};
use stagger::{Breaker, Failure, Outcome};
use tower::retry::budget::{Budget as _, TpsBudget};

/// Runs `op` `iters` times on each of `threads` threads at once.
fn run<T: Sync>(threads: usize, iters: u64, shared: &T, op: &(impl Fn(&T) + Sync)) -> Duration {
    if threads == 1 {
        let start = Instant::now();
        for _ in 0..iters {
            op(black_box(shared));
        }
        return start.elapsed();
    }
    let barrier = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        op(black_box(shared));
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or_default()
    })
}

/// Measures `op` on a fresh instance from `make` with 1 thread, then on
/// another with 2 threads.
fn contended<T: Sync>(
    c: &mut Criterion,
    group: &str,
    name: &str,
    make: impl Fn() -> T,
    op: impl Fn(&T) + Sync,
) {
    let mut g = c.benchmark_group(group);
    for threads in [1usize, 2] {
        let shared = make();
        g.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
            b.iter_custom(|iters| run(threads, iters, &shared, &op))
        });
    }
    g.finish();
}

/// The system allocator, counting the bytes allocated while [`heap_bytes`]
/// measures (off otherwise, so the timed loops pay one relaxed load).
struct Measuring;

static MEASURING: AtomicBool = AtomicBool::new(false);
static BYTES: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Measuring {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MEASURING.load(Ordering::Relaxed) {
            BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Measuring = Measuring;

/// Builds a value and says how many heap bytes it holds: what the shared
/// state behind a handle costs, whoever wrote the type (no `footprint`
/// method of our own to trust).
fn heap_bytes<T>(make: impl FnOnce() -> T) -> (T, usize) {
    BYTES.store(0, Ordering::SeqCst);
    MEASURING.store(true, Ordering::SeqCst);
    let v = make();
    MEASURING.store(false, Ordering::SeqCst);
    (v, BYTES.load(Ordering::SeqCst))
}

fn sizes() {
    println!("size_of handles: RatioBudget {} B, TokenBucket {} B, RefillBudget {} B, QuotaBudget {} B, Breaker {} B",
        std::mem::size_of::<RatioBudget>(),
        std::mem::size_of::<TokenBucket>(),
        std::mem::size_of::<RefillBudget>(),
        std::mem::size_of::<QuotaBudget>(),
        std::mem::size_of::<Breaker>(),
    );
    println!(
        "heap behind them: ratio {} B, token_bucket {} B, refill {} B, quota {} B, breaker {} B (count window 100: {} B)",
        heap_bytes(RatioBudget::default).1,
        heap_bytes(TokenBucket::default).1,
        heap_bytes(RefillBudget::default).1,
        heap_bytes(QuotaBudget::default).1,
        heap_bytes(Breaker::default).1,
        heap_bytes(|| Breaker::new(BreakerConfig { count_window: Some(100), ..Default::default() }).unwrap()).1,
    );
    println!(
        "peers: tower TpsBudget {} B + {} B heap, failsafe StateMachine {} B + {} B heap, recloser Recloser {} B + {} B heap",
        std::mem::size_of::<TpsBudget>(),
        heap_bytes(TpsBudget::default).1,
        std::mem::size_of_val(&failsafe::Config::new().build()),
        heap_bytes(|| failsafe::Config::new().build()).1,
        std::mem::size_of::<recloser::Recloser>(),
        heap_bytes(|| recloser::Recloser::custom().build()).1,
    );
}

fn budgets(c: &mut Criterion) {
    sizes();
    let now = Instant::now();
    let failure = Failure::transient();

    // Deposits: what a budget earns from ordinary traffic (a request for
    // `ratio`, a success for the others; a full bucket stays full).
    contended(c, "deposit", "ratio", RatioBudget::default, |b| {
        b.on_request(black_box(now))
    });
    contended(
        c,
        "deposit",
        "ratio + Instant::now()",
        RatioBudget::default,
        |b| b.on_request(Instant::now()),
    );
    contended(c, "deposit", "token_bucket", TokenBucket::default, |b| {
        b.on_success(None, black_box(now))
    });
    contended(c, "deposit", "refill", RefillBudget::default, |b| {
        b.on_success(None, black_box(now))
    });
    contended(c, "deposit", "quota", QuotaBudget::default, |b| {
        b.on_success(None, black_box(now))
    });
    contended(c, "deposit", "tower TpsBudget", TpsBudget::default, |b| {
        b.deposit()
    });

    // Withdrawals that are granted: each budget is large enough never to
    // run dry during the run.
    contended(
        c,
        "withdraw",
        "ratio",
        || {
            RatioBudget::new(RatioBudgetConfig {
                floor: 1_000_000_000,
                floor_per_request: None,
                ..Default::default()
            })
            .unwrap()
        },
        |b| {
            black_box(b.try_withdraw(&failure, black_box(now)));
        },
    );
    contended(c, "withdraw", "token_bucket", TokenBucket::default, |b| {
        black_box(b.try_withdraw(&failure, black_box(now)));
    });
    contended(
        c,
        "withdraw",
        "refill",
        || {
            RefillBudget::new(RefillBudgetConfig {
                capacity: 1e12,
                ..Default::default()
            })
            .unwrap()
        },
        |b| {
            black_box(b.try_withdraw(&failure, black_box(now)));
        },
    );
    contended(
        c,
        "withdraw",
        "quota",
        || {
            QuotaBudget::new(QuotaBudgetConfig {
                capacity: u32::MAX,
                retry_cost: 1,
                ..Default::default()
            })
            .unwrap()
        },
        |b| {
            black_box(b.try_withdraw(&failure, black_box(now)));
        },
    );
    contended(
        c,
        "withdraw",
        "tower TpsBudget",
        || TpsBudget::new(Duration::from_secs(10), 1_000_000_000, 0.1),
        |b| {
            black_box(b.withdraw());
        },
    );

    // A refused withdrawal (the budget is dry): what a retry storm costs.
    contended(
        c,
        "withdraw refused",
        "ratio",
        || {
            RatioBudget::new(RatioBudgetConfig {
                floor: 0,
                ..Default::default()
            })
            .unwrap()
        },
        |b| {
            black_box(b.try_withdraw(&failure, black_box(now)));
        },
    );
    contended(
        c,
        "withdraw refused",
        "tower TpsBudget",
        || TpsBudget::new(Duration::from_secs(10), 0, 0.1),
        |b| {
            black_box(b.withdraw());
        },
    );
}

fn breakers(c: &mut Criterion) {
    let now = Instant::now();
    contended(
        c,
        "breaker closed call",
        "stagger Breaker",
        Breaker::default,
        |b| {
            if let Ok(p) = b.acquire(black_box(now)) {
                b.record(p, &Outcome::Success, None, black_box(now));
            }
        },
    );
    contended(
        c,
        "breaker closed call",
        "stagger Breaker + Instant::now()",
        Breaker::default,
        |b| {
            let now = Instant::now();
            if let Ok(p) = b.acquire(now) {
                b.record(p, &Outcome::Success, None, now);
            }
        },
    );
    contended(
        c,
        "breaker closed call",
        "stagger Breaker (count window)",
        || {
            Breaker::new(BreakerConfig {
                count_window: Some(100),
                ..Default::default()
            })
            .unwrap()
        },
        |b| {
            if let Ok(p) = b.acquire(black_box(now)) {
                b.record(p, &Outcome::Success, None, black_box(now));
            }
        },
    );
    contended(
        c,
        "breaker closed call",
        "failsafe",
        || failsafe::Config::new().build(),
        |b| {
            if b.is_call_permitted() {
                b.on_success();
            }
        },
    );
    contended(
        c,
        "breaker closed call",
        "recloser",
        recloser::Recloser::default,
        |r| {
            black_box(r.call(|| Ok::<(), ()>(())).is_ok());
        },
    );
}

/// A breaker call (acquire and record) in each state an operator can set,
/// beside the closed breaker's.
fn breaker_states(c: &mut Criterion) {
    let now = Instant::now();
    for (name, to) in [
        ("closed", None),
        ("disabled", Some(Transition::Disable)),
        ("metrics_only", Some(Transition::MetricsOnly)),
        ("forced_open", Some(Transition::ForceOpen)),
    ] {
        contended(
            c,
            "breaker call by state",
            name,
            || {
                let b = Breaker::default();
                if let Some(t) = to {
                    b.transition(t, now);
                }
                b
            },
            |b| {
                if let Ok(p) = b.acquire(black_box(now)) {
                    b.record(p, &Outcome::Success, None, black_box(now));
                }
            },
        );
    }
}

/// What pacing costs each attempt while nothing is throttled (the
/// adaptive limiter's success path), beside a ratio budget's granted
/// withdrawal; and the limiter once a throttle has enabled it.
fn adaptive(c: &mut Criterion) {
    let now = Instant::now();
    let failure = Failure::transient();
    contended(
        c,
        "pacing vs withdraw",
        "adaptive acquire (success path)",
        || AdaptiveLimiter::new(now),
        |l| {
            black_box(l.acquire(black_box(now))).ok();
        },
    );
    contended(
        c,
        "pacing vs withdraw",
        "adaptive acquire (enabled)",
        || {
            let l = AdaptiveLimiter::new(now);
            l.record(true, now);
            l
        },
        |l| {
            black_box(l.acquire(black_box(now))).ok();
        },
    );
    contended(
        c,
        "pacing vs withdraw",
        "adaptive record (success)",
        || AdaptiveLimiter::new(now),
        |l| l.record(false, black_box(now)),
    );
    contended(
        c,
        "pacing vs withdraw",
        "ratio withdraw",
        || {
            RatioBudget::new(RatioBudgetConfig {
                floor: 1_000_000_000,
                floor_per_request: None,
                ..Default::default()
            })
            .unwrap()
        },
        |b| {
            black_box(b.try_withdraw(&failure, black_box(now)));
        },
    );
}

fn reference(c: &mut Criterion) {
    contended(
        c,
        "reference",
        "one atomic fetch_add",
        || AtomicU64::new(0),
        |a| {
            a.fetch_add(1, Ordering::Relaxed);
        },
    );
}

criterion_group!(
    benches,
    reference,
    budgets,
    breakers,
    breaker_states,
    adaptive
);
criterion_main!(benches);
