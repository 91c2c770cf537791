//! The one HTML escaper of the reports and charts: text and attribute
//! values both (`&`, `<`, `>` and `"`).

/// `s` made safe to put in HTML text or a double-quoted attribute.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
}
