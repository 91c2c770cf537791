//! Which exit statuses are worth another attempt.
//!
//! A command says how it failed only through its exit status, so the rule is
//! a set of codes. By default every failure is retried except the ones that
//! cannot turn out differently or that mean someone asked the command to
//! stop: 126 (not executable), 127 (not found), and deaths by SIGINT or
//! SIGTERM, which shells report as 130 and 143 (a command that exits with
//! 130 or 143 itself is read the same way: that is how scripts pass an
//! interruption on). `--retry-on` replaces the rule with an explicit list;
//! `--stop-on` keeps it and adds codes that must not be retried.

use std::fmt;

use stagger::{Class, Failure, Outcome};

/// Codes never retried by the default rule.
const NEVER_BY_DEFAULT: [u8; 4] = [126, 127, 130, 143];

/// A set of exit codes 1–255 (0 is success and never belongs to one).
#[derive(Clone, PartialEq, Eq)]
pub struct CodeSet([u64; 4]);

impl CodeSet {
    const fn empty() -> Self {
        CodeSet([0; 4])
    }

    fn insert(&mut self, code: u8) {
        self.0[usize::from(code / 64)] |= 1 << (code % 64);
    }

    /// Whether `code` is in the set.
    pub fn contains(&self, code: u8) -> bool {
        self.0[usize::from(code / 64)] & (1 << (code % 64)) != 0
    }

    fn codes(&self) -> impl Iterator<Item = u8> + '_ {
        (1..=255u8).filter(|c| self.contains(*c))
    }
}

impl fmt::Debug for CodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.codes()).finish()
    }
}

/// Parses a list such as `1,75` or `64-78,255` (for clap, which names the
/// flag in its error).
pub fn parse_codes(s: &str) -> Result<CodeSet, String> {
    let mut set = CodeSet::empty();
    if s.trim().is_empty() {
        return Err("the list is empty; write exit codes like 1,75 or 64-78".into());
    }
    for item in s.split(',') {
        let item = item.trim();
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (code(a)?, code(b)?),
            None => {
                let c = code(item)?;
                (c, c)
            }
        };
        if lo > hi {
            return Err(format!("`{item}`: the range ends before it starts"));
        }
        for c in lo..=hi {
            set.insert(c);
        }
    }
    Ok(set)
}

fn code(s: &str) -> Result<u8, String> {
    let s = s.trim();
    match s.parse::<u8>() {
        Ok(0) => Err("0 is success, not a failure; list codes from 1 to 255".into()),
        Ok(c) => Ok(c),
        Err(_) => Err(format!("`{s}` is not an exit code (1 to 255)")),
    }
}

/// The retry rule chosen on the command line.
#[derive(Debug, Clone)]
pub enum RetryRule {
    /// Retry every failure except 126, 127, 130, 143 and the listed codes.
    AllBut(CodeSet),
    /// Retry only the listed codes.
    Only(CodeSet),
}

impl RetryRule {
    /// The rule of `--retry-on` / `--stop-on` (clap keeps them exclusive).
    pub fn new(retry_on: Option<CodeSet>, stop_on: Option<CodeSet>) -> Self {
        match (retry_on, stop_on) {
            (Some(only), _) => RetryRule::Only(only),
            (None, Some(extra)) => RetryRule::AllBut(extra),
            (None, None) => RetryRule::AllBut(CodeSet::empty()),
        }
    }

    /// Whether a command that ended with `code` should be run again.
    pub fn retries(&self, code: u8) -> bool {
        match self {
            _ if code == 0 => false,
            RetryRule::Only(set) => set.contains(code),
            RetryRule::AllBut(set) => !NEVER_BY_DEFAULT.contains(&code) && !set.contains(code),
        }
    }

    /// What the decision engine is told about an attempt that ended with
    /// `code`: a success, a transient failure, or a permanent one.
    pub fn outcome(&self, code: u8) -> Outcome {
        if code == 0 {
            Outcome::Success
        } else if self.retries(code) {
            Failure::new(Class::Transient).into()
        } else {
            Failure::new(Class::Permanent).into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rule_spares_not_found_and_interrupts() {
        let r = RetryRule::new(None, None);
        for c in [1, 2, 75, 124, 125, 128, 137, 255] {
            assert!(r.retries(c), "{c}");
        }
        for c in [0, 126, 127, 130, 143] {
            assert!(!r.retries(c), "{c}");
        }
    }

    #[test]
    fn stop_on_narrows_the_default() {
        let r = RetryRule::new(None, Some(parse_codes("2,64-66").unwrap()));
        assert!(r.retries(1));
        for c in [2, 64, 65, 66, 127] {
            assert!(!r.retries(c), "{c}");
        }
        assert!(r.retries(67));
    }

    #[test]
    fn retry_on_lists_exactly_what_is_retried() {
        let r = RetryRule::new(Some(parse_codes(" 1, 75 ").unwrap()), None);
        assert!(r.retries(1) && r.retries(75));
        assert!(!r.retries(2) && !r.retries(0));
        assert_eq!(r.outcome(0), Outcome::Success);
        assert_eq!(r.outcome(2), Outcome::from(Class::Permanent));
        assert_eq!(r.outcome(75), Outcome::from(Class::Transient));
    }

    #[test]
    fn bad_lists_are_refused() {
        for bad in ["", " ", "0", "256", "x", "1,,2", "-1", "5-3", "1-", "1.5"] {
            assert!(parse_codes(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            format!("{:?}", parse_codes("255,1-3").unwrap()),
            "{1, 2, 3, 255}"
        );
    }
}
