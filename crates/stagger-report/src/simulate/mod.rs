//! What a simulation shows: the table printed on a terminal and the report
//! directory (`report.html`, self-contained with inline SVG charts;
//! `results.json`; `series.csv`).

use std::io::{self, Write};
use std::path::Path;

use stagger_sim::{Params, Results};

use crate::WriteError;

mod charts;
pub mod hedging;
pub mod priority;
mod report;
mod table;

/// Prints the table of `r` (simulated under `p`): a line describing the
/// run, then one row per strategy (per client count for contention, per
/// mode and failure rate for layers).
pub fn print_table(out: &mut impl Write, p: &Params, r: &Results) -> io::Result<()> {
    table::print(out, p, r)
}

/// Writes `report.html`, `results.json` (`json`, the `--format json`
/// document) and `series.csv` into `dir`, creating it.
pub fn write_report(dir: &Path, p: &Params, r: &Results, json: &str) -> Result<(), WriteError> {
    report::write(dir, p, r, json)
}

/// The self-contained HTML report.
pub fn html(p: &Params, r: &Results) -> String {
    report::html(p, r)
}

/// The per-bin series (failover, metastable) or one line per row
/// (contention, layers), as CSV.
pub fn csv(r: &Results) -> String {
    report::csv(r)
}

/// Fails at once, before a long simulation, if the report directory
/// cannot be made or written to.
pub fn writable(dir: &std::path::Path) -> Result<(), String> {
    let shown = dir.display();
    std::fs::create_dir_all(dir).map_err(|e| format!("--out: cannot create {shown}: {e}"))?;
    let probe = dir.join(".stagger-write-test");
    std::fs::File::create(&probe).map_err(|e| format!("--out: cannot write in {shown}: {e}"))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `d` as milliseconds under a second, else as seconds (`250 ms`, `1.5 s`).
pub(crate) fn humantime_ms(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}
