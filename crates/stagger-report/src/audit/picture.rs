//! The path as an SVG picture: one box per layer, edge on top, each with
//! its tries and the attempts it sends; the dependency at the bottom with
//! the product.

use std::fmt::Write;

use stagger_audit::path::{count, Layer, LayerNumbers, PathReport};

use super::path::attempts;
use crate::escape as esc;
use crate::style::{MUTED, STROKE, SVG_FONT};
use crate::text::{cut, cut_front};

const W: u32 = 560;
const BOX_H: u32 = 58;
const GAP: u32 = 26;
/// Characters of a box's bold title and of its second line that fit left
/// of the figures on its right (13 px sans-serif, 0.6 em a character at
/// most: 7.8 px; the figures take the right 100 px).
const TITLE_CHARS: usize = 52;
const LINE_CHARS: usize = 52;

/// The path as an SVG picture: one box per layer with its tries, the
/// attempts at the bottom.
pub fn path_svg(r: &PathReport) -> String {
    let n = r.layers.len() as u32;
    let h = 40 + (n + 1) * (BOX_H + GAP) + 10;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" {SVG_FONT} font-size="13">"#
    );
    let _ = writeln!(
        s,
        r#"<title>Retries along the call path: {} at the bottom</title>"#,
        attempts(r.dead.bottom_attempts)
    );
    let _ = writeln!(
        s,
        r##"<text x="12" y="24" font-size="15" font-weight="bold">One call, dependency down: {} reach it</text>"##,
        attempts(r.dead.bottom_attempts)
    );
    let mut y = 40;
    for (i, (l, num)) in r.layers.iter().zip(&r.dead.layers).enumerate() {
        layer_box(&mut s, i, l, num, y);
        y += BOX_H + GAP;
    }
    let _ = writeln!(
        s,
        r##"<rect x="12" y="{y}" width="{}" height="{BOX_H}" rx="6" fill="#f7c6c6" stroke="{STROKE}"/>"##,
        W - 24
    );
    let _ = writeln!(
        s,
        r##"<text x="24" y="{}" font-weight="bold">dependency (down)</text>"##,
        y + 24
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" font-size="18" font-weight="bold">{}</text>"##,
        W - 24,
        y + 36,
        attempts(r.dead.bottom_attempts)
    );
    s.push_str("</svg>\n");
    s
}

/// One layer's box at height `y`, with the arrow to the next.
fn layer_box(s: &mut String, i: usize, l: &Layer, num: &LayerNumbers, y: u32) {
    let retries = num.tries > 1.0;
    let fill = if retries { "#fde2cf" } else { "#e8eef5" };
    let stroke = if l.implicit {
        r#" stroke-dasharray="6 3""#
    } else {
        ""
    };
    let _ = writeln!(
        s,
        r##"<rect x="12" y="{y}" width="{}" height="{BOX_H}" rx="6" fill="{fill}" stroke="{STROKE}"{stroke}/>"##,
        W - 24
    );
    let mut title = format!("{}. {} {}", i + 1, l.system, l.selector);
    if l.implicit {
        title.push_str(" (implicit default)");
    }
    let line = format!("{} — retries on {}", l.file_name(), l.retry_on);
    // Cut to the room left of the figures; the whole text is the
    // element's tooltip.
    let _ = writeln!(
        s,
        r##"<text x="24" y="{}" font-weight="bold"><title>{}</title>{}</text>"##,
        y + 20,
        esc(&title),
        esc(&cut_front(&title, TITLE_CHARS))
    );
    let _ = writeln!(
        s,
        r##"<text x="24" y="{}" fill="{MUTED}"><title>{}</title>{}</text>"##,
        y + 40,
        esc(&format!("{} — retries on {}", l.file, l.retry_on)),
        esc(&cut(&line, LINE_CHARS))
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" font-size="16" font-weight="bold">×{}</text>"##,
        W - 24,
        y + 24,
        count(num.tries)
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="end" fill="{MUTED}">sends {}</text>"##,
        W - 24,
        y + 44,
        count(num.sends)
    );
    let ay = y + BOX_H;
    let _ = writeln!(
        s,
        r##"<line x1="{}" y1="{ay}" x2="{}" y2="{}" stroke="{STROKE}" stroke-width="2"/>"##,
        W / 2,
        W / 2,
        ay + GAP - 4
    );
    let _ = writeln!(
        s,
        r##"<path d="M{} {} l-5 -8 h10 z" fill="{STROKE}"/>"##,
        W / 2,
        ay + GAP
    );
}
