//! stagger policy files (TOML or JSON) and the durations inside them: any
//! text is either accepted and builds a valid policy, or rejected with an
//! error naming a field; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger::config::{parse_duration, PolicyFile};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_duration(s);
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
