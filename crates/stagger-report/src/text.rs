//! Text for a terminal: the one width every table keeps to, and the one way
//! to fit a cell or a paragraph into it.

/// The widest line a table prints.
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) const WIDTH: usize = 120;

/// `s` in at most `w` columns, its end cut with `…`.
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let mut out: String = s.chars().take(w.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `s` in at most `w` columns, cut at the front with `…` (its end kept).
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) fn cut_front(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let tail: String = s.chars().skip(n + 1 - w.max(1)).collect();
    format!("…{tail}")
}

/// `s` in at most `w` columns, its middle cut with `…` (both ends kept).
#[cfg_attr(not(feature = "audit"), allow(dead_code))]
pub(crate) fn cut_middle(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let head = w.saturating_sub(1).div_ceil(2);
    let tail = w.saturating_sub(1) - head;
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// `text` in lines of at most `width` columns, broken at spaces; lines after
/// the first start with `indent` (counted in the width). A word longer than
/// its line is cut with `…`.
#[cfg_attr(not(any(feature = "simulate", feature = "audit")), allow(dead_code))]
pub(crate) fn wrap(text: &str, width: usize, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = line.chars().count();
        let room = if lines.is_empty() {
            width
        } else {
            width.saturating_sub(indent.chars().count())
        };
        let word = cut(word, room.max(1));
        if len > 0 && !line.ends_with(' ') && len + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, indent.to_string()));
        }
        if !line.is_empty() && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.trim().is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_keep_the_width_and_say_so() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        assert_eq!(cut_front("abcdef", 4), "…def");
        assert_eq!(cut_middle("abcdefgh", 5), "ab…gh");
        for w in 1..10 {
            for f in [cut, cut_front, cut_middle] {
                assert!(f("a longer text than any width", w).chars().count() <= w);
            }
        }
    }

    #[test]
    fn wrapped_lines_fit_and_keep_every_word() {
        let text = "one two three four five six seven eight nine ten eleven twelve";
        let lines = wrap(text, 14, "  ");
        assert!(lines.iter().all(|l| l.chars().count() <= 14), "{lines:?}");
        assert!(lines[1..].iter().all(|l| l.starts_with("  ")), "{lines:?}");
        let words: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
        assert_eq!(words.join(" "), text);
        assert_eq!(wrap("averyveryverylongword", 8, ""), ["averyve…"]);
        assert_eq!(wrap("", 8, ""), [""]);
    }
}
