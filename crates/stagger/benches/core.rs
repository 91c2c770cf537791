//! Core overheads, stagger and its peers side by side in one run.
//!
//! cargo bench -p stagger --bench core -- --warm-up-time 1 --measurement-time 3
//!
//! Groups: the success path of the blocking and async executors against a
//! plain call; the extra cost of a retry without sleeping; the cost of one
//! full-jitter delay.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use stagger::random::FastRng;
use stagger::{AsyncRetryExt, Backoff, Policy, RetryExt};

/// Polls a future that completes without waking to completion.
#[inline(always)]
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn success_sync(c: &mut Criterion) {
    let mut g = c.benchmark_group("success_sync");
    let policy = Policy::default();
    g.bench_function("plain call", |b| b.iter(|| Ok::<u64, ()>(black_box(1))));
    g.bench_function("stagger", |b| {
        b.iter(|| (|| Ok::<u64, ()>(black_box(1))).retry(&policy).call())
    });
    g.bench_function("backon", |b| {
        b.iter(|| {
            backon::BlockingRetryable::retry(
                || Ok::<u64, ()>(black_box(1)),
                backon::ExponentialBuilder::default(),
            )
            .call()
        })
    });
    g.bench_function("retry", |b| {
        b.iter(|| {
            retry::retry(retry::delay::Exponential::from_millis(100).take(2), || {
                Ok::<u64, ()>(black_box(1))
            })
        })
    });
    g.bench_function("backoff", |b| {
        b.iter(|| {
            backoff::retry(backoff::ExponentialBackoff::default(), || {
                Ok::<u64, backoff::Error<()>>(black_box(1))
            })
        })
    });
    g.finish();
}

fn success_async(c: &mut Criterion) {
    let mut g = c.benchmark_group("success_async");
    let policy = Policy::default();
    g.bench_function("plain call", |b| {
        b.iter(|| block_on(async { Ok::<u64, ()>(black_box(1)) }))
    });
    g.bench_function("stagger", |b| {
        b.iter(|| {
            block_on(
                (|| async { Ok::<u64, ()>(black_box(1)) })
                    .retry(&policy)
                    .sleep(|_d: Duration| async {})
                    .call(),
            )
        })
    });
    g.bench_function("backon", |b| {
        b.iter(|| {
            block_on(
                backon::Retryable::retry(
                    || async { Ok::<u64, ()>(black_box(1)) },
                    backon::ExponentialBuilder::default(),
                )
                .sleep(|_d: Duration| async {}),
            )
        })
    });
    g.bench_function("tokio-retry2", |b| {
        b.iter(|| {
            block_on(tokio_retry2::Retry::spawn(
                tokio_retry2::strategy::ExponentialBackoff::from_millis(100).take(2),
                || async { Ok::<u64, tokio_retry2::RetryError<()>>(black_box(1)) },
            ))
        })
    });
    g.finish();
}

/// `fails` failures then a success, no real sleeping. The cost of one retry
/// is the difference between 10 and 1 failures, divided by 9 (the fixed
/// cost of a call cancels out).
fn retries(c: &mut Criterion, fails: u32) {
    let mut g = c.benchmark_group(format!("retries_no_sleep_x{fails}"));
    let policy = Policy::builder()
        .max_attempts(fails + 1)
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .build()
        .unwrap();
    g.bench_function("stagger", |b| {
        b.iter(|| {
            let mut n = 0;
            (|| {
                n += 1;
                if n <= fails {
                    Err(())
                } else {
                    Ok(black_box(n))
                }
            })
            .retry(&policy)
            .sleep(|_d| {})
            .call()
        })
    });
    g.bench_function("backon", |b| {
        b.iter(|| {
            let mut n = 0;
            backon::BlockingRetryable::retry(
                || {
                    n += 1;
                    if n <= fails {
                        Err(())
                    } else {
                        Ok(black_box(n))
                    }
                },
                backon::ExponentialBuilder::default()
                    .with_min_delay(Duration::ZERO)
                    .with_jitter()
                    .with_max_times(fails as usize),
            )
            .sleep(|_d| {})
            .call()
        })
    });
    g.bench_function("retry", |b| {
        b.iter(|| {
            let mut n = 0;
            retry::retry(retry::delay::NoDelay.take(fails as usize), || {
                n += 1;
                if n <= fails {
                    Err(())
                } else {
                    Ok(black_box(n))
                }
            })
        })
    });
    g.finish();
}

fn one_retry(c: &mut Criterion) {
    retries(c, 1)
}

fn ten_retries(c: &mut Criterion) {
    retries(c, 10)
}

fn full_jitter_delay(c: &mut Criterion) {
    let mut g = c.benchmark_group("full_jitter_delay");
    let backoff = Backoff::new();
    let mut rng = FastRng::seeded(1);
    let mut n = 0u32;
    g.bench_function("stagger", |b| {
        b.iter(|| {
            n = n % 8 + 1;
            backoff.delay(black_box(n), None, &mut rng)
        })
    });
    let mut it = backon::BackoffBuilder::build(
        backon::ExponentialBuilder::default()
            .with_jitter()
            .without_max_times(),
    );
    g.bench_function("backon", |b| b.iter(|| it.next()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    {
        use tower::retry::backoff::{Backoff as _, ExponentialBackoffMaker, MakeBackoff};
        let mut maker = ExponentialBackoffMaker::new(
            Duration::from_millis(100),
            Duration::from_secs(10),
            1.0,
            tower::util::rng::HasherRng::default(),
        )
        .unwrap();
        let mut backoff = maker.make_backoff();
        g.bench_function("tower", |b| b.iter(|| backoff.next_backoff()));
    }
    g.finish();
}

criterion_group!(
    benches,
    success_sync,
    success_async,
    one_retry,
    ten_retries,
    full_jitter_delay
);
criterion_main!(benches);
