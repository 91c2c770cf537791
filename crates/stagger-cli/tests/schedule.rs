//! `stagger schedule` end to end: the JSON contract, bounds, bad flags.

use std::process::Command;

fn stagger(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stagger"))
        .args(args)
        .output()
        .expect("run stagger");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn json_samples_obey_each_retrys_bounds() {
    let _quiet = crate::support::any();
    for jitter in ["none", "full", "equal", "decorrelated", "proportional:0.2"] {
        let (code, out, err) = stagger(&[
            "schedule",
            "--jitter",
            jitter,
            "--attempts",
            "6",
            "--samples",
            "2000",
            "--format",
            "json",
        ]);
        assert_eq!(code, Some(0), "{jitter}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let rows = v["retries"].as_array().unwrap();
        assert_eq!(rows.len(), 5, "{jitter}");
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r["retry"].as_u64(), Some(i as u64 + 1));
            let (lo, hi) = (r["min_ms"].as_f64().unwrap(), r["max_ms"].as_f64().unwrap());
            let b = r["backoff_ms"].as_f64().unwrap();
            assert_eq!(b, 100.0 * 2f64.powi(i as i32), "{jitter}");
            let samples = r["samples_ms"].as_array().unwrap();
            assert_eq!(samples.len(), 2000);
            for x in samples {
                let x = x.as_f64().unwrap();
                // none: exactly b_n; decorrelated: the range is the samples' own.
                let top_ok = if jitter == "none" || jitter == "decorrelated" {
                    x <= hi
                } else {
                    x < hi || (lo == hi && x == hi)
                };
                assert!(
                    x >= lo && top_ok,
                    "{jitter} retry {}: {x} outside [{lo}, {hi})",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let _quiet = crate::support::any();
    for (args, flag) in [
        (&["--multiplier", "0.5"][..], "--multiplier"),
        (&["--base", "1x"][..], "--base"),
        (&["--cap", "10ms"][..], "--cap"),
        (&["--jitter", "sometimes"][..], "--jitter"),
        (&["--attempts", "0"][..], "--attempts"),
        (&["--format", "xml"][..], "--format"),
        // Review regression: 10^4 retries × 10^7 samples would need ~800 GB.
        (
            &["--attempts", "10001", "--samples", "10000000"][..],
            "--samples",
        ),
    ] {
        let mut all = vec!["schedule"];
        all.extend_from_slice(args);
        let (code, _, err) = stagger(&all);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// Decorrelated jitter's range is the rule's, `[base, 3·base)` at retry 1,
/// not the samples' minimum and maximum (one sample once printed the empty
/// `[162.0, 162.0)`), and its `b_n` column is blank: it does not use it.
#[test]
fn decorrelated_range_is_the_rules_even_with_one_sample() {
    let _quiet = crate::support::any();
    let args = ["schedule", "--jitter", "decorrelated", "--samples", "1"];
    let (code, out, err) = stagger(&args);
    assert_eq!(code, Some(0), "{err}");
    let first = out.lines().nth(2).unwrap();
    assert!(first.contains("[100.0, 300.0)"), "{out}");
    assert_eq!(first.split_whitespace().nth(1), Some("-"), "{out}");
    let mut json = args.to_vec();
    json.extend(["--format", "json", "--attempts", "8"]);
    let (_, out, _) = stagger(&json);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["retries"][0]["min_ms"], 100.0);
    assert_eq!(v["retries"][0]["max_ms"], 300.0);
    assert_eq!(v["retries"][6]["max_ms"], 10_000.0, "the cap");
}
