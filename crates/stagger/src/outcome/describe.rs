//! Settings said in words: the pieces the guardrails' `Display` impls share,
//! so a report can print what a budget or a breaker was built with instead
//! of prose that drifts from the defaults.

use std::fmt;
use std::time::Duration;

/// A duration as a reader says it: `10 s`, `2 min`, `250 ms`, `1.5 s`.
pub(crate) struct Spoken(pub(crate) Duration);

impl fmt::Display for Spoken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        if s >= 60.0 && s % 60.0 == 0.0 {
            write!(f, "{} min", s / 60.0)
        } else if s >= 1.0 {
            write!(f, "{} s", Trimmed(s))
        } else {
            write!(f, "{} ms", Trimmed(s * 1e3))
        }
    }
}

/// Parts per million as a percentage: `10 %`, `12.5 %`.
pub(crate) struct Percent(pub(crate) u64);

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} %", Trimmed(self.0 as f64 / 1e4))
    }
}

/// A number with at most three decimals and no trailing zeros.
pub(crate) struct Trimmed(pub(crate) f64);

impl fmt::Display for Trimmed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = format!("{:.3}", self.0);
        f.write_str(s.trim_end_matches('0').trim_end_matches('.'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_shares_read_as_written() {
        assert_eq!(Spoken(Duration::from_secs(120)).to_string(), "2 min");
        assert_eq!(Spoken(Duration::from_secs(10)).to_string(), "10 s");
        assert_eq!(Spoken(Duration::from_millis(1500)).to_string(), "1.5 s");
        assert_eq!(Spoken(Duration::from_millis(250)).to_string(), "250 ms");
        assert_eq!(Percent(100_000).to_string(), "10 %");
        assert_eq!(Percent(125_000).to_string(), "12.5 %");
    }
}
