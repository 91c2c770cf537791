//! The gRPC client [`RetryLayer`] and its configuration.

use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::method::{Entry, MethodPolicy, Methods};
use super::service::RetryService;
use super::shared::{Shared, Unchanged};
use super::{AttemptHook, AttemptRecord};
use crate::guardrails::adaptive::AdaptiveLimiter;
use crate::guardrails::budget::{TokenBucket, TokenBucketConfig};
use crate::guardrails::event::Observer;
use crate::outcome::error::ConfigError;

pub(crate) use crate::backoff::a6::MAX_TRANSPARENT_RETRIES;

/// Retries for a gRPC channel, as [A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md) specifies and grpc-go and grpc-java do
/// it: per-method policies, commitment, pushback, throttling, transparent
/// retries (see the [module docs](super)).
///
/// One layer is one channel: its `retryThrottling` bucket is shared by every
/// method and every service it makes (clones included), and by nothing
/// else.
///
/// ```
/// use stagger::grpc::MethodPolicy;
/// use stagger::tower::grpc::RetryLayer;
///
/// let layer = RetryLayer::builder()
///     .method("shop.Cart", "Add", MethodPolicy::builder().max_attempts(3).build()?)
///     .service("shop.Till", MethodPolicy::builder().retryable_codes([14, 8]).build()?)
///     .throttling(10.0, 0.1)
///     .build()?;
/// assert!(layer.throttling_bucket().is_some());
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryLayer<M = Unchanged> {
    shared: Arc<Shared>,
    make: M,
}

impl RetryLayer {
    /// Starts configuring a layer (no method retried until given a policy).
    pub fn builder() -> RetryLayerBuilder {
        RetryLayerBuilder {
            entries: Vec::new(),
            fallback: MethodPolicy::no_retries(),
            throttling: None,
            pacing: None,
            max_replay_bytes: crate::http::Settings::DEFAULT_MAX_REPLAY_BYTES,
            transparent_retries: MAX_TRANSPARENT_RETRIES,
            one_layer: true,
            hook: None,
            observer: None,
            #[cfg(feature = "opentelemetry")]
            trace_attempts: false,
        }
    }
}

impl<M> RetryLayer<M> {
    /// The same layer (same channel state) handing the inner service
    /// `make(body)` for each attempt: `.body(tonic::body::Body::new)` for a
    /// tonic channel.
    pub fn body<N>(self, make: N) -> RetryLayer<N> {
        RetryLayer {
            shared: self.shared,
            make,
        }
    }

    /// The channel's throttling bucket, if `retryThrottling` is set.
    pub fn throttling_bucket(&self) -> Option<&TokenBucket> {
        self.shared.bucket.as_ref()
    }
}

impl<S, M: Clone> Layer<S> for RetryLayer<M> {
    type Service = RetryService<S, M>;

    fn layer(&self, inner: S) -> RetryService<S, M> {
        RetryService::new(inner, self.shared.clone(), self.make.clone())
    }
}

/// Configures a [`RetryLayer`].
pub struct RetryLayerBuilder {
    entries: Vec<Entry>,
    fallback: MethodPolicy,
    throttling: Option<(f64, f64)>,
    pacing: Option<AdaptiveLimiter>,
    max_replay_bytes: usize,
    transparent_retries: u32,
    one_layer: bool,
    hook: Option<AttemptHook>,
    observer: Option<Arc<dyn Observer>>,
    #[cfg(feature = "opentelemetry")]
    trace_attempts: bool,
}

impl fmt::Debug for RetryLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryLayerBuilder")
            .field("entries", &self.entries.len())
            .field("throttling", &self.throttling)
            .field("max_replay_bytes", &self.max_replay_bytes)
            .finish()
    }
}

impl RetryLayerBuilder {
    /// The policy of one method (`service` is the full name,
    /// `package.Service`). The first policy given for a name wins.
    pub fn method(mut self, service: &str, method: &str, policy: MethodPolicy) -> Self {
        self.entries
            .push(((service.to_owned(), method.to_owned()), policy));
        self
    }

    /// The policy of every method of `service` without its own.
    pub fn service(mut self, service: &str, policy: MethodPolicy) -> Self {
        self.entries
            .push(((service.to_owned(), String::new()), policy));
        self
    }

