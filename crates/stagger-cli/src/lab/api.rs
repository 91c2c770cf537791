//! The simulation and schedule endpoints: a query parsed as the
//! subcommand's flags, bounded so one request costs a fraction of a second
//! of CPU, answered by the subcommand's own JSON function.

use std::time::Duration;

use stagger_sim::{Model, Options};

use super::query::{self, BadParam};
use crate::{schedule, simulate};

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
/// Schedule samples × retries, at most.
const MAX_DRAWS: usize = 200_000;

/// `GET /api/simulate`: exactly what `stagger simulate --format json`
/// prints for the same flags.
pub(crate) fn simulate(q: &str) -> Result<String, BadParam> {
    let args: simulate::Args = query::parse("simulate", q, REFUSED)?;
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
    let opts = Options {
        threads: 1,
        progress: None,
    };
    let (_, doc) = simulate::simulate(&p, &strategies, &opts).map_err(usage)?;
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
        let e = simulate("out=/tmp/x").unwrap_err();
        assert_eq!(e.parameter, "out");
        let e = simulate("model=nonsense").unwrap_err();
        assert_eq!(e.parameter, "model", "{}", e.message);
        let e = simulate("strategy=full,bogus&runs=1").unwrap_err();
        assert_eq!(e.parameter, "strategy", "{}", e.message);
        let e = schedule("samples=1000000").unwrap_err();
        assert_eq!(e.parameter, "samples");
        let e = schedule("jitter=purple").unwrap_err();
        assert_eq!(e.parameter, "jitter", "{}", e.message);
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
