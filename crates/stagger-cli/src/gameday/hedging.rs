//! `stagger gameday --fault slow --hedging LIST`: hedging strategies on real
//! sockets against random stalls, beside the simulator's prediction.

use std::process::ExitCode;
use std::time::Duration;

use stagger_gameday::gameday::hedging;
use stagger_sim::hedging::{HedgeStrategy, HedgingParams};

use crate::args::{gameday_error, UsageError};

/// What `stagger gameday` passes on.
pub struct Run<'a> {
    pub strategies: &'a str,
    pub rate: Option<f64>,
    pub duration: Option<Duration>,
    pub seed: u64,
    pub json: bool,
}

/// Runs the hedging game-day and prints its table or JSON.
pub fn run(r: &Run<'_>) -> anyhow::Result<ExitCode> {
    let strategies = HedgeStrategy::parse_list(r.strategies)
        .map_err(|e| UsageError(format!("--hedging: {}", e.problem())))?;
    let rate = r.rate.unwrap_or(500.0);
    let duration = r.duration.unwrap_or(Duration::from_secs(4));
    if duration.is_zero() || duration > Duration::from_secs(60) {
        return Err(UsageError("--duration: the hedging game-day takes 1ms to 60s".into()).into());
    }
    let requests = (rate * duration.as_secs_f64()).round().max(1.0) as u64;
    let p = HedgingParams {
        seed: r.seed,
        ..HedgingParams::default()
    };
    let runs = hedging::run(&p, &strategies, requests, rate).map_err(gameday_error)?;
    if r.json {
        println!(
            "{}",
            serde_json::json!({"fault": "slow", "requests": requests, "rate": rate, "runs": runs})
        );
    } else {
        print!(
            "{}",
            stagger_report::gameday::hedging_table(&p, &runs, requests, rate)
        );
    }
    Ok(ExitCode::SUCCESS)
}
