//! The limits of the simulation and schedule endpoints, so that one
//! request costs a fraction of a second of CPU: runs, rows × runs,
//! simulated time, ticks, arrivals, and a cost model of each simulation's
//! CPU time calibrated per model.

use std::time::Duration;

use stagger_sim::hedging::{HedgeStrategy, HedgingParams};
use stagger_sim::priority::{Shedding, Workload};
use stagger_sim::{Model, Params, Strategy};

use super::query::BadParam;

/// Parameters the API refuses: flags that write files or change only the
/// command line's output, not the answer.
pub const REFUSED: &[&str] = &["out", "threads", "format"];

/// Runs averaged per row, at most.
const MAX_RUNS: usize = 200;
/// Rows × runs, at most (the command line's default failover comparison is
/// 8 × 200; the page's contention scene 5 strategies × 40 client counts × 10).
const MAX_WORK: u64 = 2_000;
/// Simulated time, at most (contention's is only a limit and is not bounded
/// here).
const MAX_DURATION: Duration = Duration::from_secs(300);
/// Failover ticks per run, at most.
const MAX_TICKS: u128 = 2_400;
/// Failover arrivals per tick and burst, metastable and layers rate, at most.
const MAX_ARRIVALS: u32 = 500;
const MAX_BURST: u32 = 5_000;
const MAX_RATE: f64 = 2_000.0;
/// Retries in one schedule, at most.
const MAX_RETRIES: usize = 100;
/// Schedule samples × retries, at most.
const MAX_DRAWS: usize = 200_000;

/// The most work one simulation request may ask for, in units of one
/// failover request of a 10-client fleet (about 0.16 µs of CPU here; the
/// command line's default failover comparison is 3.7 million of them,
/// half a second on one loaded core).
const MAX_COST: f64 = 4e6;

/// Hedging model: requests × strategies × attempts per call, at most (the
/// page's scene asks for 20,000 requests, 5 strategies and 2 attempts; the
/// command line's default of 200,000 requests is refused here).
const MAX_HEDGE_WORK: u64 = 400_000;
/// Hedging model: servers, at most.
const MAX_HEDGE_SERVERS: f64 = 1_000.0;

/// Priority model: arrivals simulated in all (loads × ways of shedding ×
/// seeds), at most. The page's scene asks for 11 loads from 0.5× to 3×
/// capacity, 5 seeds and 10 s: about 770,000.
const MAX_PRIORITY_ARRIVALS: f64 = 2e6;

/// An estimate of a simulation's CPU time in the units of [`MAX_COST`],
/// calibrated on this machine per model: failover grows with the clients'
/// own guardrails, layers with `attempts^layers` at the failure rates
/// given, contention with the racing clients squared.
fn cost(p: &Params, strategies: &[Strategy]) -> f64 {
    let runs = p.run_seeds().len() as f64;
    let rows = strategies.len() as f64;
    let secs = p.duration.as_secs_f64();
    // A model added later is bounded by the runs and rows limits alone.
    #[allow(unreachable_patterns)]
    match p.model {
        Model::Failover => {
            let requests =
                f64::from(p.arrivals) * secs / p.tick.as_secs_f64().max(1e-3) + f64::from(p.burst);
            rows * runs * requests * (1.0 + f64::from(p.clients.hi) / 130.0)
        }
        Model::Metastable => rows * runs * 1.5 * p.rate * secs,
        Model::Layers => {
            // Attempts reaching the bottom per request when every layer
            // retries: (Σ_{k<a} f^k)^layers, at most a^layers.
            let a = f64::from(p.attempts.unwrap_or(1_000));
            let per_request: f64 = p
                .failure_rates
                .iter()
                .map(|f| {
                    let f = f.clamp(0.0, 1.0);
                    let e = if f >= 1.0 {
                        a
                    } else {
                        (1.0 - f.powf(a)) / (1.0 - f)
                    };
                    e.powf(f64::from(p.layers))
                })
                .sum();
            // Three placements of the retries per strategy; about six
            // layer events cost one unit.
            rows * 3.0 * runs * p.rate * secs * per_request / 6.0
        }
        Model::Contention => {
            let clients: f64 = p
                .clients
                .iter()
                .map(|c| f64::from(c) * (1.0 + f64::from(c) / 30.0))
                .sum();
            rows * runs * clients * 1.5
        }
        _ => 0.0,
    }
}

