//! The fault proxy's arrival histogram as text and as an SVG chart: what
//! `stagger proxy --out` writes as `histogram.txt` and `histogram.svg` and
//! what the proxy's `/stats` and `/stats?format=svg` serve while it runs.

use std::fmt::Write as _;

use stagger_gameday::proxy::Report;

use crate::svg::Histogram;

/// The histogram of `r` as an SVG chart: first attempts and retries stacked
/// per bin, upstream successes as a line, the faults shaded.
pub fn chart(r: &Report) -> String {
    let s = &r.series;
    // The bars and the successes' line both fit under the top.
    let top = s
        .first_attempts
        .iter()
        .zip(&s.retries)
        .map(|(f, r)| f + r)
        .chain(s.upstream_ok.iter().copied())
        .map(f64::from)
        .fold(1.0, f64::max)
        * 1.1;
    let n = s.first_attempts.len() as f64;
    let bins = |x: f64| x * 1000.0 / r.bin_ms.max(1) as f64;
    Histogram {
        first: &s.first_attempts,
        retries: &s.retries,
        successes: Some((&s.upstream_ok, "upstream successes")),
        title: Some(format!(
            "stagger proxy: attempts arriving per {} ms",
            r.bin_ms
        )),
        shaded: r
            .faults
            .iter()
            .map(|w| (bins(w.start_s), w.end_s.map_or(n, bins)))
            .collect(),
        lines: Vec::new(),
        top,
    }
    .svg()
}

/// The histogram of `r` as text: one line per second (first attempts and
/// retries, a bar of each), faults marked.
pub fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} requests arrived: {} first attempts, {} retries ({} by x-retry-attempt, {} by \
         grpc-previous-rpc-attempts, {} by a repeated Idempotency-Key)",
        r.arrivals(),
        r.first_attempts,
        r.retries,
        r.retries_by.x_retry_attempt,
        r.retries_by.grpc_previous_rpc_attempts,
        r.retries_by.idempotency_key
    );
    let _ = writeln!(
        out,
        "forwarded {} (upstream 2xx {}, 5xx {}, unreachable {}); answered by faults: 503 {}, \
         429 {}, reset {}, blackholed {}; stalled {}, slowed {}, failovers {} (open connections \
         dropped {}; new ones refused by the kernel, not counted here); \
         keys answered 2xx twice: executed twice {}, replayed {} (marked \
         Idempotent-Replayed); answers no client received {} (it hung up first: \
         the upstream served them all the same)",
        r.forwarded,
        r.upstream_ok,
        r.upstream_5xx,
        r.upstream_errors,
        r.answered_503,
        r.answered_429,
        r.reset,
        r.blackholed,
        r.stalled,
        r.slowed,
        r.failovers,
        r.failover_dropped,
        r.duplicates,
        r.replayed,
        r.unclaimed
    );
    if !r.grpc_status.is_empty() {
        let by: Vec<String> = r
            .grpc_status
            .iter()
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "gRPC calls by grpc-status: {} (HTTP 200 all; only OK is in upstream 2xx)",
            by.join(", ")
        );
    }
    if let Some(why) = &r.first_upstream_error {
        let _ = writeln!(
            out,
            "no answer from the upstream ({}×), first: {why}",
            r.upstream_errors
        );
    }
    per_second(r, &mut out);
    out
}

/// The arrivals per second as bars of `#` (first attempts) and `+`
/// (retries), each second marked with the faults holding in it.
fn per_second(report: &Report, out: &mut String) {
    let s = &report.series;
    let per_s = (1000 / report.bin_ms.max(1)).max(1) as usize;
    let secs: Vec<(u64, u64)> = s
        .first_attempts
        .chunks(per_s)
        .zip(s.retries.chunks(per_s))
        .map(|(f, r)| {
            (
                f.iter().map(|&x| u64::from(x)).sum(),
                r.iter().map(|&x| u64::from(x)).sum(),
            )
        })
        .collect();
    let top = secs.iter().map(|(f, r)| f + r).max().unwrap_or(0).max(1);
    let _ = writeln!(out, "arrivals per second (# first attempts, + retries):");
    let _ = writeln!(out, "{:>6}  {:>7}  {:>7}", "second", "first", "retries");
    for (i, (f, r)) in secs.iter().enumerate() {
        let bar = |n: u64| ((n * 50).div_ceil(top)) as usize;
        let t = i as f64;
        let marks: Vec<&str> = report
            .faults
            .iter()
            .filter(|w| t + 1.0 > w.start_s && w.end_s.is_none_or(|e| t < e))
            .map(|w| w.kind.as_str())
            .collect();
        let line = format!(
            "{i:>6}  {f:>7}  {r:>7}  {}{}{}",
            "#".repeat(bar(*f)),
            "+".repeat(bar(*r)),
            if marks.is_empty() {
                String::new()
            } else {
                format!("  [{}]", marks.join(", "))
            }
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use stagger_gameday::fault::WindowJson;
    use stagger_gameday::proxy::record::ProxySeries;
    use stagger_gameday::proxy::Report;

    // Ten arrivals a second for two and a half seconds, one retry in the
    // second second, a 503 fault over it.
    fn report() -> Report {
        let mut first = vec![1u32; 25];
        first.resize(30, 0);
        let mut retries = vec![0u32; 30];
        retries[12] = 1;
        Report {
            bin_ms: 100,
            first_attempts: 25,
            retries: 1,
            replayed: 3,
            failovers: 1,
            failover_dropped: 3,
            faults: vec![WindowJson {
                kind: "503".into(),
                start_s: 1.0,
                end_s: Some(2.0),
            }],
            series: ProxySeries {
                t_s: (0..30).map(|i| f64::from(i) / 10.0).collect(),
                first_attempts: first,
                retries,
                upstream_ok: vec![0; 30],
            },
            ..Report::default()
        }
    }

    #[test]
    fn the_text_histogram_has_a_line_per_second_with_faults_marked() {
        let text = super::text(&report());
        let lines: Vec<&str> = text.lines().skip(4).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].trim_start().starts_with("0       10        0"),
            "{text}"
        );
        assert!(
            lines[1].contains("[503]") && !lines[0].contains("[503]"),
            "{text}"
        );
        assert!(text.contains("replayed 3"), "{text}");
        assert!(
            text.contains(
                "failovers 1 (open connections dropped 3; new ones refused by the kernel"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_proxy_chart_stacks_retries_on_first_attempts_under_its_title() {
        let r = Report {
            bin_ms: 100,
            series: ProxySeries {
                t_s: vec![0.0, 0.1],
                first_attempts: vec![4, 2],
                retries: vec![0, 3],
                upstream_ok: vec![4, 1],
            },
            ..Report::default()
        };
        let svg = super::chart(&r);
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("#d9534f"), "retries drawn in the retry colour");
        assert!(svg.contains("stagger proxy: attempts arriving per 100 ms"));
    }
}
