//! The simulation and schedule endpoints: a query parsed as the
//! subcommand's flags, bounded so one request costs a fraction of a second
//! of CPU, answered by the subcommand's own JSON function.

use std::time::Duration;

use stagger_sim::{Model, Options};

use super::query::{self, BadParam};
use crate::{schedule, simulate, simulate_hedging};

/// Flags the API refuses: they write files or change only the command
/// line's output, not the answer.
const REFUSED: &[&str] = &["out", "threads", "format"];

/// Runs averaged per row, at most.
pub(crate) const MAX_RUNS: usize = 200;
/// Rows × runs, at most (the command line's default failover comparison is
/// 8 × 200; the page's contention scene 5 strategies × 40 client counts × 10).
pub(crate) const MAX_WORK: u64 = 2_000;
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

/// An estimate of a simulation's CPU time in the units of [`MAX_COST`],
/// calibrated on this machine per model: failover grows with the clients'
/// own guardrails, layers with `attempts^layers` at the failure rates
/// given, contention with the racing clients squared.
fn cost(p: &stagger_sim::Params, strategies: &[stagger_sim::Strategy]) -> f64 {
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

/// `GET /api/simulate`: exactly what `stagger simulate --format json`
/// prints for the same flags.
pub(crate) fn simulate(q: &str) -> Result<String, BadParam> {
    let args: simulate::Args = query::parse("simulate", q, REFUSED)?;
    if args.is_hedging() {
        return simulate_hedging(&args);
    }
    let (p, strategies) = args.params().map_err(usage)?;
    let runs = p.run_seeds().len();
    if runs > MAX_RUNS {
        return Err(BadParam::new(
            if p.seeds.is_some() { "seeds" } else { "runs" },
            format!("{runs} runs is more than this server's limit of {MAX_RUNS}"),
        ));
    }
    let work = stagger_sim::work_items(&p, &strategies);
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
    let cost = cost(&p, &strategies);
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
    let opts = Options {
        threads: 1,
        progress: None,
    };
    let (_, doc) = simulate::simulate(&p, &strategies, &opts).map_err(usage)?;
    Ok(doc + "\n")
}

/// `GET /api/simulate?model=hedging&…`: the hedging model's own parameters,
/// bounded by requests × strategies × attempts and by servers (the report's
/// utilisation sweep writes files and is not served).
fn simulate_hedging(args: &simulate::Args) -> Result<String, BadParam> {
    let run = args.hedging(1);
    if let Some(c) = run.capacity {
        if c.is_finite() && c > MAX_HEDGE_SERVERS {
            return Err(BadParam::new(
                "capacity",
                format!("is more than this server's limit of {MAX_HEDGE_SERVERS} servers"),
            ));
        }
    }
    let (p, strategies) = simulate_hedging::params(&run).map_err(usage)?;
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
    let opts = Options {
        threads: 1,
        progress: None,
    };
    let (_, doc) = simulate_hedging::simulate(&p, &strategies, &opts).map_err(usage)?;
    Ok(doc + "\n")
}

/// `GET /api/schedule`: exactly what `stagger schedule --format json`
/// prints for the same flags.
pub(crate) fn schedule(q: &str) -> Result<String, BadParam> {
    let args: schedule::Args = query::parse("schedule", q, REFUSED)?;
    let retries = args
        .policy
        .schedule
        .limit()
        .map_err(usage)?
        .saturating_sub(1) as usize;
    if retries > MAX_RETRIES {
        return Err(BadParam::new(
            "attempts",
            format!("is more than this server's limit of {}", MAX_RETRIES + 1),
        ));
    }
    if retries.saturating_mul(args.samples) > MAX_DRAWS {
        return Err(BadParam::new(
            "samples",
            format!(
                "{} samples × {retries} retries is more than this server's limit of {MAX_DRAWS} delays",
                args.samples
            ),
        ));
    }
    let doc = schedule::json(&args).map_err(usage)?;
    Ok(doc + "\n")
}

fn usage(e: anyhow::Error) -> BadParam {
    BadParam::from_usage(&format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_parameters_are_named() {
        let e = simulate("runs=100000").unwrap_err();
        assert_eq!(e.parameter, "runs", "{}", e.message);
        let e = simulate("burst=9999999").unwrap_err();
        assert_eq!(e.parameter, "burst");
        let e = simulate("model=metastable&duration=1h&runs=1").unwrap_err();
        assert_eq!(e.parameter, "duration");
        let e = simulate("model=metastable&rate=2000&duration=300s&runs=20").unwrap_err();
        assert_eq!(e.parameter, "runs", "{}", e.message);
        assert!(
            e.message.contains("the work this server does"),
            "{}",
            e.message
        );
        // The command line's default comparison fits; a fleet of 400 with
        // their own guardrails, or retries at every one of 5 layers, does not.
        assert!(simulate("runs=1&duration=5s").is_ok());
        assert_eq!(cost_of(""), cost_of("model=failover"));
        assert!(cost_of("") < MAX_COST, "{}", cost_of(""));
        assert!(cost_of("clients=400") > MAX_COST);
        assert!(cost_of("model=layers&layers=5&attempts=20&runs=1") > MAX_COST);
        assert!(cost_of("model=layers&runs=4") < MAX_COST);
        assert!(cost_of("model=contention&clients=1..40&runs=10") < MAX_COST);
        let e = simulate("model=hedging").unwrap_err();
        assert_eq!(e.parameter, "requests", "{}", e.message);
        let e = simulate("model=hedging&requests=30000&hedge_attempts=4").unwrap_err();
        assert_eq!(e.parameter, "requests", "{}", e.message);
        let e = simulate("model=hedging&requests=1000&capacity=5000&utilisation=0.5").unwrap_err();
        assert_eq!(e.parameter, "capacity", "{}", e.message);
        let e = simulate("model=hedging&requests=1000&utilisation=1.5&capacity=4").unwrap_err();
        assert_eq!(e.parameter, "utilisation", "{}", e.message);
        assert!(simulate("model=hedging&requests=20000").is_ok());
        let e = simulate("out=/tmp/x").unwrap_err();
        assert_eq!(e.parameter, "out");
        let e = simulate("model=nonsense").unwrap_err();
        assert_eq!(e.parameter, "model", "{}", e.message);
        let e = simulate("strategy=full,bogus&runs=1").unwrap_err();
        assert_eq!(e.parameter, "strategy", "{}", e.message);
        let e = schedule("attempts=4294967295&samples=0").unwrap_err();
        assert_eq!(e.parameter, "attempts");
        let e = schedule("samples=1000000").unwrap_err();
        assert_eq!(e.parameter, "samples");
        let e = schedule("jitter=purple").unwrap_err();
        assert_eq!(e.parameter, "jitter", "{}", e.message);
    }

    fn cost_of(q: &str) -> f64 {
        let a: simulate::Args = query::parse("simulate", q, REFUSED).unwrap();
        let (p, s) = a.params().unwrap();
        cost(&p, &s)
    }

    #[test]
    fn a_small_simulation_answers_json() {
        let doc = simulate("strategy=full&runs=2&duration=10s").unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["model"], "failover");
        assert_eq!(v["strategies"][0]["strategy"], "full");
        assert_eq!(v["strategies"][0]["runs"], 2);
    }
}
