//! The faults of the game-day and the proxy — one vocabulary — and when
//! they hold: `KIND@START+DURATION`.
//!
//! A fault is what the dependency does wrong, said the same way wherever it
//! is injected: by the game-day's own server, by the fault proxy in front of
//! a real upstream (`stagger proxy`, `gameday --target`), or by the kernel
//! between network namespaces (`gameday --hosts`). Each injector does what
//! the name means at its own depth: a `blackhole` answers nothing, which
//! the kernel does by dropping packets and the proxy (which cannot drop a
//! client's packets) by holding connections open unanswered. Two faults
//! exist only in the kernel: `reject` and `partition`.
//! Times are measured from the start of the run (or the proxy's start).

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Requests are held until the stall ends, then served (a GC pause
    /// upstream).
    Stall,
    /// The listener is closed: new connections are refused and open ones
    /// dropped; it listens again when the fault ends.
    Failover,
    /// `503 Service Unavailable` with `Retry-After: 1` to every request
    /// (`503`; also read as `dead` and `unavailable`).
    Unavailable,
    /// `429 Too Many Requests` with `Retry-After: 1` to every request
    /// (`429`; also read as `throttle`).
    Throttle,
    /// The connection is reset (RST) instead of answered; every other
    /// request is served first, so a client cannot tell whether it was
    /// applied.
    Reset,
    /// Each request takes this much longer (`slow:MS`).
    Slow(Duration),
    /// Nothing is answered: the client waits for its own timeout.
    Blackhole,
    /// Every packet to the server is answered with a TCP reset (the kernel
    /// only: `gameday --hosts`).
    Reject,
    /// Half the client hosts, rounded up, are cut off from the server (the
    /// kernel only: `gameday --hosts`).
    Partition,
}

/// Every fault's name, in the order of `--help` (`slow` takes its delay
/// as `slow:MS`).
pub const NAMES: &str = "stall, failover, 503 (or dead), 429 (or throttle), reset, slow:MS, \
                         blackhole, reject, partition";

impl Fault {
    /// The name in a `--fault` spec (`slow` without its delay).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Stall => "stall",
            Fault::Failover => "failover",
            Fault::Unavailable => "503",
            Fault::Throttle => "429",
            Fault::Reset => "reset",
            Fault::Slow(_) => "slow",
            Fault::Blackhole => "blackhole",
            Fault::Reject => "reject",
            Fault::Partition => "partition",
        }
    }

    /// Whether only the kernel can inject it (between the game-day's
    /// network namespaces).
    pub fn kernel_only(&self) -> bool {
        matches!(self, Fault::Reject | Fault::Partition)
    }

    /// Reads a fault's name, `slow:MS` with its delay in ms (1 to 60000);
    /// `slow` alone takes `slow` (a game-day's default) or is refused.
    pub fn named(name: &str, slow: Option<Duration>) -> Result<Fault, String> {
        Ok(match name.trim() {
            "stall" => Fault::Stall,
            "failover" => Fault::Failover,
            "503" | "dead" | "unavailable" => Fault::Unavailable,
            "429" | "throttle" => Fault::Throttle,
            "reset" => Fault::Reset,
            "blackhole" => Fault::Blackhole,
            "reject" => Fault::Reject,
            "partition" => Fault::Partition,
            "slow" => {
                Fault::Slow(slow.ok_or("slow needs its delay, e.g. slow:200 (ms)".to_string())?)
            }
            k if k.starts_with("slow:") => {
                let ms = &k["slow:".len()..];
                let ms: u64 = ms
                    .parse()
                    .ok()
                    .filter(|&m| (1..=60_000).contains(&m))
                    .ok_or_else(|| {
                        format!("`{ms}` is not a delay in ms between 1 and 60000 (slow:200)")
                    })?;
                Fault::Slow(Duration::from_millis(ms))
            }
            k => return Err(format!("unknown fault `{k}` (expected {NAMES})")),
        })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Slow(d) => write!(f, "slow:{}", d.as_millis()),
            k => f.write_str(k.name()),
        }
    }
}

