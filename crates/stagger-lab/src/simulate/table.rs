//! The table printed on stdout: one row per strategy.

use std::io::{self, Write};
use std::time::Duration;

use stagger_sim::{Model, Params, Results, Row};

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

/// Prints the table for `r`.
pub(super) fn print(out: &mut impl Write, p: &Params, r: &Results) -> io::Result<()> {
    writeln!(out, "{}", describe(p))?;
    match p.model {
        Model::Failover | Model::Metastable => overload(out, p, &r.strategies),
        Model::Contention => contention(out, &r.strategies),
        Model::Layers => layers(out, &r.strategies),
    }
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
