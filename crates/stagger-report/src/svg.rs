//! The arrival histogram as an SVG chart, written by hand (no chart
//! library, no fonts): the game-day's report and the fault proxy's
//! `histogram.svg` draw the same picture with this one function.

use std::fmt::Write as _;

use crate::style::{STROKE, SVG_FONT};

const W: f64 = 960.0;
const H: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 30.0;

/// What one chart shows, per 100 ms bin: first attempts (blue) and retries
/// (red) stacked, an optional line of successes (green), shaded spans
/// (faults, in bins) and horizontal reference lines; with a title, also a
/// legend, for a chart read on its own (the fault proxy's file).
#[derive(Debug, Clone)]
pub struct Histogram<'a> {
    /// First attempts per bin.
    pub first: &'a [u32],
    /// Retries per bin.
    pub retries: &'a [u32],
    /// Successes per bin, drawn as a line, and what they are (the legend's
    /// words, e.g. "successes at the clients").
    pub successes: Option<(&'a [u32], &'a str)>,
    /// A title over the chart; with one, the chart carries its own legend.
    pub title: Option<String>,
    /// `(from, to)` in bins.
    pub shaded: Vec<(f64, f64)>,
    /// `(value per bin, colour, dash pattern, label)`.
    pub lines: Vec<(f64, &'static str, &'static str, String)>,
    /// The top of the y axis, in attempts per bin.
    pub top: f64,
}

/// Where a value lands on the chart: `n` bins across, `top` at the top.
struct Plot {
    n: usize,
    top: f64,
}

impl Plot {
    fn x(&self, i: f64) -> f64 {
        LEFT + (W - LEFT - RIGHT) * i / self.n as f64
    }

    fn y(&self, v: f64) -> f64 {
        TOP + (H - TOP - BOTTOM) * (1.0 - v / self.top)
    }
}

impl Histogram<'_> {
    /// The chart.
    pub fn svg(&self) -> String {
        let p = Plot {
            n: self.first.len().max(1),
            top: self.top.max(1.0),
        };
        let mut g = String::new();
        let _ = write!(
            g,
            r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" {SVG_FONT} font-size="11">"##
        );
        self.shaded_and_bars(&p, &mut g);
        self.successes_and_lines(&p, &mut g);
        axes(&p, &mut g);
        if let Some(t) = &self.title {
            self.title_and_legend(t, &mut g);
        }
        g.push_str("</svg>");
        g
    }

    /// The title on the left of the top margin, the legend on its right.
    fn title_and_legend(&self, title: &str, g: &mut String) {
        let _ = write!(
            g,
            r##"<text x="{LEFT}" y="14" font-size="12" font-weight="bold">{}</text>"##,
            crate::escape(title)
        );
        let mut keys: Vec<(&str, String)> = vec![
            ("#4a78c2", "first attempts".into()),
            ("#d9534f", "retries".into()),
        ];
        if let Some((_, what)) = self.successes {
            keys.push(("#2e8b57", what.to_string()));
        }
        if !self.shaded.is_empty() {
            keys.push(("#ddd", "fault".into()));
        }
        // Right-aligned: each key a swatch and its words, about 6 px a
        // character at this size.
        let width: f64 = keys
            .iter()
            .map(|(_, w)| 20.0 + 6.0 * w.chars().count() as f64)
            .sum();
        let mut x = W - RIGHT - width;
        for (colour, words) in keys {
            let line = colour == "#2e8b57";
            let (h, y) = if line { (3.0, 8.5) } else { (10.0, 5.0) };
            let _ = write!(
                g,
                r##"<rect x="{x:.1}" y="{y}" width="12" height="{h}" fill="{colour}"/><text x="{:.1}" y="14">{}</text>"##,
                x + 16.0,
                crate::escape(&words)
            );
            x += 20.0 + 6.0 * words.chars().count() as f64;
        }
    }

    /// The shaded spans, then first attempts and retries stacked per bin.
    fn shaded_and_bars(&self, p: &Plot, g: &mut String) {
        let ph = H - TOP - BOTTOM;
        let bw = ((W - LEFT - RIGHT) / p.n as f64).max(0.5);
        for &(fs, fe) in &self.shaded {
            let _ = write!(
                g,
                r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{ph}" fill="#eee"/>"##,
                p.x(fs),
                (p.x(fe.min(p.n as f64)) - p.x(fs)).max(0.0)
            );
        }
        for (i, (f, r)) in self.first.iter().zip(self.retries).enumerate() {
            let (f, r) = (f64::from(*f), f64::from(*r));
            let xi = p.x(i as f64);
            if f > 0.0 {
                let _ = write!(
                    g,
                    r##"<rect x="{xi:.1}" y="{:.1}" width="{bw:.2}" height="{:.1}" fill="#4a78c2"/>"##,
                    p.y(f),
                    p.y(0.0) - p.y(f)
                );
            }
            if r > 0.0 {
                let _ = write!(
                    g,
                    r##"<rect x="{xi:.1}" y="{:.1}" width="{bw:.2}" height="{:.1}" fill="#d9534f"/>"##,
                    p.y(f + r),
                    p.y(f) - p.y(f + r)
                );
            }
        }
    }

    /// The successes' line and the horizontal reference lines.
    fn successes_and_lines(&self, p: &Plot, g: &mut String) {
        if let Some((ok, _)) = self.successes {
            // Never above the frame, whatever the top the caller chose.
            let pts: Vec<String> = ok
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let v = f64::from(*v).min(p.top);
                    format!("{:.1},{:.1}", p.x(i as f64 + 0.5), p.y(v))
                })
                .collect();
            // A white casing under the green line: successes run along the
            // top of the bars (most attempts succeed), where a bare line of
            // their width disappears into their edges.
            let _ = write!(
                g,
                r##"<polyline points="{pts}" fill="none" stroke="#fff" stroke-width="4" stroke-linejoin="round" opacity="0.9"/><polyline points="{pts}" fill="none" stroke="#2e8b57" stroke-width="2" stroke-linejoin="round"/>"##,
                pts = pts.join(" ")
            );
        }
        for (v, color, dash, label) in &self.lines {
            let _ = write!(
                g,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{yv:.1}" y2="{yv:.1}" stroke="{color}" stroke-dasharray="{dash}"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{color}">{label}</text>"##,
                W - RIGHT,
                W - RIGHT - 2.0,
                p.y(*v) - 3.0,
                yv = p.y(*v)
            );
        }
    }
}

