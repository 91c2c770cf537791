//! The proxy's faults and when they hold: `KIND@START+DURATION`.
//!
//! The kinds are the game-day's, said at the network's edge: a `stall`
//! holds requests until it ends, `failover` closes the listener (connections
//! refused, open ones dropped), `503` and `429` answer at once with a
//! `Retry-After`, `reset` closes the connection with RST instead of an
//! answer, `slow:MS` adds a delay before forwarding and `blackhole` accepts
//! and never answers. Times are measured from the proxy's start.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// Requests are held until the stall ends, then forwarded (a GC pause
    /// upstream).
    Stall,
    /// The listener is closed: new connections are refused and open ones
    /// dropped; it listens again when the fault ends.
    Failover,
    /// `503 Service Unavailable` with `Retry-After: 1`, nothing forwarded.
    Unavailable,
    /// `429 Too Many Requests` with `Retry-After: 1`, nothing forwarded.
    Throttle,
    /// The connection is reset (RST) instead of answered; every other
    /// request is forwarded first, so a client cannot tell whether it was
    /// applied.
    Reset,
    /// Each request waits this long before it is forwarded.
    Slow(Duration),
    /// Connections are accepted and requests read, but nothing is ever
    /// answered or forwarded: the client waits for its own timeout.
    Blackhole,
}

impl Kind {
    /// The name in a `--fault` spec (`slow` without its delay).
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Stall => "stall",
            Kind::Failover => "failover",
            Kind::Unavailable => "503",
            Kind::Throttle => "429",
            Kind::Reset => "reset",
            Kind::Slow(_) => "slow",
            Kind::Blackhole => "blackhole",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Slow(d) => write!(f, "slow:{}", d.as_millis()),
            k => f.write_str(k.name()),
        }
    }
}

/// One fault and the span of time it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// What it does.
    pub kind: Kind,
    /// When it starts, since the proxy started.
    pub start: Duration,
    /// How long it lasts (`None`: to the end).
    pub length: Option<Duration>,
}

impl Window {
    /// When it ends (`None`: never).
    pub fn end(&self) -> Option<Duration> {
        self.length.map(|l| self.start.saturating_add(l))
    }

    /// Whether it holds at `t` since the start.
    pub fn holds(&self, t: Duration) -> bool {
        t >= self.start && self.end().is_none_or(|e| t < e)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}s", self.kind, self.start.as_secs_f64())?;
        if let Some(l) = self.length {
            write!(f, "+{}s", l.as_secs_f64())?;
        }
        Ok(())
    }
}

/// A fault as reported in JSON (times in seconds).
#[derive(Debug, Clone, Serialize)]
pub struct WindowJson {
    /// The kind, as in a spec (`slow:200`).
    pub kind: String,
    /// Start, seconds since the proxy started.
    pub start_s: f64,
    /// End (`null`: never).
    pub end_s: Option<f64>,
}

impl From<&Window> for WindowJson {
    fn from(w: &Window) -> Self {
        WindowJson {
            kind: w.kind.to_string(),
            start_s: w.start.as_secs_f64(),
            end_s: w.end().map(|e| e.as_secs_f64()),
        }
    }
}

/// The longest start or length a spec may give (a day).
const MAX_SPAN: Duration = Duration::from_secs(86_400);

fn span(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = stagger_sim::duration(t).ok();
    match d {
        Some(d) if d <= MAX_SPAN => Ok(d),
        Some(_) => Err(format!("`{t}` is more than a day")),
        None => Err(format!(
            "`{t}` is not a duration (write seconds, 10, or with a unit, 1500ms, 2s)"
        )),
    }
}

