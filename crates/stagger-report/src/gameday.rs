//! How a game-day's results are shown: the comparison table, its key, the
//! run's legend and the self-contained HTML report (inline SVG arrival
//! histograms, written by hand: no chart library needed). The results
//! themselves ([`Row`], [`Params`], [`Results`]) are the game-day's own, in
//! [`stagger_gameday::results`]. The hedging and priority game-days' tables
//! are [`hedging_table`] and [`priority_table`].

use std::fmt::Write as _;

use stagger_gameday::gameday::soak::{Verdict, MAX_GROWTH_PCT};
use stagger_gameday::results::{Params, Results, Row};

use crate::svg::Histogram;

mod drills;

pub use drills::{hedging_table, priority_table};

/// A share in whole percent, except where rounding would say all or
/// nothing: 99.5 % is `99.5%`, never `100%`, and 0.2 % is `0.2%`, never `0%`.
fn pct(x: f64) -> String {
    let v = x * 100.0;
    if v < 100.0 && v.round() >= 100.0 {
        format!("{:.1}%", ((v * 10.0).floor() / 10.0).min(99.9))
    } else if v > 0.0 && v.round() <= 0.0 {
        format!("{:.1}%", ((v * 10.0).ceil() / 10.0).max(0.1))
    } else {
        format!("{v:.0}%")
    }
}

/// What the recovery column says: the time, "not recovered", or that
/// there is nothing to recover from (no fault, or one that never clears).
fn recovery(fault: &str, s: &Row, never_clears: &str) -> String {
    match (s.recovered, s.recovery_s) {
        _ if fault == "none" => "n/a (no fault)".to_string(),
        (None, _) => never_clears.to_string(),
        (Some(_), Some(x)) => format!("{x:.1} s after the fault"),
        (Some(_), None) => "not recovered".to_string(),
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String, none: &str) -> String {
    x.map_or_else(|| none.to_string(), f)
}

/// The comparison table, one row per strategy.
pub fn table(r: &Results) -> String {
    let (head, rows) = cells(r);
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[String]| {
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i == 0 {
                let _ = write!(out, "{c:<w$}");
            } else {
                let _ = write!(out, "  {c:>w$}");
            }
        }
        out.push('\n');
    };
    line(&mut out, &head.map(String::from));
    for row in &rows {
        line(&mut out, row);
    }
    out
}

