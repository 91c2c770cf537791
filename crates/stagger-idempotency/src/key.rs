//! Reading the `Idempotency-Key` header.
//!
//! The draft defines the field as one Structured Field string (`"…"`, RFC 8941 §3.3.3). Clients
//! such as Stripe's send a bare UUID, so an unquoted value is accepted as well. Either way the key
//! is 1 to 255 visible ASCII characters and names one key: a comma means the client sent several.

use http::header::{HeaderMap, HeaderName};

/// The request header that carries the key.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The longest key accepted, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// Why a request's `Idempotency-Key` was refused (each answers 400).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The method requires a key and the request has none.
    Missing,
    /// The field is present but holds no key (`""` or blank).
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] characters.
    TooLong(usize),
    /// The field names more than one key (a comma, or the header twice).
    Several,
    /// A character that is not visible ASCII, at this byte offset of the key.
    BadCharacter(usize),
    /// A quoted value that is not a well-formed Structured Field string.
    Malformed(&'static str),
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::Missing => f.write_str("this request needs an Idempotency-Key header"),
            KeyError::Empty => f.write_str("the Idempotency-Key header is empty"),
            KeyError::TooLong(n) => write!(
                f,
                "the Idempotency-Key is {n} characters long; at most {MAX_KEY_LEN} are allowed"
            ),
            KeyError::Several => {
                f.write_str("the Idempotency-Key header names more than one key; send exactly one")
            }
            KeyError::BadCharacter(at) => write!(
                f,
                "the Idempotency-Key holds a character that is not visible ASCII at byte {at}"
            ),
            KeyError::Malformed(why) => write!(
                f,
                "the Idempotency-Key is not a Structured Field string: {why}"
            ),
        }
    }
}

impl std::error::Error for KeyError {}

/// Reads the request's key: `Ok(None)` when the header is absent.
///
/// ```
/// use http::HeaderMap;
/// use stagger_idempotency::key;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("idempotency-key", "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"".parse().unwrap());
/// assert_eq!(key(&headers).unwrap().as_deref(), Some("8e03978e-40d5-43e8-bc93-6894a57f9324"));
///
/// headers.insert("idempotency-key", "a, b".parse().unwrap());
/// assert!(key(&headers).is_err());
/// ```
pub fn key(headers: &HeaderMap) -> Result<Option<String>, KeyError> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Several);
    }
    parse(value.as_bytes()).map(Some)
}

/// Parses one field value into the key it names.
pub(crate) fn parse(raw: &[u8]) -> Result<String, KeyError> {
    let trimmed = trim_ows(raw);
    let key = if trimmed.first() == Some(&b'"') {
        unquote(trimmed)?
    } else {
        trimmed.to_vec()
    };
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(at) = key.iter().position(|&b| b == b',') {
        let _ = at;
        return Err(KeyError::Several);
    }
    if let Some(at) = key.iter().position(|b| !(0x21..=0x7e).contains(b)) {
        return Err(KeyError::BadCharacter(at));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong(key.len()));
    }
    // Only visible ASCII is left, so this cannot fail.
    String::from_utf8(key).map_err(|_| KeyError::Malformed("not ASCII"))
}

fn trim_ows(raw: &[u8]) -> &[u8] {
    let start = raw
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

/// RFC 8941 §4.2.5: a string is `"`, then characters with `\"` and `\\` as the only escapes, then
/// `"`. Anything after the closing quote (a second member, parameters) is refused.
fn unquote(quoted: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(quoted.len());
    let mut bytes = quoted[1..].iter().copied();
    loop {
        match bytes.next() {
            None => return Err(KeyError::Malformed("the closing quote is missing")),
            Some(b'\\') => match bytes.next() {
                Some(c @ (b'"' | b'\\')) => out.push(c),
                _ => return Err(KeyError::Malformed("only \\\" and \\\\ may be escaped")),
            },
            Some(b'"') => break,
            Some(c) => out.push(c),
        }
    }
    let rest: Vec<u8> = bytes.collect();
    if rest.is_empty() {
        Ok(out)
    } else if trim_ows(&rest).first() == Some(&b',') {
        Err(KeyError::Several)
    } else {
        Err(KeyError::Malformed(
            "text follows the closing quote (parameters are not allowed)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_and_bare_keys_name_the_same_key() {
        assert_eq!(parse(b"\"abc-123\"").unwrap(), "abc-123");
        assert_eq!(parse(b"abc-123").unwrap(), "abc-123");
        assert_eq!(parse(b"  \"abc\"  ").unwrap(), "abc");
        assert_eq!(parse(br#""a\"b""#).unwrap(), "a\"b");
    }

    #[test]
    fn refusals_name_the_rule() {
        assert_eq!(parse(b"\"\""), Err(KeyError::Empty));
        assert_eq!(parse(b"   "), Err(KeyError::Empty));
        assert_eq!(parse(b"\"a\", \"b\""), Err(KeyError::Several));
        assert_eq!(parse(b"a,b"), Err(KeyError::Several));
        assert_eq!(parse(b"\"a b\""), Err(KeyError::BadCharacter(1)));
        assert_eq!(parse("\"é\"".as_bytes()), Err(KeyError::BadCharacter(0)));
        assert!(matches!(parse(b"\"abc"), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(b"\"abc\";x=1"), Err(KeyError::Malformed(_))));
        assert!(matches!(parse(br#""a\nb""#), Err(KeyError::Malformed(_))));
        let long = vec![b'k'; 256];
        assert_eq!(parse(&long), Err(KeyError::TooLong(256)));
        assert_eq!(parse(&long[..255]).unwrap().len(), 255);
    }
}
