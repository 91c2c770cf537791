//! The hedging and priority game-days' tables, with the CPU trigger's
//! trace, as text of at most 100 columns.

use stagger_gameday::gameday::hedging::HedgingRun;
use stagger_gameday::gameday::priority::cpu::{CpuRun, TracePoint};
use stagger_gameday::gameday::priority::{PriorityParams, PriorityReport, ServerRun};
use stagger_sim::hedging::HedgingParams;

/// The hedging game-day's table: measured and predicted, one line per
/// strategy.
pub fn hedging_table(p: &HedgingParams, runs: &[HedgingRun], requests: u64, rate: f64) -> String {
    let mut s = format!(
        "hedging game-day on 127.0.0.1: {requests} GET requests at {rate}/s per strategy; service LogNormal(median {:?}, σ {}) + {:?} with probability {}; unlimited capacity\n",
        p.latency_median, p.latency_sigma, p.stall, p.stall_prob
    );
    s.push_str(&format!(
        "{:<14} {:>9} {:>9} {:>11} {:>8}   {:>9} {:>9} {:>11}\n",
        "strategy", "p50 ms", "p99 ms", "extra load", "errors", "sim p50", "sim p99", "sim extra"
    ));
    for r in runs {
        s.push_str(&format!(
            "{:<14} {:>9.1} {:>9.1} {:>10.1}% {:>8}   {:>9.1} {:>9.1} {:>10.1}%\n",
            r.measured.strategy,
            r.measured.p50_ms,
            r.measured.p99_ms,
            r.measured.extra_load * 100.0,
            r.errors,
            r.predicted.p50_ms,
            r.predicted.p99_ms,
            r.predicted.extra_load * 100.0,
        ));
    }
    s
}

/// One server's line of the table.
fn row(v: &ServerRun) -> String {
    format!(
        "{:<26} {:>6.1}% {:>6.1}ms {:>6.1} {:>6.1}% {:>6} {:>6} {:>6} {:>7}\n",
        v.server,
        v.critical.success_pct,
        v.critical.p99_ms,
        v.critical_p99_ratio,
        v.sheddable.success_pct,
        v.critical.shed,
        v.sheddable.shed,
        v.critical.failed + v.sheddable.failed,
        v.layer_shed,
    )
}

/// The priority game-day's table, ≤ 100 columns (with the CPU trigger's run, its row, how it
/// held and its trace plotted every half second).
pub fn priority_table(p: &PriorityParams, r: &PriorityReport) -> String {
    let mut s = format!(
        "priority game-day on 127.0.0.1: {:?} of CPU a request on {} core(s) ({} loop rounds)\n\
         capacity {}/s; {} requests at {}/s ({}×) per server, {:.0} % critical, deadline {:?}, \
         limit {}\nunloaded p99 {} ms\n",
        p.work,
        p.cores,
        r.iterations,
        r.capacity_rps,
        r.requests,
        r.rate_rps,
        p.load,
        p.critical * 100.0,
        p.deadline,
        p.limit,
        r.unloaded_p99_ms
    );
    s.push_str(&format!(
        "{:<26} {:>7} {:>8} {:>6} {:>7} {:>6} {:>6} {:>6} {:>7}\n",
        "server", "crit ok", "crit p99", "×idle", "shd ok", "c 503", "s 503", "failed", "shed"
    ));
    for v in r.servers.iter().chain(r.cpu.as_ref().map(|c| &c.server)) {
        s.push_str(&row(v));
    }
    s.push_str(
        "crit ok / shd ok: answered 200 in time (after a warm-up fifth)\n\
         ×idle: critical p99 over the unloaded p99\n\
         c 503 / s 503: shed answers by level; failed: no answer in time; shed: the layer's count\n\
         (every count after the warm-up fifth)\n",
    );
    if let Some(c) = &r.cpu {
        s.push_str(&cpu_section(c));
    }
    s
}

/// The CPU trigger's part of the game-day's table: how it held, then its
/// trace plotted every half second.
fn cpu_section(c: &CpuRun) -> String {
    let h = &c.holding;
    format!(
        "\nCPU trigger ({:.0} %, fed by the upstream's threads) for {:.0} s, {:.0} ms requests\n\
         capacity {}/s, {}/s offered, unloaded p99 {} ms; {} shed by the trigger\n\
         settled from {:.1} s: cpu {:.1} %, shed rate {:.1} % (peak-to-peak {:.1} pts, \
         {} swings), {}/{} at 0\n{}",
        h.threshold * 100.0,
        c.duration_s,
        c.work_ms,
        c.capacity_rps,
        c.rate_rps,
        c.unloaded_p99_ms,
        c.shed_by_cpu,
        h.settled_from_s,
        h.mean_utilisation * 100.0,
        h.mean_shed_rate * 100.0,
        h.shed_rate_peak_to_peak * 100.0,
        h.swings,
        h.samples_not_shedding,
        h.samples,
        cpu_plot(&c.trace, h.threshold, 5),
    )
}

