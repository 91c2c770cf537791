//! The report directory: `report.html` (self-contained: inline CSS and SVG,
//! no script, no external resource), `results.json` and `series.csv`.

use std::fmt::Write as _;
use std::path::Path;

use stagger_sim::{Model, Params, Results, RetryKind, Row, Schedule, Strategy};

use super::charts::{self, color, svg_or_note, Frame, HLine, Line};
use super::table;
use crate::escape;
use crate::WriteError;

/// Seconds of history in the retry-ratio chart.
const RATIO_WINDOW_S: f64 = 10.0;

/// Writes the three files into `dir` (created if needed).
pub(super) fn write(dir: &Path, p: &Params, r: &Results, json: &str) -> Result<(), WriteError> {
    crate::write_files(
        dir,
        &[
            ("report.html", &html(p, r)),
            ("results.json", json),
            ("series.csv", &csv(r)),
        ],
    )
}

/// The CSV: per-bin series for failover and metastable; one line per row for
/// contention and layers.
pub(super) fn csv(r: &Results) -> String {
    let mut s = String::new();
    match r.model {
        "contention" => {
            s.push_str("strategy,clients,calls,completion_ms,request_success\n");
            for row in &r.strategies {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{}",
                    row.strategy,
                    row.clients.unwrap_or(0),
                    row.calls.unwrap_or(0.0),
                    row.completion_ms
                        .map_or_else(String::new, |c| c.to_string()),
                    row.request_success
                );
            }
        }
        "layers" => {
            s.push_str(
                "strategy,retry_at,failure_rate,bottom_attempts_per_request,request_success\n",
            );
            for row in &r.strategies {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{}",
                    row.strategy,
                    row.retry_at.unwrap_or(""),
                    row.failure_rate.unwrap_or(0.0),
                    row.bottom_attempts_per_request.unwrap_or(0.0),
                    row.request_success
                );
            }
        }
        _ => {
            s.push_str("strategy,server,t_s,load,retries,successes\n");
            for row in &r.strategies {
                let se = &row.series;
                let server = row.server.as_deref().unwrap_or("");
                for i in 0..se.t_s.len() {
                    let _ = writeln!(
                        s,
                        "{},{server},{},{},{},{}",
                        row.strategy, se.t_s[i], se.load[i], se.retries[i], se.successes[i]
                    );
                }
            }
        }
    }
    s
}

/// Points with y clipped at `clip` (the metastable release spike would
/// otherwise flatten everything else).
fn clipped(xs: &[f64], ys: &[f64], clip: f64) -> Vec<(f64, f64)> {
    xs.iter()
        .copied()
        .zip(ys.iter().map(|y| y.min(clip)))
        .collect()
}

/// Retries ÷ logical requests (first attempts) over a sliding window, in
/// percent, at the end of each bin (0 where there were no requests).
fn retry_ratio(row: &Row, bin_s: f64) -> Vec<(f64, f64)> {
    let w = ((RATIO_WINDOW_S / bin_s).round() as usize).max(1);
    let se = &row.series;
    (0..se.t_s.len())
        .map(|i| {
            let from = (i + 1).saturating_sub(w);
            let retries: f64 = se.retries[from..=i].iter().sum();
            let firsts: f64 = (from..=i).map(|k| se.load[k] - se.retries[k]).sum();
            let pct = if firsts > 1e-9 {
                100.0 * retries / firsts
            } else {
                0.0
            };
            (se.t_s[i] + bin_s, pct)
        })
        .collect()
}

/// The top of the load axis: what happens after the outage (the finding)
/// in view with some room, never less than 1.6× capacity. The burst during
/// the outage may be cut.
fn finding_top(p: &Params, r: &Results, cap: f64) -> f64 {
    let settle = p.outage_end.as_secs_f64()
        + match p.model {
            // The released backlog of the metastable model arrives in the
            // second after the slowdown.
            Model::Metastable => 3.0,
            _ => 0.0,
        };
    let after = r
        .strategies
        .iter()
        .flat_map(|row| {
            row.series
                .t_s
                .iter()
                .zip(&row.series.load)
                .filter(|(t, _)| **t >= settle)
                .map(|(_, l)| *l)
        })
        .fold(0.0, f64::max);
    (after * 1.15).max(cap * 1.6)
}

