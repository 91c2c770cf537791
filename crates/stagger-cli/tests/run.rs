//! `stagger run` as users run it: the real binary, real child processes
//! (`sh -c …`), real signals.
//!
//! Every test is bounded: the binary is killed and the test fails if it runs
//! past its limit. Backoff bases are a few milliseconds so the suite stays
//! fast; time tolerances are stated where they are checked.

use crate::common;

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;

#[test]
fn fails_twice_then_succeeds_in_three_attempts() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("twice");
    let script = "echo x >> count; [ $(wc -l < count) -ge 3 ]";
    let d = stagger(&["run", "--base", "10ms", "--", "sh", "-c", script], &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    assert_eq!(dir.count("count"), 3);
    let retries: Vec<&str> = d.stderr.lines().collect();
    assert_eq!(retries.len(), 2, "{}", d.stderr);
    assert!(retries[0].starts_with("stagger: attempt 1/3 failed (exit 1); retrying in "));
    assert!(retries[1].starts_with("stagger: attempt 2/3 failed (exit 1); retrying in "));
}

#[test]
fn stop_on_code_runs_once_and_keeps_the_status() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("stop-on");
    let script = "echo x >> count; exit 2";
    let d = stagger(
        &[
            "run",
            "--base",
            "10ms",
            "--stop-on",
            "2",
            "--",
            "sh",
            "-c",
            script,
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(2));
    assert_eq!(dir.count("count"), 1);
}

#[test]
fn retry_on_list_leaves_other_codes_alone() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("retry-on");
    let script = "echo x >> count; exit 3";
    let d = stagger(
        &[
            "run",
            "--base",
            "1ms",
            "--retry-on",
            "1,75",
            "--",
            "sh",
            "-c",
            script,
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(3));
    assert_eq!(dir.count("count"), 1);
}

#[test]
fn not_found_and_interrupt_codes_are_not_retried_by_default() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("defaults");
    for status in ["126", "127", "130", "143"] {
        let script = format!("echo x >> count-{status}; exit {status}");
        let d = stagger(&["run", "--base", "1ms", "--", "sh", "-c", &script], &dir);
        assert_eq!(code(&d), status.parse().ok());
        assert_eq!(dir.count(&format!("count-{status}")), 1, "{status}");
    }
}

/// Two attempts of 200 ms each plus one wait under 10 ms: about 0.4 s.
#[test]
fn attempt_timeout_kills_each_attempt_and_exits_124() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("timeout");
    let args = [
        "run",
        "--attempt-timeout",
        "200ms",
        "--attempts",
        "2",
        "--base",
        "10ms",
        "--format",
        "json",
        "--",
        "sleep",
        "10",
    ];
    let d = stagger(&args, &dir);
    assert_eq!(code(&d), Some(124), "{}", d.stderr);
    assert!(d.elapsed >= Duration::from_millis(400), "{:?}", d.elapsed);
    assert!(
        d.elapsed < Duration::from_millis(410) + SLACK,
        "{:?}",
        d.elapsed
    );
    assert!(d
        .stderr
        .contains("attempt 1/2 failed (timeout after 200ms)"));
    let r = json(&d);
    assert_eq!(r["exit_code"], 124);
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().all(|a| a["timed_out"] == true));
}

/// A command that ignores SIGTERM is killed once `--kill-after` has passed.
#[test]
fn sigkill_follows_an_ignored_sigterm_after_the_grace_period() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("kill-after");
    let args = [
        "run",
        "--attempts",
        "1",
        "--attempt-timeout",
        "100ms",
        "--kill-after",
        "300ms",
        "--",
        "sh",
        "-c",
        "trap '' TERM; sleep 10",
    ];
    let d = stagger(&args, &dir);
    // As timeout(1): 128 + 9 once SIGKILL was needed, not 124.
    assert_eq!(code(&d), Some(137), "{}", d.stderr);
    assert!(d.elapsed >= Duration::from_millis(400), "{:?}", d.elapsed);
    assert!(
        d.elapsed < Duration::from_millis(400) + SLACK,
        "{:?}",
        d.elapsed
    );
}

/// A timeout stops everything the command started, not only its first
/// process: the background `sleep` of the shell is gone too.
#[test]
fn timeout_reaches_the_commands_children() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("group");
    let script = "sleep 30 & echo $! > pid; wait";
    let d = stagger(
        &[
            "run",
            "--attempts",
            "1",
            "--attempt-timeout",
            "200ms",
            "--",
            "sh",
            "-c",
            script,
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(124));
    let pid = dir.read("pid").trim().to_string();
    assert!(!pid.is_empty());
    // Killed processes may linger as zombies until their new parent reaps
    // them: count a zombie as gone (Linux's /proc; `kill -0` elsewhere).
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let alive = match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
            Err(_) if Path::new("/proc/self").exists() => false,
            Err(_) => Command::new("kill")
                .args(["-0", &pid])
                .stderr(Stdio::null())
                .status()
                .unwrap()
                .success(),
        };
        if !alive {
            break;
        }
        assert!(Instant::now() < until, "background sleep {pid} survived");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The deadline bounds the whole run whether the command hangs or keeps
