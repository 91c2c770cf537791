//! The conventions every subcommand shares, as a user of sleep(1),
//! timeout(1) and curl expects them: bare seconds, 0 = no limit, one
//! `--format text|json`, `-v`/`-q`, help with examples and exit status.

use crate::common;

use std::time::Duration;

use common::*;

const SUBCOMMANDS: [&str; 10] = [
    "schedule", "run", "sleep", "jitter", "simulate", "http", "gameday", "audit", "lab", "grpc",
];

#[test]
fn top_level_help_lists_every_subcommand() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("top-help");
    let d = stagger(&["--help"], &dir);
    assert_eq!(code(&d), Some(0));
    let commands: Vec<&str> = d
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for s in SUBCOMMANDS {
        assert!(commands.contains(&s), "{s} missing from {commands:?}");
    }
    // The one-line description names every one of them too (it left out
    // proxy, grpc and lab).
    let about = d.stdout.lines().next().unwrap_or_default();
    for s in commands.iter().filter(|c| **c != "help") {
        assert!(
            about.contains(&format!(" {s},")) || about.contains(&format!(" {s}.")),
            "{s} missing from {about:?}"
        );
    }
}

#[test]
fn every_subcommand_help_has_examples_and_exit_status() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("help");
    let nested: [&[&str]; 1] = [&["grpc", "health"]];
    let all = SUBCOMMANDS.iter().map(|s| vec![*s]);
    for words in all.chain(nested.iter().map(|w| w.to_vec())) {
        let s = words.join(" ");
        for flag in ["-h", "--help"] {
            let mut argv = words.clone();
            argv.push(flag);
            let d = stagger(&argv, &dir);
            assert_eq!(code(&d), Some(0), "{s} {flag}");
            let examples = d.stdout.find("Examples:");
            let exit = d.stdout.find("Exit status:");
            assert!(examples.is_some(), "{s} {flag} has no examples");
            assert!(exit.is_some(), "{s} {flag} has no exit status");
            let start = examples.unwrap_or_default();
            let first = d.stdout[start..].lines().nth(1).unwrap_or_default();
            assert!(
                first.trim_start().starts_with("stagger ")
                    || first.trim_start().starts_with("sleep "),
                "{s} {flag}: first example is {first:?}"
            );
        }
    }
}

