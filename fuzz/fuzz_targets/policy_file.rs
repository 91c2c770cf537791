//! stagger policy files (TOML or JSON) and the one duration grammar: any
//! text is either accepted and builds a valid policy, or rejected with an
//! error naming a field; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger::config::{parse_duration, Bare, PolicyFile};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for bare in [Bare::None, Bare::Seconds, Bare::Millis] {
        let _ = parse_duration(s, bare);
    }
    for parsed in [PolicyFile::from_toml(s), PolicyFile::from_json(s)] {
        match parsed {
            Ok(file) => {
                if let Ok(builder) = file.policy_builder() {
                    let _ = builder.build();
                }
            }
            Err(e) => assert!(!e.field().is_empty()),
        }
    }
});
