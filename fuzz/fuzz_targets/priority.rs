//! Priority header values from untrusted peers: parsing never panics, what
//! parses is one of the eight levels and reads back as itself, and the
//! server's reading of a request never fails over it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger::priority::Priority;

fuzz_target!(|data: &[u8]| {
    match Priority::from_bytes(data) {
        Ok(p) => {
            assert!(usize::from(p.rank()) < Priority::LEVELS);
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
            let core = data.iter().filter(|b| **b != b' ' && **b != b'\t').count();
            assert!((1..=16).contains(&core), "{data:?}");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    if let Ok(v) = http::HeaderValue::from_bytes(data) {
        let mut h = http::HeaderMap::new();
        h.insert(stagger::priority::HEADER, v);
        let inbound = stagger::http::Inbound::from_headers(&h, std::time::Instant::now());
        let _ = inbound.priority();
    }
});
