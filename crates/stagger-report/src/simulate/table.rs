//! The table printed on stdout: one row per strategy.

use std::io::{self, Write};
use std::time::Duration;

use stagger_sim::{Model, Params, Results, Row, Strategy};

use crate::text::wrap;

/// A human duration: `250ms`, `2s`, `1.5s`.
pub(super) fn dur(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1000.0 {
        format!("{}ms", trim(ms))
    } else {
        format!("{}s", trim(ms / 1e3))
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn opt(x: Option<f64>, digits: usize, unit: &str, none: &str) -> String {
    x.map_or_else(|| none.to_string(), |v| format!("{v:.digits$}{unit}"))
}

/// One line describing the parameters.
pub(super) fn describe(p: &Params) -> String {
    let attempts = p
        .attempts
        .map_or_else(|| "unlimited".to_string(), |a| a.to_string());
    let runs = p.run_seeds().len();
    let seeds = match &p.seeds {
        Some(_) => "explicit seeds".to_string(),
        None => format!("seed {}", p.seed),
    };
    let backoff = format!("base {}, ×2, cap {}", dur(p.base), dur(p.cap));
    let body = match p.model {
        Model::Failover => format!(
            "{} in ticks of {}, {} new requests/tick, capacity {}/tick ({}), outage {}–{}, burst {}, {} client processes, {attempts} attempts, {backoff}{}",
            dur(p.duration), dur(p.tick), p.arrivals, p.capacity, p.success_model.as_str(),
            dur(p.outage_start), dur(p.outage_end), p.burst, p.clients,
            if p.server_sheds_retries { ", server sheds retries first" } else { "" }
        ),
        Model::Contention => format!(
            "{} clients, hops |N({}, {})|, {attempts} attempts, {backoff}",
            p.clients, dur(p.hop_mean), dur(p.hop_sd)
        ),
        Model::Metastable => format!(
            "{} of Poisson arrivals at {}/s, a server at {}/s, timeout {}, outage {}–{}, {}, {attempts} attempts, {backoff}",
            dur(p.duration), p.rate, p.capacity, dur(p.timeout), dur(p.outage_start),
            dur(p.outage_end),
            servers(p)
        ),
        Model::Layers => format!(
            "{} layers, {attempts} attempts per layer, {} requests/s for {}, {backoff}",
            p.layers, p.rate, dur(p.duration)
        ),
    };
    format!("{}: {body}; means over {runs} runs ({seeds})", p.model)
}

/// The metastable model's server strategies, as the description says them.
fn servers(p: &Params) -> String {
    let list: Vec<String> = p.server_list().iter().map(ToString::to_string).collect();
    format!("server {}", list.join(", "))
}

/// A row's name: its strategy, and the server's strategy when there is one.
pub(super) fn label(r: &Row) -> String {
    match &r.server {
        Some(s) => format!("{} @ {s}", r.strategy),
        None => r.strategy.clone(),
    }
}

/// The widest line the failover and layers tables print (a terminal's 100
/// columns, with room to spare).
pub(super) const COLUMNS: usize = 100;

/// Prints the table for `r`.
pub(super) fn print(out: &mut impl Write, p: &Params, r: &Results) -> io::Result<()> {
    for line in wrap(&describe(p), COLUMNS, "  ") {
        writeln!(out, "{line}")?;
    }
    match p.model {
        Model::Failover | Model::Metastable => {
            overload(out, p, &r.strategies)?;
            for note in notes(&r.strategies) {
                for line in wrap(&note, COLUMNS, "  ") {
                    writeln!(out, "{line}")?;
                }
            }
            Ok(())
        }
        Model::Contention => contention(out, &r.strategies),
        Model::Layers => layers(out, &r.strategies),
    }
}

/// What the table's numbers rest on, one sentence each: the settings of
/// each guardrail in use (read from the library objects the strategies were
/// given), and rows whose numbers are identical, with why.
pub(super) fn notes(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let used: Vec<Strategy> = rows
        .iter()
        .filter_map(|r| r.strategy.parse().ok())
        .collect();
    for (name, settings) in stagger_sim::guardrail_settings() {
        let on = used.iter().any(|s| match name {
            "+budget" => s.budget,
            "+breaker" => s.breaker,
            _ => s.throttle,
        });
        if on {
            let refuses = if name == "+breaker" {
                " (while open it refuses first attempts too)"
            } else {
                ""
            };
            out.push(format!("{name}: {settings}{refuses}."));
        }
    }
    for group in identical(rows) {
        let names: Vec<String> = group.iter().map(|r| label(r)).collect();
        let silent = group
            .iter()
            .all(|r| r.breaker_opens > 0.0 && r.series.retries.iter().sum::<f64>() == 0.0);
        let why = if silent {
            "they sent no retry at all: their breakers opened and refused every one, so how \
             they back off never came into play"
        } else {
            "what differs between them changed nothing in this scenario"
        };
        out.push(format!(
            "{} print the same numbers: {why}.",
            names.join(", ")
        ));
    }
    out
}

/// Groups of two or more rows whose printed numbers are all equal.
fn identical(rows: &[Row]) -> Vec<Vec<&Row>> {
    let key = |r: &Row| {
        format!(
            "{:.1} {:.2} {:.1} {:?} {:?} {:?} {:.1} {:.1} {:?}",
            r.attempts,
            r.amplification,
            r.request_success * 100.0,
            r.peak_load_over_capacity.map(|x| format!("{x:.2}")),
            r.post_outage_peak_over_capacity.map(|x| format!("{x:.2}")),
            r.recovery_s.map(|x| format!("{x:.2}")),
            r.budget_refusals,
            r.breaker_opens,
            r.server,
        )
    };
    let mut groups: Vec<(String, Vec<&Row>)> = Vec::new();
    for r in rows {
        let k = key(r);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    groups
        .into_iter()
        .map(|(_, g)| g)
        .filter(|g| g.len() > 1)
        .collect()
}

fn width(rows: &[Row]) -> usize {
    rows.iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(8)
        .max(8)
}

fn overload(out: &mut impl Write, p: &Params, rows: &[Row]) -> io::Result<()> {
    let w = width(rows);
    let meta = p.model == Model::Metastable;
    write!(
        out,
        "{:<w$}  {:>9}  {:>6}  {:>7}  {:>6}  {:>9}  {:>8}  {:>7}  {:>7}",
        "strategy",
        "attempts",
        "ampl.",
        "success",
        "peak/C",
        "post-out.",
        "recovery",
        "budget",
        "breaker"
    )?;
    if meta {
        write!(
            out,
            "  {:>9}  {:>9}  {:>9}  {:>6}",
            "goodput<", "goodput>", "recovered", "shed"
        )?;
    }
    writeln!(out)?;
    write!(
        out,
        "{:<w$}  {:>9}  {:>6}  {:>7}  {:>6}  {:>9}  {:>8}  {:>7}  {:>7}",
        "", "", "", "", "", "peak/C", "", "refusals", "opens"
    )?;
    if meta {
        write!(
            out,
            "  {:>9}  {:>9}  {:>9}  {:>6}",
            "(per s)", "(per s)", "", ""
        )?;
    }
    writeln!(out)?;
    for r in rows {
        write!(
            out,
            "{:<w$}  {:>9.1}  {:>5.2}x  {:>6.1}%  {:>6}  {:>9}  {:>8}  {:>7.1}  {:>7.1}",
            label(r),
            r.attempts,
            r.amplification,
            r.request_success * 100.0,
            opt(r.peak_load_over_capacity, 2, "", "-"),
            opt(r.post_outage_peak_over_capacity, 2, "", "-"),
            opt(r.recovery_s, 2, "s", "never"),
            r.budget_refusals,
            r.breaker_opens,
        )?;
        if meta {
            write!(
                out,
                "  {:>9}  {:>9}  {:>9}  {:>6}",
                opt(r.goodput_before, 1, "", "-"),
                opt(r.goodput_after, 1, "", "-"),
                match r.recovered {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "-",
                },
                opt(r.shed_share.map(|x| x * 100.0), 1, "%", "-"),
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn contention(out: &mut impl Write, rows: &[Row]) -> io::Result<()> {
    // One line per client count, one column pair per strategy.
    let mut strategies: Vec<&str> = Vec::new();
    let mut counts: Vec<u32> = Vec::new();
    for r in rows {
        if !strategies.contains(&r.strategy.as_str()) {
            strategies.push(&r.strategy);
        }
        if let Some(c) = r.clients {
            if !counts.contains(&c) {
                counts.push(c);
            }
        }
    }
    write!(out, "{:>7}", "clients")?;
    for s in &strategies {
        write!(out, "  {:>26}", format!("{s}: calls / ms"))?;
    }
    writeln!(out)?;
    for c in counts {
        write!(out, "{c:>7}")?;
        for s in &strategies {
            let cell = rows
                .iter()
                .find(|r| r.strategy == *s && r.clients == Some(c))
                .map_or_else(String::new, |r| {
                    let done = if r.request_success < 1.0 {
                        format!(" ({:.0}% done)", r.request_success * 100.0)
                    } else {
                        String::new()
                    };
                    format!(
                        "{:.1} / {}{done}",
                        r.calls.unwrap_or(0.0),
                        opt(r.completion_ms, 0, "", "never")
                    )
                });
            write!(out, "  {cell:>26}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

fn layers(out: &mut impl Write, rows: &[Row]) -> io::Result<()> {
    let w = width(rows);
    writeln!(
        out,
        "{:<w$}  {:<11}  {:>6}  {:>22}  {:>7}  {:>9}",
        "strategy", "retry at", "f", "dependency attempts", "success", "refusals"
    )?;
    writeln!(
        out,
        "{:<w$}  {:<11}  {:>6}  {:>22}",
        "", "", "", "per user request"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<w$}  {:<11}  {:>6}  {:>22.3}  {:>6.1}%  {:>9.1}",
            r.strategy,
            r.retry_at.unwrap_or("-"),
            r.failure_rate.map_or_else(|| "-".into(), |f| f.to_string()),
            r.bottom_attempts_per_request.unwrap_or(0.0),
            r.request_success * 100.0,
            r.budget_refusals,
        )?;
    }
    Ok(())
}