#[test]
fn bare_numbers_are_seconds() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("bare");
    let d = stagger(&["jitter", "2..3", "--seed", "4"], &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    let v: f64 = d.stdout.trim().parse().unwrap();
    assert!((2.0..3.0).contains(&v), "{v}");
    let d = stagger(
        &[
            "schedule",
            "--base",
            "1.5",
            "--cap",
            "30",
            "--attempts",
            "3",
            "--format",
            "json",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    let j = json(&d);
    assert_eq!(j["retries"][0]["backoff_ms"], 1500.0);
    assert_eq!(j["retries"][1]["backoff_ms"], 3000.0);
    for bad in ["1.2.3", "inf", "1e999", "ten"] {
        let d = stagger(&["schedule", "--base", bad], &dir);
        assert_eq!(code(&d), Some(2), "{bad}");
        assert!(d.stderr.contains("--base"), "{bad}: {}", d.stderr);
    }
}

/// `--deadline -1s` used to be read as a flag `-1` ("use -- -1").
#[test]
fn negative_durations_are_refused_naming_the_flag() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("negative");
    let cases: &[&[&str]] = &[
        &["run", "--deadline", "-1s", "--", "true"],
        &["run", "--kill-after", "-2", "--", "true"],
        &["http", "--max-time", "-1s", "127.0.0.1:9"],
        &["schedule", "--base", "-100ms"],
        &["gameday", "--deadline", "-1s"],
        &["simulate", "--duration", "-5s"],
    ];
    for args in cases {
        let d = stagger(args, &dir);
        assert_eq!(code(&d), Some(2), "{args:?}: {}", d.stderr);
        assert!(d.stderr.contains(args[1]), "{args:?}: {}", d.stderr);
        assert!(d.stderr.contains("negative"), "{args:?}: {}", d.stderr);
        assert!(!d.stderr.contains("-- -1"), "{args:?}: {}", d.stderr);
    }
}

/// `--attempts -3` used to be "unexpected argument '-3' found": a negative
/// number never reached the flag's parser.
#[test]
fn negative_numbers_are_refused_naming_the_flag_and_what_it_takes() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("negative-numbers");
    let cases: &[(&[&str], &str)] = &[
        (&["simulate", "--attempts", "-3"], "1 or more"),
        (&["http", "--retry", "-1", "127.0.0.1:9"], "0 or more"),
        (&["http", "--max-redirs", "-1", "127.0.0.1:9"], "0 or more"),
        (&["jitter", "30s", "--spread", "-10%"], "0% to 100%"),
        (&["simulate", "--clients", "-3"], "1.."),
        (&["run", "--attempts", "-2", "--", "true"], "1 or more"),
    ];
    for (args, takes) in cases {
        let d = stagger(args, &dir);
        let flag = args.iter().find(|a| a.starts_with("--")).unwrap();
        assert_eq!(code(&d), Some(2), "{args:?}: {}", d.stderr);
        assert!(d.stderr.contains(flag), "{args:?}: {}", d.stderr);
        assert!(d.stderr.contains("negative"), "{args:?}: {}", d.stderr);
        assert!(d.stderr.contains(takes), "{args:?}: {}", d.stderr);
        assert!(
            !d.stderr.contains("unexpected argument"),
            "{args:?}: {}",
            d.stderr
        );
    }
    // A flag after a value-taking option is still a flag.
    let d = stagger(&["http", "-H", "-v", "127.0.0.1:9"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
}

#[test]
fn unknown_model_lists_every_model_hedging_included() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("model");
    let d = stagger(&["simulate", "--model", "bogus"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
    for m in ["failover", "contention", "metastable", "layers", "hedging"] {
        assert!(d.stderr.contains(m), "{m}: {}", d.stderr);
    }
}

#[test]
fn schedule_says_when_it_shows_fewer_retries_than_asked() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("capped");
    let d = stagger(
        &["schedule", "--attempts", "4294967295", "--samples", "0"],
        &dir,
    );
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    let first = d.stdout.lines().next().unwrap_or_default();
    assert!(
        first.contains("4294967294 retries; the first 10000 shown"),
        "{first}"
    );
    // One more than the most is too many, not "not a whole number".
    let d = stagger(&["schedule", "--attempts", "4294967296"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
    assert!(
        d.stderr.contains("more than the most attempts"),
        "{}",
        d.stderr
    );
    assert!(!d.stderr.contains("not a whole number"), "{}", d.stderr);
}

/// 0 means "no limit", as in timeout(1) and curl.
#[test]
fn zero_deadline_and_attempt_timeout_mean_no_limit() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("zero");
    let d = stagger(
        &[
            "run",
            "--deadline",
            "0",
            "--attempt-timeout",
            "0",
            "--",
            "sh",
            "-c",
            "sleep 0.3",
        ],
        &dir,
    );
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    assert!(d.elapsed >= Duration::from_millis(300));
}

#[test]
fn one_format_flag_text_or_json_with_table_kept_as_a_hidden_alias() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("format");
    for s in ["schedule", "run", "simulate", "http", "gameday", "audit"] {
        let d = stagger(&[s, "--help"], &dir);
        assert!(d.stdout.contains("--format <F>"), "{s}: {}", d.stdout);
        assert!(
            d.stdout.contains("text") && d.stdout.contains("json"),
            "{s}"
        );
        assert!(!d.stdout.contains("table | json"), "{s}");
        assert!(!d.stdout.contains("table|json"), "{s}");
    }
    let text = stagger(&["schedule", "--format", "text", "--seed", "2"], &dir);
    let table = stagger(&["schedule", "--format", "table", "--seed", "2"], &dir);
    assert_eq!(code(&text), Some(0));
    assert_eq!(text.stdout, table.stdout);
    let d = stagger(&["run", "--format", "json", "--", "true"], &dir);
    assert_eq!(json(&d)["stop_reason"], "success");
    let d = stagger(&["schedule", "--format", "xml"], &dir);
    assert_eq!(code(&d), Some(2));
    assert!(d.stderr.contains("--format"));
}

#[test]
fn every_command_that_talks_has_verbose_and_quiet() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("talk");
    for s in ["run", "http", "sleep", "simulate", "gameday"] {
        let d = stagger(&[s, "--help"], &dir);
        assert!(d.stdout.contains("-v, --verbose"), "{s}");
        assert!(d.stdout.contains("-q, --quiet"), "{s}");
    }
    // run: -q silences the retry lines, -v adds start and success lines.
    let d = stagger(&["run", "-q", "--base", "1ms", "--", "false"], &dir);
    assert_eq!(code(&d), Some(1));
    assert_eq!(d.stderr, "");
    let d = stagger(&["run", "--base", "1ms", "--", "false"], &dir);
    assert!(d.stderr.contains("retrying"), "{}", d.stderr);
    let d = stagger(&["run", "-v", "--", "true"], &dir);
    assert!(d.stderr.contains("attempt 1/3 starting"), "{}", d.stderr);
    assert!(
        d.stderr.contains("succeeded after 1 attempt"),
        "{}",
        d.stderr
    );
    let d = stagger(&["run", "-v", "-q", "--", "true"], &dir);
    assert_eq!(code(&d), Some(2));
    // sleep: -v says how long.
    let d = stagger(&["sleep", "-v", "10ms"], &dir);
    assert!(d.stderr.starts_with("stagger: sleeping "), "{}", d.stderr);
    // simulate: -q drops the summary line.
    let small = [
        "simulate",
        "--runs",
        "2",
        "--duration",
        "5",
        "--strategy",
        "full",
        "--out",
        "none",
    ];
    let d = stagger(&small, &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    assert!(d.stderr.contains("simulated events"), "{}", d.stderr);
    let mut quiet = small.to_vec();
    quiet.push("-q");
    let d = stagger(&quiet, &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    assert_eq!(d.stderr, "");
}

#[test]
fn sleep_print_prints_the_delay_and_does_not_sleep() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("print");
    let d = stagger(&["sleep", "5..6", "--print", "--seed", "3"], &dir);
    assert_eq!(code(&d), Some(0), "{}", d.stderr);
    let v: f64 = d.stdout.trim().parse().unwrap();
    assert!((5.0..6.0).contains(&v), "{v}");
    assert!(d.elapsed < Duration::from_secs(5), "{:?}", d.elapsed);
    // The same key prints the same delay: what this host will sleep.
    let a = stagger(&["sleep", "0..5m", "--key", "web-1", "--print"], &dir);
    let b = stagger(&["sleep", "0..5m", "--key", "web-1", "--print"], &dir);
    assert_eq!(a.stdout, b.stdout);
}

/// `schedule --samples 0` printed NaN as the mean.
#[test]
fn schedule_without_samples_prints_no_nan() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("nan");
    let d = stagger(&["schedule", "--samples", "0"], &dir);
    assert_eq!(code(&d), Some(0));
    assert!(!d.stdout.to_lowercase().contains("nan"), "{}", d.stdout);
}

/// `-m x` and `--deadline x` are named as typed, not as `--max-time`.
#[test]
fn errors_name_the_flag_as_typed() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("typed");
    for (args, typed) in [
        (
            &["http", "--deadline", "soon", "127.0.0.1:9"][..],
            "'--deadline",
        ),
        (&["http", "-m", "-1", "127.0.0.1:9"], "'-m"),
        (&["http", "--deadline=x", "127.0.0.1:9"], "'--deadline"),
        (&["http", "--max-time", "x", "127.0.0.1:9"], "'--max-time"),
    ] {
        let d = stagger(args, &dir);
        assert_eq!(code(&d), Some(2), "{args:?}");
        assert!(d.stderr.contains(typed), "{args:?}: {}", d.stderr);
    }
}

