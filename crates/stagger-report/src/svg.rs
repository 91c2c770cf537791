//! The arrival histogram as an SVG chart, written by hand (no chart
//! library, no fonts): the game-day's report and the fault proxy's
//! `histogram.svg` draw the same picture with this one function.

use std::fmt::Write as _;

const W: f64 = 960.0;
const H: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 30.0;

/// What one chart shows, per 100 ms bin: first attempts (blue) and retries
/// (red) stacked, an optional line of successes (green), shaded spans
/// (faults, in bins) and horizontal reference lines.
#[derive(Debug, Clone)]
pub struct Histogram<'a> {
    /// First attempts per bin.
    pub first: &'a [u32],
    /// Retries per bin.
    pub retries: &'a [u32],
    /// Successes per bin, drawn as a line.
    pub successes: Option<&'a [u32]>,
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
            r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" font-family="sans-serif" font-size="11">"##
        );
        self.shaded_and_bars(&p, &mut g);
        self.successes_and_lines(&p, &mut g);
        axes(&p, &mut g);
        g.push_str("</svg>");
        g
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
        if let Some(ok) = self.successes {
            let pts: Vec<String> = ok
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{:.1},{:.1}", p.x(i as f64 + 0.5), p.y(f64::from(*v))))
                .collect();
            let _ = write!(
                g,
                r##"<polyline points="{}" fill="none" stroke="#2e8b57" stroke-width="1.2"/>"##,
                pts.join(" ")
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
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{:.1}" stroke="#000"/><line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#000"/>"##,
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
    use super::tick_step;

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
