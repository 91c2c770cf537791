//! The concurrency limiter's cost per request against the Rust ports of
//! Netflix's concurrency limits, in one run.
//!
//! ```text
//! cargo bench -p stagger --features tower --bench limiter -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Two levels, one thread, the limit never reached (the cost of admitting
//! and releasing, not of waiting):
//!
//! - `core`: admit one request, release it with a latency sample. Ours is
//!   synchronous and takes `now` from the caller: each row reads
//!   `Instant::now()` twice, as a server layer does. congestion-limiter's
//!   `Limiter` is an async trait (a boxed future per call), so its rows run
//!   on a current-thread tokio runtime; `async_noop` is that harness alone.
//! - `core/stagger_priority_aimd`: the same AIMD limiter deciding by
//!   priority (`try_acquire_as` with the default ceilings, a `sheddable`
//!   retry: the longest path through the ceilings) + `release`, beside
//!   `core/stagger_aimd`; `core/priority_cap` is the ceilings' arithmetic
//!   alone.
//! - `layer`: one request through the tower layer around a service that
//!   answers at once: our `ShedLayer::limited` (an `http::Request`, whose
//!   attempt and deadline headers it reads) against tower-acc's
//!   `ConcurrencyLimitLayer` (a unit request), both driven by
//!   `ready().await` then `call().await` on the same runtime;
//!   `layer/stagger_shed_aimd_header` is a request with `x-criticality:
//!   sheddable` through the AIMD layer that ignores it,
//!   `layer/stagger_shed_aimd_priorities` the same request through the
//!   layer shedding by priority, `_cpu` with an idle CPU trigger beside the
//!   limit (its per-request check) as well.

use std::convert::Infallible;
use std::hint::black_box;
use std::time::Instant;

use congestion_limiter::limiter::{DefaultLimiter, Limiter as _, Outcome as PeerOutcome};
use congestion_limiter::limits as peer;
use criterion::{criterion_group, criterion_main, Criterion};
use stagger::limit::{Aimd, Algorithm, Completion, CpuTrigger, Gradient, Limiter};
use stagger::priority::{Ceilings, Class, Priority};
use stagger::tower::ShedLayer;
use tower::{Layer, Service, ServiceExt};

fn ours(c: &mut Criterion, name: &str, limiter: Limiter) {
    c.bench_function(&format!("core/stagger_{name}"), |b| {
        b.iter(|| {
            let t = limiter.try_acquire(false, Instant::now()).unwrap();
            limiter.release(black_box(t), Completion::Served, Instant::now());
        })
    });
}

fn core(c: &mut Criterion) {
    ours(c, "static", Limiter::fixed(1000));
    let aimd = Limiter::builder(Aimd {
        initial: 1000,
        ..Aimd::new()
    })
    .build()
    .unwrap();
    ours(c, "aimd", aimd);
    let aimd = Limiter::builder(Aimd {
        initial: 1000,
        ..Aimd::new()
    })
    .build()
    .unwrap();
    let ceilings = Ceilings::default();
    let class = Class::new(Priority::SHEDDABLE, true);
    c.bench_function("core/stagger_priority_aimd", |b| {
        b.iter(|| {
            let t = aimd
                .try_acquire_as(black_box(class), &ceilings, Instant::now())
                .unwrap();
            aimd.release(black_box(t), Completion::Served, Instant::now());
        })
    });
    c.bench_function("core/priority_cap", |b| {
        b.iter(|| ceilings.cap(black_box(1000), black_box(class), black_box(0.2)))
    });
    let gradient = Limiter::builder(Gradient {
        initial: 1000,
        ..Gradient::new()
    })
    .seed(1)
    .build()
    .unwrap();
    ours(c, "gradient", gradient);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    c.bench_function("core/async_noop", |b| {
        b.to_async(&rt).iter(|| async { black_box(1u64) })
    });
    let aimd = DefaultLimiter::new(peer::Aimd::new_with_initial_limit(1000).with_max_limit(1000));
    c.bench_function("core/congestion_limiter_aimd", |b| {
        b.to_async(&rt).iter(|| async {
            let t = aimd.try_acquire().await.unwrap();
            black_box(aimd.release(t, Some(PeerOutcome::Success)).await)
        })
    });
    // Its `Gradient` cannot be measured: its moving average subtracts
    // durations, and panics ("overflow when subtracting durations") on the
    // first sample below the average once warmed up. Vegas, its other
    // latency-based limit, stands in.
    let vegas = DefaultLimiter::new(peer::Vegas::new_with_initial_limit(1000).with_max_limit(1000));
    c.bench_function("core/congestion_limiter_vegas", |b| {
        b.to_async(&rt).iter(|| async {
            let t = vegas.try_acquire().await.unwrap();
            black_box(vegas.release(t, Some(PeerOutcome::Success)).await)
        })
    });
}

