//! What the services of one gRPC layer share: the method policies, the
//! channel's throttling bucket and the limits, and how a replayed body
//! becomes the inner service's.

use std::fmt;

use super::method::Methods;
use super::AttemptHook;
use crate::guardrails::budget::TokenBucket;
use crate::tower::ReplayBody;

/// Turns the body the layer replays into the body the inner service takes.
/// The default, [`Unchanged`], hands the inner service a
/// [`ReplayBody`]; a tonic channel wants its own body type, so give the
/// layer tonic's constructor with [`RetryLayer::body`](super::RetryLayer::body)
/// (`.body(tonic::body::Body::new)`). Any `Fn(ReplayBody<B>) -> T` is one.
pub trait MakeBody<B> {
    /// The inner service's request body.
    type Output;
    /// Wraps one attempt's body.
    fn make(&self, body: ReplayBody<B>) -> Self::Output;
}

/// The default [`MakeBody`]: the inner service gets the [`ReplayBody`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Unchanged;

impl<B> MakeBody<B> for Unchanged {
    type Output = ReplayBody<B>;
    fn make(&self, body: ReplayBody<B>) -> ReplayBody<B> {
        body
    }
}

impl<B, F, T> MakeBody<B> for F
where
    F: Fn(ReplayBody<B>) -> T,
{
    type Output = T;
    fn make(&self, body: ReplayBody<B>) -> T {
        self(body)
    }
}

/// What every service of one layer shares: the method policies (built with
/// the layer's one throttling bucket) and the limits.
pub(crate) struct Shared {
    pub(crate) methods: Methods,
    pub(crate) bucket: Option<TokenBucket>,
    pub(crate) max_replay_bytes: usize,
    pub(crate) transparent_retries: u32,
    pub(crate) one_layer: bool,
    pub(crate) hook: Option<AttemptHook>,
    #[cfg(feature = "opentelemetry")]
    pub(crate) trace_attempts: bool,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("methods", &self.methods)
            .field("bucket", &self.bucket)
            .field("max_replay_bytes", &self.max_replay_bytes)
            .field("transparent_retries", &self.transparent_retries)
            .field("one_layer", &self.one_layer)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}
