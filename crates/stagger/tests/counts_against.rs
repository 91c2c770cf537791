//! One rule for which failures count against the dependency: budgets, the
//! breaker and adaptive throttling read `Failure::counts_against_dependency`
//! and agree on every kind of failure, the awkward one included — a
//! permanent error the server marks "do not retry". gRPC's A6 states the
//! rule for its throttling: "The only RPCs that are counted as failures for
//! the throttling policy are RPCs that fail with a status code that
//! qualifies as a retryable or non-fatal status code, or that receive a
//! pushback response indicating not to retry"
//! (<https://github.com/grpc/proposal/blob/master/A6-client-retries.md#throttling-retry-attempts-and-hedged-rpcs>).

use std::time::{Duration, Instant};

use stagger::guardrails::{BreakerConfig, ThrottleConfig};
use stagger::{Breaker, Class, Failure, Hint, Outcome, Throttle};

fn kinds() -> Vec<(&'static str, Failure)> {
    vec![
        ("transient", Failure::transient()),
        ("unknown", Failure::timeout()),
        ("hint-only", Failure::new(Class::OnlyWithHint)),
        ("permanent", Failure::permanent()),
        (
            "permanent, do not retry",
            Failure::permanent().with_hint(Hint::DoNotRetry),
        ),
        ("cancelled", Failure::new(Class::Cancelled)),
        (
            "cancelled, do not retry",
            Failure::new(Class::Cancelled).with_hint(Hint::DoNotRetry),
        ),
    ]
}

#[test]
fn budgets_breaker_and_throttle_count_the_same_failures_against_the_dependency() {
    let now = Instant::now();
    for (name, failure) in kinds() {
        let counts = failure.counts_against_dependency();

        let breaker = Breaker::new(BreakerConfig::default()).unwrap();
        let permit = breaker.acquire(now).unwrap();
        breaker.record(permit, &Outcome::Failure(failure), None, now);
        let (calls, failures) = breaker.counts(now);
        if failure.class == Class::Cancelled {
            assert_eq!(
                failures, 0,
                "{name}: a cancellation is not the breaker's business"
            );
        } else {
            assert_eq!(calls, 1, "{name}");
            assert_eq!(failures == 1, counts, "{name}: breaker disagrees");
        }

        let throttle = Throttle::new(ThrottleConfig {
            window: Duration::from_secs(60),
            ..Default::default()
        })
        .unwrap();
        throttle.record(&Outcome::Failure(failure), now);
        let (_, accepts) = throttle.counts(now);
        assert_eq!(accepts == 0, counts, "{name}: throttle disagrees");
    }
}
