//! OpenTelemetry (feature `opentelemetry`): what the layers tell a tracing
//! or metrics backend, through the OpenTelemetry API. The application
//! installs the SDK, its exporter and a propagator; stagger only speaks the
//! API, so without a provider everything here is a no-op.
//!
//! - **A client span per attempt** for the HTTP front-ends (the tower
//!   [`RetryLayer`](crate::tower::RetryLayer) and the reqwest
//!   [`RetryMiddleware`](crate::reqwest::RetryMiddleware)), under the HTTP
//!   semantic conventions: named after the method, kind client,
//!   `http.request.method`, `url.full`, `server.address`, `server.port`,
//!   `http.response.status_code`, `error.type`, and
//!   `http.request.resend_count` on every attempt after the first (the
//!   convention counts every request sent again, for any reason: retries,
//!   hedges and transparent retries alike). The trace context is injected
//!   into each attempt's headers with the global propagator, so the server's
//!   span is the attempt's child. The span of an attempt cancelled because
//!   another one answered (a hedge that lost) ends when it is dropped,
//!   without a status.
//! - **gRPC's retry metrics** for the gRPC layer, under the names [gRFC A96](https://github.com/grpc/proposal/blob/master/A96-retry-otel-stats.md)
//!   gives them (histograms recorded once per call, labelled `grpc.method`
//!   and `grpc.target` as [gRFC A66](https://github.com/grpc/proposal/blob/master/A66-otel-stats.md) defines them; a count of 0 is not
//!   recorded): `grpc.client.call.retries`,
//!   `grpc.client.call.transparent_retries`, `grpc.client.call.hedges` and
//!   `grpc.client.call.retry_delay` (seconds with no attempt running).
//!
//! `grpc.client.call.retry_delay` is recorded for calls that made more
//! than one attempt.

// The spans are opened and closed by the HTTP drivers alone (the tower
// layer, gRPC's included, and the reqwest middleware): without one of
// them the feature keeps only the (never filled) span list.
#[cfg(any(feature = "tower", feature = "reqwest"))]
use std::borrow::Cow;

#[cfg(any(feature = "tower", feature = "reqwest"))]
use http::HeaderMap;
#[cfg(any(feature = "tower", feature = "reqwest"))]
use opentelemetry::propagation::Injector;
#[cfg(any(feature = "tower", feature = "reqwest"))]
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::Context;
#[cfg(any(feature = "tower", feature = "reqwest"))]
use opentelemetry::{global, KeyValue};
#[cfg(any(feature = "tower", feature = "reqwest"))]
use opentelemetry_semantic_conventions::attribute as semconv;

#[cfg(any(feature = "tower", feature = "reqwest"))]
use crate::engine::drive::Answer;
#[cfg(any(feature = "tower", feature = "reqwest"))]
use crate::outcome::Outcome;

#[cfg(feature = "grpc")]
mod grpc;
#[cfg(feature = "grpc")]
pub(crate) use grpc::{record_grpc_call, GrpcSpans};

/// The name stagger's tracer and meter are registered under.
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(super) const SCOPE: &str = "stagger";

/// The spans of one call's attempts, each open from its send to its answer.
#[derive(Default)]
pub(crate) struct AttemptSpans {
    open: Vec<(u32, Context)>,
}

impl std::fmt::Debug for AttemptSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttemptSpans")
            .field("open", &self.open.len())
            .finish()
    }
}

/// Writes the propagator's fields into a request's headers.
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(super) struct Headers<'a>(pub(super) &'a mut HeaderMap);

#[cfg(any(feature = "tower", feature = "reqwest"))]
impl Injector for Headers<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

#[cfg(any(feature = "tower", feature = "reqwest"))]
impl AttemptSpans {
    /// Opens the span of attempt `id` (1-based, every attempt sent counted)
    /// for a request to `url` with `method`, and injects its context into
    /// `headers`.
    pub(crate) fn start(
        &mut self,
        id: u32,
        method: &http::Method,
        url: &str,
        headers: &mut HeaderMap,
    ) {
        let method = method.as_str();
        let tracer = global::tracer(SCOPE);
        let mut attributes = vec![
            KeyValue::new(semconv::HTTP_REQUEST_METHOD, method.to_owned()),
            KeyValue::new(semconv::URL_FULL, url.to_owned()),
        ];
        if let Ok(uri) = url.parse::<http::Uri>() {
            if let Some(host) = uri.host() {
                attributes.push(KeyValue::new(semconv::SERVER_ADDRESS, host.to_owned()));
            }
            let port = uri.port_u16().or(match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            });
            if let Some(p) = port {
                attributes.push(KeyValue::new(semconv::SERVER_PORT, i64::from(p)));
            }
        }
        if id > 1 {
            attributes.push(KeyValue::new(
                semconv::HTTP_REQUEST_RESEND_COUNT,
                i64::from(id - 1),
            ));
        }
        let span = tracer
            .span_builder(Cow::Owned(method.to_owned()))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&tracer, &Context::current());
        let cx = Context::current_with_span(span);
        global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Headers(headers)));
        self.open.push((id, cx));
    }

    /// Ends the span of attempt `id` with its answer: the status code, or
    /// the error (`error.type` is the failure's class, or `timeout`).
    pub(crate) fn end(&mut self, id: u32, answer: Result<u16, &str>, outcome: &Outcome) {
        let Some(cx) = take(&mut self.open, id) else {
            return;
        };
        let span = cx.span();
        match answer {
            Ok(status) => {
                span.set_attribute(KeyValue::new(
                    semconv::HTTP_RESPONSE_STATUS_CODE,
                    i64::from(status),
                ));
                if status >= 400 {
                    // Client spans: a 4xx or 5xx answer is an error.
                    span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, status.to_string()));
                    span.set_status(Status::error(""));
                }
            }
            Err(kind) => {
                let kind = match outcome {
                    Outcome::Failure(f) if kind.is_empty() => f.class.as_str(),
                    _ => kind,
                };
                span.set_attribute(KeyValue::new(semconv::ERROR_TYPE, kind.to_owned()));
                span.set_status(Status::error(kind.to_owned()));
            }
        }
        span.end();
    }
}

/// The context of running attempt `id`'s span, taken out of `open`.
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(super) fn take(open: &mut Vec<(u32, Context)>, id: u32) -> Option<Context> {
    let i = open.iter().position(|(a, _)| *a == id)?;
    Some(open.swap_remove(i).1)
}

/// What an attempt's span says of its answer: the status code `status`
/// reads off a response, or a low-cardinality error kind (`""`: the
/// failure's class; `timeout`).
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(crate) fn span_answer<R, E>(
    answer: &Answer<Result<R, E>>,
    status: impl FnOnce(&R) -> u16,
) -> Result<u16, &'static str> {
    match answer {
        Answer::Came(Ok(resp)) => Ok(status(resp)),
        Answer::Came(Err(_)) => Err(""),
        Answer::TimedOut => Err("timeout"),
    }
}
