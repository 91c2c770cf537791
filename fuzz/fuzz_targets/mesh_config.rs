//! `stagger audit --path` readers on any text: Istio, Envoy, Linkerd, AWS
//! and the clients' own files, with and without a selector. Each input is
//! either a report or an error naming the file; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger_audit::path::{audit_path, Options, PathInput};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // The first line may name a selector, the rest is the file.
    let (selector, text) = match s.split_once('\n') {
        Some((first, rest)) if first.starts_with("#sel ") => (Some(&first[5..]), rest),
        _ => (None, s),
    };
    for name in ["f.yaml", "f.toml"] {
        match audit_path(&[PathInput::new(name, text, selector)], &Options::default()) {
            Ok(r) => {
                // Every layer tries at least once.
                assert!(r.dead.bottom_attempts >= 1.0, "{}", r.dead.bottom_attempts);
                assert!(r.at_rate.bottom_attempts >= 1.0, "{}", r.at_rate.bottom_attempts);
                let _ = stagger_report::audit::path_text(&r);
                let _ = stagger_report::audit::path_svg(&r);
            }
            Err(e) => assert!(!e.file.is_empty()),
        }
    }
});