/// Mean |a − b| ÷ mean load over the series: how far apart two load curves are.
fn gap(a: &Row, b: &Row) -> f64 {
    let (la, lb) = (&a.series.load, &b.series.load);
    let n = la.len().min(lb.len()).max(1) as f64;
    let diff: f64 = la.iter().zip(lb).map(|(x, y)| (x - y).abs()).sum::<f64>() / n;
    let mean: f64 = la.iter().chain(lb).sum::<f64>() / (2.0 * n);
    if mean > 0.0 {
        diff / mean
    } else {
        0.0
    }
}

/// The scale and labels every overload chart of one report shares.
struct Scale {
    bin_s: f64,
    cap: f64,
    unit: &'static str,
    span: Option<(f64, f64)>,
    y_desc: String,
    top: f64,
}

impl Scale {
    fn frame<'a>(&'a self, title: &'a str) -> Frame<'a> {
        Frame {
            title,
            x_desc: "time (s)",
            y_desc: &self.y_desc,
            hlines: vec![HLine::capacity(self.cap, format!("capacity {}", self.cap))],
            span: self.span,
            log_y: false,
            y_range: Some((0.0, self.top)),
        }
    }
}

fn overload_charts(p: &Params, r: &Results, h: &mut String) {
    let (bin_s, cap, unit) = match p.model {
        Model::Failover => (p.tick.as_secs_f64(), p.capacity, "tick"),
        _ => (1.0, p.capacity, "second"),
    };
    // One y scale for every panel, fitted to the load after the outage so
    // that where it settles against capacity is readable; the burst during
    // the outage is cut at the top.
    let scale = Scale {
        bin_s,
        cap,
        unit,
        span: Some((p.outage_start.as_secs_f64(), p.outage_end.as_secs_f64())),
        y_desc: format!("attempts per {unit}"),
        top: finding_top(p, r, cap),
    };
    load_panels(r, &scale, h);
    lockstep(p, r, &scale, h);
    retry_ratios(r, bin_s, h);
}

/// One panel per strategy: load, retries and successes against capacity.
fn load_panels(r: &Results, sc: &Scale, h: &mut String) {
    let (top, unit) = (sc.top, sc.unit);
    let burst = r
        .strategies
        .iter()
        .flat_map(|row| row.series.load.iter().copied())
        .fold(0.0, f64::max);
    h.push_str("<h2>Load against capacity</h2><p>Mean attempts per ");
    let _ = write!(
        h,
        "{unit} over the runs (retries included), the successes among them, and the capacity line; \
         where the model counts them apart, what the clients sent too (an outage holds it before \
         it reaches the server). Every panel has the same y scale, fitted to the load after the outage: that is where a \
         retry storm shows, as load that stays above capacity once the dependency is back."
    );
    if burst > top {
        let _ = write!(
            h,
            " <b>The y axis is cut at {top:.0} attempts per {unit}</b>: during the outage the load \
             reaches {burst:.0} (the table's peak/C column); lines at the top edge are cut there."
        );
    }
    h.push_str("</p><div class=grid>");
    for row in &r.strategies {
        let title = super::table::label(row);
        let mut lines = vec![
            Line {
                name: "load (attempts)",
                points: clipped(&row.series.t_s, &row.series.load, top),
                color: color(0),
            },
            Line {
                name: "retries among them",
                points: clipped(&row.series.t_s, &row.series.retries, top),
                color: color(4),
            },
            Line {
                name: "successes",
                points: clipped(&row.series.t_s, &row.series.successes, top),
                color: color(2),
            },
        ];
        // Metastable: what the clients sent, which an outage holds before
        // it reaches the server (where `load` counts it).
        if let Some(sent) = &row.series.sent {
            lines.push(Line {
                name: "sent by clients",
                points: clipped(&row.series.t_s, sent, top),
                color: color(3),
            });
        }
        h.push_str(&svg_or_note(charts::lines(&lines, &sc.frame(&title))));
    }
    h.push_str("</div>");
}

