//! What a simulation reports: one [`Row`] per strategy (per client count,
//! per failure rate), each the mean over its runs, with a time series.

use serde::Serialize;

use crate::params::Params;

/// The whole result, serialised as the `--format json` document.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// The model's name.
    pub model: &'static str,
    /// The parameters the rows were produced with.
    pub params: ParamsOut,
    /// One row per strategy (and client count or failure rate).
    pub strategies: Vec<Row>,
}

/// The parameters as written in JSON (durations in seconds). Thread count is
/// deliberately absent: it never changes a result.
#[derive(Debug, Clone, Serialize)]
pub struct ParamsOut {
    /// Simulated seconds (contention: the limit).
    pub duration_s: f64,
    /// Tick length in seconds.
    pub tick_s: f64,
    /// New requests per tick.
    pub arrivals: u32,
    /// Arrivals per second.
    pub rate: f64,
    /// Capacity (per tick for failover, per second for metastable).
    pub capacity: f64,
    /// Client timeout in seconds.
    pub timeout_s: f64,
    /// Whether the server drops expired work.
    pub server_skips_expired: bool,
    /// The server strategies of the rows (metastable).
    pub servers: Vec<String>,
    /// Whether an overloaded server sheds retries first (failover).
    pub server_sheds_retries: bool,
    /// Outage start in seconds.
    pub outage_start_s: f64,
    /// Outage end in seconds.
    pub outage_end_s: f64,
    /// Burst size.
    pub burst: u32,
    /// Client count or range (`"1..100"`).
    pub clients: String,
    /// Max attempts (`null`: unlimited).
    pub attempts: Option<u32>,
    /// First backoff in seconds.
    pub base_s: f64,
    /// Backoff cap in seconds.
    pub cap_s: f64,
    /// `square` or `linear`.
    pub success_model: &'static str,
    /// Mean hop in seconds (contention).
    pub hop_mean_s: f64,
    /// Hop standard deviation in seconds (contention).
    pub hop_sd_s: f64,
    /// Layers in the chain.
    pub layers: u32,
    /// Failure rates reported (layers).
    pub failure_rates: Vec<f64>,
    /// First seed (`null` when explicit seeds were given).
    pub seed: Option<u64>,
    /// Runs per row.
    pub runs: usize,
    /// Explicit run seeds, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<u64>>,
}

impl ParamsOut {
    /// The JSON view of `p`.
    pub fn new(p: &Params) -> Self {
        ParamsOut {
            duration_s: p.duration.as_secs_f64(),
            tick_s: p.tick.as_secs_f64(),
            arrivals: p.arrivals,
            rate: p.rate,
            capacity: p.capacity,
            timeout_s: p.timeout.as_secs_f64(),
            server_skips_expired: p.server_skips_expired,
            servers: p.server_list().iter().map(ToString::to_string).collect(),
            server_sheds_retries: p.server_sheds_retries,
            outage_start_s: p.outage_start.as_secs_f64(),
            outage_end_s: p.outage_end.as_secs_f64(),
            burst: p.burst,
            clients: p.clients.to_string(),
            attempts: p.attempts,
            base_s: p.base.as_secs_f64(),
            cap_s: p.cap.as_secs_f64(),
            success_model: p.success_model.as_str(),
            hop_mean_s: p.hop_mean.as_secs_f64(),
            hop_sd_s: p.hop_sd.as_secs_f64(),
            layers: p.layers,
            failure_rates: p.failure_rates.clone(),
            seed: p.seeds.is_none().then_some(p.seed),
            runs: p.run_seeds().len(),
            seeds: p.seeds.clone(),
        }
    }
}

/// Mean per-bin values over the runs: bin start times and, per bin, the
/// attempts made (load), the retries among them, and the successes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    /// Bin start, seconds.
    pub t_s: Vec<f64>,
    /// Attempts in the bin.
    pub load: Vec<f64>,
    /// Retries (attempt 2 and later) in the bin.
    pub retries: Vec<f64>,
    /// Successful attempts in the bin.
    pub successes: Vec<f64>,
    /// Attempts the clients sent in the bin, first attempts and retries
    /// (metastable: an outage holds what is sent, and `load` counts it when
    /// it reaches the server); absent for the other models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<Vec<f64>>,
}

