//! The knobs of a simulation, with each model's defaults.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::server::Server;
use crate::SimError;

/// Which world to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// The classic retry-storm model: a burst of failed requests around a
    /// short outage, in discrete ticks, against a fixed capacity.
    Failover,
    /// AWS's optimistic-concurrency contention: N clients race to write one
    /// row; work is writes sent, completion is when the last one succeeds.
    Contention,
    /// Bronson et al.'s metastable failure: a FIFO server near saturation, a
    /// client timeout and one retry, and a network outage that releases its
    /// backlog all at once.
    Metastable,
    /// Retries multiplied through a chain of layers.
    Layers,
}

impl Model {
    /// Every model, in a fixed order.
    pub const ALL: [Model; 4] = [
        Model::Failover,
        Model::Contention,
        Model::Metastable,
        Model::Layers,
    ];

    /// The name used on the command line and in JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Model::Failover => "failover",
            Model::Contention => "contention",
            Model::Metastable => "metastable",
            Model::Layers => "layers",
        }
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Model {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, SimError> {
        Model::ALL
            .into_iter()
            .find(|m| m.as_str() == s.trim())
            .ok_or_else(|| {
                SimError::new(
                    "model",
                    format!(
                        "unknown model `{s}` (expected failover, contention, metastable or layers)"
                    ),
                )
            })
    }
}

/// How the chance of success falls when a tick's load `L` exceeds capacity
/// `C` (failover model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuccessModel {
    /// `(C/L)²`: the usual model, standing in for queueing and timeouts.
    Square,
    /// `C/L`: exactly capacity's worth of attempts succeed on average.
    Linear,
}

impl SuccessModel {
    /// The name used on the command line and in JSON.
    pub const fn as_str(&self) -> &'static str {
        match self {
            SuccessModel::Square => "square",
            SuccessModel::Linear => "linear",
        }
    }
}

impl FromStr for SuccessModel {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, SimError> {
        match s.trim() {
            "square" => Ok(SuccessModel::Square),
            "linear" => Ok(SuccessModel::Linear),
            other => Err(SimError::new(
                "success-model",
                format!("unknown success model `{other}` (expected square or linear)"),
            )),
        }
    }
}

/// An inclusive range of client counts (`10`, or `1..100` for a sweep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRange {
    /// Smallest count.
    pub lo: u32,
    /// Largest count (inclusive).
    pub hi: u32,
}

/// The most clients a simulation accepts (keeps event keys packed).
pub const MAX_CLIENTS: u32 = 65_535;

impl ClientRange {
    /// A single count.
    pub const fn one(n: u32) -> Self {
        ClientRange { lo: n, hi: n }
    }

    /// The counts, in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> {
        self.lo..=self.hi
    }

    /// How many counts the range holds (at least one).
    pub fn count(&self) -> usize {
        (self.hi.saturating_sub(self.lo)) as usize + 1
    }

    /// Whether it is a sweep of more than one count.
    pub fn is_sweep(&self) -> bool {
        self.hi > self.lo
    }
}

impl FromStr for ClientRange {
    type Err = SimError;