/// The small bugs of the first CLI: each named after what it did.
#[test]
fn strategy_lists_with_empty_entries_or_typos_are_refused_as_written() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("strategy");
    let d = stagger(&["simulate", "--strategy", "full,,none"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
    assert!(d.stderr.contains("--strategy"), "{}", d.stderr);
    let d = stagger(&["gameday", "--strategy", "full+budgett"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
    assert!(d.stderr.contains("`full+budgett`"), "{}", d.stderr);
    assert!(!d.stderr.contains("none+"), "{}", d.stderr);
}

#[test]
fn gameday_too_short_for_its_fault_blames_duration_not_fault_at() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("short-gameday");
    let d = stagger(&["gameday", "--duration", "1s"], &dir);
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
    assert!(d.stderr.contains("--duration"), "{}", d.stderr);
    assert!(!d.stderr.contains("--fault-at"), "{}", d.stderr);
}

#[test]
fn simulate_fails_on_an_unwritable_out_before_simulating() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("unwritable");
    let d = stagger(
        &["simulate", "--runs", "100000", "--out", "/proc/stagger-x"],
        &dir,
    );
    assert_eq!(code(&d), Some(1), "{}", d.stderr);
    assert!(d.stderr.contains("--out"), "{}", d.stderr);
    assert!(d.elapsed < Duration::from_secs(2), "{:?}", d.elapsed);
}

/// A curl or timeout(1) flag whose meaning stagger spells differently gets
/// a tip naming ours.
#[test]
fn curl_and_timeout_habits_get_a_tip() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("habits");
    for (args, ours) in [
        (
            &["run", "--timeout", "30", "--", "true"][..],
            "--attempt-timeout",
        ),
        (&["http", "--retry-max-time", "30", "x"], "--max-time"),
        (&["http", "--retry-delay", "1", "x"], "--base"),
        (&["http", "--data-raw", "a", "x"], "-d"),
    ] {
        let d = stagger(args, &dir);
        assert_eq!(code(&d), Some(2), "{args:?}");
        assert!(d.stderr.contains("tip: "), "{args:?}: {}", d.stderr);
        assert!(d.stderr.contains(ours), "{args:?}: {}", d.stderr);
    }
}

