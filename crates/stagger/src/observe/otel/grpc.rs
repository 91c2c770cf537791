//! gRPC's part of the OpenTelemetry feature: the call and attempt spans as
//! [gRFC A72](https://github.com/grpc/proposal/blob/master/A72-open-telemetry-tracing.md) shapes them, and gRPC's per-call retry metrics ([gRFC A96](https://github.com/grpc/proposal/blob/master/A96-retry-otel-stats.md)).

use std::time::Duration;

use http::HeaderMap;
use opentelemetry::metrics::Histogram;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{global, Context, KeyValue};
use opentelemetry_semantic_conventions::attribute as semconv;

use super::{take, Headers, SCOPE};
use crate::engine::call::Call;

/// A gRPC call's spans as [gRFC A72](https://github.com/grpc/proposal/blob/master/A72-open-telemetry-tracing.md) shapes them: the call's client span and,
/// under it, one span per attempt.
pub(crate) struct GrpcSpans {
    call: Context,
    /// `<service>.<method>`, the spans' name after their prefix.
    name: String,
    open: Vec<(u32, Context)>,
    /// The number the last attempt went out as: a transparent retry goes
    /// out under the number of the attempt that never left.
    last_number: u32,
}

impl GrpcSpans {
    /// Opens the call's span for a request to `path` (`/package.Service/Method`).
    pub(crate) fn open(path: &str) -> Self {
        let name = path.trim_start_matches('/').replace('/', ".");
        let tracer = global::tracer(SCOPE);
        let span = tracer
            .span_builder(format!("Sent.{name}"))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new(semconv::RPC_SYSTEM_NAME, "grpc"),
                KeyValue::new(semconv::RPC_METHOD, path.trim_start_matches('/').to_owned()),
            ])
            .start_with_context(&tracer, &Context::current());
        GrpcSpans {
            call: Context::current_with_span(span),
            name,
            open: Vec::new(),
            last_number: 0,
        }
    }

    /// Opens attempt `id`'s span (sent as number `number`) and injects its
    /// context into the attempt's metadata.
    pub(crate) fn start(&mut self, id: u32, number: u32, headers: &mut HeaderMap) {
        let transparent = id > 1 && number == self.last_number;
        self.last_number = number;
        let tracer = global::tracer(SCOPE);
        let span = tracer
            .span_builder(format!("Attempt.{}", self.name))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("previous-rpc-attempts", i64::from(id - 1)),
                KeyValue::new("transparent-retry", transparent),
            ])
            .start_with_context(&tracer, &self.call);
        let cx = self.call.with_span(span);
        global::get_text_map_propagator(|p| p.inject_context(&cx, &mut Headers(headers)));
        self.open.push((id, cx));
    }

    /// Ends attempt `id`'s span with its `grpc-status`, when it had one.
    pub(crate) fn end(&mut self, id: u32, code: Option<u32>) {
        if let Some(cx) = take(&mut self.open, id) {
            end_with_status(&cx, code);
        }
    }

    /// Ends the call's span with the status the caller got, when known
    /// (a committed call's status comes later, in its trailers).
    pub(crate) fn close(self, code: Option<u32>) {
        end_with_status(&self.call, code);
    }
}

fn end_with_status(cx: &Context, code: Option<u32>) {
    let span = cx.span();
    if let Some(c) = code {
        let name = crate::classify::GRPC_CODE_NAMES
            .get(c as usize)
            .copied()
            .unwrap_or("UNKNOWN");
        span.set_attribute(KeyValue::new(semconv::RPC_RESPONSE_STATUS_CODE, name));
        if c != 0 {
            span.set_status(Status::error(name));
        }
    }
    span.end();
}

/// gRPC's per-call retry metrics ([gRFC A96](https://github.com/grpc/proposal/blob/master/A96-retry-otel-stats.md)).
pub(crate) struct CallMetrics {
    retries: Histogram<u64>,
    transparent: Histogram<u64>,
    hedges: Histogram<u64>,
    delay: Histogram<f64>,
}

/// What one gRPC call did, for [`CallMetrics::record`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CallCounts {
    pub(crate) retries: u64,
    pub(crate) transparent: u64,
    pub(crate) hedges: u64,
    pub(crate) waited: Duration,
}

impl CallCounts {
    /// A finished call's counts: every attempt after the first is a
    /// transparent retry, a hedge or else a retry.
    pub(crate) fn of<R>(call: &Call<R>, waited: Duration) -> Self {
        let transparent = u64::from(call.transparent_retries_made());
        let hedges = u64::from(call.hedges.count_ones());
        let later = u64::from(call.attempts().saturating_sub(1));
        CallCounts {
            retries: later.saturating_sub(transparent + hedges),
            transparent,
            hedges,
            waited,
        }
    }
}

/// Records a finished gRPC call to `uri` (`scheme://authority/package.Service/Method`):
/// `grpc.method` is the path without its leading `/`, `grpc.target` the
/// scheme and authority the channel sent it to.
pub(crate) fn record_grpc_call<R>(uri: &http::Uri, call: &Call<R>, waited: Duration) {
    let counts = CallCounts::of(call, waited);
    if counts.retries + counts.transparent + counts.hedges == 0 {
        return;
    }
    let method = uri.path().trim_start_matches('/');
    let target = match (uri.scheme_str(), uri.authority()) {
        (Some(s), Some(a)) => format!("{s}://{a}"),
        (None, Some(a)) => a.to_string(),
        _ => String::new(),
    };
    // Asked of the global meter provider each time (only calls that made
    // more than one attempt get here), so a provider installed after the
    // first call still receives every later one.
    CallMetrics::new().record(method, &target, counts);
}

impl CallMetrics {
    fn new() -> Self {
        let meter = global::meter(SCOPE);
        CallMetrics {
            retries: meter
                .u64_histogram("grpc.client.call.retries")
                .with_unit("{retry}")
                .with_description("Number of retries during the client call.")
                .build(),
            transparent: meter
                .u64_histogram("grpc.client.call.transparent_retries")
                .with_unit("{transparent_retry}")
                .with_description("Number of transparent retries during the client call.")
                .build(),
            hedges: meter
                .u64_histogram("grpc.client.call.hedges")
                .with_unit("{hedge}")
                .with_description("Number of hedges during the client call.")
                .build(),
            delay: meter
                .f64_histogram("grpc.client.call.retry_delay")
                .with_unit("s")
                .with_description(
                    "Total time of delay while there is no active attempt during the client call.",
                )
                .build(),
        }
    }

    /// Records one call to `method` (`package.Service/Method`) on `target`.
    pub(crate) fn record(&self, method: &str, target: &str, c: CallCounts) {
        let labels = [
            KeyValue::new("grpc.method", method.to_owned()),
            KeyValue::new("grpc.target", target.to_owned()),
        ];
        // A96: a count of 0 is not recorded.
        if c.retries > 0 {
            self.retries.record(c.retries, &labels);
        }
        if c.transparent > 0 {
            self.transparent.record(c.transparent, &labels);
        }
        if c.hedges > 0 {
            self.hedges.record(c.hedges, &labels);
        }
        if c.retries + c.hedges + c.transparent > 0 {
            self.delay.record(c.waited.as_secs_f64(), &labels);
        }
    }
}
