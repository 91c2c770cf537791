//! `stagger sleep` and `stagger jitter` as scripts use them: the real binary.

use crate::common;

use std::time::Duration;

use common::*;

#[test]
fn jitter_prints_a_value_in_its_window_and_refuses_bad_ones() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("jitter");
    let d = stagger(&["jitter", "30s", "--spread", "10%"], &dir);
    assert_eq!(code(&d), Some(0));
    let v: f64 = d.stdout.trim().parse().unwrap();
    assert!((27.0..33.0).contains(&v), "{v}");
    let a = stagger(&["jitter", "0..5m", "--unit", "ms", "--seed", "9"], &dir);
    let b = stagger(&["jitter", "0..5m", "--unit", "ms", "--seed", "9"], &dir);
    assert_eq!(a.stdout, b.stdout);
    let ms: u64 = a.stdout.trim().parse().unwrap();
    assert!(ms < 300_000);
    for bad in [
        &["jitter", "5m..1m"][..],
        &["jitter", "soon"],
        &["jitter", "1s", "--spread", "2s"],
        &["jitter", "1s", "--unit", "h"],
        &["sleep", "1s..x"],
    ] {
        let d = stagger(bad, &dir);
        assert_eq!(code(&d), Some(2), "{bad:?}");
        assert!(!d.stderr.is_empty());
    }
}

#[test]
fn sleep_waits_inside_its_window() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("sleep");
    let d = stagger(&["sleep", "100ms..200ms"], &dir);
    assert_eq!(code(&d), Some(0));
    assert!(d.elapsed >= Duration::from_millis(100), "{:?}", d.elapsed);
    assert!(
        d.elapsed < Duration::from_millis(200) + SLACK,
        "{:?}",
        d.elapsed
    );
}
