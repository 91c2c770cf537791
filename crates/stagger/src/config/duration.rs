//! One duration grammar for every duration stagger reads: a policy file,
//! the mesh, proxy and framework configs `stagger audit` reads, the
//! command line's flags, the lab's queries and the proxy's fault specs.
//!
//! The systems on a call path write durations in overlapping forms; one
//! grammar reads them all, so a form is accepted or refused the same way
//! everywhere:
//!
//! | form | example | written by |
//! |---|---|---|
//! | terms `<number><unit>`, one or more | `25ms`, `1m30s`, `1h 30m` | Go's `time.ParseDuration` (Istio, Linkerd, Traefik), nginx, HAProxy, Spring |
//! | a decimal number in a term | `0.025s`, `1.5s` | protobuf JSON (Envoy, Istio), Go |
//! | `0` alone | `0` | Go (zero needs no unit) |
//! | a bare number | `30` | nginx (seconds), HAProxy and Spring (milliseconds): see [`Bare`] |
//! | ISO-8601 `PT…` | `PT1M30S` | Spring |
//!
//! Units: `ns`, `us` (`µs`, `μs`), `ms`, `s`, `m`, `h`, `d`. Terms may be
//! separated by white space (nginx's `1h 30m`) and appear in any order;
//! their values add up. The number is decimal digits with at most one `.`
//! and a digit on at least one side of it; it is read exactly, to the
//! nanosecond (further digits are dropped). A sign, an unknown unit, a
//! number without a unit (unless [`Bare`] gives one), or a total above
//! 10⁹ seconds (about 31 years) is an error naming the problem; no input
//! panics.
//!
//! ```
//! use stagger::config::{parse_duration as parse, Bare};
//! use std::time::Duration;
//!
//! assert_eq!(parse("1m30s", Bare::None), Ok(Duration::from_secs(90)));
//! assert_eq!(parse("0.025s", Bare::None), Ok(Duration::from_millis(25)));
//! assert_eq!(parse("30", Bare::Seconds), Ok(Duration::from_secs(30)));
//! assert_eq!(parse("30", Bare::Millis), Ok(Duration::from_millis(30)));
//! assert_eq!(parse("PT1M", Bare::None), Ok(Duration::from_secs(60)));
//! let err = parse("30", Bare::None).unwrap_err();
//! assert_eq!(err.to_string(), "\"30\": a number needs a unit (ns, us, ms, s, m, h, d)");
//! ```

use std::fmt;
use std::time::Duration;

/// The longest duration read: about 31 years, past any timeout or backoff.
pub(crate) const MAX: Duration = Duration::from_secs(1_000_000_000);

/// What a number written without a unit means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    /// Nothing: a unit is required (Go, protobuf JSON); `0` alone is zero.
    None,
    /// Milliseconds (HAProxy, Spring).
    Millis,
    /// Seconds (nginx).
    Seconds,
}

/// A duration that could not be read: the text and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    /// The text as given.
    pub input: String,
    /// What is wrong.
    pub problem: &'static str,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.input, self.problem)
    }
}

impl std::error::Error for DurationError {}

const NEEDS_UNIT: &str = "a number needs a unit (ns, us, ms, s, m, h, d)";

/// Reads `text` by stagger's one duration grammar (see the [`config`](super)
/// module): one or more `<number><unit>` terms that add up (`25ms`, `0.025s`,
/// `1m30s`, `1h 30m`), `0` alone, or ISO-8601 `PT…`; units `ns`, `us`, `ms`,
/// `s`, `m`, `h`, `d`; a bare number as `bare` says. Exact to the
/// nanosecond, at most 10⁹ seconds; an error names the text and the problem.
///
/// ```
/// use stagger::config::{parse_duration, Bare};
/// use std::time::Duration;
/// assert_eq!(parse_duration("1h 30m", Bare::None), Ok(Duration::from_secs(5400)));
/// assert!(parse_duration("-1s", Bare::None).is_err());
/// ```
pub fn parse_duration(text: &str, bare: Bare) -> Result<Duration, DurationError> {
    let err = |problem| DurationError {
        input: text.to_string(),
        problem,
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(err("empty: write a number and a unit such as 250ms"));
    }
    if let Some(iso) = s.strip_prefix("PT").or_else(|| s.strip_prefix("pt")) {
        let lower = iso.to_ascii_lowercase();
        return terms(&lower).map_err(err);
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let per = match bare {
            Bare::Millis => 1_000_000,
            Bare::Seconds => 1_000_000_000,
            Bare::None if s.bytes().all(|b| b == b'0') => 1,
            Bare::None => return Err(err(NEEDS_UNIT)),
        };
        return number(s, per).and_then(total).map_err(err);
    }
    terms(s).map_err(err)
}