/// Refuses a simulation past this server's limits, naming the parameter to
/// lower: runs, rows × runs, duration, ticks, arrivals, burst, rate, and
/// the estimated CPU time of the whole request.
pub fn check_simulation(p: &Params, strategies: &[Strategy]) -> Result<(), BadParam> {
    let runs = p.run_seeds().len();
    if runs > MAX_RUNS {
        return Err(BadParam::new(
            if p.seeds.is_some() { "seeds" } else { "runs" },
            format!("{runs} runs is more than this server's limit of {MAX_RUNS}"),
        ));
    }
    let work = stagger_sim::work_items(p, strategies);
    if work > MAX_WORK {
        return Err(BadParam::new(
            "runs",
            format!(
                "{work} runs in all (rows × runs) is more than this server's limit of \
                 {MAX_WORK}; lower runs, or give fewer strategies or clients"
            ),
        ));
    }
    if p.model != Model::Contention && p.duration > MAX_DURATION {
        return Err(BadParam::new(
            "duration",
            format!(
                "is more than this server's limit of {}s",
                MAX_DURATION.as_secs()
            ),
        ));
    }
    if p.model == Model::Failover {
        let ticks = p.duration.as_nanos() / p.tick.as_nanos().max(1);
        if ticks > MAX_TICKS {
            return Err(BadParam::new(
                "tick",
                format!("{ticks} ticks per run is more than this server's limit of {MAX_TICKS}"),
            ));
        }
    }
    if p.arrivals > MAX_ARRIVALS {
        return Err(BadParam::new(
            "arrivals",
            format!("is more than this server's limit of {MAX_ARRIVALS}"),
        ));
    }
    if p.burst > MAX_BURST {
        return Err(BadParam::new(
            "burst",
            format!("is more than this server's limit of {MAX_BURST}"),
        ));
    }
    if p.rate > MAX_RATE {
        return Err(BadParam::new(
            "rate",
            format!("is more than this server's limit of {MAX_RATE}"),
        ));
    }
    let cost = cost(p, strategies);
    if cost > MAX_COST {
        return Err(BadParam::new(
            "runs",
            format!(
                "this simulation is about {:.1}× the work this server does per request; lower \
                 runs (or duration, rate, clients, layers, attempts, strategies)",
                cost / MAX_COST
            ),
        ));
    }
    Ok(())
}

/// Refuses a hedging model with more servers than this server simulates
/// (checked before the model's own parameters are read).
pub fn check_hedging_servers(capacity: Option<f64>) -> Result<(), BadParam> {
    if let Some(c) = capacity {
        if c.is_finite() && c > MAX_HEDGE_SERVERS {
            return Err(BadParam::new(
                "capacity",
                format!("is more than this server's limit of {MAX_HEDGE_SERVERS} servers"),
            ));
        }
    }
    Ok(())
}

/// Refuses a hedging model past requests × strategies × attempts.
pub fn check_hedging(p: &HedgingParams, strategies: &[HedgeStrategy]) -> Result<(), BadParam> {
    let work = p
        .requests
        .saturating_mul(strategies.len() as u64)
        .saturating_mul(u64::from(p.hedge_attempts));
    if work > MAX_HEDGE_WORK {
        return Err(BadParam::new(
            "requests",
            format!(
                "{} requests × {} strategies × {} attempts is more than this server's limit of \
                 {MAX_HEDGE_WORK}; lower requests, or give fewer strategies or hedge_attempts",
                p.requests,
                strategies.len(),
                p.hedge_attempts
            ),
        ));
    }
    Ok(())
}

