//! `stagger simulate --model priority`: a CPU-bound server at twice its
//! capacity, 20 % critical and 80 % sheddable, under each way of shedding,
//! five seeds each (the library's Limiter, Ceilings and CpuTrigger in
//! virtual time; SIMULATOR.md §8).

use std::io::Write;
use std::process::ExitCode;

use stagger_sim::priority::{self, Workload};

/// Runs the comparison from `seed` (seeds `seed` to `seed + 4`) and
/// prints its table, or with `json` one object per way of shedding.
pub fn run(seed: Option<u64>, json: bool) -> anyhow::Result<ExitCode> {
    let first = seed.unwrap_or(1);
    let seeds: Vec<u64> = (0..5).map(|i| first.wrapping_add(i)).collect();
    let w = Workload::default();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json {
        let rows: Vec<serde_json::Value> = priority::compare(&w, &seeds)
            .iter()
            .map(|(s, r)| {
                let both = |f: &dyn Fn(&priority::Report) -> f64| {
                    let (lo, hi) = priority::range(r, f);
                    serde_json::json!([lo, hi])
                };
                serde_json::json!({
                    "server": s.name(),
                    "critical_served": both(&|x| x.critical.success()),
                    "critical_p99_ms": both(&|x| x.critical.p99().as_secs_f64() * 1e3),
                    "sheddable_served": both(&|x| x.sheddable.success()),
                    "busy": both(&|x| x.utilisation),
                })
            })
            .collect();
        let doc = serde_json::json!({ "model": "priority", "seeds": seeds, "rows": rows });
        writeln!(out, "{doc}")?;
    } else {
        write!(out, "{}", priority::table(&w, &seeds))?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