/// The same table as HTML, whose headers wrap so that it fits the page
/// instead of scrolling sideways as the text table did.
fn html_table(r: &Results) -> String {
    let (head, rows) = cells(r);
    let mut h = String::from("<table><tr>");
    for c in head {
        let _ = write!(h, "<th>{}</th>", crate::escape(c));
    }
    h.push_str("</tr>");
    for row in rows {
        h.push_str("<tr>");
        for c in row {
            let _ = write!(h, "<td>{}</td>", crate::escape(&c));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    h
}

/// The table's header and cells.
fn cells(r: &Results) -> ([&'static str; 17], Vec<[String; 17]>) {
    let head = [
        "strategy",
        "requests",
        "success",
        "ampl",
        "tries/req",
        "retries/req",
        "peak/cap",
        "after/cap",
        ">cap after",
        "recovery",
        "tail retries",
        "budget",
        "breaker",
        "dup",
        "goodput>",
        "p99",
        "shed",
    ];
    let rows: Vec<[String; 17]> = r
        .strategies
        .iter()
        .map(|s| {
            [
                s.strategy.clone(),
                s.requests.to_string(),
                pct(s.request_success),
                format!("{:.2}", s.amplification),
                format!("{:.2}", s.client_amplification),
                pct(s.retry_ratio),
                format!("{:.2}", s.peak_load_over_capacity),
                opt(s.post_outage_peak_over_capacity, |x| format!("{x:.2}"), "-"),
                opt(s.overloaded_after_fault_s, |x| format!("{x:.1}s"), "-"),
                match (s.recovered, s.recovery_s) {
                    _ if r.params.fault == "none" => "-".to_string(),
                    (None, _) => "-".to_string(),
                    (Some(_), Some(x)) => format!("{x:.1}s"),
                    (Some(_), None) => "not recovered".to_string(),
                },
                pct(s.tail_retry_ratio),
                s.budget_refusals.to_string(),
                s.breaker_opens.to_string(),
                s.duplicates.to_string(),
                opt(s.goodput_after_fault, |x| format!("{x:.0}/s"), "-"),
                s.latency
                    .p99_ms
                    .map_or_else(|| "-".to_string(), |x| format!("{x}ms")),
                opt(s.shed_share, pct, "-"),
            ]
        })
        .collect();
    (head, rows)
}

/// What the table's columns mean.
pub const KEY: &str = "\
success: requests that succeeded within their deadline. ampl: attempts arriving at the server ÷ requests; \
tries/req: attempts the clients made ÷ requests (refused connections included). retries/req: retries \
arriving ÷ requests. peak/cap: largest 1 s load ÷ capacity; after/cap: the same after the fault cleared; \
>cap after: seconds after the fault with the 1 s load over capacity. recovery: from the fault clearing \
until every 1 s window to the end of the traffic has ≥ 95 % of its new requests succeeding and at \
most 1.25 attempts per new request (the simulator's definition). tail retries: retries ÷ requests over the last quarter of the run. budget: retries refused by the \
budgets; breaker: times a pod's breaker opened; dup: orders applied twice at the server. goodput>: \
requests succeeding per second from the fault clearing to the end of the traffic; p99: 99th percentile \
of a request's latency over all its attempts, every request counted (a failed one at the moment it \
failed); shed: attempts the server's ShedLayer answered at once ÷ \
attempts arriving.";

/// A short description of the run for the report and `--help` readers.
pub fn legend(p: &Params) -> String {
    let end = p
        .outage_end_s
        .map_or("the end of the run".to_string(), |e| format!("{e:.1} s"));
    let mut layers = match (p.shed_retries, p.drop_expired) {
        (false, false) => "",
        (true, false) => ", sheds retries first",
        (false, true) => ", drops expired work",
        (true, true) => ", sheds retries first, drops expired work",
    }
    .to_string();
    if let Some(l) = &p.server_limit {
        let _ = write!(layers, ", limit {l} (retries shed first)");
    }
    let rate = match p.ramp_to {
        Some(r) => format!("{} ramping to {r}", p.rate),
        None => p.rate.to_string(),
    };
    // A baseline has no fault window to describe.
    let fault = if p.fault == "none" {
        "no fault (a baseline; recovery counts from the start)".to_string()
    } else {
        format!("fault {} from {:.1} s to {end}", p.fault, p.outage_start_s)
    };
    let server = match &p.target {
        // A real upstream: its capacity is what the flags state it to be.
        Some(url) => format!(
            "target {} {url} through the fault proxy (capacity stated as {:.0}/s: {} workers × {:.0} ms)",
            p.method,
            p.capacity,
            p.workers,
            p.service_time_s * 1e3
        ),
        None if p.hosts.is_some() => format!(
            "server capacity {:.0}/s ({} workers × {:.0} ms, queue {}{layers}) in a network \
             namespace of its own, the pods over {} more",
            p.capacity,
            p.workers,
            p.service_time_s * 1e3,
            p.queue,
            p.hosts.unwrap_or(0)
        ),
        None => format!(
            "server capacity {:.0}/s ({} workers × {:.0} ms, queue {}{layers})",
            p.capacity,
            p.workers,
            p.service_time_s * 1e3,
            p.queue
        ),
    };
    format!(
        "{fault}; {rate} new requests/s from {} clients in {} pods; {server}; attempt timeout \
         {:.0} ms, deadline {:.1} s, up to {} attempts, backoff {:.0} ms ×2 up to {:.0} s",
        p.clients,
        p.pods,
        p.timeout_s * 1e3,
        p.deadline_s,
        p.attempts,
        p.base_s * 1e3,
        p.cap_s,
    )
}

/// The top of the y axis shared by every strategy's chart: the highest
/// load or count of successes of any of them, and at least 1.2× capacity.
fn shared_top(rows: &[Row], p: &Params) -> f64 {
    rows.iter()
        .flat_map(|r| r.series.load.iter().chain(&r.series.successes))
        .map(|x| f64::from(*x))
        .fold(p.capacity / 10.0 * 1.2, f64::max)
        .max(1.0)
}

/// One arrival histogram: first attempts and retries stacked per 100 ms,
/// the capacity and baseline lines, the fault shaded, successes as a line,
/// on a y axis from 0 to `top` (the same for every strategy of a report, so
/// their heights compare).
pub fn chart(row: &Row, p: &Params, top: f64) -> String {
    let s = &row.series;
    let n = s.load.len().max(1);
    let fault = (
        p.outage_start_s * 10.0,
        p.outage_end_s.map_or(n as f64, |e| e * 10.0),
    );
    Histogram {
        first: &s.first_attempts,
        retries: &s.retries,
        successes: Some((&s.successes, "successes at the clients")),
        title: None,
        shaded: vec![fault],
        lines: vec![
            (p.capacity / 10.0, "#000", "6,3", "capacity".into()),
            (p.rate / 10.0, "#777", "2,3", "baseline".into()),
        ],
        top,
    }
    .svg()
}

/// The whole report: the legend, the table, one chart per strategy.
pub fn html(r: &Results) -> String {
    // Seventeen columns: a smaller, tighter table, and the colour key.
    let mut h = crate::style::head(
        "stagger gameday",
        "table{font-size:12px}td,th{padding:2px 5px}th{white-space:normal;vertical-align:bottom}\
         .key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}",
    );
    let _ = write!(
        h,
        "<h1>stagger gameday: {}</h1><p>{}</p>{}<p><small>{}</small></p>",
        crate::escape(r.params.fault),
        crate::escape(&legend(&r.params)),
        html_table(r),
        crate::escape(KEY)
    );
    h.push_str(
        "<p class=\"key\">Attempts arriving at the server per 100 ms:<span style=\"background:#4a78c2\"></span>first attempts\
         <span style=\"background:#d9534f\"></span>retries<span style=\"background:#2e8b57;height:2px\"></span>successes at the clients\
         <span style=\"background:#eee\"></span>fault. Dashed: capacity; dotted: baseline (the arrival rate).</p>",
    );
    let top = shared_top(&r.strategies, &r.params);
    let _ = write!(
        h,
        "<p>Every chart has the same y scale (0 to {top:.0} attempts per 100 ms), so their heights compare.</p>"
    );
    for row in &r.strategies {
        let _ = write!(
            h,
            "<h2>{}</h2><p>success {}, amplification {:.2}, retries/request {}, recovery {}, duplicates {}</p>{}",
            crate::escape(&row.strategy),
            pct(row.request_success),
            row.amplification,
            pct(row.retry_ratio),
            recovery(r.params.fault, row, "n/a (the fault never clears)"),
            row.duplicates,
            chart(row, &r.params, top)
        );
    }
    h.push_str("</body></html>\n");
    h
}

/// Writes `report.html` (self-contained, inline SVG) and `results.json`
/// (`json`, the `--format json` document) into `dir`, creating it.
pub fn write_report(
    dir: &std::path::Path,
    results: &Results,
    json: &str,
) -> Result<(), crate::WriteError> {
    crate::write_files(
        dir,
        &[
            ("report.html", &html(results)),
            ("results.json", &format!("{json}\n")),
        ],
    )
}

/// A soak's verdict in a few lines, printed under the table.
pub fn soak(v: &Verdict) -> String {
    let mb = |kb: f64| kb / 1024.0;
    let [a, b] = v.warm_window_s;
    let [c, d] = v.end_window_s;
    format!(
        "soak: resident memory {:.1} MiB over {a:.0}–{b:.0} s, {:.1} MiB over {c:.0}–{d:.0} s \
         ({:+.1} %, bound {} %; most {:.1} MiB)\n\
         soak: open descriptors {:.0} → {:.0} ({:+.1} %; most {})\n\
         soak: {}",
        mb(v.rss_warm_kb),
        mb(v.rss_end_kb),
        v.rss_growth_pct,
        MAX_GROWTH_PCT,
        mb(v.rss_max_kb as f64),
        v.fds_warm,
        v.fds_end,
        v.fds_growth_pct,
        v.fds_max,
        if v.flat { "flat" } else { "GREW" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagger_gameday::results::Series;

    #[test]
    fn a_soak_verdict_says_its_bound_and_whether_it_grew() {
        let v = Verdict {
            warm_window_s: [60.0, 120.0],
            end_window_s: [540.0, 600.0],
            rss_warm_kb: 10_240.0,
            rss_end_kb: 11_264.0,
            rss_max_kb: 11_400,
            rss_growth_pct: 10.0,
            fds_warm: 12.0,
            fds_end: 12.0,
            fds_max: 14,
            fds_growth_pct: 0.0,
            flat: false,
            samples: Vec::new(),
        };
        let text = soak(&v);
        assert!(
            text.contains("10.0 MiB over 60–120 s, 11.0 MiB over 540–600 s (+10.0 %, bound 5 %"),
            "{text}"
        );
        assert!(text.ends_with("soak: GREW"), "{text}");
    }

    fn row(name: &str, load: u32) -> Row {
        let n = 20;
        Row {
            strategy: name.into(),
            series: Series {
                t_s: (0..n).map(|i| f64::from(i) / 10.0).collect(),
                load: vec![load; n as usize],
                first_attempts: vec![load / 2; n as usize],
                retries: vec![load - load / 2; n as usize],
                successes: vec![1; n as usize],
                ..Series::default()
            },
            ..Row::default()
        }
    }

    fn params() -> Params {
        Params {
            fault: "stall",
            duration_s: 2.0,
            rate: 100.0,
            capacity: 200.0,
            clients: 1,
            pods: 1,
            workers: 1,
            service_time_s: 0.01,
            queue: 1,
            timeout_s: 1.0,
            deadline_s: 1.0,
            attempts: 3,
            base_s: 0.1,
            cap_s: 1.0,
            outage_start_s: 0.5,
            outage_end_s: Some(1.0),
            seed: 1,
            shed_retries: false,
            drop_expired: false,
            server_limit: None,
            ramp_to: None,
            target: None,
            method: "POST",
            hosts: None,
        }
    }

    /// The y-axis labels of a chart, top last.
    fn y_labels(svg: &str) -> Vec<String> {
        svg.split(r#"text-anchor="end">"#)
            .skip(1)
            .map(|s| s.split('<').next().unwrap_or("").to_string())
            .filter(|s| s.parse::<f64>().is_ok())
            .collect()
    }

    #[test]
    fn every_strategy_chart_shares_one_y_scale_and_labels_it() {
        let r = Results {
            model: "gameday",
            params: params(),
            strategies: vec![row("storm", 90), row("calm", 12)],
        };
        let h = html(&r);
        let charts: Vec<&str> = h.split("<svg").skip(1).collect();
        assert_eq!(charts.len(), 2);
        let (a, b) = (y_labels(charts[0]), y_labels(charts[1]));
        assert_eq!(a, b, "same scale");
        assert_eq!(a.last().map(String::as_str), Some("90"));
        assert!(charts.iter().all(|c| c.contains("attempts per 100 ms")));
    }

    /// The report said "success 100%" for 99.5 %.
    #[test]
    fn a_share_short_of_all_or_nothing_is_never_rounded_to_it() {
        assert_eq!(pct(0.995), "99.5%");
        assert_eq!(pct(0.9999), "99.9%");
        assert_eq!(pct(1.0), "100%");
        assert_eq!(pct(0.002), "0.2%");
        assert_eq!(pct(0.0), "0%");
        assert_eq!(pct(0.42), "42%");
    }

    /// Under `--fault none` the report said "recovery 11.9 s after the
    /// fault", and its table (a `<pre>`) scrolled sideways.
    #[test]
    fn no_fault_has_no_recovery_and_the_table_is_an_html_table() {
        let mut p = params();
        p.fault = "none";
        let mut calm = row("calm", 12);
        calm.recovered = Some(true);
        calm.recovery_s = Some(11.9);
        let r = Results {
            model: "gameday",
            params: p,
            strategies: vec![calm],
        };
        let h = html(&r);
        assert!(
            !h.contains("11.9 s after the fault"),
            "no fault to recover from"
        );
        assert!(h.contains("recovery n/a (no fault)"));
        assert!(h.contains("<table><tr><th>strategy</th>") && !h.contains("<pre>"));
        assert!(!table(&r).contains("11.9"));
    }

    /// `--fault none` described a fault "from 0.0 s to 0.0 s".
    #[test]
    fn a_baseline_is_described_as_no_fault() {
        let mut p = params();
        p.fault = "none";
        let l = legend(&p);
        assert!(l.starts_with("no fault"), "{l}");
        assert!(!l.contains("from 0.0 s"), "{l}");
        let l = legend(&params());
        assert!(l.starts_with("fault stall from 0.5 s to 1.0 s"), "{l}");
    }
}
