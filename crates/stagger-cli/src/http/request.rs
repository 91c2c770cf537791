//! The request `stagger http`'s flags describe: URL, method, headers, body
//! and Idempotency-Key, with curl's rules for the body flags.
//!
//! - `-d DATA` sends DATA; `-d @FILE` the file with every CR and LF
//!   removed (curl's `-d` is meant for form data); `-d @-` reads stdin the
//!   same way. Several `-d` are joined with `&`.
//! - `--data-binary` is the same with the bytes kept exactly.
//! - Both send `Content-Type: application/x-www-form-urlencoded` unless a
//!   `-H Content-Type:` says otherwise.
//! - `--json DATA` (or `@FILE`, `@-`) sends the bytes as they are, with
//!   `Content-Type` and `Accept: application/json`; several are joined
//!   as they are.
//! - A body makes the method POST unless `-X` names another.

use std::io::Read;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use stagger::http::{new_idempotency_key, IDEMPOTENCY_KEY};

/// The flags that describe a request, as `stagger http` takes them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags<'a> {
    /// The URL (`http://` when it has no scheme).
    pub url: &'a str,
    /// `-X`.
    pub method: Option<&'a str>,
    /// `-H`, each `Name: value`.
    pub headers: &'a [String],
    /// `-d`.
    pub data: &'a [String],
    /// `--data-binary`.
    pub data_binary: &'a [String],
    /// `--json`.
    pub json: &'a [String],
    /// `--idempotency-key`: a key, or `auto`.
    pub idempotency_key: Option<&'a str>,
}

/// What is wrong with the flags, the flag named first.
fn usage(msg: String) -> String {
    msg
}

/// The request the flags describe.
pub struct Parts {
    /// The URL.
    pub url: reqwest::Url,
    /// The method (POST when a body is given without `-X`).
    pub method: Method,
    /// The headers, the implied ones included.
    pub headers: HeaderMap,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
    /// The `Idempotency-Key` sent, as the user would write it (unquoted).
    pub key: Option<String>,
}

/// The URL of the request: one without a scheme is http, as in curl.
pub fn url(raw: &str) -> Result<reqwest::Url, String> {
    let full = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let url = reqwest::Url::parse(&full).map_err(|e| usage(format!("URL `{raw}`: {e}")))?;
    match url.scheme() {
        "http" => Ok(url),
        "https" if cfg!(feature = "tls") => Ok(url),
        "https" => Err(usage(format!(
            "URL `{raw}`: this build has no TLS (built without the `tls` feature)"
        ))),
        other => Err(usage(format!(
            "URL `{raw}`: `{other}://` is not supported; use http:// or https://"
        ))),
    }
}

/// How a body flag treats its data.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `-d`: a file's or stdin's CR and LF are removed.
    Data,
    /// `--data-binary`, `--json`: bytes as they are.
    Binary,
}

/// Reads one body argument: `@FILE`, `@-` (stdin) or the text itself.
fn body_part(flag: &str, value: &str, kind: Kind) -> Result<Vec<u8>, String> {
    let mut bytes = match value.strip_prefix('@') {
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| usage(format!("{flag} @-: cannot read stdin: {e}")))?;
            buf
        }
        Some(path) => {
            std::fs::read(path).map_err(|e| usage(format!("{flag}: cannot read `{path}`: {e}")))?
        }
        // Text typed on the command line is sent as typed.
        None => return Ok(value.as_bytes().to_vec()),
    };
    if kind == Kind::Data {
        bytes.retain(|b| *b != b'\r' && *b != b'\n');
    }
    Ok(bytes)
}

fn join(parts: Vec<Vec<u8>>, sep: &[u8]) -> Option<Vec<u8>> {
    if parts.is_empty() {
        return None;
    }
    Some(parts.join(sep))
}

