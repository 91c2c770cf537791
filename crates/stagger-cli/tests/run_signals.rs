//! `stagger run` as timeout(1) users expect it: every signal a session or a
//! user sends reaches the command, `-s`, `--kill-after`, 137 after SIGKILL,
//! `--preserve-status`, 125/126/127, and a terminal (a pseudo-terminal from
//! script(1)) for `--foreground` and for the stop it replaces.
//!
//! The binary is real, the children are `sh -c …`, the signals are real;
//! every run is bounded and the test fails if it overruns.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A command that records `sig` (from its trap) and then exits 3; it never
/// ends on its own within the test's bound.
fn trapping(sig: &str) -> String {
    format!(
        "echo x >> count; trap 'echo {sig} >> got; exit 3' {sig}; touch started; \
         while :; do sleep 0.05; done"
    )
}

/// HUP (an ssh session closing), INT, QUIT and TERM reach the command, no
/// attempt follows, and stagger ends by the same signal.
#[test]
fn ending_signals_are_forwarded_and_end_the_run_by_the_same_signal() {
    let _turn = crate::support::quiet();
    for (name, number) in [("HUP", 1), ("INT", 2), ("QUIT", 3), ("TERM", 15)] {
        let dir = TempDir::new(&format!("forward-{name}"));
        let started = Instant::now();
        let child = spawn(
            &["run", "--base", "10ms", "--", "sh", "-c", &trapping(name)],
            &dir.0,
            false,
        );
        wait_for(&dir, "started");
        send(&format!("-{name}"), child.id());
        let d = finish(child, started, Duration::from_secs(10));
        assert_eq!(dir.read("got").trim(), name, "{name}: {}", d.stderr);
        assert_eq!(dir.count("count"), 1, "{name}: retried");
        assert_eq!(
            d.status.signal(),
            Some(number),
            "{name}: {:?} {}",
            d.status,
            d.stderr
        );
    }
}

/// USR1 and USR2 reach the whole group (a background child of the shell
/// too) and the run goes on to its ordinary end.
#[test]
fn usr1_and_usr2_are_forwarded_to_the_group_and_the_run_goes_on() {
    let _turn = crate::support::quiet();
    for sig in ["USR1", "USR2"] {
        let dir = TempDir::new(&format!("pass-{sig}"));
        let script = format!(
            "trap 'echo top >> got' {sig}; \
             (trap 'echo deep >> deep' {sig}; while [ ! -s deep ]; do sleep 0.05; done) & \
             touch started; \
             while [ ! -s got ] || [ ! -s deep ]; do sleep 0.05; done; wait; exit 0"
        );
        let started = Instant::now();
        let child = spawn(
            &["run", "--format", "json", "--", "sh", "-c", &script],
            &dir.0,
            false,
        );
        wait_for(&dir, "started");
        // Give the subshell a moment to set its trap.
        std::thread::sleep(Duration::from_millis(200));
        send(&format!("-{sig}"), child.id());
        let d = finish(child, started, Duration::from_secs(10));
        assert_eq!(d.status.code(), Some(0), "{sig}: {}", d.stderr);
        assert_eq!(dir.read("got").trim(), "top");
        assert_eq!(dir.read("deep").trim(), "deep");
        assert_eq!(json(&d)["stop_reason"], "success");
    }
}

/// `-s INT`: the timeout sends SIGINT, and the run still exits 124.
#[test]
fn signal_flag_chooses_the_timeout_signal() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("signal-flag");
    let d = stagger(
        &[
            "run",
            "--attempts",
            "1",
            "--attempt-timeout",
            "200ms",
            "-s",
            "INT",
            "--",
            "sh",
            "-c",
            &trapping("INT"),
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(124), "{}", d.stderr);
    assert_eq!(dir.read("got").trim(), "INT");
    for (spelling, ok) in [
        ("sighup", true),
        ("9", true),
        ("TERM", true),
        ("NOPE", false),
        ("99", false),
    ] {
        let d = stagger(
            &["run", "--signal", spelling, "--attempts", "1", "--", "true"],
            &dir,
        );
        assert_eq!(code(&d) == Some(0), ok, "{spelling}: {}", d.stderr);
        if !ok {
            assert_eq!(code(&d), Some(2));
            assert!(d.stderr.contains("--signal"), "{}", d.stderr);
        }
    }
}

/// `--preserve-status`: a timed-out command's own status (143 for the
/// SIGTERM that ended it), 137 when SIGKILL was needed.
#[test]
fn preserve_status_keeps_the_commands_status() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("preserve");
    let d = stagger(
        &[
            "run",
            "--attempts",
            "1",
            "--attempt-timeout",
            "100ms",
            "--preserve-status",
            "--",
            "sleep",
            "5",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(143), "{}", d.stderr);
    let d = stagger(
        &[
            "run",
            "--attempts",
            "1",
            "--attempt-timeout",
            "100ms",
            "--",
            "sleep",
            "5",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(124), "{}", d.stderr);
}

/// Ctrl-C (SIGINT) to a command that ignores it: SIGKILL after
/// `--kill-after`, as help says.
#[test]
fn an_ignored_interrupt_is_followed_by_sigkill_after_kill_after() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("ctrl-c");
    let started = Instant::now();
    let child = spawn(
        &[
            "run",
            "-k",
            "300ms",
            "--format",
            "json",
            "--",
            "sh",
            "-c",
            "trap '' INT; touch started; sleep 10",
        ],
        &dir.0,
        false,
    );
    wait_for(&dir, "started");
    let sent = Instant::now();
    send("-INT", child.id());
    let d = finish(child, started, Duration::from_secs(10));
    let waited = sent.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(
        waited < Duration::from_millis(300) + SLACK * 3,
        "{waited:?}"
    );
    assert_eq!(d.status.signal(), Some(2), "{:?} {}", d.status, d.stderr);
    let r = json(&d);
    assert_eq!(r["attempts"][0]["exit_code"], 137);
    let help = stagger(&["run", "--help"], &dir).stdout;
    assert!(help.contains("Ctrl-C"), "{help}");
    assert!(help.contains("--kill-after"), "{help}");
}

