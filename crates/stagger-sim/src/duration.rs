//! The duration every tool of stagger reads from a person: a flag, the
//! lab's query, a fault spec.

use std::time::Duration;

use stagger::config::Bare;

/// Parses a duration as a person types it on a command line: the library's
/// one duration grammar ([`stagger::config::parse_duration`]: `250ms`,
/// `5s`, `1m30s`, `1h 30m`) with bare seconds as sleep(1) and timeout(1)
/// take them (`30`, `1.5`). A negative value is refused with a message
/// saying so, and so is anything else that is not a duration.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(stagger_sim::duration("1.5"), Ok(Duration::from_millis(1500)));
/// assert_eq!(stagger_sim::duration("1m30s"), Ok(Duration::from_secs(90)));
/// assert!(stagger_sim::duration("-1s").unwrap_err().contains("negative"));
/// ```
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!(
            "`{s}` is negative; a duration is 0 or more (e.g. 30, 250ms, 5s)"
        ));
    }
    stagger::config::parse_duration(s, Bare::Seconds).map_err(|e| {
        format!(
            "`{s}` is not a duration ({}); write seconds (30) or a number with a unit \
             (250ms, 5s, 1m30s; units ns, us, ms, s, m, h, d)",
            e.problem
        )
    })
}
#[cfg(test)]
mod tests {
    use super::duration;
    use std::time::Duration;

    #[test]
    fn one_minute_thirty_is_accepted_wherever_a_duration_is_read() {
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration(" 250ms "), Ok(Duration::from_millis(250)));
        assert_eq!(duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn what_is_not_a_duration_is_named() {
        for bad in ["", "abc", "1.2.3", "5 x", "1e3", "2w"] {
            let e = duration(bad).unwrap_err();
            assert!(e.contains(&format!("`{}`", bad.trim())), "{bad:?}: {e}");
        }
    }
}
