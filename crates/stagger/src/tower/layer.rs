//! The client [`RetryLayer`].

use std::sync::Arc;

use tower_layer::Layer;

use super::RetryService;
use crate::http::Settings;

/// Wraps a client service so every request is retried under one shared
/// [`Policy`](crate::Policy); see the [module docs](super) for what it does to each
/// request.
///
/// Clones of the layer, and every service it makes, share the same policy,
/// so a budget or breaker attached to it sees all their calls.
///
/// ```
/// use stagger::http::Settings;
/// use stagger::tower::RetryLayer;
/// use stagger::Policy;
/// use std::time::Duration;
///
/// let layer = RetryLayer::new(
///     Settings {
///     policy: Policy::default(),
///     idempotency_keys: true,
///     timeout: Some(Duration::from_secs(3)),
///     ..Default::default()
/// },
/// );
/// # let _ = layer;
/// ```
#[derive(Debug, Clone)]
pub struct RetryLayer {
    settings: Arc<Settings>,
}

impl RetryLayer {
    /// A layer with these HTTP settings — or a [`Policy`](crate::Policy) with the default
    /// ones (see [`Settings`]).
    pub fn new(settings: impl Into<Settings>) -> Self {
        RetryLayer {
            settings: Arc::new(settings.into().resolved()),
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService::from_shared(inner, self.settings.clone())
    }
}