/// One fault and the span of time it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// What it does.
    pub kind: Fault,
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
    let kind = Fault::named(kind, None).map_err(|e| bad("kind", e))?;
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

/// Checks a list of faults for the proxy, against each other and against
/// `duration` (when the proxy stops, if it does). Refused, each with a line
/// naming the specs: a fault only the kernel can inject, two faults holding at once where neither is `slow:MS` (the
/// one delay that composes with another fault; otherwise one would hide
/// the other), and a fault starting once the proxy has stopped. A fault
/// cut short by `duration` is allowed; the returned lines say so.
pub fn check(faults: &[Window], duration: Option<Duration>) -> Result<Vec<String>, String> {
    if let Some(w) = faults.iter().find(|w| w.kind.kernel_only()) {
        return Err(format!(
            "--fault: `{w}`: {} is a kernel fault; only `stagger gameday --hosts` injects it",
            w.kind.name()
        ));
    }
    let slow = |w: &Window| matches!(w.kind, Fault::Slow(_));
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
    pub verdict: Option<Fault>,
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
            Fault::Stall => {
                let until = w.end().unwrap_or(MAX_SPAN);
                now.stall_until = Some(now.stall_until.map_or(until, |u| u.max(until)));
            }
            Fault::Slow(d) => now.slow = Some(now.slow.map_or(d, |s| s.max(d))),
            Fault::Failover => {}
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

    /// The game-day said `dead` and `throttle` where the proxy said `503`
    /// and `429`, and `blackhole` was a kernel drop in one and a held
    /// connection in the other: one vocabulary now, each word read by both.
    #[test]
    fn the_game_days_and_the_proxys_words_name_the_same_faults() {
        for (a, b) in [("dead", "503"), ("unavailable", "503"), ("throttle", "429")] {
            assert_eq!(Fault::named(a, None), Fault::named(b, None), "{a}");
        }
        for f in [
            Fault::Stall,
            Fault::Failover,
            Fault::Unavailable,
            Fault::Throttle,
            Fault::Reset,
            Fault::Slow(Duration::from_millis(200)),
            Fault::Blackhole,
            Fault::Reject,
            Fault::Partition,
        ] {
            assert_eq!(Fault::named(&f.to_string(), None), Ok(f), "{f}");
            assert!(NAMES.contains(f.name()), "{f} is missing from NAMES");
        }
        assert_eq!(
            Fault::named("slow", Some(Duration::from_millis(900))),
            Ok(Fault::Slow(Duration::from_millis(900)))
        );
        assert!(Fault::named("slow", None).unwrap_err().contains("slow:200"));
    }

    #[test]
    fn the_proxy_refuses_a_fault_only_the_kernel_can_inject() {
        for (spec, name) in [
            ("reject@1+2", "`reject@1s+2s`"),
            ("partition@1", "`partition@1s`"),
        ] {
            let e = check(&[parse(spec).unwrap()], None).unwrap_err();
            assert!(e.contains("kernel fault") && e.contains(name), "{e}");
        }
        assert!(check(&[parse("blackhole@1+2").unwrap()], None).is_ok());
    }

    #[test]
    fn a_spec_gives_kind_start_and_length() {
        let w = parse("stall@10s+2s").unwrap();
        assert_eq!(
            (w.kind, w.start, w.length),
            (Fault::Stall, S(10), Some(S(2)))
        );
        let w = parse("slow:250@1500ms+3").unwrap();
        assert_eq!(w.kind, Fault::Slow(Duration::from_millis(250)));
        assert_eq!(
            (w.start, w.end()),
            (
                Duration::from_millis(1500),
                Some(Duration::from_millis(4500))
            )
        );
        let w = parse("503@5").unwrap();
        assert_eq!((w.kind, w.length), (Fault::Unavailable, None));
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
        assert_eq!(at(&faults, ms(2500)).verdict, Some(Fault::Unavailable));
        assert_eq!(at(&faults, ms(3000)).verdict, Some(Fault::Reset));
        assert_eq!(at(&faults, ms(3000)).stall_until, None);
        assert_eq!(at(&faults, S(20)), Now::default());
    }
}
