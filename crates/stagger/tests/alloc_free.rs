//! The success path of both executors allocates nothing, and neither does a
//! blocking retry: counted with a global allocator wrapper.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use stagger::random::FastRng;
use stagger::{AsyncRetryExt, Backoff, Policy, RetryExt};

mod counting;

use counting::{allocations_during, Counting};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

// One test function so no other test thread allocates while we count.
#[test]
fn success_paths_and_blocking_retries_do_not_allocate() {
    let policy = Policy::default();
    let quick = Policy::builder()
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .max_attempts(5)
        .build()
        .unwrap();
    // Warm up thread-locals (the per-thread random stream) outside the count.
    let _ = (|| Err::<(), ()>(())).retry(&quick).sleep(|_| {}).call();

    let n = allocations_during(|| {
        for i in 0..1000u64 {
            let v = (|| Ok::<u64, ()>(i)).retry(&policy).call().unwrap();
            assert_eq!(v, i);
        }
    });
    assert_eq!(n, 0, "blocking success path allocated");

    let n = allocations_during(|| {
        for i in 0..1000u64 {
            let fut = (|| async move { Ok::<u64, ()>(i) })
                .retry(&policy)
                .sleep(|_d: Duration| async {})
                .call();
            assert_eq!(block_on(fut).unwrap(), i);
        }
    });
    assert_eq!(n, 0, "async success path allocated");

    let n = allocations_during(|| {
        let mut left = 3;
        let r = (|| {
            left -= 1;
            if left > 0 {
                Err(())
            } else {
                Ok(())
            }
        })
        .retry(&quick)
        .sleep(|_| {})
        .report();
        assert_eq!(r.attempts, 3);
    });
    assert_eq!(n, 0, "blocking retries allocated");

    let n = allocations_during(|| {
        let b = Backoff::new();
        let mut rng = FastRng::seeded(1);
        for k in 1..100 {
            let _ = b.delay(k, None, &mut rng);
        }
    });
    assert_eq!(n, 0, "delays allocated");
}