/// One or more `<number><unit>` terms, white space allowed between them.
fn terms(s: &str) -> Result<Duration, &'static str> {
    let mut rest = s.trim_start();
    let mut sum: u128 = 0;
    if rest.is_empty() {
        return Err("no number");
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if n == 0 {
            return Err("expected a number");
        }
        let (num, tail) = rest.split_at(n);
        let u = tail
            .find(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(u);
        let per = unit_nanos(unit)?;
        sum = sum.saturating_add(number(num, per)?);
        if sum > MAX.as_nanos() {
            return Err("too long (at most 1e9 seconds)");
        }
        rest = tail.trim_start();
    }
    total(sum)
}

fn unit_nanos(unit: &str) -> Result<u128, &'static str> {
    Ok(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "" => return Err(NEEDS_UNIT),
        _ => return Err("unknown unit (expected ns, us, ms, s, m, h or d)"),
    })
}

/// A decimal number of `per`-nanosecond units, exactly, in nanoseconds.
fn number(num: &str, per: u128) -> Result<u128, &'static str> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if frac.contains('.') {
        return Err("a number has at most one decimal point");
    }
    if int.is_empty() && frac.is_empty() {
        return Err("expected a number");
    }
    // Past 20 digits the total is above MAX whatever the unit.
    if int.trim_start_matches('0').len() > 20 {
        return Err("too long (at most 1e9 seconds)");
    }
    let whole: u128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| "expected a number")?
    };
    // Digits past the nanosecond of the largest unit say nothing more.
    let frac = &frac[..frac.len().min(18)];
    let mut part: u128 = 0;
    if !frac.is_empty() {
        let digits: u128 = frac.parse().map_err(|_| "expected a number")?;
        let len = u32::try_from(frac.len()).unwrap_or(18);
        part = digits.saturating_mul(per) / 10u128.pow(len);
    }
    Ok(whole.saturating_mul(per).saturating_add(part))
}

fn total(nanos: u128) -> Result<Duration, &'static str> {
    if nanos > MAX.as_nanos() {
        return Err("too long (at most 1e9 seconds)");
    }
    let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
    let sub = u32::try_from(nanos % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str, bare: Bare) -> Duration {
        parse_duration(s, bare).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_form_the_readers_need() {
        let ms = Duration::from_millis;
        // Istio / Envoy.
        assert_eq!(ok("25ms", Bare::None), ms(25));
        assert_eq!(ok("0.025s", Bare::None), ms(25));
        // protobuf JSON.
        assert_eq!(ok("1.5s", Bare::None), ms(1500));
        assert_eq!(ok(".5s", Bare::None), ms(500));
        assert_eq!(ok("2.s", Bare::None), ms(2000));
        // Go.
        assert_eq!(ok("1m30s", Bare::None), ms(90_000));
        assert_eq!(ok("1h2m3.5s", Bare::None), ms(3_723_500));
        assert_eq!(ok("0", Bare::None), Duration::ZERO);
        assert_eq!(ok("300us", Bare::None), Duration::from_micros(300));
        assert_eq!(ok("300µs", Bare::None), Duration::from_micros(300));
        // nginx.
        assert_eq!(ok("30s", Bare::Seconds), ms(30_000));
        assert_eq!(ok("1m", Bare::Seconds), ms(60_000));
        assert_eq!(ok("30", Bare::Seconds), ms(30_000));
        assert_eq!(ok("1h 30m", Bare::Seconds), ms(5_400_000));
        assert_eq!(ok("1d", Bare::Seconds), ms(86_400_000));
        // HAProxy and Spring.
        assert_eq!(ok("500", Bare::Millis), ms(500));
        assert_eq!(ok("PT1.5S", Bare::Millis), ms(1500));
        assert_eq!(ok("pt2m", Bare::Millis), ms(120_000));
        // Exact to the nanosecond.
        assert_eq!(ok("0.000000001s", Bare::None), Duration::from_nanos(1));
        assert_eq!(ok("0.1s", Bare::None), ms(100));
    }

    #[test]
    fn what_is_refused_says_why() {
        for (s, bare, why) in [
            ("", Bare::None, "empty"),
            ("30", Bare::None, "needs a unit"),
            ("2x", Bare::None, "unknown unit"),
            ("-1s", Bare::None, "expected a number"),
            ("1.2.3s", Bare::None, "decimal point"),
            ("s", Bare::None, "expected a number"),
            ("1s2", Bare::None, "needs a unit"),
            (".s", Bare::None, "expected a number"),
            ("99999999999h", Bare::None, "too long"),
            ("1e3s", Bare::None, "unknown unit"),
            ("PT", Bare::Millis, "no number"),
        ] {
            let e = parse_duration(s, bare).unwrap_err();
            assert!(e.problem.contains(why), "{s:?}: {e}");
            assert_eq!(e.input, s);
        }
    }
}