/// Plain exponential against full jitter, overlaid, and what the gap says.
fn lockstep(p: &Params, r: &Results, sc: &Scale, h: &mut String) {
    let (top, unit, bin_s) = (sc.top, sc.unit, sc.bin_s);
    let find = |k: RetryKind| {
        r.strategies
            .iter()
            .find(|row| row.strategy == Strategy::plain(k).to_string())
    };
    h.push_str("<h2>Lockstep against full jitter</h2>");
    match (find(RetryKind::Exponential), find(RetryKind::Full)) {
        (Some(a), Some(b)) => {
            let g = gap(a, b);
            if g < 0.1 {
                let _ = write!(
                    h,
                    "<p><b>Here the two lines nearly coincide</b> (they differ by {:.0} % of the load on \
                     average). Jitter changes <i>when</i> retries arrive, not how many there are: with a \
                     first backoff of {} and {unit}s of {:.0} ms, the retries of one burst land in the \
                     same few {unit}s with or without jitter, and once the dependency is overloaded both \
                     are limited by the same number of retries per request. Lockstep shows as spikes when \
                     the backoff is long against the {unit} (try <code>--base 1s</code>); what lowers the \
                     load is fewer retries (+budget, +breaker).</p>",
                    g * 100.0,
                    super::humantime_ms(p.base),
                    bin_s * 1e3
                );
            } else {
                let _ = write!(
                    h,
                    "<p>The lines differ by {:.0} % of the load on average: lockstep retries arrive \
                     together, as spikes; full jitter spreads the same retries over each backoff \
                     step.</p>",
                    g * 100.0
                );
            }
            let lines = [
                Line { name: "exponential (no jitter)", points: clipped(&a.series.t_s, &a.series.load, top), color: color(0) },
                Line { name: "exponential + full jitter", points: clipped(&b.series.t_s, &b.series.load, top), color: color(1) },
            ];
            let frame = sc.frame("the same failures, retried in lockstep and with full jitter");
            h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
        }
        _ => h.push_str("<p class=note>Run both <code>exponential</code> and <code>full</code> to see them overlaid.</p>"),
    }
}

/// The retry ratio over time against the SLI's lines, whole and zoomed.
fn retry_ratios(r: &Results, bin_s: f64, h: &mut String) {
    h.push_str("<h2>Retry ratio</h2>");
    let ratios: Vec<(&Row, Vec<(f64, f64)>)> = r
        .strategies
        .iter()
        .filter(|row| row.strategy != "none")
        .map(|row| (row, retry_ratio(row, bin_s)))
        .collect();
    let highest = ratios
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    // Linear scales: the whole range, and beside it a zoom on 0–40 % where
    // the 10 % and 20 % lines sit apart.
    let full_top = (highest * 1.08).max(30.0);
    let zoom_top = 40.0;
    let _ = write!(
        h,
        "<p>Retries ÷ logical requests over the last {RATIO_WINDOW_S} s, against the healthy \
         (10 %) and alarm (20 %) lines of the retry-amplification SLI: first the whole range \
         (the storm reaches {highest:.0} %), then the first {zoom_top:.0} % enlarged."
    );
    let silent: Vec<&str> = ratios
        .iter()
        .filter(|(_, pts)| pts.iter().all(|p| p.1 < 0.05))
        .map(|(row, _)| row.strategy.as_str())
        .collect();
    if !silent.is_empty() {
        let _ = write!(
            h,
            " <b>{}</b> sent (almost) no retries: {} on the zero line.",
            escape(&silent.join(", ")),
            if silent.len() == 1 {
                "its line lies"
            } else {
                "their lines lie"
            }
        );
    }
    h.push_str("</p><div class=grid>");
    let lines: Vec<Line<'_>> = ratios
        .iter()
        .enumerate()
        .map(|(i, (row, pts))| Line {
            name: &row.strategy,
            points: pts.clone(),
            color: color(i),
        })
        .collect();
    for (title, top) in [
        ("retry ratio (%)", full_top),
        ("retry ratio, 0–40 % (zoom)", zoom_top),
    ] {
        let frame = Frame {
            title,
            x_desc: "time (s)",
            y_desc: "retries per 100 requests",
            hlines: vec![
                HLine {
                    y: 10.0,
                    label: "10 % healthy".into(),
                    color: charts::HEALTHY,
                },
                HLine {
                    y: 20.0,
                    label: "20 % alarm".into(),
                    color: charts::ALARM,
                },
            ],
            span: None,
            log_y: false,
            y_range: Some((-top * 0.03, top)),
        };
        h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
    }
    h.push_str("</div>");
}