/// The axes: seconds along the bottom, attempts per 100 ms on the left.
fn axes(p: &Plot, g: &mut String) {
    let (n, top) = (p.n, p.top);
    let ph = H - TOP - BOTTOM;
    let _ = write!(
        g,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{:.1}" stroke="{STROKE}"/><line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{STROKE}"/>"##,
        p.y(0.0),
        W - RIGHT,
        p.y(0.0),
        p.y(0.0)
    );
    let secs = n / 10;
    let step = match secs {
        0..=15 => 1,
        16..=40 => 5,
        41..=400 => 10,
        _ => 60,
    };
    for t in (0..=secs).step_by(step) {
        let xt = p.x(t as f64 * 10.0);
        let _ = write!(
            g,
            r##"<text x="{xt:.1}" y="{:.1}" text-anchor="middle">{t}s</text>"##,
            p.y(0.0) + 14.0
        );
    }
    let _ = write!(
        g,
        r##"<text transform="translate(14,{:.1}) rotate(-90)" text-anchor="middle">attempts per 100 ms</text>"##,
        TOP + ph / 2.0
    );
    // Whole-number ticks a round step apart (1, 2, 5, 10, 20, …), so a
    // low axis reads 0, 1, 2 and never 0, 0, 1, 1, 1.
    // The top is labelled too when it stands clear of the last tick.
    let step = tick_step(top);
    let mut ticks: Vec<f64> = (0..)
        .map(|k| f64::from(k) * step)
        .take_while(|v| *v <= top + 1e-9)
        .collect();
    if ticks.last().is_some_and(|&l| top - l >= step / 2.0) && top.fract() == 0.0 {
        ticks.push(top);
    }
    for v in ticks {
        let _ = write!(
            g,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
            LEFT - 4.0,
            p.y(v) + 4.0
        );
    }
}

/// The smallest of 1, 2, 5, 10, 20, 50, … that puts at most four steps
/// between 0 and `top`.
fn tick_step(top: f64) -> f64 {
    let mut step = 1.0;
    loop {
        for m in [1.0, 2.0, 5.0] {
            if top / (step * m) <= 4.0 {
                return step * m;
            }
        }
        step *= 10.0;
    }
}

#[cfg(test)]
mod tests {
    use super::{tick_step, Histogram, H, TOP};

    fn chart(title: Option<&str>, top: f64) -> String {
        Histogram {
            first: &[5, 5, 5],
            retries: &[0, 2, 0],
            successes: Some((&[5, 30, 5], "upstream successes")),
            title: title.map(str::to_string),
            shaded: vec![(1.0, 2.0)],
            lines: Vec::new(),
            top,
        }
        .svg()
    }

    /// The polylines' y coordinates.
    fn line_ys(svg: &str) -> Vec<f64> {
        svg.split("points=\"")
            .skip(1)
            .flat_map(|rest| {
                let pts = &rest[..rest.find('"').unwrap()];
                pts.split(' ')
                    .map(|xy| xy.split(',').nth(1).unwrap().parse::<f64>().unwrap())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The proxy's histogram.svg had no title and no legend.
    #[test]
    fn a_titled_chart_says_what_it_shows() {
        let svg = chart(Some("arrivals at 127.0.0.1:8080"), 12.0);
        for words in [
            "arrivals at 127.0.0.1:8080",
            "first attempts",
            "retries",
            "upstream successes",
            "fault",
        ] {
            assert!(svg.contains(words), "{words}: {svg}");
        }
        assert!(!chart(None, 12.0).contains("first attempts"));
    }

    /// Its green line ran off the top when successes outnumbered the
    /// axis's top.
    #[test]
    fn the_successes_line_stays_inside_the_frame() {
        let ys = line_ys(&chart(None, 12.0));
        assert!(!ys.is_empty());
        assert!(ys.iter().all(|&y| (TOP..=H).contains(&y)), "{ys:?}");
    }

    /// The game-day report's green line vanished along the tops of the
    /// bars: it is drawn last, over a white casing wider than itself.
    #[test]
    fn the_successes_line_is_drawn_over_the_bars_with_a_casing() {
        let svg = chart(None, 40.0);
        let casing = svg.find(r##"stroke="#fff""##).expect("a casing");
        let line = svg.find(r##"stroke="#2e8b57""##).expect("the line");
        let last_bar = svg.rfind("<rect").unwrap();
        assert!(last_bar < casing && casing < line, "{svg}");
    }

    /// The proxy's histogram read `0, 0, 1, 1, 1` on an axis topped at 1.
    #[test]
    fn ticks_are_distinct_whole_numbers() {
        for (top, step) in [
            (1.0, 1.0),
            (3.0, 1.0),
            (4.0, 1.0),
            (5.0, 2.0),
            (9.0, 5.0),
            (90.0, 50.0),
            (400.0, 100.0),
        ] {
            assert_eq!(tick_step(top), step, "top {top}");
        }
    }
}