/// failing: never more than `SLACK` past it.
#[test]
fn deadline_is_never_overrun() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("deadline");
    for script in ["sleep 10", "sleep 0.15; exit 1", "exit 1"] {
        let args = [
            "run",
            "--deadline",
            "1s",
            "--attempts",
            "1000",
            "--base",
            "10ms",
            "--cap",
            "100ms",
            "--",
            "sh",
            "-c",
            script,
        ];
        let d = stagger(&args, &dir);
        assert_eq!(code(&d), Some(124), "{script}: {}", d.stderr);
        assert!(
            d.elapsed < Duration::from_secs(1) + SLACK,
            "{script}: {:?}",
            d.elapsed
        );
        assert!(d.stderr.contains("(deadline)"), "{script}: {}", d.stderr);
    }
}

/// SIGTERM during an attempt reaches the command's whole process group (the
/// shell's `sleep` dies, the shell's trap runs) and no attempt follows.
#[test]
fn sigterm_during_an_attempt_reaches_the_child_and_stops() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("sigterm");
    let script =
        "echo x >> count; trap 'echo trapped > marker; exit 1' TERM; touch started; sleep 10";
    let started = Instant::now();
    let child = spawn(
        &[
            "run",
            "--attempts",
            "5",
            "--base",
            "10ms",
            "--",
            "sh",
            "-c",
            script,
        ],
        &dir.0,
        false,
    );
    wait_for(&dir, "started");
    send("-TERM", child.id());
    let d = finish(child, started, Duration::from_secs(10));
    assert_eq!(d.status.signal(), Some(15), "{:?} {}", d.status, d.stderr);
    assert_eq!(dir.read("marker").trim(), "trapped");
    assert_eq!(dir.count("count"), 1);
    assert!(d.elapsed < Duration::from_secs(3), "{:?}", d.elapsed);
}

#[test]
fn sigint_during_an_attempt_is_forwarded_as_sigint() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("sigint");
    let script = "echo x >> count; trap 'echo int > marker; exit 1' INT; touch started; sleep 10";
    let started = Instant::now();
    let child = spawn(
        &[
            "run", "--base", "10ms", "--format", "json", "--", "sh", "-c", script,
        ],
        &dir.0,
        false,
    );
    wait_for(&dir, "started");
    send("-INT", child.id());
    let d = finish(child, started, Duration::from_secs(10));
    assert_eq!(d.status.signal(), Some(2), "{:?} {}", d.status, d.stderr);
    assert_eq!(dir.read("marker").trim(), "int");
    assert_eq!(dir.count("count"), 1);
    let r = json(&d);
    assert_eq!(r["stop_reason"], "cancelled");
    assert_eq!(r["exit_code"], 130);
}

/// During a 5 s wait, SIGTERM ends the run at once.
#[test]
fn sigterm_during_a_wait_ends_the_run_at_once() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("sigterm-wait");
    let script = "echo x >> count; exit 1";
    let started = Instant::now();
    let child = spawn(
        &[
            "run", "--base", "5s", "--cap", "5s", "--jitter", "none", "--", "sh", "-c", script,
        ],
        &dir.0,
        false,
    );
    wait_for(&dir, "count");
    thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    send("-TERM", child.id());
    let d = finish(child, started, Duration::from_secs(10));
    assert_eq!(d.status.signal(), Some(15), "{:?} {}", d.status, d.stderr);
    assert!(
        sent.elapsed() < Duration::from_secs(1),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(dir.count("count"), 1);
}

#[test]
fn missing_command_exits_127_at_once() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("missing");
    let d = stagger(
        &[
            "run",
            "--base",
            "5s",
            "--format",
            "json",
            "--",
            "stagger-no-such-command-7",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(127));
    assert!(d.elapsed < Duration::from_secs(2), "{:?}", d.elapsed);
    assert!(d.stderr.contains("command not found"), "{}", d.stderr);
    assert!(!d.stderr.contains("retrying"));
    let r = json(&d);
    assert_eq!(r["stop_reason"], "not_retryable");
    assert_eq!(r["attempts"].as_array().unwrap().len(), 1);
}

#[test]
fn command_that_is_not_executable_exits_126_at_once() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("noexec");
    fs::write(dir.path("script"), "#!/bin/sh\nexit 0\n").unwrap();
    let path = dir.path("script");
    let d = stagger(&["run", "--base", "5s", "--", path.to_str().unwrap()], &dir);
    assert_eq!(code(&d), Some(126), "{}", d.stderr);
    assert!(d.elapsed < Duration::from_secs(2));
}

