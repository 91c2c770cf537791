//! What `stagger run` tells the user: one stderr line per retry, a last
//! line when it gives up, and with `--format json` a final report on stdout.

use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;
use stagger::StopReason;

/// One attempt, as the JSON report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    /// 1-based attempt number.
    pub attempt: u32,
    /// The attempt's exit code (128 + n for a death by signal n; 127 or
    /// 126 when the command could not be started).
    pub exit_code: u8,
    /// Whether stagger cut the attempt off at its timeout or the deadline.
    pub timed_out: bool,
    /// How long the attempt ran.
    pub duration_ms: u64,
    /// The wait that followed it; `null` when no attempt followed.
    pub delay_ms: Option<u64>,
    /// The signal that killed the command, if one did (not in the JSON:
    /// `exit_code` already says 128 + n).
    #[serde(skip)]
    pub signal: Option<i32>,
    /// Whether stagger had to kill the command with SIGKILL (not in the
    /// JSON: `exit_code` says 137).
    #[serde(skip)]
    pub killed: bool,
}

/// The final JSON report (field order is part of the format).
#[derive(Debug, Serialize)]
pub struct Report {
    /// A stop reason of docs/behaviour.md §10.
    pub stop_reason: &'static str,
    /// The exit status of `stagger run` itself.
    pub exit_code: u8,
    /// From the start of the first attempt to the stop, waits included.
    pub elapsed_ms: u64,
    /// Every attempt, in order.
    pub attempts: Vec<AttemptRecord>,
}

/// Whole milliseconds, saturating.
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration as people write it: `85ms`, `1.5s`, `2m5s`, `1h0m`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        let tenths = (ms + 50) / 100;
        if tenths % 10 == 0 {
            format!("{}s", tenths / 10)
        } else {
            format!("{}.{}s", tenths / 10, tenths % 10)
        }
    } else {
        let s = d.as_secs();
        if s < 3600 {
            format!("{}m{}s", s / 60, s % 60)
        } else {
            format!("{}h{}m", s / 3600, (s % 3600) / 60)
        }
    }
}

/// Why an attempt failed, for the stderr line: `exit 1`, `timeout after
/// 200ms`, `killed by signal 9`.
pub fn why(record: &AttemptRecord, timeout: Option<Duration>) -> String {
    if record.timed_out {
        match timeout {
            Some(t) => format!("timeout after {}", human(t)),
            None => "timeout".into(),
        }
    } else if let Some(sig) = record.signal {
        format!("exit {}, killed by signal {sig}", record.exit_code)
    } else {
        format!("exit {}", record.exit_code)
    }
}

/// The line printed before each wait.
pub fn retry_line(record: &AttemptRecord, max: u32, timeout: Option<Duration>, wait: Duration) {
    eprintln!(
        "stagger: attempt {}/{} failed ({}); retrying in {}",
        record.attempt,
        max,
        why(record, timeout),
        human(wait)
    );
}

/// With `-v`, the line printed as an attempt starts.
pub fn start_line(attempt: u32, max: u32, timeout: Option<Duration>) {
    let limit = timeout.map_or_else(String::new, |t| format!(", at most {}", human(t)));
    eprintln!("stagger: attempt {attempt}/{max} starting{limit}");
}

/// With `-v`, the line printed when an attempt succeeded.
pub fn success_line(attempts: u32, elapsed: Duration) {
    let plural = if attempts == 1 { "" } else { "s" };
    eprintln!(
        "stagger: succeeded after {attempts} attempt{plural} in {}",
        human(elapsed)
    );
}

/// The line printed when the run ends without success.
pub fn give_up_line(reason: StopReason, attempts: u32, exit: u8) {
    let plural = if attempts == 1 { "" } else { "s" };
    eprintln!("stagger: stopped after {attempts} attempt{plural} ({reason}); exit {exit}");
}

/// Prints the JSON report on its own line, after the command's output.
pub fn print_json(report: &Report) -> io::Result<()> {
    let out = io::stdout();
    let mut out = out.lock();
    serde_json::to_writer(&mut out, report)?;
    writeln!(out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        let ms = Duration::from_millis;
        assert_eq!(human(ms(0)), "0ms");
        assert_eq!(human(ms(85)), "85ms");
        assert_eq!(human(ms(1000)), "1s");
        assert_eq!(human(ms(1540)), "1.5s");
        assert_eq!(human(ms(59_990)), "60s");
        assert_eq!(human(ms(125_000)), "2m5s");
        assert_eq!(human(Duration::from_secs(3720)), "1h2m");
        assert!(!human(Duration::MAX).is_empty());
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = Report {
            stop_reason: StopReason::AttemptsExhausted.as_str(),
            exit_code: 1,
            elapsed_ms: 12,
            attempts: vec![AttemptRecord {
                attempt: 1,
                exit_code: 1,
                timed_out: false,
                duration_ms: 3,
                delay_ms: None,
                signal: None,
                killed: false,
            }],
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"stop_reason":"attempts_exhausted","exit_code":1,"elapsed_ms":12,"attempts":[{"attempt":1,"exit_code":1,"timed_out":false,"duration_ms":3,"delay_ms":null}]}"#
        );
    }

    #[test]
    fn why_names_the_cause() {
        let mut r = AttemptRecord {
            attempt: 1,
            exit_code: 1,
            timed_out: false,
            duration_ms: 0,
            delay_ms: None,
            signal: None,
            killed: false,
        };
        assert_eq!(why(&r, None), "exit 1");
        r.exit_code = 137;
        assert_eq!(why(&r, None), "exit 137");
        r.signal = Some(9);
        assert_eq!(why(&r, None), "exit 137, killed by signal 9");
        r.timed_out = true;
        assert_eq!(
            why(&r, Some(Duration::from_millis(200))),
            "timeout after 200ms"
        );
    }
}
