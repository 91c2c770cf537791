//! The report directory: `report.html` (self-contained: inline CSS and SVG,
//! no script, no external resource), `results.json` and `series.csv`.

use std::fmt::Write as _;
use std::path::Path;

use stagger_sim::{Model, Params, Results, RetryKind, Row, Schedule, Strategy};

use super::charts::{self, color, Frame, Line};
use super::table;
use crate::{Error, ErrorKind};

/// Seconds of history in the retry-ratio chart.
const RATIO_WINDOW_S: f64 = 10.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes the three files into `dir` (created if needed).
pub(super) fn write(dir: &Path, p: &Params, r: &Results, json: &str) -> Result<(), Error> {
    let io =
        |what: &str, p: &Path, e| Error::with(ErrorKind::Io, format!("{what} {}", p.display()), e);
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let html = html(p, r);
    for (name, body) in [
        ("report.html", html.as_str()),
        ("results.json", json),
        ("series.csv", csv(r).as_str()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|e| io("writing", &path, e))?;
    }
    Ok(())
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

fn svg_or_note(svg: Result<String, String>) -> String {
    svg.unwrap_or_else(|e| format!("<p class=note>chart unavailable: {}</p>", esc(&e)))
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
/// percent; windows with (almost) no retries are left out of the log chart.
fn retry_ratio(row: &Row, bin_s: f64) -> Vec<(f64, f64)> {
    let w = ((RATIO_WINDOW_S / bin_s).round() as usize).max(1);
    let se = &row.series;
    (0..se.t_s.len())
        .filter_map(|i| {
            let from = (i + 1).saturating_sub(w);
            let retries: f64 = se.retries[from..=i].iter().sum();
            let firsts: f64 = (from..=i).map(|k| se.load[k] - se.retries[k]).sum();
            let pct = if firsts > 1e-9 {
                100.0 * retries / firsts
            } else {
                0.0
            };
            (pct >= 0.1).then_some((se.t_s[i] + bin_s, pct))
        })
        .collect()
}

fn overload_charts(p: &Params, r: &Results, h: &mut String) {
    let (bin_s, cap, unit) = match p.model {
        Model::Failover => (p.tick.as_secs_f64(), p.capacity, "tick"),
        _ => (1.0, p.capacity, "second"),
    };
    let span = Some((p.outage_start.as_secs_f64(), p.outage_end.as_secs_f64()));
    let y_desc = format!("attempts per {unit}");
    // Metastable: the held requests arrive in one second; clip at 4× capacity.
    let clip = match p.model {
        Model::Metastable => 4.0 * cap,
        _ => f64::INFINITY,
    };
    h.push_str("<h2>Load against capacity</h2><p>Mean attempts per ");
    let _ = write!(
        h,
        "{unit} over the runs (retries included), the successes among them, and the capacity line."
    );
    if clip.is_finite() {
        let _ = write!(
            h,
            " The y axis is cut at 4× capacity (the released backlog arrives in one second)."
        );
    }
    h.push_str("</p><div class=grid>");
    for row in &r.strategies {
        let title = super::table::label(row);
        let lines = [
            Line {
                name: "load",
                points: clipped(&row.series.t_s, &row.series.load, clip),
                color: color(0),
            },
            Line {
                name: "successes",
                points: clipped(&row.series.t_s, &row.series.successes, clip),
                color: color(2),
            },
        ];
        let frame = Frame {
            title: &title,
            x_desc: "time (s)",
            y_desc: &y_desc,
            hlines: vec![(cap, format!("capacity {cap}"))],
            span,
            log_y: false,
        };
        h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
    }
    h.push_str("</div>");
    let find = |k: RetryKind| {
        r.strategies
            .iter()
            .find(|row| row.strategy == Strategy::plain(k).to_string())
    };
    h.push_str("<h2>Lockstep against full jitter</h2>");
    match (find(RetryKind::Exponential), find(RetryKind::Full)) {
        (Some(a), Some(b)) => {
            let lines = [
                Line { name: "exponential (no jitter)", points: clipped(&a.series.t_s, &a.series.load, clip), color: color(0) },
                Line { name: "exponential + full jitter", points: clipped(&b.series.t_s, &b.series.load, clip), color: color(1) },
            ];
            let frame = Frame {
                title: "the same failures, retried in lockstep and with full jitter",
                x_desc: "time (s)",
                y_desc: &y_desc,
                hlines: vec![(cap, format!("capacity {cap}"))],
                span,
                log_y: false,
            };
            h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
        }
        _ => h.push_str("<p class=note>Run both <code>exponential</code> and <code>full</code> to see them overlaid.</p>"),
    }
    h.push_str("<h2>Retry ratio</h2>");
    let _ = write!(h, "<p>Retries ÷ logical requests over the last {RATIO_WINDOW_S} s, against the healthy (10 %) and alarm (20 %) lines of the retry-amplification SLI.</p>");
    let lines: Vec<Line<'_>> = r
        .strategies
        .iter()
        .enumerate()
        .filter(|(_, row)| row.strategy != "none")
        .map(|(i, row)| Line {
            name: &row.strategy,
            points: retry_ratio(row, bin_s),
            color: color(i),
        })
        .collect();
    let frame = Frame {
        title: "retry ratio (%, log scale)",
        x_desc: "time (s)",
        y_desc: "retries per 100 requests",
        hlines: vec![(10.0, "10 % healthy".into()), (20.0, "20 % alarm".into())],
        span: None,
        log_y: true,
    };
    h.push_str(&svg_or_note(charts::lines(&lines, &frame)));
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
            esc(&row.strategy), esc(&extra), row.attempts, row.amplification, row.request_success * 100.0,
            o(row.peak_load_over_capacity, ""), o(row.post_outage_peak_over_capacity, ""),
            row.recovery_s.map_or_else(|| if r.model == "failover" || r.model == "metastable" { "never".into() } else { "–".into() }, |v| format!("{v:.2} s")),
            row.budget_refusals, row.breaker_opens
        );
    }
    h.push_str("</table>");
}

