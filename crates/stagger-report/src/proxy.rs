//! The fault proxy's arrival histogram as an SVG chart: what
//! `stagger proxy --out` writes as `histogram.svg` and what the proxy's
//! `/stats?format=svg` serves while it runs.

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

#[cfg(test)]
mod tests {
    use stagger_gameday::proxy::record::ProxySeries;
    use stagger_gameday::proxy::Report;

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
