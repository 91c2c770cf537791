//! The API's requests: a URL query's pairs, and the error that names the
//! parameter a request got wrong.

/// A request the API refuses: which parameter, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParam {
    /// The parameter as the query names it (`burst`), or empty when the
    /// problem is not one parameter's.
    pub(crate) parameter: String,
    /// What is wrong, in the command line's words.
    pub(crate) message: String,
}

impl BadParam {
    /// A problem with `parameter` (as the query names it, or empty).
    pub fn new(parameter: impl Into<String>, message: impl Into<String>) -> Self {
        BadParam {
            parameter: parameter.into(),
            message: message.into(),
        }
    }

    /// From a usage message that starts with the flag (`--rate: …`).
    pub fn from_usage(message: &str) -> Self {
        let parameter = message
            .strip_prefix("--")
            .and_then(|m| m.split(':').next())
            .filter(|f| !f.contains(' '))
            .unwrap_or("")
            .replace('-', "_");
        BadParam::new(parameter, message.trim())
    }

    /// The parameter as the query names it (`burst`), or empty when the
    /// problem is not one parameter's.
    pub fn parameter(&self) -> &str {
        &self.parameter
    }

    /// What is wrong, in the command line's words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Decodes `application/x-www-form-urlencoded` pairs (`+` is a space,
/// `%XX` a byte). A malformed escape or non-UTF-8 text is an error.
pub fn pairs(query: &str) -> Result<Vec<(String, String)>, BadParam> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let k =
                decode(k).ok_or_else(|| BadParam::new("", format!("`{p}` is not URL-encoded")))?;
            let v = decode(v).ok_or_else(|| BadParam::new(k.clone(), "is not URL-encoded"))?;
            Ok((k, v))
        })
        .collect()
}

fn decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = (bytes.next()? as char).to_digit(16)?;
                let lo = (bytes.next()? as char).to_digit(16)?;
                out.push((hi * 16 + lo) as u8);
            }
            b => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_form_encoding() {
        assert_eq!(
            pairs("strategy=full%2Bbreaker,none&x=a+b&flag").unwrap(),
            vec![
                ("strategy".into(), "full+breaker,none".into()),
                ("x".into(), "a b".into()),
                ("flag".into(), String::new())
            ]
        );
        assert!(pairs("a=%zz").is_err());
        assert!(pairs("a=%ff").is_err(), "not UTF-8");
    }

    #[test]
    fn usage_messages_name_their_flag() {
        let e = BadParam::from_usage("--outage-end: must be after --outage-start");
        assert_eq!(e.parameter, "outage_end");
    }
}