fn sweep_charts(r: &Results, h: &mut String) {
    let mut names: Vec<&str> = Vec::new();
    for row in &r.strategies {
        if !names.contains(&row.strategy.as_str()) {
            names.push(&row.strategy);
        }
    }
    type Pick = fn(&Row) -> Option<f64>;
    let charts: [(&str, &str, Pick, bool); 2] = [
        ("work: writes sent", "calls", |row| row.calls, false),
        (
            "completion: time until the last client succeeds",
            "ms (log)",
            |row| row.completion_ms,
            true,
        ),
    ];
    for (title, y_desc, pick, log_y) in charts {
        let lines: Vec<Line<'_>> = names
            .iter()
            .enumerate()
            .map(|(i, n)| Line {
                name: n,
                points: r
                    .strategies
                    .iter()
                    .filter(|row| row.strategy == *n)
                    .filter_map(|row| Some((f64::from(row.clients?), pick(row)?)))
                    .collect(),
                color: color(i),
            })
            .collect();
        let frame = Frame {
            title,
            x_desc: "clients",
            y_desc,
            hlines: vec![],
            span: None,
            log_y,
            y_range: None,
        };
        h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
    }
}

fn layers_chart(r: &Results, h: &mut String) {
    let mut keys: Vec<(String, &str)> = Vec::new();
    for row in &r.strategies {
        let k = (row.strategy.clone(), row.retry_at.unwrap_or(""));
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let names: Vec<String> = keys.iter().map(|(s, m)| format!("{s} ({m})")).collect();
    let lines: Vec<Line<'_>> = keys
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, ((s, m), name))| Line {
            name,
            points: r
                .strategies
                .iter()
                .filter(|row| &row.strategy == s && row.retry_at == Some(m))
                .filter_map(|row| Some((row.failure_rate?, row.bottom_attempts_per_request?)))
                .collect(),
            color: color(i),
        })
        .collect();
    let frame = Frame {
        title: "dependency attempts per user request",
        x_desc: "dependency failure rate f",
        y_desc: "attempts (log)",
        hlines: vec![],
        span: None,
        log_y: true,
        y_range: None,
    };
    h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
}

fn rows_table(r: &Results, h: &mut String) {
    h.push_str("<table><tr><th>strategy</th><th>clients / f</th><th>attempts</th><th>amplification</th><th>success</th><th>peak/C</th><th>post-outage peak/C</th><th>recovery</th><th>budget refusals</th><th>breaker opens</th></tr>");
    let o =
        |x: Option<f64>, unit: &str| x.map_or_else(|| "–".to_string(), |v| format!("{v:.2}{unit}"));
    for row in &r.strategies {
        let extra = match (row.clients, row.failure_rate, row.retry_at) {
            (Some(c), _, _) => c.to_string(),
            (_, Some(f), Some(m)) => format!("{f} · {m}"),
            _ => "–".into(),
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.2}×</td><td>{:.1} %</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td></tr>",
            escape(&row.strategy), escape(&extra), row.attempts, row.amplification, row.request_success * 100.0,
            o(row.peak_load_over_capacity, ""), o(row.post_outage_peak_over_capacity, ""),
            row.recovery_s.map_or_else(|| if r.model == "failover" || r.model == "metastable" { "never".into() } else { "–".into() }, |v| format!("{v:.2} s")),
            row.budget_refusals, row.breaker_opens
        );
    }
    h.push_str("</table>");
}

fn cards(r: &Results, h: &mut String) {
    // The settings are read from the library objects the strategies were
    // given, so the page cannot describe other defaults than the run's.
    h.push_str("<h2>Guardrails</h2><p>The settings each guardrail had in this run, one set per client process.</p><div class=cards>");
    let settings = stagger_sim::guardrail_settings();
    let sli = stagger::export::SliWindow::default().to_string();
    let titles = [
        "retry budget (+budget)",
        "circuit breaker (+breaker)",
        "adaptive throttle (+throttle)",
    ];
    let cards = titles
        .iter()
        .zip(settings.iter().map(|(_, s)| s.as_str()))
        .chain([(&"retry-ratio SLI (the chart above)", sli.as_str())]);
    for (title, body) in cards {
        let _ = write!(
            h,
            "<div class=card><h3>{}</h3><p>{}</p></div>",
            escape(title),
            escape(body)
        );
    }
    for row in r.strategies.iter().filter(|row| row.strategy.contains('+')) {
        let _ = write!(
            h,
            "<div class='card num'><h3>{}</h3><p><b>{:.1}</b> budget refusals · <b>{:.1}</b> breaker opens per run</p><p>{:.2}× amplification, {:.1} % success</p></div>",
            escape(&row.strategy), row.budget_refusals, row.breaker_opens, row.amplification, row.request_success * 100.0
        );
    }
    h.push_str("</div>");
}

