//! What a game-day measured: one strategy's run ([`Row`], with its
//! per-100 ms [`Series`] and its [`Latency`]), the run's [`Params`], and the
//! whole [`Results`] document that `--format json` prints.
//!
//! These are plain data. The game-day fills them in; the comparison table
//! and the HTML report that draw them live in `stagger-report`, which
//! depends on this crate and never the other way round.

use std::collections::BTreeMap;

use serde::Serialize;

/// Per-bin series, as in the simulator's JSON plus the server's view.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Series {
    /// Bin start, seconds.
    pub t_s: Vec<f64>,
    /// Attempts arriving (first attempts + retries).
    pub load: Vec<u32>,
    /// First attempts arriving.
    pub first_attempts: Vec<u32>,
    /// Retries arriving.
    pub retries: Vec<u32>,
    /// Requests that succeeded at the clients.
    pub successes: Vec<u32>,
    /// Jobs the server completed.
    pub completed: Vec<u32>,
    /// Jobs completed for a client that had already given up.
    pub abandoned: Vec<u32>,
    /// Requests the server rejected.
    pub rejected: Vec<u32>,
}

/// Latency of every request over all its attempts: to its success, or to
/// the moment it failed.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    /// Median, ms.
    pub p50_ms: Option<u32>,
    /// 99th percentile, ms.
    pub p99_ms: Option<u32>,
}

/// One strategy's row; field names follow `stagger simulate` where they
/// mean the same thing.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// The strategy, e.g. `full+budget+breaker`.
    pub strategy: String,
    /// Logical requests made.
    pub requests: u64,
    /// Attempts that reached the server.
    pub attempts: u64,
    /// First attempts that reached the server.
    pub first_attempts: u64,
    /// Retries that reached the server.
    pub retries: u64,
    /// Attempts ÷ requests (at the server).
    pub amplification: f64,
    /// Attempts the clients made, including refused connections.
    pub client_attempts: u64,
    /// Client attempts ÷ requests.
    pub client_amplification: f64,
    /// Retries ÷ requests (the retry-amplification SLI over the run).
    pub retry_ratio: f64,
    /// Retries ÷ requests over the last quarter of the traffic.
    pub tail_retry_ratio: f64,
    /// Share of requests that succeeded.
    pub request_success: f64,
    /// Largest 1 s load ÷ capacity.
    pub peak_load_over_capacity: f64,
    /// The same, over windows after the fault cleared (`null` if it never
    /// clears).
    pub post_outage_peak_over_capacity: Option<f64>,
    /// Seconds after the fault cleared during which the 1 s load exceeded
    /// capacity.
    pub overloaded_after_fault_s: Option<f64>,
    /// Seconds from the fault clearing until every 1 s window to the end of
    /// the traffic has at least 95 % of its new requests succeeding and at
    /// most 1.25 attempts per new request arriving at the server
    /// (`stagger_sim::recovery`); `null` if that never happened.
    pub recovery_s: Option<f64>,
    /// Whether it happened (`null` when the fault never clears).
    pub recovered: Option<bool>,
    /// Retries refused by a budget.
    pub budget_refusals: u64,
    /// Times a breaker opened.
    pub breaker_opens: u64,
    /// Orders applied more than once at the server.
    pub duplicates: u64,
    /// Attempts the server's idempotency-key table absorbed.
    pub deduplicated: u64,
    /// Jobs the server completed.
    pub completed: u64,
    /// Jobs completed for clients that had already given up.
    pub abandoned: u64,
    /// Requests the server rejected.
    pub rejected: u64,
    /// Requests by stop reason.
    pub stops: BTreeMap<String, u64>,
    /// Latency of successful requests.
    pub latency: Latency,
    /// Requests succeeding per second from the fault clearing to the end of
    /// the traffic (`null` without a fault end).
    pub goodput_after_fault: Option<f64>,
    /// Attempts the server shed at once ÷ attempts arriving (`null`
    /// without a shedding layer).
    pub shed_share: Option<f64>,
    /// Per-100 ms series over the traffic period.
    pub series: Series,
}

/// The parameters of a game-day, as written in JSON (durations in seconds).
#[derive(Debug, Clone, Serialize)]
pub struct Params {
    /// The fault's name.
    pub fault: &'static str,
    /// Seconds of traffic.
    pub duration_s: f64,
    /// New requests per second.
    pub rate: f64,
    /// Server capacity, jobs per second (workers ÷ service time).
    pub capacity: f64,
    /// Client tasks.
    pub clients: usize,
    /// Pods (each with its own pool, budget and breaker).
    pub pods: usize,
    /// Server workers.
    pub workers: usize,
    /// Service time of one job, seconds.
    pub service_time_s: f64,
    /// Server queue length.
    pub queue: usize,
    /// Timeout of one attempt, seconds.
    pub timeout_s: f64,
    /// Deadline of one request over all its attempts, seconds.
    pub deadline_s: f64,
    /// Max attempts.
    pub attempts: u32,
    /// First backoff, seconds.
    pub base_s: f64,
    /// Backoff cap, seconds.
    pub cap_s: f64,
    /// Fault start, seconds.
    pub outage_start_s: f64,
    /// Fault end, seconds (`null`: it never ends).
    pub outage_end_s: Option<f64>,
    /// Seed of the pods' breakers.
    pub seed: u64,
    /// Whether the server shed retries first (`ShedLayer`).
    pub shed_retries: bool,
    /// Whether the server dropped expired work (`DeadlineLayer`).
    pub drop_expired: bool,
    /// The server's concurrency limit (`static:N`, `aimd`, `gradient`;
    /// `null`: none).
    pub server_limit: Option<String>,
    /// The rate the fleet ramps up to by the end of the traffic (`null`: a
    /// steady rate).
    pub ramp_to: Option<f64>,
    /// `--target`: the real upstream the fleet drove through the fault
    /// proxy (`null`: the game-day's own server).
    pub target: Option<String>,
    /// The method of every request, `GET` or `POST`.
    pub method: &'static str,
    /// `--hosts`: client hosts (network namespaces) the pods were spread
    /// over (`null`: all on loopback).
    pub hosts: Option<usize>,
}

/// The whole result, the `--format json` document.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Always `gameday` (the simulator writes its model's name here).
    pub model: &'static str,
    /// The parameters.
    pub params: Params,
    /// One row per strategy, in the order run.
    pub strategies: Vec<Row>,
}