/// `a ÷ b`, or 0 when there is nothing to divide by (a model with no
/// requests in a run). Every model's row uses it for its ratios.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// One row: a strategy's means over its runs. Fields that do not apply to
/// a model are `null` (or absent, for another model's extra fields).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    /// The strategy, e.g. `full+budget+breaker`.
    pub strategy: String,
    /// The server strategy (metastable): `fifo`, `deadline-drop`,
    /// `adaptive`, `aimd`, `gradient` or `static:N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Share of attempts the server shed on arrival (metastable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shed_share: Option<f64>,
    /// Racing clients (contention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<u32>,
    /// Where retries happen (layers): `every_layer`, `one_layer`, `hop_rule`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<&'static str>,
    /// Dependency failure probability (layers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_rate: Option<f64>,
    /// Runs averaged.
    pub runs: usize,
    /// Attempts per run (that reached the server or dependency).
    pub attempts: f64,
    /// Logical requests per run.
    pub requests: f64,
    /// Attempts ÷ requests.
    pub amplification: f64,
    /// Share of requests that succeeded.
    pub request_success: f64,
    /// Mean of each run's largest load ÷ capacity.
    pub peak_load_over_capacity: Option<f64>,
    /// The same, over the time after the outage.
    pub post_outage_peak_over_capacity: Option<f64>,
    /// Seconds after the outage until the dependency recovered for good
    /// (failover, metastable; see [`crate::recovery`]), the mean over the
    /// runs; `null` when some run never got there.
    pub recovery_s: Option<f64>,
    /// Retries refused by a budget, per run.
    pub budget_refusals: f64,
    /// Times a breaker opened, per run.
    pub breaker_opens: f64,
    /// Writes sent per run (contention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<f64>,
    /// Time until the last client succeeded, ms (contention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_ms: Option<f64>,
    /// Answers in time per second before the outage (metastable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_before: Option<f64>,
    /// Answers in time per second over the run's last 20 s (metastable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_after: Option<f64>,
    /// Whether every run recovered ([`crate::recovery`]) (metastable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovered: Option<bool>,
    /// Attempts reaching the dependency per user request (layers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bottom_attempts_per_request: Option<f64>,
    /// Mean time series.
    pub series: Series,
}

/// Sums of per-bin counts over runs, exact until divided.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeriesSum {
    pub(crate) load: Vec<u64>,
    pub(crate) retries: Vec<u64>,
    pub(crate) successes: Vec<u64>,
    pub(crate) sent: Vec<u64>,
}

impl SeriesSum {
    pub(crate) fn add(&mut self, load: &[u32], retries: &[u32], successes: &[u32]) {
        for (dst, src) in [
            (&mut self.load, load),
            (&mut self.retries, retries),
            (&mut self.successes, successes),
        ] {
            if dst.len() < src.len() {
                dst.resize(src.len(), 0);
            }
            for (d, s) in dst.iter_mut().zip(src) {
                *d += u64::from(*s);
            }
        }
    }

    /// Adds one run's attempts as the clients sent them ([`Series::sent`]).
    pub(crate) fn add_sent(&mut self, sent: &[u32]) {
        if self.sent.len() < sent.len() {
            self.sent.resize(sent.len(), 0);
        }
        for (d, s) in self.sent.iter_mut().zip(sent) {
            *d += u64::from(*s);
        }
    }

    pub(crate) fn mean(&self, runs: usize, bin_s: f64) -> Series {
        let r = runs.max(1) as f64;
        let m = |v: &Vec<u64>| v.iter().map(|x| *x as f64 / r).collect::<Vec<f64>>();
        Series {
            t_s: (0..self.load.len()).map(|i| i as f64 * bin_s).collect(),
            load: m(&self.load),
            retries: m(&self.retries),
            successes: m(&self.successes),
            sent: (!self.sent.is_empty()).then(|| m(&self.sent)),
        }
    }
}
