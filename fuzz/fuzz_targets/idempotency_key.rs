//! `Idempotency-Key` values from an untrusted client: reading one never panics, and a key is
//! accepted only as the draft allows it (1 to 255 visible ASCII characters, one key).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = http::HeaderValue::from_bytes(data) else {
        return;
    };
    let mut headers = http::HeaderMap::new();
    headers.insert("idempotency-key", value);
    match stagger_idempotency::key(&headers) {
        Ok(Some(key)) => {
            assert!((1..=stagger_idempotency::MAX_KEY_LEN).contains(&key.len()), "{key:?}");
            assert!(key.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','), "{key:?}");
        }
        Ok(None) => panic!("a present header read as absent: {data:?}"),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