    /// The policy of every method without one of its own or its service's.
    pub fn default_policy(mut self, policy: MethodPolicy) -> Self {
        self.entries.push(((String::new(), String::new()), policy));
        self
    }

    /// `retryThrottling`: one token bucket for the channel, `max_tokens` in
    /// (0, 1000] and a positive `token_ratio` (three decimals).
    pub fn throttling(mut self, max_tokens: f64, token_ratio: f64) -> Self {
        self.throttling = Some((max_tokens, token_ratio));
        self
    }

    /// Paces every attempt of every method, first attempts included, by an
    /// adaptive client rate limiter (see
    /// [`PolicyBuilder::pacing`](crate::PolicyBuilder::pacing)), told of
    /// every `RESOURCE_EXHAUSTED`: one limiter for the channel.
    ///
    /// ```
    /// use stagger::guardrails::AdaptiveLimiter;
    /// let limiter = AdaptiveLimiter::new(std::time::Instant::now());
    /// let layer = stagger::tower::grpc::RetryLayer::builder().pacing(limiter).build().unwrap();
    /// # let _ = layer;
    /// ```
    pub fn pacing(mut self, limiter: AdaptiveLimiter) -> Self {
        self.pacing = Some(limiter);
        self
    }

    /// The largest request body buffered per call so it can be sent again
    /// (default 1 MiB); a call whose body outgrows it is committed.
    pub fn max_replay_bytes(mut self, bytes: usize) -> Self {
        self.max_replay_bytes = bytes;
        self
    }

    /// How many transparent retries a call may make (default and most 10).
    pub fn transparent_retries(mut self, n: u32) -> Self {
        self.transparent_retries = n.min(MAX_TRANSPARENT_RETRIES);
        self
    }

    /// The one-layer rule (default on): no retries while serving an inbound
    /// retry, and a give-up reported to the inbound request.
    pub fn one_layer(mut self, on: bool) -> Self {
        self.one_layer = on;
        self
    }

    /// Calls `hook` after every attempt with what happened and what comes
    /// next.
    pub fn on_attempt(mut self, hook: impl Fn(&AttemptRecord) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// Opens OpenTelemetry spans for every call and attempt (feature
    /// `opentelemetry`; off by default), shaped as [gRFC A72](https://github.com/grpc/proposal/blob/master/A72-open-telemetry-tracing.md) describes: a
    /// client span `Sent.<service>.<method>` for the call, a child of the
    /// caller's current context, and under it a span
    /// `Attempt.<service>.<method>` per attempt with `previous-rpc-attempts`
    /// (attempts before it) and `transparent-retry`, ended with the
    /// attempt's `grpc-status` (`rpc.response.status_code`, the code's
    /// name). The global
    /// propagator injects each attempt's context into its metadata.
    ///
    /// ```
    /// let layer = stagger::tower::grpc::RetryLayer::builder().trace_attempts(true).build().unwrap();
    /// # let _ = layer;
    /// ```
    #[cfg(feature = "opentelemetry")]
    pub fn trace_attempts(mut self, on: bool) -> Self {
        self.trace_attempts = on;
        self
    }

    /// Tells `observer` every event of every method's policy.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Validates and builds: one bucket for the channel, one engine policy
    /// per method.
    pub fn build(self) -> Result<RetryLayer, ConfigError> {
        let bucket = match self.throttling {
            Some((max, ratio)) => Some(TokenBucket::new(TokenBucketConfig {
                max_tokens: max,
                token_ratio: ratio,
            })?),
            None => None,
        };
        let methods = Methods::build(
            &self.entries,
            &self.fallback,
            bucket.as_ref(),
            self.pacing.as_ref(),
            self.observer.as_ref(),
        )?;
        Ok(RetryLayer {
            shared: Arc::new(Shared {
                methods,
                bucket,
                max_replay_bytes: self.max_replay_bytes,
                transparent_retries: self.transparent_retries,
                one_layer: self.one_layer,
                hook: self.hook,
                #[cfg(feature = "opentelemetry")]
                trace_attempts: self.trace_attempts,
            }),
            make: Unchanged,
        })
    }
}