/// `stagger jitter -5s` got clap's "unexpected argument": a window that
/// starts with `-` now reaches the parser, which names it.
#[test]
fn a_negative_window_is_refused_naming_the_window() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("negative-window");
    for args in [&["jitter", "-5s"][..], &["sleep", "-1s..5s"]] {
        let d = stagger(args, &dir);
        assert_eq!(code(&d), Some(2), "{args:?}: {}", d.stderr);
        assert!(
            d.stderr.contains(&format!("window `{}`", args[1])),
            "{}",
            d.stderr
        );
        assert!(d.stderr.contains("negative"), "{}", d.stderr);
        assert!(!d.stderr.contains("unexpected argument"), "{}", d.stderr);
    }
}

/// cli.md promises `-q` on every subcommand that talks on stderr; `grpc
/// health` and `lab` refused it.
#[test]
fn grpc_health_and_lab_take_verbose_and_quiet() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("talk-more");
    for words in [&["grpc", "health"][..], &["lab"]] {
        let mut argv = words.to_vec();
        argv.push("--help");
        let d = stagger(&argv, &dir);
        assert!(d.stdout.contains("-v, --verbose"), "{words:?}");
        assert!(d.stdout.contains("-q, --quiet"), "{words:?}");
    }
    // Nothing listens on port 9: could not connect (2), not bad usage (1).
    let d = stagger(
        &["grpc", "health", "127.0.0.1:9", "--attempts", "1", "-q"],
        &dir,
    );
    assert_eq!(code(&d), Some(2), "{}", d.stderr);
}
