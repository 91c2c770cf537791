//! SVG charts drawn with plotters' SVG backend (text is left to the browser,
//! so no font or system library is needed).

use plotters::prelude::*;
use stagger::random::FastRng;
use stagger::Backoff;

/// Colours, one per line, in order. Neither green nor red: those mark the
/// thresholds ([`HEALTHY`], [`ALARM`]), and a line must not pass for one.
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// The colour of a "healthy" threshold line.
pub(super) const HEALTHY: RGBColor = RGBColor(44, 160, 44);

/// The colour of an "alarm" threshold line.
pub(super) const ALARM: RGBColor = RGBColor(214, 39, 40);

/// The colour of line `i`.
pub(super) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

const SIZE: (u32, u32) = (760, 280);
const CAPACITY: RGBColor = RGBColor(20, 20, 20);
const OUTAGE: RGBColor = RGBColor(250, 200, 200);

/// A named line of (x, y) points.
pub(super) struct Line<'a> {
    pub(super) name: &'a str,
    pub(super) points: Vec<(f64, f64)>,
    pub(super) color: RGBColor,
}

/// A horizontal reference line (a capacity, an SLI threshold).
pub(super) struct HLine {
    pub(super) y: f64,
    pub(super) label: String,
    pub(super) color: RGBColor,
}

impl HLine {
    /// A reference line in the capacity's colour.
    pub(super) fn capacity(y: f64, label: String) -> Self {
        HLine {
            y,
            label,
            color: CAPACITY,
        }
    }
}

/// What to draw on a time chart besides the lines.
pub(super) struct Frame<'a> {
    pub(super) title: &'a str,
    pub(super) x_desc: &'a str,
    pub(super) y_desc: &'a str,
    /// Horizontal reference lines.
    pub(super) hlines: Vec<HLine>,
    /// A shaded span of x (the outage).
    pub(super) span: Option<(f64, f64)>,
    /// Logarithmic y axis.
    pub(super) log_y: bool,
    /// A fixed y range (linear charts): one scale shared by several panels,
    /// or an axis cut below the data's top; points above it are drawn at
    /// the top. A range starting below 0 keeps a line at 0 off the axis.
    pub(super) y_range: Option<(f64, f64)>,
}