fn cards(r: &Results, h: &mut String) {
    h.push_str("<h2>Guardrails</h2><div class=cards>");
    for (title, body) in [
        ("retry budget", "a retry only while retries stay under 10 % of requests (window 10 s, floor 10)"),
        ("circuit breaker", "opens at ≥ 50 % failures over 10 s with ≥ 20 calls; open 5 s (+≤ 20 % jitter), then one probe"),
        ("adaptive throttle", "rejects locally with p = max(0, (requests − 2·accepts)/(requests + 1)) over 2 min"),
        ("retry-ratio SLI", "healthy under 10 % retries per request; alarm above 20 % for a minute"),
    ] {
        let _ = write!(h, "<div class=card><h3>{title}</h3><p>{body}</p></div>");
    }
    for row in r.strategies.iter().filter(|row| row.strategy.contains('+')) {
        let _ = write!(
            h,
            "<div class='card num'><h3>{}</h3><p><b>{:.1}</b> budget refusals · <b>{:.1}</b> breaker opens per run</p><p>{:.2}× amplification, {:.1} % success</p></div>",
            esc(&row.strategy), row.budget_refusals, row.breaker_opens, row.amplification, row.request_success * 100.0
        );
    }
    h.push_str("</div>");
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1600px;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{margin-top:2em;font-size:1.2em}.note{color:#666}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}\
td:first-child,th:first-child{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:8px}\
.grid svg{width:760px;max-width:100%;height:auto}.cards{display:flex;flex-wrap:wrap;gap:12px}\
.card{border:1px solid #ccd;border-radius:8px;padding:8px 14px;width:260px;background:#f8f9fc}\
.card h3{margin:4px 0;font-size:1em}.card.num{background:#fdf8ee}pre{background:#f4f4f4;padding:8px;overflow:auto}";

/// The whole page.
pub(super) fn html(p: &Params, r: &Results) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>stagger simulate: {}</title><style>{STYLE}</style></head><body>",
        r.model
    );
    let _ = write!(
        h,
        "<h1>stagger simulate — {}</h1><p>{}</p>",
        r.model,
        esc(&table::describe(p))
    );
    h.push_str("<p class=note>Every failed attempt was decided by the stagger library's own <code>Policy::decide</code> in virtual time, with a per-request random stream seeded from the run's seed. Values are means over the runs.</p>");
    if p.model != Model::Contention {
        rows_table(r, &mut h);
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
