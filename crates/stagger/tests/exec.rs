//! The blocking and async executors, with sleepers that never sleep.

use stagger::Backoff;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use stagger::time::ManualClock;
use stagger::{AsyncRetryExt, Class, Failure, Hint, Jitter, Policy, RetryExt, StopReason};

const MS: Duration = Duration::from_millis(1);

/// Drives a future that never needs waking (our sleepers are instant).
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("future did not finish");
}

fn fixed(attempts: u32) -> Policy {
    Policy::builder()
        .max_attempts(attempts)
        .backoff(Backoff {
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

#[test]
fn fails_twice_then_succeeds_in_three_attempts() {
    let policy = fixed(5);
    let slept = RefCell::new(vec![]);
    let mut n = 0;
    let report = (|| {
        n += 1;
        if n < 3 {
            Err(io::Error::from(io::ErrorKind::ConnectionReset))
        } else {
            Ok(n)
        }
    })
    .retry(&policy)
    .when_classified()
    .sleep(|d| slept.borrow_mut().push(d))
    .report();
    assert_eq!(report.reason, StopReason::Success);
    assert_eq!(report.attempts, 3);
    assert_eq!(report.result.unwrap(), 3);
    assert_eq!(*slept.borrow(), vec![100 * MS, 200 * MS]);
}

#[test]
fn permanent_error_stops_at_once_and_keeps_the_error() {
    let policy = fixed(5);
    let err = (|| Err::<(), _>(io::Error::new(io::ErrorKind::NotFound, "no such row")))
        .retry(&policy)
        .when_classified()
        .sleep(|_| panic!("must not sleep"))
        .call()
        .unwrap_err();
    assert_eq!(err.reason(), StopReason::NotRetryable);
    assert_eq!(err.attempts(), 1);
    assert_eq!(err.last().unwrap().to_string(), "no such row");
    assert!(err.to_string().contains("not_retryable"));
}

#[test]
fn exhausted_attempts_keep_the_last_error() {
    let policy = fixed(4);
    let mut n = 0;
    let err = (|| {
        n += 1;
        Err::<(), _>(format!("failure {n}"))
    })
    .retry(&policy)
    .sleep(|_| {})
    .call()
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::AttemptsExhausted);
    assert_eq!(err.attempts(), 4);
    assert_eq!(err.last().map(String::as_str), Some("failure 4"));
}

#[test]
fn notify_sees_attempt_delay_and_elapsed() {
    let policy = fixed(3);
    let clock = ManualClock::new();
    let seen = RefCell::new(vec![]);
    let _ = (|| {
        clock.advance(5 * MS);
        Err::<(), _>("busy")
    })
    .retry(&policy)
    .clock(clock.clone())
    .sleep(|d| clock.advance(d))
    .notify(|n: &stagger::exec::Notice<'_, (), &'static str>| {
        seen.borrow_mut()
            .push((n.attempt, n.delay, n.elapsed, n.error.copied()))
    })
    .call();
    assert_eq!(
        *seen.borrow(),
        vec![
            (1, 100 * MS, 5 * MS, Some("busy")),
            (2, 200 * MS, 110 * MS, Some("busy"))
        ]
    );
}

#[test]
fn ok_values_can_be_retried() {
    let policy = fixed(3);
    let mut statuses = vec![200, 503, 503]; // popped from the end
    let report = (|| Ok::<u16, ()>(statuses.pop().unwrap()))
        .retry(&policy)
        .retry_ok_if(|s: &u16| (*s >= 500).then_some(Class::Transient))
        .sleep(|_| {})
        .report();
    assert_eq!(report.attempts, 3);
    assert_eq!(report.reason, StopReason::Success);
    assert_eq!(report.result.unwrap(), 200);

    // When retries run out, the last value comes back with the reason.
    let report = (|| Ok::<u16, ()>(503))
        .retry(&policy)
        .retry_ok_if(|s: &u16| (*s >= 500).then_some(Class::Transient))
        .sleep(|_| {})
        .report();
    assert_eq!(report.reason, StopReason::AttemptsExhausted);
    assert_eq!(report.result.unwrap(), 503);
}

#[test]
fn deadline_stops_before_a_wait_that_cannot_fit() {
    let policy = fixed(10);
    let clock = ManualClock::new();
    let total = Rc::new(RefCell::new(Duration::ZERO));
    let err = (|| Err::<(), _>("down"))
        .retry(&policy)
        .clock(clock.clone())
        .timeout(Duration::from_millis(350))
        .sleep(|d| {
            *total.borrow_mut() += d;
            clock.advance(d)
        })
        .call()
        .unwrap_err();
    // 100 + 200 = 300 ms of waits fit; the 400 ms one does not.
    assert_eq!(err.reason(), StopReason::Deadline);
    assert_eq!(err.attempts(), 3);
    assert_eq!(*total.borrow(), 300 * MS);
    assert!(clock.elapsed() <= Duration::from_millis(350));
}

#[test]
fn hint_in_error_is_honoured() {
    let policy = fixed(2);
    let slept = RefCell::new(vec![]);
    let _ = (|| Err::<(), _>(7u16))
        .retry(&policy)
        .when(|_: &u16| Failure::transient().with_hint(Hint::RetryAfter(Duration::from_secs(3))))
        .sleep(|d| slept.borrow_mut().push(d))
        .call();
    let d = slept.borrow()[0];
    assert!(
        d >= Duration::from_secs(3) && d < Duration::from_secs(3) + 100 * MS,
        "{d:?}"
    );
}

#[test]
fn async_retries_until_success() {
    let policy = fixed(4);
    let mut n = 0;
    let slept = RefCell::new(vec![]);
    let report = block_on(
        (|| {
            n += 1;
            let v = n;
            async move {
                if v < 3 {
                    Err("busy")
                } else {
                    Ok(v)
                }
            }
        })
        .retry(&policy)
        .sleep(|d| {
            slept.borrow_mut().push(d);
            async {}
        })
        .report(),
    );
    assert_eq!(report.attempts, 3);
    assert_eq!(report.result.unwrap(), 3);
    assert_eq!(*slept.borrow(), vec![100 * MS, 200 * MS]);
}

#[test]
fn async_attempt_timeout_cuts_a_hung_attempt() {
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let timers = RefCell::new(vec![]);
    // Idempotent: a timeout (unknown result) is retried until attempts run out.
    let err = block_on(
        (|| std::future::pending::<Result<(), &str>>())
            .retry(&policy)
            .idempotent(true)
            .sleep(|d| {
                timers.borrow_mut().push(d);
                async {}
            })
            .call(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::AttemptsExhausted);
    assert_eq!(err.attempts(), 3);
    assert!(err.timed_out());
    assert!(err.last().is_none());
    // Three attempt timers of 1 s, two zero waits between them.
    assert_eq!(
        timers
            .borrow()
            .iter()
            .filter(|d| **d == Duration::from_secs(1))
            .count(),
        3
    );

    // Not idempotent: the unknown result is not retried.
    let err = block_on(
        (|| std::future::pending::<Result<(), &str>>())
            .retry(&policy)
            .sleep(|_| async {})
            .call(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::NotRetryable);
    assert_eq!(err.attempts(), 1);
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn tokio_sleeper_is_the_default_with_the_feature() {
    let policy = Policy::builder()
        .backoff(Backoff {
            base: Duration::from_millis(1),
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let mut n = 0;
    let v = (|| {
        n += 1;
        let v = n;
        async move {
            if v < 2 {
                Err("busy")
            } else {
                Ok(v)
            }
        }
    })
    .retry(&policy)
    .call()
    .await
    .unwrap();
    assert_eq!(v, 2);
}

/// Dropping an async call while its attempt is in flight frees a breaker's
/// half-open probe slot at once (not after the probe timeout).
#[test]
fn dropping_an_async_call_mid_attempt_frees_the_probe_slot() {
    use stagger::guardrails::BreakerConfig;
    use stagger::Breaker;
    let clock = ManualClock::new();
    let breaker = Breaker::new(BreakerConfig {
        min_calls: 1,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder()
        .max_attempts(1)
        .breaker(breaker.clone())
        .build()
        .unwrap();
    // One failure trips the breaker; after the open period it is half-open.
    let _ = (|| Err::<(), _>("down"))
        .retry(&policy)
        .clock(clock.clone())
        .sleep(|_| {})
        .call();
    assert_eq!(breaker.state(), stagger::guardrails::BreakerState::Open);
    clock.advance(Duration::from_secs(7));
    {
        let fut = (|| std::future::pending::<Result<(), &str>>())
            .retry(&policy)
            .clock(clock.clone())
            .sleep(|_d: Duration| std::future::pending::<()>())
            .call();
        let mut fut = pin!(fut);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(breaker.probes_in_flight(), 1, "the probe is in flight");
    } // dropped here
    assert_eq!(
        breaker.probes_in_flight(),
        0,
        "dropping the call freed the probe"
    );
    let v = (|| Ok::<u8, ()>(1))
        .retry(&policy)
        .clock(clock.clone())
        .call();
    assert_eq!(v.unwrap(), 1);
}

/// Review regression: an open breaker's `retry_in` reaches the caller.
#[test]
fn breaker_open_error_says_when_to_come_back() {
    use stagger::guardrails::BreakerConfig;
    use stagger::Breaker;
    let clock = ManualClock::new();
    let breaker = Breaker::new(BreakerConfig {
        min_calls: 1,
        open_jitter: 0.0,
        ..Default::default()
    })
    .unwrap();
    let policy = Policy::builder()
        .max_attempts(1)
        .breaker(breaker)
        .build()
        .unwrap();
    let _ = (|| Err::<(), _>("down"))
        .retry(&policy)
        .clock(clock.clone())
        .call();
    clock.advance(Duration::from_secs(1));
    let err = (|| Ok::<(), &str>(()))
        .retry(&policy)
        .clock(clock.clone())
        .call()
        .unwrap_err();
    assert_eq!(err.reason(), StopReason::BreakerOpen);
    assert_eq!(err.attempts(), 0);
    assert_eq!(err.retry_in(), Some(Duration::from_secs(4)));
}

#[test]
fn an_async_retry_waits_as_its_sleeper_says_not_as_the_clock_reads() {
    // Backoffs of 5 s and 10 s, slept by a sleeper that returns at once:
    // the one attempt loop takes the sleeper's word that the wait is over
    // rather than spinning until the monotonic clock agrees.
    let policy = Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_secs(5),
            jitter: Jitter::None,
            ..Backoff::new()
        })
        .build()
        .unwrap();
    let slept = RefCell::new(vec![]);
    let started = std::time::Instant::now();
    let report = block_on(
        (|| async { Err::<(), _>("busy") })
            .retry(&policy)
            .sleep(|d| {
                slept.borrow_mut().push(d);
                async {}
            })
            .report(),
    );
    assert_eq!(report.attempts, 3);
    assert_eq!(report.reason, StopReason::AttemptsExhausted);
    assert_eq!(
        *slept.borrow(),
        vec![Duration::from_secs(5), Duration::from_secs(10)]
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn async_notify_sees_each_rejected_value_and_error_before_its_wait() {
    let policy = fixed(4);
    /// Attempt, error, rejected value and wait, as the hook saw them.
    type Seen = (u32, Option<&'static str>, Option<u32>, Duration);
    let seen: RefCell<Vec<Seen>> = RefCell::new(vec![]);
    let mut n = 0;
    let report = block_on(
        (|| {
            n += 1;
            let v = n;
            async move {
                match v {
                    1 => Err("busy"),
                    _ => Ok(v),
                }
            }
        })
        .retry(&policy)
        .retry_ok_if(|v: &u32| (*v < 3).then_some(Class::Transient))
        .notify(|n: &stagger::exec::Notice<'_, u32, &'static str>| {
            seen.borrow_mut()
                .push((n.attempt, n.error.copied(), n.value.copied(), n.delay));
        })
        .sleep(|_d| async {})
        .report(),
    );
    assert_eq!(report.result.unwrap(), 3);
    assert_eq!(report.attempts, 3);
    assert_eq!(
        *seen.borrow(),
        vec![
            (1, Some("busy"), None, 100 * MS),
            (2, None, Some(2), 200 * MS)
        ]
    );
}

#[test]
fn a_blocking_sleeper_woken_by_a_shutdown_stops_the_call_as_cancelled() {
    struct Shutdown<'a>(&'a RefCell<u32>);
    impl stagger::exec::BlockingSleeper for Shutdown<'_> {
        fn sleep(&mut self, _d: Duration) {
            *self.0.borrow_mut() += 1;
        }
        fn interrupted(&self) -> bool {
            *self.0.borrow() >= 2
        }
    }
    let waits = RefCell::new(0);
    let mut calls = 0;
    let report = (|| {
        calls += 1;
        Err::<(), _>("busy")
    })
    .retry(&fixed(5))
    .sleep(Shutdown(&waits))
    .report();
    assert_eq!(report.reason, StopReason::Cancelled);
    assert_eq!(report.attempts, 2, "the second wait was cut short");
    assert_eq!(calls, 2);
    assert_eq!(report.result.unwrap_err().reason(), StopReason::Cancelled);
}

/// A closure that takes 400 ms and fails, under a 1 s deadline: the
/// typical-attempt estimate learns from failures too, so after two attempts
/// (800 ms and a wait) no third one starts that could not end in time. It
/// once learned from successes only and ran a third attempt to 1.3 s.
#[test]
fn a_slow_failing_closure_never_runs_past_its_deadline() {
    let policy = Policy::builder().max_attempts(10).build().unwrap();
    let clock = ManualClock::new();
    let starts = RefCell::new(vec![]);
    let report = (|| {
        starts.borrow_mut().push(clock.elapsed());
        clock.advance(400 * MS);
        Err::<(), _>("slow and failing")
    })
    .retry(&policy)
    .clock(clock.clone())
    .timeout(Duration::from_secs(1))
    .seed(3)
    .sleep(|d| clock.advance(d))
    .report();
    assert_eq!(report.reason, StopReason::Deadline);
    assert_eq!(
        report.attempts,
        2,
        "attempts began at {:?}",
        starts.borrow()
    );
    assert!(
        clock.elapsed() <= Duration::from_secs(1),
        "{:?}",
        clock.elapsed()
    );
}

/// The async twin: the attempts run on tokio's paused clock, so the check is
/// exact, not timed.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_async_slow_failing_closure_starts_no_attempt_it_cannot_finish() {
    struct Tokio;
    impl stagger::time::Clock for Tokio {
        fn now(&self) -> std::time::Instant {
            tokio::time::Instant::now().into_std()
        }
    }
    let policy = Policy::builder().max_attempts(10).build().unwrap();
    let t0 = tokio::time::Instant::now();
    let report = (|| async {
        tokio::time::sleep(400 * MS).await;
        Err::<(), _>("slow and failing")
    })
    .retry(&policy)
    .clock(Tokio)
    .timeout(Duration::from_secs(1))
    .seed(3)
    .report()
    .await;
    assert_eq!(report.reason, StopReason::Deadline);
    assert_eq!(report.attempts, 2);
    let took = t0.elapsed();
    assert!(took <= Duration::from_secs(1), "{took:?}");
}

/// A hung attempt cut by its timeout is an unknown result, which a call not
/// declared idempotent does not repeat: the error says so and names the
/// setting that would change it.
#[test]
fn a_timed_out_attempt_not_retried_names_the_timeout_and_idempotent() {
    let policy = Policy::builder()
        .max_attempts(10)
        .attempt_timeout(300 * MS)
        .build()
        .unwrap();
    let err = block_on(
        (|| std::future::pending::<Result<(), &str>>())
            .retry(&policy)
            .sleep(|_| async {})
            .call(),
    )
    .unwrap_err();
    assert_eq!(err.reason(), StopReason::NotRetryable);
    let said = err.to_string();
    assert!(said.contains("timed out"), "{said}");
    assert!(said.contains(".idempotent(true)"), "{said}");
}

/// The guarded preset on a fresh process: the budget has seen one request,
/// so it grants one retry; the error says why the second is refused.
#[test]
fn a_budget_stop_says_a_new_client_earns_retries_with_traffic() {
    let policy = Policy::guarded();
    let mut answers = [Err("503"), Err("429"), Ok(200)].into_iter();
    let err = (|| answers.next().unwrap())
        .retry(&policy)
        .sleep(|_| {})
        .call()
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (StopReason::Budget, 2));
    let said = err.to_string();
    assert!(
        said.contains("a new client earns retries with traffic"),
        "{said}"
    );
    assert!(said.ends_with("429"), "{said}");
}

/// The blocking twin: a closure that applies its attempt's timeout and
/// reports it as an I/O timeout (an unknown result) is not repeated unless
/// declared idempotent, and the error says so.
#[test]
fn a_blocking_timeout_not_retried_names_idempotent() {
    use stagger::RetryAttemptExt;
    let policy = Policy::builder()
        .max_attempts(10)
        .attempt_timeout(300 * MS)
        .build()
        .unwrap();
    let err = (|_: &stagger::exec::Attempt| Err::<(), _>(io::Error::from(io::ErrorKind::TimedOut)))
        .retry_with_attempt(&policy)
        .when_classified()
        .sleep(|_| {})
        .call()
        .unwrap_err();
    assert_eq!(
        (err.reason(), err.attempts()),
        (StopReason::NotRetryable, 1)
    );
    let said = err.to_string();
    assert!(said.contains(".idempotent(true)"), "{said}");
}