/// Parses `KIND@START+DURATION` (`+DURATION` may be left out: to the end;
/// `@START` too: from the start). The error names `--fault`, the spec and
/// the part that is wrong.
pub fn parse(spec: &str) -> Result<Window, String> {
    let bad = |part: &str, why: String| format!("--fault: `{spec}`: {part}: {why}");
    let (kind, when) = match spec.split_once('@') {
        Some((k, w)) => (k, Some(w)),
        None => (spec, None),
    };
    let kind = match kind.trim() {
        "stall" => Kind::Stall,
        "failover" => Kind::Failover,
        "503" => Kind::Unavailable,
        "429" => Kind::Throttle,
        "reset" => Kind::Reset,
        "blackhole" => Kind::Blackhole,
        k if k.starts_with("slow") => {
            let ms = k
                .strip_prefix("slow:")
                .ok_or_else(|| bad("kind", "slow needs its delay, e.g. slow:200 (ms)".into()))?;
            let ms: u64 = ms
                .parse()
                .ok()
                .filter(|&m| (1..=60_000).contains(&m))
                .ok_or_else(|| {
                    bad(
                        "kind",
                        format!("`{ms}` is not a delay in ms between 1 and 60000 (slow:200)"),
                    )
                })?;
            Kind::Slow(Duration::from_millis(ms))
        }
        k => {
            return Err(bad(
                "kind",
                format!(
                    "unknown fault `{k}` (expected stall, failover, 503, 429, reset, \
                     slow:MS or blackhole)"
                ),
            ))
        }
    };
    let (start, length) = match when {
        None => (Duration::ZERO, None),
        Some(w) => {
            let (s, l) = match w.split_once('+') {
                Some((s, l)) => (s, Some(l)),
                None => (w, None),
            };
            let start = span(s).map_err(|e| bad("start", e))?;
            let length = l
                .map(|l| span(l).map_err(|e| bad("duration", e)))
                .transpose()?;
            if length.is_some_and(|l| l.is_zero()) {
                return Err(bad("duration", "must be more than 0".into()));
            }
            (start, length)
        }
    };
    Ok(Window {
        kind,
        start,
        length,
    })
}

/// Checks a list of faults against each other and against `duration`
/// (when the proxy stops, if it does). Refused, each with a line naming
/// both specs: two faults holding at once where neither is `slow:MS` (the
/// one delay that composes with another fault; otherwise one would hide
/// the other), and a fault starting once the proxy has stopped. A fault
/// cut short by `duration` is allowed; the returned lines say so.
pub fn check(faults: &[Window], duration: Option<Duration>) -> Result<Vec<String>, String> {
    let slow = |w: &Window| matches!(w.kind, Kind::Slow(_));
    for (i, a) in faults.iter().enumerate() {
        for b in &faults[i + 1..] {
            let from = a.start.max(b.start);
            let to = match (a.end(), b.end()) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            if to.is_some_and(|t| t <= from) || slow(a) || slow(b) {
                continue;
            }
            let until = to.map_or("the end".to_string(), |t| format!("{}s", t.as_secs_f64()));
            return Err(format!(
                "--fault: `{b}` overlaps `{a}` from {}s to {until}; only slow:MS combines \
                 with another fault (give them separate times)",
                from.as_secs_f64()
            ));
        }
    }
    let Some(d) = duration else {
        return Ok(Vec::new());
    };
    let mut notes = Vec::new();
    for w in faults {
        if w.start >= d {
            return Err(format!(
                "--fault: `{w}` starts at {}s, when --duration {}s has already stopped the proxy",
                w.start.as_secs_f64(),
                d.as_secs_f64()
            ));
        }
        if w.end().is_some_and(|e| e > d) {
            notes.push(format!(
                "--fault `{w}` is cut short at {}s by --duration",
                d.as_secs_f64()
            ));
        }
    }
    Ok(notes)
}

/// What the faults holding at one instant do to a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Now {
    /// Answered by the proxy (503, 429), reset or held unanswered: the
    /// first such fault in the list wins.
    pub verdict: Option<Kind>,
    /// Held until this instant (since the start), then forwarded.
    pub stall_until: Option<Duration>,
    /// Delay before forwarding (the largest `slow` holding).
    pub slow: Option<Duration>,
}