/// Headers a body flag implies unless `-H` sets them.
type Implied = Vec<(HeaderName, &'static str)>;

/// The body and the Content-Type (and Accept) its flags imply.
fn body(a: &Flags<'_>) -> Result<(Option<Vec<u8>>, Implied), String> {
    const FORM: &str = "application/x-www-form-urlencoded";
    const JSON: &str = "application/json";
    if !a.json.is_empty() {
        let parts = a
            .json
            .iter()
            .map(|v| body_part("--json", v, Kind::Binary))
            .collect::<Result<Vec<_>, String>>()?;
        return Ok((join(parts, b""), vec![(CONTENT_TYPE, JSON), (ACCEPT, JSON)]));
    }
    let mut parts = Vec::new();
    for v in a.data {
        parts.push(body_part("-d", v, Kind::Data)?);
    }
    for v in a.data_binary {
        parts.push(body_part("--data-binary", v, Kind::Binary)?);
    }
    let body = join(parts, b"&");
    let implied = if body.is_some() {
        vec![(CONTENT_TYPE, FORM)]
    } else {
        Vec::new()
    };
    Ok((body, implied))
}

/// The request these flags describe.
pub fn parts(a: &Flags<'_>) -> Result<Parts, String> {
    let url = url(a.url)?;
    let (body, implied) = body(a)?;
    let method = match a.method {
        Some(m) => Method::from_bytes(m.to_ascii_uppercase().as_bytes())
            .map_err(|_| usage(format!("-X: `{m}` is not an HTTP method")))?,
        None if body.is_some() => Method::POST,
        None => Method::GET,
    };
    let mut headers = HeaderMap::new();
    for h in a.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| usage(format!("-H: `{h}` is not `Name: value`")))?;
        let name = HeaderName::from_bytes(k.trim().as_bytes())
            .map_err(|_| usage(format!("-H: `{}` is not a header name", k.trim())))?;
        let value = HeaderValue::from_str(v.trim()).map_err(|_| {
            usage(format!(
                "-H: the value of `{name}` is not a valid header value"
            ))
        })?;
        headers.append(name, value);
    }
    for (name, value) in implied {
        if !headers.contains_key(&name) {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    let key = match a.idempotency_key {
        None => None,
        Some("auto") => {
            (method == Method::POST || method == Method::PATCH).then(new_idempotency_key)
        }
        Some(k) => {
            let bare = k.trim().trim_matches('"');
            if bare.is_empty() {
                return Err(usage(
                    "--idempotency-key: the key is empty; give one, or `auto`".into(),
                ));
            }
            Some(HeaderValue::from_str(&format!("\"{bare}\"")).map_err(|_| {
                usage("--idempotency-key: the key must be visible ASCII".to_string())
            })?)
        }
    };
    if let Some(k) = &key {
        headers.insert(IDEMPOTENCY_KEY, k.clone());
    }
    // The key as people write it: the header's quotes are syntax.
    let key = headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .map(|k| k.trim().trim_matches('"').to_string());
    Ok(Parts {
        url,
        method,
        headers,
        body,
        key,
    })
}

/// curl's exit status for a call that got no final response.
pub fn curl_exit_code(e: &reqwest_middleware::Error, timed_out: bool) -> u8 {
    let chain = stagger::http::error_chain(e);
    match e {
        _ if timed_out => 28,
        reqwest_middleware::Error::Reqwest(e) if e.is_timeout() => 28,
        reqwest_middleware::Error::Reqwest(e) if e.is_redirect() => 47,
        _ if chain.contains("certificate") => 60,
        reqwest_middleware::Error::Reqwest(e) if e.is_connect() => 7,
        // curl's "failure in receiving network data": the peer reset a
        // connection that was open.
        _ if io_kind(e) == Some(std::io::ErrorKind::ConnectionReset) => 56,
        _ => 1,
    }
}

/// The kind of the I/O error at the root of `e`, if one is.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// One attempt as `stagger http -v` says it: the answer, the server's
/// hint, and the wait or the stop that followed.
pub fn attempt_line(log: &stagger::http::AttemptLog) -> String {
    let what = match (&log.status, &log.error) {
        (Some(s), _) => format!("HTTP {s}"),
        (None, Some(e)) => e.clone(),
        (None, None) => "no answer".into(),
    };
    let hint = log
        .hint
        .map(|h| format!(" (server hint {})", crate::run::human(h)))
        .unwrap_or_default();
    match (log.delay, log.stop) {
        (Some(d), _) => format!(
            "attempt {}: {what}{hint}; waiting {}",
            log.attempt,
            crate::run::human(d)
        ),
        (None, Some(r)) => format!("attempt {}: {what}{hint}; stop: {r}", log.attempt),
        (None, None) => format!("attempt {}: {what}{hint}", log.attempt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_scheme_is_http() {
        assert_eq!(
            url("127.0.0.1:8080/x").unwrap().as_str(),
            "http://127.0.0.1:8080/x"
        );
        assert_eq!(url("localhost").unwrap().scheme(), "http");
        assert!(url("ftp://example.com/").is_err());
        assert!(url("http://exa mple.com/").is_err());
    }

    #[test]
    fn data_files_lose_their_newlines_binary_ones_keep_them() {
        let dir = std::env::temp_dir().join(format!("stagger-body-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("b.txt");
        std::fs::write(&f, "a=1\r\nb=2\n").unwrap();
        let at = format!("@{}", f.display());
        assert_eq!(body_part("-d", &at, Kind::Data).unwrap(), b"a=1b=2");
        assert_eq!(
            body_part("--data-binary", &at, Kind::Binary).unwrap(),
            b"a=1\r\nb=2\n"
        );
        // Typed text is sent as typed.
        assert_eq!(body_part("-d", "x\ny", Kind::Data).unwrap(), b"x\ny");
        let missing = body_part("-d", "@/nonexistent/stagger", Kind::Data).unwrap_err();
        assert!(missing.to_string().starts_with("-d: cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
