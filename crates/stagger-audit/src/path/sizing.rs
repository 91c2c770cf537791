//! Budget sizing by Little's law: what a cap on concurrent retries lets
//! through at a stated request rate and attempt latency, and the largest
//! cap that keeps the path's attempts under a stated bound.
//!
//! A cap on retries in flight (Envoy's `max_retries` circuit breaker, which
//! Istio's `connectionPool.http.maxRetries` sets, or a `retry_budget`'s
//! `min_retry_concurrency` floor) is a limit on concurrency, not on a
//! request's tries. Little's law turns it into a rate: `C` retries in
//! flight, each taking the latency `W`, are `C / W` retries a second.
//! With the dependency down, a layer receiving `λ` requests a second whose
//! rules try each `n` times wants `λ (n − 1)` retries a second; the cap lets
//! through `min(λ (n − 1), C / W)`, so each request is tried
//! `1 + min(n − 1, C / (λ W))` times. A `retry_budget` caps at
//! `max(percent × active, min_retry_concurrency)`, with `λ W` requests
//! active (Little's law again).
//!
//! The bound `B` on attempts at the bottom per call at the edge: with the
//! other layers multiplying by `Q`, the layer may try each request at most
//! `B / Q` times, so its cap must stay at or below `(B / Q − 1) λ W`
//! (and a budget's percent at or below `(B / Q − 1) × 100`).

use std::time::Duration;

use serde::Serialize;

use super::{Budget, Layer, Options, PathError, Scenario};

/// The sizing options' own errors, named by their flags.
pub(crate) fn check(o: &Options) -> Result<(), PathError> {
    if o.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(PathError::new(
            "--rate",
            "",
            "must be a number of requests a second above 0",
        ));
    }
    if !(o.bound.is_finite() && o.bound >= 1.0) {
        return Err(PathError::new(
            "--bound",
            "",
            format!("must be at least 1 attempt per call, not {}", o.bound),
        ));
    }
    Ok(())
}

/// What one capped layer allows at the stated rate and latency.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sizing {
    /// The layer (an index into the report's layers).
    pub layer: usize,
    /// Requests a second reaching the layer: the edge's rate times the
    /// tries of the layers above it.
    pub rate: f64,
    /// Requests in flight at the layer (`rate × latency`).
    pub active: f64,
    /// Retries in flight the cap allows.
    pub cap: f64,
    /// Retries a second the cap allows (`cap / latency`).
    pub allowed_per_second: f64,
    /// Retries a second the layer's rules want with the dependency down.
    pub wanted_per_second: f64,
    /// Tries per request under the cap.
    pub tries: f64,
    /// Attempts at the bottom per call at the edge with this layer capped
    /// (the others as their rules say).
    pub bottom_attempts: f64,
    /// The bound the floor is for.
    pub bound: f64,
    /// The largest cap on retries in flight that keeps the bottom at or
    /// under the bound (`None`: the other layers alone pass it).
    pub floor: Option<u64>,
}

/// The cap of `b` on retries in flight with `active` requests in flight,
/// if `b` is a cap on concurrency.
fn cap(b: &Budget, active: f64) -> Option<f64> {
    match *b {
        Budget::MaxConcurrent { max } => Some(max as f64),
        Budget::Concurrent {
            percent,
            min_concurrency,
        } => Some((percent / 100.0 * active).max(f64::from(min_concurrency))),
        Budget::Ratio { .. } | Budget::Drains { .. } => None,
    }
}

/// Every layer of `layers` with a concurrency cap, sized at `rate` requests
/// a second at the edge and `latency` per attempt, for attempts at the
/// bottom under `bound`.
pub(crate) fn size(
    layers: &[Layer],
    dead: &Scenario,
    rate: f64,
    latency: Duration,
    bound: f64,
) -> Vec<Sizing> {
    let w = latency.as_secs_f64();
    let tries: Vec<f64> = dead.layers.iter().map(|n| n.tries.max(1.0)).collect();
    let mut out = Vec::new();
    for (k, l) in layers.iter().enumerate() {
        let Some(b) = &l.budget else { continue };
        let above: f64 = tries[..k].iter().product();
        let lambda = rate * above;
        let active = lambda * w;
        let Some(c) = cap(b, active) else { continue };
        let n = tries[k];
        let wanted = lambda * (n - 1.0);
        let allowed = if w > 0.0 { c / w } else { f64::INFINITY };
        let capped = if lambda > 0.0 {
            1.0 + (n - 1.0).min(allowed / lambda)
        } else {
            n
        };
        let others: f64 = tries
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != k)
            .map(|(_, t)| t)
            .product();
        let room = bound / others - 1.0;
        // A hair above the product, so 1/3 × 150 is 50, not 49.999….
        let floor = (room >= 0.0).then(|| (room * active + 1e-9).floor() as u64);
        out.push(Sizing {
            layer: k,
            rate: lambda,
            active,
            cap: c,
            allowed_per_second: allowed,
            wanted_per_second: wanted,
            tries: capped,
            bottom_attempts: others * capped,
            bound,
            floor,
        });
    }
    out
}
