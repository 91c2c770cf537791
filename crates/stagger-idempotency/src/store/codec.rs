//! The bytes a shared store keeps for a record.
//!
//! ```text
//! record   = state:u8 ('C' claimed | 'D' done) token:16 fingerprint:32 [response]
//! response = status:u16 count:u16 (name_len:u16 name value_len:u32 value){count} body
//! ```
//! All integers are big-endian. The token sits at a fixed offset so a Redis script can compare it
//! without decoding the rest. Decoding checks every length: a record written by something else
//! is an error, never a panic.
#![cfg_attr(not(all(feature = "redis", feature = "postgres")), allow(dead_code))]

use super::{Fingerprint, StoreError, StoredResponse, Token};
use bytes::Bytes;

pub(crate) const CLAIMED: u8 = b'C';
pub(crate) const DONE: u8 = b'D';
/// Where the token starts and ends in a record.
#[cfg(test)]
pub(crate) const TOKEN: std::ops::Range<usize> = 1..17;
const HEAD: usize = 1 + 16 + 32;

/// A decoded record.
pub(crate) enum Record {
    Claimed(Fingerprint),
    Done(Fingerprint, StoredResponse),
}

pub(crate) fn claimed(token: Token, fingerprint: &Fingerprint) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD);
    head(&mut out, CLAIMED, token, fingerprint);
    out
}

pub(crate) fn done(token: Token, fingerprint: &Fingerprint, response: &StoredResponse) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + 4 + response.body.len() + 64);
    head(&mut out, DONE, token, fingerprint);
    out.extend_from_slice(&response_bytes(response));
    out
}

fn head(out: &mut Vec<u8>, state: u8, token: Token, fingerprint: &Fingerprint) {
    out.push(state);
    out.extend_from_slice(&token.0.to_be_bytes());
    out.extend_from_slice(&fingerprint.0);
}

pub(crate) fn token_bytes(token: Token) -> [u8; 16] {
    token.0.to_be_bytes()
}

pub(crate) fn response_bytes(response: &StoredResponse) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + response.body.len() + 64);
    out.extend_from_slice(&response.status.to_be_bytes());
    let count = u16::try_from(response.headers.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&count.to_be_bytes());
    for (name, value) in response.headers.iter().take(usize::from(count)) {
        let name = &name.as_bytes()[..name.len().min(usize::from(u16::MAX))];
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name);
        let value = &value[..value.len().min(u32::MAX as usize)];
        out.extend_from_slice(&(value.len() as u32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out.extend_from_slice(&response.body);
    out
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Record, StoreError> {
    if bytes.len() < HEAD {
        return Err(bad("a record shorter than its header"));
    }
    let fingerprint = Fingerprint(bytes[17..HEAD].try_into().expect("32 bytes"));
    match bytes[0] {
        CLAIMED if bytes.len() == HEAD => Ok(Record::Claimed(fingerprint)),
        DONE => Ok(Record::Done(fingerprint, decode_response(&bytes[HEAD..])?)),
        _ => Err(bad("a record of an unknown kind")),
    }
}

pub(crate) fn decode_response(bytes: &[u8]) -> Result<StoredResponse, StoreError> {
    let mut at = 0;
    let status = u16::from_be_bytes(take(bytes, &mut at, 2)?.try_into().expect("2 bytes"));
    let count = u16::from_be_bytes(take(bytes, &mut at, 2)?.try_into().expect("2 bytes"));
    let mut headers = Vec::with_capacity(usize::from(count).min(64));
    for _ in 0..count {
        let len = u16::from_be_bytes(take(bytes, &mut at, 2)?.try_into().expect("2 bytes"));
        let name = std::str::from_utf8(take(bytes, &mut at, usize::from(len))?)
            .map_err(|_| bad("a header name that is not UTF-8"))?
            .to_owned();
        let len = u32::from_be_bytes(take(bytes, &mut at, 4)?.try_into().expect("4 bytes"));
        let value = Bytes::copy_from_slice(take(bytes, &mut at, len as usize)?);
        headers.push((name, value));
    }
    Ok(StoredResponse {
        status,
        headers,
        body: Bytes::copy_from_slice(&bytes[at..]),
    })
}

fn take<'a>(bytes: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], StoreError> {
    let end = at
        .checked_add(n)
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| bad("a stored answer cut short"))?;
    let out = &bytes[*at..end];
    *at = end;
    Ok(out)
}

fn bad(what: &str) -> StoreError {
    StoreError::new(format!("{what} (was it written by this version?)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn response() -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![
                (
                    "content-type".into(),
                    Bytes::from_static(b"application/json"),
                ),
                ("location".into(), Bytes::from_static(b"/orders/7")),
            ],
            body: Bytes::from_static(b"{\"id\":7}"),
        }
    }

    #[test]
    fn a_done_record_round_trips() {
        let fp = Fingerprint::of("POST", "/orders", b"x");
        let token = Token::new();
        match decode(&done(token, &fp, &response())).unwrap() {
            Record::Done(f, r) => assert_eq!((f, r), (fp, response())),
            Record::Claimed(..) => panic!("decoded a claim"),
        }
        assert!(matches!(
            decode(&claimed(token, &fp)).unwrap(),
            Record::Claimed(f) if f == fp
        ));
    }

    #[test]
    fn the_token_sits_where_the_redis_scripts_read_it() {
        let token = Token(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        let fp = Fingerprint::of("POST", "/", b"");
        assert_eq!(&claimed(token, &fp)[TOKEN], &token_bytes(token)[..]);
        assert_eq!(
            &done(token, &fp, &response())[TOKEN],
            &token_bytes(token)[..]
        );
        assert_eq!(claimed(token, &fp)[0], CLAIMED);
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
            let _ = decode_response(&bytes);
        }

        #[test]
        fn a_truncated_record_is_an_error_or_a_shorter_body(cut in 0usize..80) {
            let fp = Fingerprint::of("POST", "/", b"");
            let bytes = done(Token(7), &fp, &response());
            let cut = cut.min(bytes.len());
            if let Ok(Record::Done(_, r)) = decode(&bytes[..cut]) {
                prop_assert!(r.body.len() <= response().body.len());
            }
        }
    }
}