/// What this page draws beyond the shared style: wider, a grid of charts,
/// the summary cards and the charts' legends.
const EXTRA: &str = "body{max-width:1600px}.grid{display:flex;flex-wrap:wrap;gap:8px}\
.grid svg{width:760px;max-width:100%;height:auto}.cards{display:flex;flex-wrap:wrap;gap:12px}\
.card{border:1px solid #ccd;border-radius:8px;padding:8px 14px;width:260px;background:#f8f9fc}\
.card h3{margin:4px 0;font-size:1em}.card.num{background:#fdf8ee}\
figure.chart{margin:0;width:760px;max-width:100%}figure.chart svg{width:760px;max-width:100%;height:auto}\
.legend{font-size:12px;display:flex;flex-wrap:wrap;gap:4px 14px;padding:2px 0 10px 60px}\
.legend i{display:inline-block;width:18px;height:3px;margin-right:5px;vertical-align:middle}";

/// The whole page.
pub(super) fn html(p: &Params, r: &Results) -> String {
    let mut h = crate::style::head(&format!("stagger simulate: {}", r.model), EXTRA);
    let _ = write!(
        h,
        "<h1>stagger simulate — {}</h1><p>{}</p>",
        r.model,
        escape(&table::describe(p))
    );
    h.push_str("<p class=note>Every failed attempt was decided by the stagger library's own <code>Policy::decide</code> in virtual time, with a per-request random stream seeded from the run's seed. Values are means over the runs.</p>");
    if p.model != Model::Contention {
        rows_table(r, &mut h);
    }
    if matches!(p.model, Model::Failover | Model::Metastable) {
        for note in table::notes(&r.strategies) {
            let _ = write!(h, "<p class=note>{}</p>", escape(&note));
        }
    }
    match p.model {
        Model::Failover | Model::Metastable => overload_charts(p, r, &mut h),
        Model::Contention => {
            h.push_str("<h2>Contention</h2>");
            sweep_charts(r, &mut h);
            h.push_str("<h2>Every row</h2>");
            rows_table(r, &mut h);
        }
        Model::Layers => {
            h.push_str("<h2>Retries through layers</h2>");
            layers_chart(r, &mut h);
        }
    }
    h.push_str("<h2>Backoff schedule</h2><p>What the library's full-jitter schedule for these flags draws from before each retry: the tile is the jitter range, the bar the capped backoff, the dots sampled delays.</p>");
    let full = Strategy::plain(RetryKind::Full);
    let schedule = Schedule::from(p);
    let retries = full.max_attempts(&schedule).saturating_sub(1).clamp(1, 12);
    let title = format!(
        "full jitter: base {}, ×2, cap {}",
        table::dur(p.base),
        table::dur(p.cap)
    );
    h.push_str(&svg_or_note(charts::schedule_tiles(
        &title,
        &full.backoff(&schedule),
        retries,
        24,
    )));
    cards(r, &mut h);
    h.push_str("<h2>Files</h2><p><code>results.json</code> (the <code>--format json</code> document) and <code>series.csv</code> sit beside this page.</p></body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger_sim::{Options, Strategy};

    fn failover(strategies: &str, p: Params) -> (Params, Results) {
        let s = Strategy::parse_list(strategies).unwrap();
        let r = stagger_sim::simulate(&p, &s, &Options::default()).unwrap();
        (p, r)
    }

    fn defaults(runs: u32) -> Params {
        let mut p = Params::defaults(Model::Failover);
        p.runs = runs;
        p
    }

    /// The metastable report drew only what reached the server, which is
    /// nothing while an outage holds the clients' attempts: what they sent
    /// is a line of its own, and only there.
    #[test]
    fn the_metastable_report_draws_what_the_clients_sent() {
        let mut p = Params::defaults(Model::Metastable);
        p.runs = 1;
        let (p, r) = failover("none,full", p);
        assert!(r.strategies.iter().all(|row| row.series.sent.is_some()));
        let h = html(&p, &r);
        assert_eq!(
            h.matches(">sent by clients<").count(),
            2,
            "one legend entry per panel"
        );
        let (p, r) = failover("none,full", defaults(1));
        assert!(!html(&p, &r).contains(">sent by clients<"));
    }

    #[test]
    fn the_load_axis_shows_the_finding_not_the_burst() {
        let (p, r) = failover("none,full,full+budget+breaker", defaults(4));
        let top = finding_top(&p, &r, p.capacity);
        let full = &r.strategies[1];
        let after: Vec<f64> = full
            .series
            .t_s
            .iter()
            .zip(&full.series.load)
            .filter(|(t, _)| **t >= p.outage_end.as_secs_f64())
            .map(|(_, l)| *l)
            .collect();
        let settled = after.iter().sum::<f64>() / after.len() as f64;
        assert!(settled > 3.0 * p.capacity, "the storm: {settled}");
        // The settled load sits in the upper half of the axis, not the
        // bottom 15 % as when the axis was fitted to the burst.
        assert!(settled / top > 0.5, "settled {settled} of top {top}");
        let burst = full.series.load.iter().copied().fold(0.0, f64::max);
        assert!(burst > top, "the burst is cut");
        let h = html(&p, &r);
        assert!(h.contains("The y axis is cut at"), "the cut is said");
    }

    #[test]
    fn retry_ratio_names_silent_strategies_and_keeps_thresholds_apart() {
        let (p, r) = failover("full,full+budget+breaker", defaults(4));
        let h = html(&p, &r);
        let ratio = &h[h.find("<h2>Retry ratio").unwrap()..];
        assert!(
            ratio.contains("<b>full+budget+breaker</b> sent (almost) no retries"),
            "{}",
            &ratio[..600]
        );
        assert!(ratio.contains("retry ratio, 0–40 % (zoom)"));
        assert!(!ratio.contains("log scale"));
        // The 10 % and 20 % lines have their own colours in the legend.
        assert!(ratio.contains("dashed #2ca02c'></i>10 % healthy"));
        assert!(ratio.contains("dashed #d62728'></i>20 % alarm"));
    }

    /// The `full` line used to be drawn in the same green as the "10 %
    /// healthy" threshold.
    #[test]
    fn no_strategy_line_takes_a_threshold_colour() {
        let (p, r) = failover("none,exponential,full,full+budget", defaults(2));
        let h = html(&p, &r);
        let ratio = &h[h.find("<h2>Retry ratio").unwrap()..];
        for (i, row) in r.strategies.iter().enumerate() {
            let c = color(i);
            assert!(
                c != charts::HEALTHY && c != charts::ALARM,
                "{} is drawn in a threshold's colour",
                row.strategy
            );
        }
        // Each threshold's colour appears once in the legend: its own entry.
        assert_eq!(ratio.matches("#2ca02c'></i>").count(), 2, "two charts");
        assert_eq!(ratio.matches("#d62728'></i>").count(), 2, "two charts");
    }

    #[test]
    fn coinciding_lockstep_and_jitter_lines_are_explained() {
        let (p, r) = failover("exponential,full", defaults(4));
        let h = html(&p, &r);
        assert!(h.contains("Here the two lines nearly coincide"));
        let mut slow = defaults(4);
        slow.base = std::time::Duration::from_secs(1);
        let (p, r) = failover("exponential,full", slow);
        let h = html(&p, &r);
        assert!(!h.contains("nearly coincide"), "a long base separates them");
        assert!(h.contains("lockstep retries arrive together"));
    }

    #[test]
    fn legends_sit_outside_the_charts() {
        let (p, r) = failover("full", defaults(2));
        let h = html(&p, &r);
        // plotters draws no legend box inside the load charts any more.
        let load = &h[h.find("<h2>Load against").unwrap()..h.find("<h2>Backoff").unwrap()];
        assert!(load.matches("<div class=legend>").count() >= 3);
        assert!(
            !load.contains("fill-opacity=\"0.85\""),
            "no legend box over data"
        );
    }
}