/// The faults holding at `t`.
pub fn at(faults: &[Window], t: Duration) -> Now {
    let mut now = Now::default();
    for w in faults.iter().filter(|w| w.holds(t)) {
        match w.kind {
            Kind::Stall => {
                let until = w.end().unwrap_or(MAX_SPAN);
                now.stall_until = Some(now.stall_until.map_or(until, |u| u.max(until)));
            }
            Kind::Slow(d) => now.slow = Some(now.slow.map_or(d, |s| s.max(d))),
            Kind::Failover => {}
            k => {
                now.verdict.get_or_insert(k);
            }
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_spec_gives_kind_start_and_length() {
        let w = parse("stall@10s+2s").unwrap();
        assert_eq!(
            (w.kind, w.start, w.length),
            (Kind::Stall, S(10), Some(S(2)))
        );
        let w = parse("slow:250@1500ms+3").unwrap();
        assert_eq!(w.kind, Kind::Slow(Duration::from_millis(250)));
        assert_eq!(
            (w.start, w.end()),
            (
                Duration::from_millis(1500),
                Some(Duration::from_millis(4500))
            )
        );
        let w = parse("503@5").unwrap();
        assert_eq!((w.kind, w.length), (Kind::Unavailable, None));
        assert_eq!(parse("blackhole").unwrap().start, Duration::ZERO);
        assert_eq!(parse("reset@1+2").unwrap().to_string(), "reset@1s+2s");
    }

    #[test]
    fn a_malformed_spec_names_the_flag_and_the_wrong_part() {
        for (spec, part) in [
            ("stal@1+2", "kind"),
            ("slow@1+2", "kind"),
            ("slow:abc@1+2", "kind"),
            ("slow:0@1+2", "kind"),
            ("stall@x+2", "start"),
            ("stall@1+", "duration"),
            ("stall@1+0", "duration"),
            ("stall@1+2days", "duration"),
            ("503@99999999+1", "start"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(
                e.starts_with(&format!("--fault: `{spec}`: {part}:")),
                "{spec}: {e}"
            );
        }
    }

    fn specs(s: &[&str]) -> Vec<Window> {
        s.iter().map(|s| parse(s).unwrap()).collect()
    }

    #[test]
    fn overlapping_faults_are_refused_naming_both_unless_one_is_slow() {
        let e = check(&specs(&["stall@1+2", "503@2+5"]), None).unwrap_err();
        assert_eq!(
            e,
            "--fault: `503@2s+5s` overlaps `stall@1s+2s` from 2s to 3s; only slow:MS combines \
             with another fault (give them separate times)"
        );
        let e = check(&specs(&["reset@10", "blackhole@20+1"]), None).unwrap_err();
        assert!(e.contains("from 20s to 21s"), "{e}");
        let e = check(&specs(&["429", "failover@5"]), None).unwrap_err();
        assert!(e.contains("to the end"), "{e}");
        // Back to back is not overlapping; slow composes with anything.
        assert_eq!(check(&specs(&["stall@1+2", "503@3+1"]), None), Ok(vec![]));
        let ok = check(&specs(&["reset@5+3", "slow:200@0+30"]), None);
        assert_eq!(ok, Ok(vec![]));
    }

    #[test]
    fn a_fault_after_the_duration_is_refused_and_one_cut_short_is_said() {
        let e = check(&specs(&["stall@70s+2s"]), Some(S(60))).unwrap_err();
        assert!(
            e.starts_with("--fault: `stall@70s+2s` starts at 70s"),
            "{e}"
        );
        assert!(e.contains("--duration 60s"), "{e}");
        assert!(check(&specs(&["stall@60+2"]), Some(S(60))).is_err());
        let notes = check(&specs(&["stall@55+10", "503@1+2"]), Some(S(60))).unwrap();
        assert_eq!(
            notes,
            ["--fault `stall@55s+10s` is cut short at 60s by --duration"]
        );
        assert_eq!(check(&specs(&["503@1"]), Some(S(60))), Ok(vec![]));
    }

    #[test]
    fn faults_hold_only_in_their_window_and_combine() {
        let faults = [
            parse("stall@1+2").unwrap(),
            parse("slow:100@0+10").unwrap(),
            parse("503@2+1").unwrap(),
            parse("reset@2+5").unwrap(),
        ];
        let ms = Duration::from_millis;
        assert_eq!(at(&faults, ms(500)).stall_until, None);
        assert_eq!(at(&faults, ms(500)).slow, Some(ms(100)));
        assert_eq!(at(&faults, ms(1500)).stall_until, Some(S(3)));
        assert_eq!(at(&faults, ms(1500)).verdict, None);
        // Two answering faults at once: the first listed wins.
        assert_eq!(at(&faults, ms(2500)).verdict, Some(Kind::Unavailable));
        assert_eq!(at(&faults, ms(3000)).verdict, Some(Kind::Reset));
        assert_eq!(at(&faults, ms(3000)).stall_until, None);
        assert_eq!(at(&faults, S(20)), Now::default());
    }
}