    /// Parses `N`, `A..B` or `A..=B` (both ends included).
    fn from_str(s: &str) -> Result<Self, SimError> {
        let bad = |why: String| SimError::new("clients", why);
        let num = |t: &str| -> Result<u32, SimError> {
            if t.trim().starts_with('-') {
                return Err(bad(format!(
                    "`{t}` is negative; give a count of clients in 1..{MAX_CLIENTS} (e.g. 10 or 1..100)"
                )));
            }
            let n: u32 = t
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{t}` is not a whole number")))?;
            if n == 0 || n > MAX_CLIENTS {
                return Err(bad(format!("{n} is outside 1..{MAX_CLIENTS}")));
            }
            Ok(n)
        };
        let s = s.trim();
        let r = match s.split_once("..") {
            None => ClientRange::one(num(s)?),
            Some((a, b)) => {
                let b = b.strip_prefix('=').unwrap_or(b);
                let (lo, hi) = (num(a)?, num(b)?);
                if hi < lo {
                    return Err(bad(format!("range `{s}` is empty")));
                }
                ClientRange { lo, hi }
            }
        };
        Ok(r)
    }
}

impl fmt::Display for ClientRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_sweep() {
            write!(f, "{}..{}", self.lo, self.hi)
        } else {
            write!(f, "{}", self.lo)
        }
    }
}

/// Client processes in the drill ([`Params::drill`]).
pub const DRILL_PROCESSES: u32 = 400;

/// The strategies the drill compares, in both the simulator and the
/// game-day.
pub const DRILL_STRATEGIES: &str = "none,immediate,full,full+budget+breaker";

/// Every knob of a simulation. Start from [`Params::defaults`] and change
/// fields; [`Params::validate`] names the first bad one by its flag.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// The model.
    pub model: Model,
    /// Simulated time (failover, metastable, layers); for contention the
    /// limit after which unfinished clients count as failed.
    pub duration: Duration,
    /// Tick length (failover).
    pub tick: Duration,
    /// New requests per tick (failover).
    pub arrivals: u32,
    /// Arrivals per second (metastable; layers).
    pub rate: f64,
    /// Attempts per tick (failover) or completions per second (metastable).
    pub capacity: f64,
    /// Client timeout (metastable).
    pub timeout: Duration,
    /// Whether the server drops work whose deadline has passed (metastable):
    /// the older spelling of `servers: [Server::DeadlineDrop]`, used when
    /// `servers` is empty.
    pub server_skips_expired: bool,
    /// The server strategies to compare (metastable), one row each per
    /// client strategy; empty means `fifo` (or `deadline-drop` with
    /// `server_skips_expired`). See [`Params::server_list`].
    pub servers: Vec<Server>,
    /// Whether an overloaded server sheds retries before first attempts
    /// (failover): retries get only the capacity first attempts leave, and
    /// the rest are answered at once with a `Retry-After` of 1 to 5 s.
    pub server_sheds_retries: bool,
    /// Outage start (failover, metastable).
    pub outage_start: Duration,
    /// Outage end (failover, metastable).
    pub outage_end: Duration,
    /// Extra requests failing in the first outage tick (failover).
    pub burst: u32,
    /// Client processes (failover: requests spread round-robin; contention:
    /// racing clients, sweepable).
    pub clients: ClientRange,
    /// Max attempts, the first included; `None` is unlimited.
    pub attempts: Option<u32>,
    /// First backoff.
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
    /// Success under overload (failover).
    pub success_model: SuccessModel,
    /// Mean one-way hop (contention).
    pub hop_mean: Duration,
    /// Standard deviation of a hop (contention).
    pub hop_sd: Duration,
    /// Layers in the call chain (layers).
    pub layers: u32,
    /// Dependency failure probabilities to report (layers).
    pub failure_rates: Vec<f64>,
    /// First seed; run `i` uses `seed + i` unless `seeds` is given.
    pub seed: u64,
    /// Number of runs averaged.
    pub runs: u32,
    /// Explicit run seeds (replaces `seed` and `runs`).
    pub seeds: Option<Vec<u64>>,
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Params {
    /// The defaults of `model`, as the issue states them.
    pub fn defaults(model: Model) -> Self {
        let mut p = Params {
            model,
            duration: Duration::from_secs(60),
            tick: ms(250),
            arrivals: 8,
            rate: 280.0,
            capacity: 10.0,
            timeout: Duration::from_secs(1),
            server_skips_expired: false,
            servers: Vec::new(),
            server_sheds_retries: false,
            outage_start: Duration::from_secs(2),
            outage_end: Duration::from_secs(5),
            burst: 200,
            clients: ClientRange::one(10),
            attempts: Some(5),
            base: ms(100),
            cap: Duration::from_secs(10),
            success_model: SuccessModel::Square,
            hop_mean: ms(10),
            hop_sd: ms(2),
            layers: 3,
            failure_rates: vec![0.01, 0.1, 0.5, 1.0],
            seed: 1,
            runs: 200,
            seeds: None,
        };
        match model {
            Model::Failover => {}
            Model::Contention => {
                p.duration = Duration::from_secs(3600);
                p.clients = ClientRange { lo: 1, hi: 100 };
                p.attempts = None;
                p.base = ms(10);
                p.cap = Duration::from_secs(2);
            }
            Model::Metastable => {
                p.duration = Duration::from_secs(120);
                p.capacity = 300.0;
                p.outage_start = Duration::from_secs(10);
                p.outage_end = Duration::from_secs(20);
                p.attempts = Some(2);
            }
            Model::Layers => {
                p.duration = Duration::from_secs(10);
                p.rate = 100.0;
                p.attempts = Some(4);
            }
        }
        p
    }

    /// The drill: a fleet of 400 client processes sending 200 requests per
    /// second in all to a dependency with twice that capacity, which stalls
    /// for 2 s after 10 s of steady traffic — the failover model in ticks of
    /// 500 ms (the game-day's attempt timeout: a stalled attempt is known
    /// to have failed when it times out), 100 new requests per tick,
    /// capacity 200 per tick, an outage from 10 s to 12 s whose first tick
    /// also fails the 20 requests in flight when it began, 20 s in all, 5
    /// attempts from 100 ms doubling to 10 s. The same shape as
    /// `stagger gameday --drill`; pass `clients` 10 for a fleet of busy
    /// processes.
    pub fn drill() -> Self {
        Params {
            duration: Duration::from_secs(20),
            tick: ms(500),
            arrivals: 100,
            capacity: 200.0,
            outage_start: Duration::from_secs(10),
            outage_end: Duration::from_secs(12),
            burst: 20,
            clients: ClientRange::one(DRILL_PROCESSES),
            ..Params::defaults(Model::Failover)
        }
    }

    /// The server strategies of the metastable model's rows.
    pub fn server_list(&self) -> Vec<Server> {
        match (self.servers.is_empty(), self.server_skips_expired) {
            (false, _) => self.servers.clone(),
            (true, false) => vec![Server::Fifo],
            (true, true) => vec![Server::DeadlineDrop],
        }
    }

    /// Each run's seed, in run order.
    pub fn run_seeds(&self) -> Vec<u64> {
        match &self.seeds {
            Some(s) => s.clone(),
            None => (0..u64::from(self.runs))
                .map(|i| self.seed.wrapping_add(i))
                .collect(),
        }
    }

    /// Checks every field, naming the flag of the first bad one.
    pub fn validate(&self) -> Result<(), SimError> {
        let err = |flag: &'static str, why: String| Err(SimError::new(flag, why));
        if self.duration.is_zero() {
            return err("duration", "must be greater than zero".into());
        }
        if self.duration > Duration::from_secs(24 * 3600) {
            return err("duration", "must be at most 24h of simulated time".into());
        }
        if self.tick.is_zero() {
            return err("tick", "must be greater than zero".into());
        }
        if self.model == Model::Failover
            && self.duration.as_nanos() / self.tick.as_nanos() > 10_000_000
        {
            return err(
                "tick",
                "gives more than 10 million ticks; use a longer tick".into(),
            );
        }
        if self.arrivals > 1_000_000 {
            return err("arrivals", "must be at most 1000000 per tick".into());
        }
        if !(self.rate.is_finite() && self.rate > 0.0 && self.rate <= 1e6) {
            return err(
                "rate",
                format!("{} must be a number in (0, 1000000]", self.rate),
            );
        }
        if !(self.capacity.is_finite() && self.capacity > 0.0 && self.capacity <= 1e9) {
            return err(
                "capacity",
                format!("{} must be a positive number", self.capacity),
            );
        }
        if self.timeout.is_zero() {
            return err("timeout", "must be greater than zero".into());
        }
        if self.outage_end < self.outage_start {
            return err("outage-end", "is before --outage-start".into());
        }
        if self.burst > 10_000_000 {
            return err("burst", "must be at most 10000000".into());
        }
        if self.attempts == Some(0) {
            return err(
                "attempts",
                "must be at least 1 (the first attempt counts)".into(),
            );
        }
        if self.cap < self.base {
            return err(
                "cap",
                format!("{:?} is smaller than --base {:?}", self.cap, self.base),
            );
        }
        if self.layers == 0 || self.layers > 8 {
            return err("layers", format!("{} must be in 1..=8", self.layers));
        }
        if let Some(f) = self
            .failure_rates
            .iter()
            .find(|f| !(0.0..=1.0).contains(*f))
        {
            return err(
                "failure-rates",
                format!("{f} is not a probability in [0, 1]"),
            );
        }
        self.validate_volume()?;
        if self.model == Model::Failover && self.clients.is_sweep() {
            return err("clients", "a range is only for --model contention".into());
        }
        Ok(())
    }

    /// Checks the runs and the memory one run may need, naming the flag
    /// that makes it too much.
    fn validate_volume(&self) -> Result<(), SimError> {
        let err = |flag: &'static str, why: String| Err(SimError::new(flag, why));
        let runs = self.seeds.as_ref().map_or(self.runs as usize, Vec::len);
        if runs == 0 {
            return err("runs", "must be at least 1".into());
        }
        if runs > 1_000_000 {
            return err("runs", "must be at most 1000000".into());
        }
        // Bound the memory one run may need (every request keeps its call).
        const MAX_REQUESTS: f64 = 20e6;
        let secs = self.duration.as_secs_f64();
        let requests = match self.model {
            Model::Failover => {
                let ticks = (secs / self.tick.as_secs_f64()).ceil();
                ticks * f64::from(self.arrivals) + f64::from(self.burst)
            }
            Model::Metastable | Model::Layers => self.rate * secs,
            Model::Contention => 0.0,
        };
        if requests > MAX_REQUESTS {
            let flag = match self.model {
                Model::Failover => "arrivals",
                _ => "rate",
            };
            return err(
                flag,
                format!("makes {requests:.0} requests per run; the limit is {MAX_REQUESTS:.0} (shorten --duration)"),
            );
        }
        Ok(())
    }
}