/// A path that does not exist says so (not "command not found"); both
/// exit 127 at once, as timeout(1) does.
#[test]
fn a_missing_path_says_no_such_file() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("no-such-file");
    let d = stagger(&["run", "--", "/nonexistent/stagger-cmd"], &dir);
    assert_eq!(code(&d), Some(127));
    assert!(
        d.stderr
            .contains("/nonexistent/stagger-cmd: no such file or directory"),
        "{}",
        d.stderr
    );
    assert!(!d.stderr.contains("command not found"), "{}", d.stderr);
    let d = stagger(&["run", "--", "stagger-no-such-cmd-9"], &dir);
    assert_eq!(code(&d), Some(127));
    assert!(d.stderr.contains("command not found"), "{}", d.stderr);
}

/// stagger's own failure (here: stdin that cannot be read for
/// `--stdin-each`) is 125, and the command never runs.
#[test]
fn stagger_own_failure_exits_125() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("own-failure");
    let started = Instant::now();
    let child = Command::new(BIN)
        .args(["run", "--stdin-each", "--", "touch", "ran"])
        .current_dir(&dir.0)
        .stdin(std::fs::File::open("/").expect("open /"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stagger");
    let d = finish(child, started, Duration::from_secs(10));
    assert_eq!(code(&d), Some(125), "{}", d.stderr);
    assert!(d.stderr.contains("--stdin-each"), "{}", d.stderr);
    assert!(!dir.path("ran").exists());
}

/// Runs `line` in a shell on a fresh pseudo-terminal (script(1)), typing
/// `input` into it; bounded by 10 s.
fn on_a_terminal(line: &str, input: &[u8], dir: &TempDir) -> Done {
    let started = Instant::now();
    let mut child = Command::new("script")
        .args(["-q", "-e", "-c", line, "/dev/null"])
        .current_dir(&dir.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start script(1)");
    {
        use std::io::Write;
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input).expect("type");
    }
    finish(child, started, Duration::from_secs(10))
}

/// Without `--foreground`, a command that reads the terminal is stopped by
/// SIGTTIN; stagger ends it and names `--foreground` instead of hanging.
#[test]
fn reading_the_terminal_without_foreground_ends_with_a_message() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("tty-stop");
    let line = format!(
        "{BIN} run --attempts 3 --base 10ms -- sh -c 'echo x >> count; read answer; echo got:$answer'"
    );
    let d = on_a_terminal(&line, b"yes\n", &dir);
    assert_eq!(code(&d), Some(125), "{}", d.stdout);
    assert!(d.stdout.contains("--foreground"), "{}", d.stdout);
    assert!(d.stdout.contains("SIGTTIN"), "{}", d.stdout);
    assert!(!d.stdout.contains("got:yes"), "{}", d.stdout);
    // Not retried: it would stop the same way.
    assert_eq!(dir.count("count"), 1);
}

/// With `--foreground`, the command reads the terminal as it would without
/// stagger.
#[test]
fn foreground_lets_the_command_read_the_terminal() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("tty-foreground");
    let line = format!("{BIN} run --foreground -- sh -c 'read answer; echo got:$answer; exit 0'");
    let d = on_a_terminal(&line, b"yes\n", &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stdout);
    assert!(d.stdout.contains("got:yes"), "{}", d.stdout);
}

/// `--foreground` keeps timeouts: the command itself gets the signal.
#[test]
fn foreground_still_times_out() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("fg-timeout");
    let d = stagger(
        &[
            "run",
            "--foreground",
            "--attempts",
            "1",
            "--attempt-timeout",
            "200ms",
            "--",
            "sh",
            "-c",
            &trapping("TERM"),
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(124), "{}", d.stderr);
    assert_eq!(dir.read("got").trim(), "TERM");
}

/// `-k 0` disables the SIGKILL, as a 0 duration does in timeout(1): a
/// command that ignores SIGTERM runs to its own end, and the run exits 124.
#[test]
fn kill_after_zero_never_sends_sigkill() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("kill-after-0");
    let d = stagger(
        &[
            "run",
            "--attempts",
            "1",
            "--attempt-timeout",
            "100ms",
            "-k",
            "0",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 0.6; echo done > finished",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(124), "{}", d.stderr);
    assert!(d.elapsed >= Duration::from_millis(600), "{:?}", d.elapsed);
    assert_eq!(dir.read("finished").trim(), "done");
}
