//! The priority model's comparison (`stagger simulate --model priority`)
//! as text: one table per load, as the other models print theirs.
//!
//! ```
//! use stagger_sim::priority::{compare, run, Shedding, Workload};
//!
//! let w = Workload { seconds: 2.0, ..Workload::default() };
//! let seeds = [1];
//! let rows = compare(&w, &seeds);
//! let unloaded = [run(&Workload { load: 0.3, ..w }, Shedding::Queue, 1)];
//! let text = stagger_report::simulate::priority::table(&w, &seeds, &rows, &unloaded);
//! assert!(text.starts_with("priority: load 2× capacity"));
//! assert_eq!(text.lines().count(), 2 + rows.len());
//! ```

use std::time::Duration;

use stagger_sim::priority::{range, Report, Shedding, Workload};

/// The comparison of `rows` (each way of shedding and its reports, one per
/// seed in `seeds`) at `w`'s load: a line naming the workload, its load and
/// the critical p99 of `unloaded` (the same server at 0.3× its capacity),
/// then aligned columns, each figure the lowest and highest over `seeds`.
pub fn table(
    w: &Workload,
    seeds: &[u64],
    rows: &[(Shedding, Vec<Report>)],
    unloaded: &[Report],
) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let capacity = f64::from(w.cores) / w.cpu.as_secs_f64();
    let seeds_said = match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if seeds.len() > 1 => format!("seeds {a}–{b}"),
        (Some(a), _) => format!("seed {a}"),
        _ => "no seeds".into(),
    };
    let mut out = format!(
        "priority: load {}× capacity ({:.0} req/s to {} cores serving {:.0} req/s), {:.0} % critical, \
         {}s, deadline {}; ranges over {seeds_said}; critical p99 at 0.3× capacity {:.1} ms\n",
        w.load,
        w.load * capacity,
        w.cores,
        capacity,
        100.0 * w.critical,
        w.seconds,
        super::humantime_ms(w.deadline),
        range(unloaded, |r| ms(r.critical.p99())).1,
    );
    out.push_str(&format!(
        "{:<32}  {:>15}  {:>15}  {:>16}  {:>14}  {:>12}\n",
        "server",
        "critical served",
        "critical p99 ms",
        "sheddable served",
        "sheddable shed",
        "cores busy"
    ));
    let pct = |(a, b): (f64, f64)| format!("{:.1}–{:.1}%", 100.0 * a, 100.0 * b);
    for (s, r) in rows {
        let shed = |x: &Report| x.sheddable.shed as f64 / x.sheddable.offered.max(1) as f64;
        let (p_lo, p_hi) = range(r, |x| ms(x.critical.p99()));
        out.push_str(&format!(
            "{:<32}  {:>15}  {:>15}  {:>16}  {:>14}  {:>12}\n",
            s.name(),
            pct(range(r, |x| x.critical.success())),
            format!("{p_lo:.0}–{p_hi:.0}"),
            pct(range(r, |x| x.sheddable.success())),
            pct(range(r, shed)),
            pct(range(r, |x| x.utilisation)),
        ));
    }
    out
}
