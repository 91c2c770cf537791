//! What the hedging model shows: its table, and a report page with the
//! latency percentiles per strategy and latency and extra load against
//! utilisation for both cancellation modes.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;

use stagger_sim::hedging::{Cancel, HedgingParams, HedgingResults, SweepPoint, SWEEP};

use super::charts::{self, color, svg_or_note, Frame, Line};
use crate::WriteError;

/// One line describing the run.
pub fn describe(p: &HedgingParams) -> String {
    let capacity = match p.capacity {
        None => "unlimited capacity".to_owned(),
        Some(n) => format!(
            "{n} FIFO servers at utilisation {} (without hedges), cancel {}",
            p.utilisation,
            p.cancel.as_str()
        ),
    };
    format!(
        "hedging: {} requests, {} attempts at most; service LogNormal(median {:?}, σ {}) + {:?} with probability {}; {capacity}; seed {}",
        p.requests, p.hedge_attempts, p.latency_median, p.latency_sigma, p.stall, p.stall_prob, p.seed
    )
}

/// Prints the table: one row per strategy.
pub fn print_table(out: &mut impl Write, p: &HedgingParams, r: &HedgingResults) -> io::Result<()> {
    writeln!(out, "{}", describe(p))?;
    writeln!(
        out,
        "{:<16} {:>10} {:>10} {:>10} {:>11}",
        "strategy", "p50 ms", "p99 ms", "p99.9 ms", "extra load"
    )?;
    for row in &r.strategies {
        writeln!(
            out,
            "{:<16} {:>10.2} {:>10.2} {:>10.2} {:>10.1}%",
            row.strategy,
            row.p50_ms,
            row.p99_ms,
            row.p999_ms,
            row.extra_load * 100.0
        )?;
    }
    Ok(())
}

/// Writes `report.html` and `results.json` (`json`) into `dir`.
pub fn write_report(
    dir: &Path,
    p: &HedgingParams,
    r: &HedgingResults,
    sweep: &[SweepPoint],
    json: &str,
) -> Result<(), WriteError> {
    crate::write_files(
        dir,
        &[("report.html", &html(p, r, sweep)), ("results.json", json)],
    )
}

/// The self-contained page.
pub fn html(p: &HedgingParams, r: &HedgingResults, sweep: &[SweepPoint]) -> String {
    let mut h = crate::style::head("stagger simulate: hedging", "");
    let _ = write!(
        h,
        "<h1>stagger simulate — hedging</h1><p>{}</p>",
        crate::escape(&describe(p))
    );
    h.push_str("<p class=note>Every request was a call of the stagger library's own <code>HedgePolicy</code> in virtual time: its latency window chose the percentile delays, its budget capped the extra load.</p>");
    h.push_str("<table><tr><th>strategy</th><th>p50 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>extra load</th></tr>");
    for row in &r.strategies {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.1} %</td></tr>",
            crate::escape(&row.strategy),
            row.p50_ms,
            row.p99_ms,
            row.p999_ms,
            row.extra_load * 100.0
        );
    }
    h.push_str("</table><h2>Latency percentiles per strategy</h2><p class=note>x: nines of the percentile (0.3 = p50, 2 = p99, 3 = p99.9).</p>");
    let lines: Vec<Line<'_>> = r
        .strategies
        .iter()
        .enumerate()
        .map(|(i, row)| Line {
            name: &row.strategy,
            points: vec![
                (0.5f64.log10().abs(), row.p50_ms),
                (2.0, row.p99_ms),
                (3.0, row.p999_ms),
            ],
            color: color(i),
        })
        .collect();
    let frame = Frame {
        title: "call latency by percentile",
        x_desc: "nines",
        y_desc: "ms (log)",
        hlines: vec![],
        span: None,
        log_y: true,
        y_range: None,
    };
    h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
    if !sweep.is_empty() {
        utilisation_sweep(p, sweep, &mut h);
    }
    h.push_str("<h2>Files</h2><p><code>results.json</code> (the <code>--format json</code> document) sits beside this page.</p></body></html>\n");
    h
}

/// The sweep against utilisation: per way of cancelling, p99, p50 and the
/// extra load of every strategy.
fn utilisation_sweep(p: &HedgingParams, sweep: &[SweepPoint], h: &mut String) {
    let servers = p.capacity.unwrap_or(10);
    let _ = write!(
        h,
        "<h2>Against utilisation</h2><p class=note>{servers} FIFO servers, utilisation without hedges from {} to {}. <b>queued</b>: a call's other attempts leave the queue when it ends, but those being served run to completion. <b>running</b>: they stop too, freeing their server.</p>",
        SWEEP[0],
        SWEEP[SWEEP.len() - 1]
    );
    let mut names: Vec<&str> = Vec::new();
    for pt in sweep {
        if !names.contains(&pt.row.strategy.as_str()) {
            names.push(&pt.row.strategy);
        }
    }
    type Pick = fn(&SweepPoint) -> f64;
    let picks: [(&str, &str, Pick, bool); 3] = [
        ("p99 latency", "ms (log)", |pt| pt.row.p99_ms, true),
        ("p50 latency", "ms (log)", |pt| pt.row.p50_ms, true),
        (
            "extra load",
            "attempts ÷ requests − 1",
            |pt| pt.row.extra_load,
            false,
        ),
    ];
    for cancel in [Cancel::Queued, Cancel::Running] {
        let _ = write!(h, "<h3>cancel {}</h3>", cancel.as_str());
        for (what, y_desc, pick, log_y) in picks {
            let title = format!("{what}, cancel {}", cancel.as_str());
            let lines: Vec<Line<'_>> = names
                .iter()
                .enumerate()
                .map(|(i, n)| Line {
                    name: n,
                    points: sweep
                        .iter()
                        .filter(|pt| pt.cancel == cancel && pt.row.strategy == *n)
                        .map(|pt| (pt.utilisation, pick(pt)))
                        .collect(),
                    color: color(i),
                })
                .collect();
            let frame = Frame {
                title: &title,
                x_desc: "utilisation without hedges",
                y_desc,
                hlines: vec![],
                span: None,
                log_y,
                y_range: None,
            };
            h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger_sim::hedging::{simulate, sweep, HedgeStrategy};
    use stagger_sim::Options;

    #[test]
    fn the_page_has_every_strategy_and_both_cancellation_modes() {
        let p = HedgingParams {
            requests: 2_000,
            ..HedgingParams::default()
        };
        let s = HedgeStrategy::parse_list("none,20ms+budget").unwrap();
        let r = simulate(&p, &s, &Options::default()).unwrap();
        let pts = sweep(&p, &s, 500, &Options::default()).unwrap();
        assert_eq!(pts.len(), 2 * SWEEP.len() * 2);
        let page = html(&p, &r, &pts);
        for needle in ["20ms+budget", "cancel queued", "cancel running", "<svg"] {
            assert!(page.contains(needle), "{needle}");
        }
        let mut out = Vec::new();
        print_table(&mut out, &p, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 4);
    }
}