/// Refuses a priority model that simulates more than 2 million arrivals
/// in all: `workload` at each of `loads`, under every way of shedding,
/// once per seed.
pub fn check_priority(workload: &Workload, loads: &[f64], seeds: usize) -> Result<(), BadParam> {
    let capacity = f64::from(workload.cores) / workload.cpu.as_secs_f64().max(1e-6);
    let arrivals = loads.iter().sum::<f64>()
        * capacity
        * workload.seconds
        * Shedding::ALL.len() as f64
        * seeds as f64;
    if arrivals > MAX_PRIORITY_ARRIVALS {
        return Err(BadParam::new(
            "runs",
            format!(
                "about {arrivals:.0} simulated arrivals is more than this server's limit of \
                 {MAX_PRIORITY_ARRIVALS:.0}; lower runs, duration or the loads"
            ),
        ));
    }
    Ok(())
}

/// Refuses a schedule of more than 100 retries, or of more than 200,000
/// delays (samples × retries).
pub fn check_schedule(retries: usize, samples: usize) -> Result<(), BadParam> {
    if retries > MAX_RETRIES {
        return Err(BadParam::new(
            "attempts",
            format!("is more than this server's limit of {}", MAX_RETRIES + 1),
        ));
    }
    if retries.saturating_mul(samples) > MAX_DRAWS {
        return Err(BadParam::new(
            "samples",
            format!(
                "{} samples × {retries} retries is more than this server's limit of {MAX_DRAWS} delays",
                samples
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use stagger_sim::ClientRange;

    use super::*;

    fn cost_of(model: Model, set: impl FnOnce(&mut Params)) -> f64 {
        let mut p = Params::defaults(model);
        set(&mut p);
        cost(&p, &Strategy::defaults(model))
    }

    #[test]
    fn the_cost_model_refuses_what_takes_too_long() {
        // The command line's default comparison fits; a fleet of 400 with
        // their own guardrails, or retries at every one of 5 layers, does not.
        let failover = cost_of(Model::Failover, |_| {});
        assert!(failover < MAX_COST, "{failover}");
        let clients = |c: &str| c.parse::<ClientRange>().unwrap();
        assert!(cost_of(Model::Failover, |p| p.clients = clients("400")) > MAX_COST);
        let layers = cost_of(Model::Layers, |p| {
            p.layers = 5;
            p.attempts = Some(20);
            p.runs = 1;
        });
        assert!(layers > MAX_COST);
        assert!(cost_of(Model::Layers, |p| p.runs = 4) < MAX_COST);
        let contention = cost_of(Model::Contention, |p| {
            p.clients = clients("1..40");
            p.runs = 10;
        });
        assert!(contention < MAX_COST);
    }

    #[test]
    fn bounds_name_the_parameter() {
        let mut p = Params::defaults(Model::Failover);
        p.burst = 9_999_999;
        let e = check_simulation(&p, &Strategy::defaults(Model::Failover)).unwrap_err();
        assert_eq!(e.parameter(), "burst");
        assert_eq!(
            check_hedging_servers(Some(5000.0)).unwrap_err().parameter(),
            "capacity"
        );
        assert!(check_hedging_servers(Some(f64::INFINITY)).is_ok());
        // The page's priority scene fits; ten times its duration does not.
        let scene: Vec<f64> = (0..11).map(|i| 0.5 + 0.25 * f64::from(i)).collect();
        let short = Workload {
            seconds: 10.0,
            ..Workload::default()
        };
        assert!(check_priority(&short, &scene, 5).is_ok());
        let long = Workload {
            seconds: 100.0,
            ..short
        };
        assert_eq!(
            check_priority(&long, &scene, 5).unwrap_err().parameter(),
            "runs"
        );
        // 100 retries (101 attempts) is the limit; one more is refused.
        assert!(check_schedule(MAX_RETRIES, 0).is_ok());
        assert_eq!(
            check_schedule(MAX_RETRIES + 1, 0).unwrap_err().parameter(),
            "attempts"
        );
        assert_eq!(
            check_schedule(99, 1_000_000).unwrap_err().parameter(),
            "samples"
        );
    }
}