/// Each bad invocation exits 2, names what is wrong, and runs nothing.
#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("usage");
    let cases: &[(&[&str], &str)] = &[
        (&["--retry-on", "1,x"], "--retry-on"),
        (&["--retry-on", ""], "--retry-on"),
        (&["--stop-on", "0"], "--stop-on"),
        (&["--stop-on", "300"], "--stop-on"),
        (&["--retry-on", "1", "--stop-on", "2"], "--stop-on"),
        (&["--attempts", "0"], "--attempts"),
        (&["--attempts", "many"], "--attempts"),
        (&["--base", "soon"], "--base"),
        (&["--multiplier", "0.5"], "--multiplier"),
        (&["--base", "1s", "--cap", "10ms"], "--cap"),
        (&["--jitter", "sometimes"], "--jitter"),
        (&["--deadline", "-1s"], "--deadline"),
        (&["--deadline", "x"], "--deadline"),
        (&["--attempt-timeout", "-5"], "--attempt-timeout"),
        (&["--kill-after", "forever"], "--kill-after"),
        (&["--format", "xml"], "--format"),
        (&["--bogus"], "--bogus"),
    ];
    for (flags, name) in cases {
        let mut args = vec!["run"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "touch", "ran"]);
        let d = stagger(&args, &dir);
        assert_eq!(code(&d), Some(2), "{flags:?}: {}", d.stderr);
        assert!(d.stderr.contains(name), "{flags:?}: {}", d.stderr);
        assert!(!dir.path("ran").exists(), "{flags:?} ran the command");
    }
    let d = stagger(&["run"], &dir);
    assert_eq!(code(&d), Some(2));
    assert!(d.stderr.contains("<CMD>"), "{}", d.stderr);
}

#[test]
fn json_report_follows_the_commands_output() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("json");
    let script = "echo out-$(echo x >> count; wc -l < count); exit 1";
    let d = stagger(
        &[
            "run",
            "--base",
            "1ms",
            "--attempts",
            "2",
            "--format",
            "json",
            "--",
            "sh",
            "-c",
            script,
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(1));
    let lines: Vec<&str> = d.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", d.stdout);
    assert!(lines[0].starts_with("out-") && lines[1].starts_with("out-"));
    let r = json(&d);
    let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert_eq!(r["stop_reason"], "attempts_exhausted");
    assert_eq!(r["exit_code"], 1);
    assert!(r["elapsed_ms"].is_u64());
    let attempts = r["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    for (i, a) in attempts.iter().enumerate() {
        assert_eq!(a.as_object().unwrap().len(), 5, "{a}");
        assert_eq!(a["attempt"], i + 1);
        assert_eq!(a["exit_code"], 1);
        assert_eq!(a["timed_out"], false);
        assert!(a["duration_ms"].is_u64());
    }
    assert!(attempts[0]["delay_ms"].is_u64());
    assert!(attempts[1]["delay_ms"].is_null());
    assert!(
        lines[2].starts_with(r#"{"stop_reason":"#),
        "field order: {}",
        lines[2]
    );
}

#[test]
fn stdin_goes_to_the_first_attempt_only_unless_stdin_each() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("stdin");
    let script = "cat >> got; exit 1";
    let limit = Duration::from_secs(10);
    let base = ["run", "--base", "1ms", "--quiet"];
    let mut each = base.to_vec();
    each.extend_from_slice(&["--stdin-each", "--", "sh", "-c", script]);
    let d = stagger_with(&each, &dir, Some(b"hello\n"), limit);
    assert_eq!(code(&d), Some(1));
    assert_eq!(dir.read("got"), "hello\n".repeat(3));
    assert!(d.stderr.is_empty(), "--quiet: {}", d.stderr);

    fs::remove_file(dir.path("got")).unwrap();
    let mut once = base.to_vec();
    once.extend_from_slice(&["--", "sh", "-c", script]);
    let d = stagger_with(&once, &dir, Some(b"hello\n"), limit);
    assert_eq!(code(&d), Some(1));
    assert_eq!(dir.read("got"), "hello\n");
}

#[test]
fn help_explains_every_flag_with_an_example() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("help");
    let d = stagger(&["run", "--help"], &dir);
    assert_eq!(code(&d), Some(0));
    for flag in [
        "--attempts",
        "--base",
        "--multiplier",
        "--cap",
        "--jitter",
        "--deadline",
        "--attempt-timeout",
        "--kill-after",
        "--retry-on",
        "--stop-on",
        "--quiet",
        "--verbose",
        "--format",
        "--stdin-each",
        "--signal",
        "--foreground",
        "--preserve-status",
    ] {
        let lines: Vec<&str> = d.stdout.lines().collect();
        let start = lines
            .iter()
            .position(|l| {
                // A short form comes first: `-q, --quiet`.
                let l = l.trim_start();
                let l = match l.as_bytes() {
                    [b'-', c, b',', b' ', ..] if *c != b'-' => &l[4..],
                    _ => l,
                };
                l == flag || l.starts_with(&format!("{flag} <"))
            })
            .unwrap_or_else(|| panic!("{flag} missing from help"));
        let entry: Vec<&str> = lines[start..]
            .iter()
            .enumerate()
            .take_while(|(i, l)| *i == 0 || !l.trim_start().starts_with('-'))
            .map(|(_, l)| *l)
            .collect();
        let entry = entry.join("\n");
        assert!(entry.contains("e.g."), "{flag} has no example: {entry}");
    }
    assert!(d.stdout.contains("Exit status"));
}