/// The trace as text: one line every `every` samples with the reading,
/// the smoothed utilisation, the shed rate and a bar of each (≤ 100
/// columns), the threshold marked `|` on the utilisation's bar.
fn cpu_plot(trace: &[TracePoint], threshold: f64, every: usize) -> String {
    const BAR: f64 = 30.0;
    let bar = |v: f64, mark: Option<f64>| -> String {
        let n = (v.clamp(0.0, 1.0) * BAR).round() as usize;
        let m = mark.map(|t| (t * BAR).round() as usize);
        (0..BAR as usize)
            .map(|i| match (i < n, Some(i) == m) {
                (_, true) => '|',
                (true, false) => '#',
                (false, false) => ' ',
            })
            .collect()
    };
    let mut s = format!(
        "{:>6} {:>5} {:>5} {:>5}  {:<30}  {:<30}\n",
        "t", "read", "cpu", "shed", "cpu (smoothed), | = threshold", "shed rate"
    );
    for p in trace.iter().step_by(every.max(1)) {
        s.push_str(&format!(
            "{:>5.1}s {:>4.0}% {:>4.0}% {:>4.0}%  {}  {}\n",
            p.t_s,
            p.reading * 100.0,
            p.utilisation * 100.0,
            p.shed_rate * 100.0,
            bar(p.utilisation, Some(threshold)),
            bar(p.shed_rate, None),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger_gameday::gameday::priority::{Level, SERVERS};
    use stagger_sim::hedging::HedgingRow;

    fn point(t_s: f64, utilisation: f64, shed_rate: f64) -> TracePoint {
        TracePoint {
            t_s,
            reading: utilisation,
            utilisation,
            shed_rate,
        }
    }

    #[test]
    fn the_hedging_table_has_a_line_per_strategy() {
        let row = |strategy: &str, p99_ms| HedgingRow {
            strategy: strategy.to_string(),
            p50_ms: 10.0,
            p99_ms,
            p999_ms: p99_ms,
            extra_load: 0.05,
        };
        let runs: Vec<HedgingRun> = [("none", 210.0), ("20ms", 40.0)]
            .iter()
            .map(|&(s, p99)| HedgingRun {
                measured: row(s, p99),
                predicted: row(s, p99 - 1.0),
                errors: 0,
            })
            .collect();
        let t = hedging_table(&HedgingParams::default(), &runs, 300, 300.0);
        assert_eq!(t.lines().count(), 4, "{t}");
        assert!(t.lines().nth(3).unwrap().starts_with("20ms"), "{t}");
        assert!(t.contains("210.0"), "{t}");
    }

    #[test]
    fn the_plot_fits_in_100_columns_and_marks_the_threshold() {
        let trace = [
            point(0.1, 0.0, 0.0),
            point(0.2, 1.0, 1.0),
            point(0.3, 0.5, 0.25),
        ];
        let text = cpu_plot(&trace, 0.8, 1);
        assert_eq!(text.lines().count(), 4, "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{line}");
        }
        assert!(text.lines().nth(1).unwrap().contains('|'), "{text}");
    }

    #[test]
    fn the_table_fits_in_100_columns() {
        let level = |pct| Level {
            sent: 100,
            ok: 50,
            shed: 50,
            success_pct: pct,
            p99_ms: 999.9,
            ..Level::default()
        };
        let r = PriorityReport {
            iterations: 12_345_678,
            capacity_rps: 1234.5,
            rate_rps: 2469.0,
            unloaded_p99_ms: 12.345,
            requests: 49_999,
            servers: SERVERS
                .iter()
                .map(|&server| ServerRun {
                    server,
                    critical: level(100.0),
                    sheddable: level(0.1),
                    critical_p99_ratio: 81.1,
                    layer_shed: 49_999,
                })
                .collect(),
            cpu: None,
        };
        let t = priority_table(&PriorityParams::default(), &r);
        assert_eq!(t.lines().count(), 11, "{t}");
        for line in t.lines() {
            assert!(
                line.chars().count() <= 100,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert!(t.contains("tower-acc AIMD"), "{t}");
    }
}
