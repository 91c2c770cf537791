//! The engine: the retry [`Policy`](crate::Policy) and the
//! [`HedgePolicy`](crate::HedgePolicy), the per-call state they keep
//! ([`Call`](crate::Call)), and the plan that drives one call's attempts.
//!
//! The engine is sans-IO: it never touches a socket, a runtime, a timer or
//! the system clock on its own; it is told the time and the facts, and
//! answers what to do next.

pub(crate) mod call;
pub(crate) mod drive;
pub(crate) mod hedge;
pub(crate) mod latency;
pub(crate) mod policy;

/// Hedged requests' secondary types: the builder, and the sans-IO protocol
/// ([`HedgedCall`](hedging::HedgedCall) driven by
/// [`HedgePolicy::poll`](crate::HedgePolicy::poll) and
/// [`HedgePolicy::report`](crate::HedgePolicy::report)) a front-end speaks.
pub mod hedging {
    pub use super::hedge::{HedgePolicyConfig, HedgeStep, HedgedCall, MAX_HEDGE_ATTEMPTS};
}
