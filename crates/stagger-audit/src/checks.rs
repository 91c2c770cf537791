//! Every check the audit makes, by its stable id: one line saying what
//! fails and the help a reader needs to fix it. Reports name findings by
//! these ids; `stagger audit --format sarif` lists them as its rules.
//!
//! ```
//! use stagger_audit::checks::{check, CHECKS};
//!
//! let c = check("no_budget").unwrap();
//! assert!(c.help.contains("retryThrottling"));
//! assert!(CHECKS.iter().all(|c| !c.summary.is_empty()));
//! ```

/// One check: its id, what fails, and how to fix it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    /// The stable id findings carry (`no_budget`, …).
    pub id: &'static str,
    /// What fails, in one sentence.
    pub summary: &'static str,
    /// Why it matters and what to change.
    pub help: &'static str,
}

/// The check with id `id`, if the audit makes one.
pub fn check(id: &str) -> Option<&'static Check> {
    CHECKS.iter().find(|c| c.id == id)
}

/// Every check, the one-file checklist first, then the call path's.
pub const CHECKS: &[Check] = &[
    Check {
        id: "non_transient_codes",
        summary: "It retries a failure that will not pass by itself.",
        help: "Retry only failures that go away on their own: gRPC UNAVAILABLE, RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED, HTTP 408, 429, 502, 503 and 504. A permanent failure retried is the same error several times over, and more load on a dependency that is already failing.",
    },
    Check {
        id: "attempts_high",
        summary: "More than 3 attempts per call.",
        help: "Every attempt above one multiplies the load a failing dependency sees, and layers multiply each other. Keep maxAttempts at 3 or fewer (gRPC silently caps it at 5) and let a budget, not the count, bound retries under an outage.",
    },
    Check {
        id: "no_max_attempts",
        summary: "A retryPolicy without maxAttempts.",
        help: "gRPC clients reject or ignore a retryPolicy without maxAttempts, so it makes one attempt; a client that retries until the method's timeout makes far more. Say maxAttempts explicitly.",
    },
    Check {
        id: "no_jitter",
        summary: "Retries without jitter.",
        help: "Without jitter, clients that failed together retry together, in waves that keep a recovering dependency down. Use full jitter (gRPC always jitters).",
    },
    Check {
        id: "no_backoff",
        summary: "Retries that do not back off.",
        help: "A multiplier of 1 or less, a cap not above the base, a zero base, or hedges sent at once: retries arrive as fast as failures. Grow the wait between attempts (multiplier 2, a cap above the base).",
    },
    Check {
        id: "no_budget",
        summary: "Nothing caps retries across calls.",
        help: "Per-call attempts do not bound the fleet's retry load when everything fails. Add retryThrottling to the gRPC service config, or a [budget] to the policy file, so retries stop once most calls fail.",
    },
    Check {
        id: "no_deadline",
        summary: "No deadline for the call.",
        help: "Without a timeout each retry can wait as long as the dependency hangs, and callers pile up. Give the method a timeout (a deadline in a policy file) that covers all of its attempts.",
    },
    Check {
        id: "retry_after_ignored",
        summary: "Retry-After hints stop the call instead of pacing it.",
        help: "Retry-After counts whole seconds; a max_retry_after under 1 s turns every hint into a give-up. Allow at least the longest hint the server sends.",
    },
    Check {
        id: "duplicate_layers",
        summary: "More than one layer of the path retries.",
        help: "Retries at several layers multiply: three layers of three tries make 27 attempts at the bottom. Retry at one layer, the one closest to the failure that knows which calls are safe to repeat.",
    },
    Check {
        id: "duplicate_names",
        summary: "A method named by more than one methodConfig entry.",
        help: "gRPC rejects a service config that names a method twice, so none of it applies. Name each method once.",
    },
    Check {
        id: "nonstandard_spelling",
        summary: "Keys or durations spelled another way than gRPC A6's.",
        help: "Keys in another case, snake_case, or durations such as .1s are read by some gRPC implementations and ignored or rejected by others. Use A6's spelling (camelCase keys, durations such as 0.1s).",
    },
    Check {
        id: "no_breaker",
        summary: "A policy file without a circuit breaker.",
        help: "A breaker stops calls to a dependency that keeps failing, which retries and budgets alone do not. Set breaker = true in the policy file.",
    },
    Check {
        id: "invalid",
        summary: "A value the system rejects.",
        help: "The named field holds a value the system's own reader rejects, so the config does not apply as written. Fix the field the message names.",
    },
    Check {
        id: "retries_at_several_layers",
        summary: "More than one layer of the call path retries the failure it sees.",
        help: "Retries multiply down a call path: the attempts at the bottom are the product of every layer's tries. Keep retries at one layer, the one closest to the failure that knows which calls are idempotent (usually a client, not the mesh), and turn the others off.",
    },
    Check {
        id: "mesh_default_retries",
        summary: "An Istio route without retries still retries.",
        help: "Istio gives a route without a retries block its default policy (2 retries, on the conditions the report lists), which multiplies with every retry above and below. Write retries explicitly, attempts: 0 where another layer retries.",
    },
    Check {
        id: "per_try_timeout_exceeds_deadline",
        summary: "A per-try timeout at or past the layer's own timeout or a deadline above it.",
        help: "When tries are slow, the whole call times out before a retry is sent, so the retries configured never happen. Make the per-try timeout a fraction of the overall timeout.",
    },
    Check {
        id: "retries_non_idempotent",
        summary: "A mesh retries failures that may come after the request was handled.",
        help: "Retrying on 5xx, gateway-error or reset for every method runs a handled POST again. Retry on connect-failure and refused-stream only, or limit the route to idempotent methods.",
    },
    Check {
        id: "no_budget_on_path",
        summary: "Nothing on the call path caps retries.",
        help: "With the dependency down, every layer retries every call. Add a retry budget (Envoy's retry_budget, gRPC retryThrottling, a Linkerd retry budget) at the layer the finding names.",
    },
    Check {
        id: "budget_concurrency_floor",
        summary: "A concurrency-based retry cap lets more retries through than the stated bound.",
        help: "A cap on concurrent retries allows, by Little's law, a retry rate of the cap divided by the latency. At the stated request rate and latency, lower the floor (Envoy min_retry_concurrency, Istio maxRetries) to the figure the finding names.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for c in CHECKS {
            assert!(seen.insert(c.id), "{} twice", c.id);
            assert!(c.id.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'));
            assert!(c.help.len() > c.summary.len(), "{}: help shorter", c.id);
        }
    }
}
