//! # stagger-report — what every `stagger` command shows
//!
//! Tables for a terminal, self-contained HTML pages and SVG charts, in one
//! style and with one HTML escaper, for:
//!
//! - `simulate` (feature `simulate`, on by default): a `stagger_sim`
//!   simulation (the table, `report.html` with its charts, `results.json`,
//!   `series.csv`) and the hedging simulation;
//! - `gameday` (feature `gameday`, on by default): a game-day's results
//!   (`stagger_gameday::results`, what each strategy's run measured, per
//!   100 ms) as the comparison table and `report.html`;
//! - `audit` (feature `audit`, on by default): `stagger audit`'s table of
//!   service configs, a call path as text and as an SVG picture, a
//!   repository's audit as text, and the SARIF log of every finding;
//! - `proxy` (feature `gameday`): the fault proxy's arrival histogram as
//!   the chart of `histogram.svg` and `/stats?format=svg`;
//! - [`svg`]: the arrival histogram (first attempts and retries per 100 ms)
//!   that the game-day's report and the fault proxy's chart both draw.
//!
//! The crate measures nothing and runs nothing: it turns results into text.
//!
//! ```
//! assert_eq!(stagger_report::escape("<b>\"a&b\"</b>"), "&lt;b&gt;&quot;a&amp;b&quot;&lt;/b&gt;");
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

#[cfg(feature = "audit")]
pub mod audit;
#[cfg(feature = "gameday")]
pub mod gameday;
#[cfg(feature = "gameday")]
pub mod proxy;
#[cfg(feature = "simulate")]
pub mod simulate;
mod style;
pub mod svg;
mod text;

/// `s` made safe to put in HTML text or a double-quoted attribute value:
/// `&`, `<`, `>` and `"` escaped. Every page and chart of this crate escapes
/// through this one function.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A report file that could not be written: which file, and why.
#[derive(Debug)]
pub struct WriteError {
    message: String,
    source: std::io::Error,
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message, self.source)
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Creates `dir` if needed and writes each `(file name, contents)` in it.
#[cfg(any(feature = "simulate", feature = "gameday"))]
fn write_files(dir: &std::path::Path, files: &[(&str, &str)]) -> Result<(), WriteError> {
    let failed = |what: &str, p: &std::path::Path, source| WriteError {
        message: format!("{what} {}", p.display()),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| failed("creating", dir, e))?;
    for (name, body) in files {
        let path = dir.join(name);
        std::fs::write(&path, body).map_err(|e| failed("writing", &path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_character_html_gives_meaning_is_escaped() {
        assert_eq!(
            super::escape(r#"<a href="x">&</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;"
        );
    }

    #[cfg(any(feature = "simulate", feature = "gameday"))]
    #[test]
    fn an_unwritable_report_names_the_file() {
        let dir = std::env::temp_dir().join(format!("stagger-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let blocker = dir.join("file");
        std::fs::write(&blocker, "x").unwrap();
        let e = super::write_files(&blocker.join("sub"), &[("a.txt", "a")]).unwrap_err();
        assert!(e.to_string().starts_with("creating "), "{e}");
        assert!(e.to_string().contains("sub"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
