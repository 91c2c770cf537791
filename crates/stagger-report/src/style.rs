//! The one look of every page and picture: the page's style sheet and head,
//! and the SVG's font and inks.

/// The style sheet every page starts from; a page adds only what it alone
/// draws (a chart grid, a colour key).
#[cfg_attr(not(any(feature = "simulate", feature = "gameday")), allow(dead_code))]
const PAGE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222}\
h1{font-size:1.5em}h2{margin-top:2em;font-size:1.2em}.note{color:#666}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}\
td:first-child,th:first-child{text-align:left}svg{display:block;margin:1em 0}pre{background:#f4f4f4;padding:8px;overflow:auto}";

/// A page's opening up to its `<body>`: `title` (escaped) and the shared
/// style sheet followed by `extra`.
#[cfg_attr(not(any(feature = "simulate", feature = "gameday")), allow(dead_code))]
pub(crate) fn head(title: &str, extra: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{}</title><style>{PAGE}{extra}</style></head><body>",
        crate::escape(title)
    )
}

/// The attributes that open every SVG picture's root element: one font.
pub(crate) const SVG_FONT: &str = r#"font-family="sans-serif""#;
/// Lines, arrows and box outlines.
pub(crate) const STROKE: &str = "#555";
/// Secondary text (a box's second line, a figure's label).
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) const MUTED: &str = "#444";