/// One `sheddable` request (its header included) through the AIMD layer,
/// shedding by priority or not, with a CPU trigger or not.
fn layer_priorities(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    priorities: bool,
    cpu: Option<CpuTrigger>,
) {
    let answer = |_req| std::future::ready(Ok::<_, Infallible>(http::Response::new(())));
    let limiter = Limiter::builder(Aimd {
        initial: 1000,
        ..Aimd::new()
    })
    .build()
    .unwrap();
    let mut b = ShedLayer::limited(limiter);
    if priorities {
        b = b.priorities(Ceilings::default());
    }
    if let Some(t) = cpu {
        b = b.cpu(t);
    }
    let svc = b
        .build()
        .layer(tower::service_fn(move |r: http::Request<()>| answer(r)));
    let req = || {
        http::Request::builder()
            .header("x-criticality", "sheddable")
            .body(())
            .unwrap()
    };
    c.bench_function(name, |b| {
        b.to_async(rt).iter(|| {
            let mut svc = svc.clone();
            async move {
                let s = svc.ready().await.unwrap();
                black_box(s.call(req()).await.unwrap())
            }
        })
    });
}

fn layer(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let answer = |_req| std::future::ready(Ok::<_, Infallible>(http::Response::new(())));
    for (name, algorithm) in [
        (
            "aimd",
            Algorithm::Aimd(Aimd {
                initial: 1000,
                ..Aimd::new()
            }),
        ),
        (
            "gradient",
            Algorithm::Gradient(Gradient {
                initial: 1000,
                ..Gradient::new()
            }),
        ),
    ] {
        let limiter = Limiter::builder(algorithm).seed(1).build().unwrap();
        let svc = ShedLayer::limited(limiter)
            .build()
            .layer(tower::service_fn(move |r: http::Request<()>| answer(r)));
        c.bench_function(&format!("layer/stagger_shed_{name}"), |b| {
            b.to_async(&rt).iter(|| {
                let mut svc = svc.clone();
                async move {
                    let s = svc.ready().await.unwrap();
                    black_box(s.call(http::Request::new(())).await.unwrap())
                }
            })
        });
    }
    // A request with `x-criticality: sheddable` through the AIMD layer,
    // blind to it, shedding by it, and with an idle CPU trigger as well.
    layer_priorities(c, &rt, "layer/stagger_shed_aimd_header", false, None);
    layer_priorities(c, &rt, "layer/stagger_shed_aimd_priorities", true, None);
    let idle = CpuTrigger::builder().manual().unwrap();
    let name = "layer/stagger_shed_aimd_priorities_cpu";
    layer_priorities(c, &rt, name, true, Some(idle));
    let unit = |_req: ()| std::future::ready(Ok::<_, Infallible>(()));
    let aimd = tower_acc::ConcurrencyLimitLayer::new(
        tower_acc::Aimd::builder()
            .initial_limit(1000)
            .max_limit(1000)
            .build(),
    )
    .layer(tower::service_fn(unit));
    c.bench_function("layer/tower_acc_aimd", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = aimd.clone();
            async move {
                let s = svc.ready().await.unwrap();
                s.call(()).await.unwrap();
            }
        })
    });
    let gradient = tower_acc::ConcurrencyLimitLayer::new(
        tower_acc::Gradient2::builder()
            .initial_limit(1000)
            .max_limit(1000)
            .build(),
    )
    .layer(tower::service_fn(unit));
    c.bench_function("layer/tower_acc_gradient2", |b| {
        b.to_async(&rt).iter(|| {
            let mut svc = gradient.clone();
            async move {
                let s = svc.ready().await.unwrap();
                s.call(()).await.unwrap();
            }
        })
    });
}

criterion_group!(benches, core, layer);
criterion_main!(benches);
