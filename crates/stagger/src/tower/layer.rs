//! The client [`RetryLayer`].

use std::sync::Arc;
use std::time::Duration;

use tower_layer::Layer;

use super::RetryService;
use crate::http::{AttemptLog, Settings};
use crate::policy::Policy;

/// Wraps a client service so every request is retried under one shared
/// [`Policy`]; see the [module docs](super) for what it does to each
/// request.
///
/// Clones of the layer, and every service it makes, share the same policy,
/// so a budget or breaker attached to it sees all their calls.
///
/// ```
/// use stagger::tower::RetryLayer;
/// use stagger::Policy;
/// use std::time::Duration;
///
/// let layer = RetryLayer::new(Policy::default())
///     .idempotency_keys(true)
///     .timeout(Duration::from_secs(3));
/// # let _ = layer;
/// ```
#[derive(Debug, Clone)]
pub struct RetryLayer {
    settings: Arc<Settings>,
}

impl RetryLayer {
    /// A layer with `policy` and the default HTTP settings.
    pub fn new(policy: Policy) -> Self {
        Self::with_settings(Settings::new(policy))
    }

    /// A layer with these settings.
    pub fn with_settings(settings: Settings) -> Self {
        RetryLayer {
            settings: Arc::new(settings),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn map(self, f: impl FnOnce(Settings) -> Settings) -> Self {
        let s = Arc::try_unwrap(self.settings).unwrap_or_else(|a| (*a).clone());
        Self::with_settings(f(s))
    }

    /// See [`Settings::retry_500`].
    pub fn retry_500(self, on: bool) -> Self {
        self.map(|s| s.retry_500(on))
    }

    /// See [`Settings::idempotency_keys`].
    pub fn idempotency_keys(self, on: bool) -> Self {
        self.map(|s| s.idempotency_keys(on))
    }

    /// See [`Settings::max_replay_bytes`].
    pub fn max_replay_bytes(self, bytes: usize) -> Self {
        self.map(|s| s.max_replay_bytes(bytes))
    }

    /// See [`Settings::timeout`].
    pub fn timeout(self, timeout: Duration) -> Self {
        self.map(|s| s.timeout(timeout))
    }

    /// See [`Settings::propagate_deadline`].
    pub fn propagate_deadline(self, on: bool) -> Self {
        self.map(|s| s.propagate_deadline(on))
    }

    /// See [`Settings::one_layer`].
    pub fn one_layer(self, on: bool) -> Self {
        self.map(|s| s.one_layer(on))
    }

    /// See [`Settings::on_attempt`].
    pub fn on_attempt(self, hook: impl Fn(&AttemptLog) + Send + Sync + 'static) -> Self {
        self.map(|s| s.on_attempt(hook))
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService::from_shared(inner, self.settings.clone())
    }
}