/// A chart, or the note a page shows in its place when it cannot be drawn.
pub(super) fn svg_or_note(svg: Result<String, String>) -> String {
    svg.unwrap_or_else(|e| format!("<p class=note>chart unavailable: {}</p>", crate::escape(&e)))
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn bounds(lines: &[Line<'_>], frame: &Frame<'_>) -> (f64, f64, f64, f64) {
    let pts = || lines.iter().flat_map(|l| l.points.iter());
    let x_min = pts().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = pts().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y_data = pts().map(|p| p.1).filter(|y| y.is_finite());
    let y_max = y_data
        .chain(frame.hlines.iter().map(|h| h.y))
        .fold(0.0, f64::max);
    let (x_min, x_max) = if x_min.is_finite() && x_max > x_min {
        (x_min, x_max)
    } else {
        (0.0, 1.0)
    };
    let y_max = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
    match frame.y_range {
        Some((lo, hi)) if hi > lo => (x_min, x_max, lo, hi),
        _ => (x_min, x_max, 0.0, y_max),
    }
}

fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// The legend as HTML under the chart, so it never covers a line.
fn legend(lines: &[Line<'_>], frame: &Frame<'_>) -> String {
    let mut h = String::from("<div class=legend>");
    if frame.span.is_some() {
        h.push_str(&format!(
            "<span><i style='background:{};height:10px'></i>outage</span>",
            hex(OUTAGE)
        ));
    }
    for r in &frame.hlines {
        h.push_str(&format!(
            "<span><i style='border-top:2px dashed {}'></i>{}</span>",
            hex(r.color),
            crate::escape(&r.label)
        ));
    }
    for l in lines {
        h.push_str(&format!(
            "<span><i style='background:{}'></i>{}</span>",
            hex(l.color),
            crate::escape(l.name)
        ));
    }
    h.push_str("</div>");
    h
}

/// Lines against x, with reference lines and a shaded span; the SVG
/// followed by its legend in HTML.
pub(super) fn lines(lines: &[Line<'_>], frame: &Frame<'_>) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (x0, x1, y0, y1) = bounds(lines, frame);
        let mut b = ChartBuilder::on(&root);
        b.caption(frame.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56);
        if frame.log_y {
            draw_log(&mut b, lines, frame, (x0, x1, y1))?;
        } else {
            draw_linear(&mut b, lines, frame, (x0, x1, y0, y1))?;
        }
        root.present().map_err(err)?;
    }
    svg.push_str(&legend(lines, frame));
    Ok(format!("<figure class=chart>{svg}</figure>"))
}

/// The lines on a log y axis from just below the lowest positive value,
/// with the reference lines above zero.
fn draw_log(
    b: &mut ChartBuilder<'_, '_, SVGBackend<'_>>,
    lines: &[Line<'_>],
    frame: &Frame<'_>,
    (x0, x1, y1): (f64, f64, f64),
) -> Result<(), String> {
    let lo = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .chain(frame.hlines.iter().map(|h| h.y))
        .filter(|y| *y > 0.0)
        .fold(f64::INFINITY, f64::min);
    let lo = if lo.is_finite() { lo * 0.8 } else { 0.1 };
    let mut chart = b
        .build_cartesian_2d(x0..x1, (lo..y1.max(lo * 10.0)).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(frame.x_desc)
        .y_desc(frame.y_desc)
        .draw()
        .map_err(err)?;
    for r in frame.hlines.iter().filter(|h| h.y > 0.0) {
        chart
            .draw_series(DashedLineSeries::new(
                [(x0, r.y), (x1, r.y)],
                6,
                4,
                r.color.stroke_width(2),
            ))
            .map_err(err)?;
    }
    for l in lines {
        let pts = l.points.iter().copied().filter(|p| p.1 > 0.0);
        chart
            .draw_series(LineSeries::new(pts, l.color.stroke_width(2)))
            .map_err(err)?;
    }
    Ok(())
}

/// The lines on a linear y axis, over the shaded span, with the zero line
/// when the axis goes below it and values past the top cut there.
fn draw_linear(
    b: &mut ChartBuilder<'_, '_, SVGBackend<'_>>,
    lines: &[Line<'_>],
    frame: &Frame<'_>,
    (x0, x1, y0, y1): (f64, f64, f64, f64),
) -> Result<(), String> {
    let mut chart = b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(frame.x_desc)
        .y_desc(frame.y_desc)
        .light_line_style(WHITE)
        .draw()
        .map_err(err)?;
    if let Some((a, z)) = frame.span {
        let (a, z) = (a.max(x0), z.min(x1));
        if z > a {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, y0), (z, y1)],
                    OUTAGE.mix(0.5).filled(),
                )))
                .map_err(err)?;
        }
    }
    if y0 < 0.0 {
        // The zero line, so a series that stays at 0 is seen on it.
        chart
            .draw_series(LineSeries::new(
                [(x0, 0.0), (x1, 0.0)],
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(err)?;
    }
    for r in &frame.hlines {
        chart
            .draw_series(DashedLineSeries::new(
                [(x0, r.y), (x1, r.y)],
                6,
                4,
                r.color.stroke_width(2),
            ))
            .map_err(err)?;
    }
    for l in lines {
        chart
            .draw_series(LineSeries::new(
                l.points.iter().map(|&(x, y)| (x, y.min(y1))),
                l.color.stroke_width(2),
            ))
            .map_err(err)?;
    }
    Ok(())
}

/// `samples` delay chains drawn by the library from one seed, each delay
/// placed at its retry number, spread a little sideways so they can be told
/// apart.
fn sampled(backoff: &Backoff, retries: u32, samples: usize) -> Vec<(f64, f64)> {
    let mut root_rng = FastRng::seeded(1);
    let mut pts = Vec::new();
    for s in 0..samples {
        let chain = backoff.delays(root_rng.fork());
        for (d, n) in chain.zip(1..=retries) {
            let jitter = (s as f64 + 0.5) / samples as f64 * 0.6 - 0.3;
            pts.push((f64::from(n) + jitter, d.as_secs_f64()));
        }
    }
    pts
}

/// The backoff schedule as tiles: per retry n, the range the jitter draws
/// from (a tile), the capped backoff b_n (a bar) and sampled delays (dots),
/// all computed by the library's [`Backoff`].
pub(super) fn schedule_tiles(
    title: &str,
    backoff: &Backoff,
    retries: u32,
    samples: usize,
) -> Result<String, String> {
    let retries = retries.clamp(1, 12);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let top = (1..=retries)
            .map(|n| backoff.range(n).1.max(backoff.backoff(n)).as_secs_f64())
            .fold(0.0, f64::max)
            .max(1e-3)
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.5..(f64::from(retries) + 0.5), 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("retry n")
            .y_desc("delay (s)")
            .x_labels(retries as usize)
            .light_line_style(WHITE)
            .draw()
            .map_err(err)?;
        let tile = color(1);
        chart
            .draw_series((1..=retries).map(|n| {
                let (lo, hi) = backoff.range(n);
                let x = f64::from(n);
                Rectangle::new(
                    [
                        (x - 0.38, lo.as_secs_f64()),
                        (
                            x + 0.38,
                            hi.as_secs_f64().max(lo.as_secs_f64() + top * 0.004),
                        ),
                    ],
                    tile.mix(0.35).filled(),
                )
            }))
            .map_err(err)?
            .label("jitter range")
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 18, y + 5)], tile.mix(0.35).filled())
            });
        chart
            .draw_series((1..=retries).map(|n| {
                let x = f64::from(n);
                let b = backoff.backoff(n).as_secs_f64();
                PathElement::new(vec![(x - 0.38, b), (x + 0.38, b)], CAPACITY.stroke_width(2))
            }))
            .map_err(err)?
            .label("b_n = min(cap, base·2^(n-1))")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], CAPACITY.stroke_width(2)));
        let dots = color(0);
        let pts = sampled(backoff, retries, samples);
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 2, dots.filled())))
            .map_err(err)?
            .label("sampled delays")
            .legend(move |(x, y)| Circle::new((x + 9, y), 3, dots.filled()));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}
