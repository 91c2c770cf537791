//! `stagger gameday --priority`: a CPU-bound upstream at twice its capacity,
//! 20 % critical and 80 % sheddable, behind ShedLayer with priorities,
//! ShedLayer without, and tower-acc's AIMD limit, one after the other;
//! with `--cpu-trigger`, then the ShedLayer by priority with a CPU trigger
//! and the trace of its reading and shed rate.

use std::process::ExitCode;
use std::time::Duration;

use stagger_gameday::gameday::priority::{self, PriorityParams};

use crate::args::gameday_error;

/// Runs the priority game-day and prints its table or JSON.
pub fn run(
    duration: Option<Duration>,
    cpu_trigger: Option<Duration>,
    seed: u64,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let p = PriorityParams {
        duration: duration.unwrap_or(PriorityParams::default().duration),
        cpu_trigger,
        seed,
        ..PriorityParams::default()
    };
    let report = priority::run(&p).map_err(gameday_error)?;
    if json {
        println!(
            "{}",
            serde_json::json!({"scenario": "priority", "report": report})
        );
    } else {
        print!("{}", stagger_report::gameday::priority_table(&p, &report));
    }
    Ok(ExitCode::SUCCESS)
}
