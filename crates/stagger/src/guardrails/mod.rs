//! The shared guardrails: retry [`budget`]s, the [`Breaker`](crate::Breaker)
//! with its operator controls, the [`Throttle`](crate::Throttle), the
//! [`AdaptiveLimiter`] that paces a client against a throttling API, and
//! the [`Guardrail`] seam with which a policy consults them
//! ([`Guardrails`] combines them); and the [`Observer`](crate::Observer)
//! seam every policy and guardrail tells its [`Event`](crate::Event)s.
//!
//! Nothing here touches a transport, a runtime or the network: the
//! guardrails take the time they are given and the outcomes they are told.

pub(crate) mod adaptive;
pub(crate) mod breaker;
pub mod budget;
pub(crate) mod event;
pub(crate) mod guard;
pub(crate) mod sync;
pub(crate) mod throttle;
pub(crate) mod window;

pub use adaptive::{is_throttling_error_code, AdaptiveLimiter, LimiterSnapshot};
pub use breaker::{BreakerConfig, BreakerControl, BreakerOpen, Permit, Transition};
pub use event::BreakerState;
pub use guard::{Guardrail, Guardrails, Refusal, Ticket};
pub use throttle::ThrottleConfig;
