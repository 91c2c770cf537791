//! `stagger http`: a curl-like client whose retries follow stagger's rules,
//! on the reqwest middleware.
//!
//! Exit codes (as curl users expect): 0 when the final response is 2xx or
//! 3xx; 22 when it is an HTTP error; 28 when the call stopped on its
//! deadline, the last attempt timed out, or the body was still arriving at
//! the deadline; 7 when no connection could be made; 2 for bad usage; 1 for
//! any other transport failure (the body's included).
//!
//! The body is passed to stdout as it arrives (`--format json` counts and
//! drops it), so memory stays flat however much a server sends, and reading
//! it counts against `--deadline` like the attempts and waits before it.

use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Method;
use serde::Serialize;
use stagger::http::{new_idempotency_key, AttemptLog, RetryInfo, Settings, IDEMPOTENCY_KEY};
use stagger::reqwest::RetryMiddleware;
use stagger::StopReason;

use crate::args::{duration, flag_error, limit, FormatArgs, PolicyArgs, UsageError, Verbosity};

const EXAMPLES: &str = "\
Examples:
  stagger http -m 10 https://api.example.com/health
  stagger http -X POST 127.0.0.1:8080/pay -d '{\"cents\":5}' --idempotency-key auto -v
  stagger http --format json http://127.0.0.1:8080/ | jq .stop_reason

Exit status: as curl's, 0 the final response is 1xx-3xx; 22 it is an HTTP
error (one line on stderr, the body discarded); 28 the deadline (-m) or the
last attempt's timeout passed; 7 no connection could be made; 2 bad usage
(the message names the flag); 1 any other failure.";

/// Send an HTTP request, retrying what is worth retrying: 502/503/504 and
/// 429 (never sooner than Retry-After), refused connections, timeouts of
/// idempotent requests; POST and PATCH only with an Idempotency-Key.
///
/// Example: `stagger http -X POST http://127.0.0.1:8080/pay -d '{"cents":5}'
/// --idempotency-key auto --deadline 5s -v`
///
/// Plain http:// only (no TLS in this build).
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// The URL to request (e.g. `http://127.0.0.1:8080/health`).
    url: String,
    /// The method (e.g. `-X PUT`); GET, or POST when `-d` is given.
    #[arg(short = 'X', long = "request", value_name = "METHOD")]
    method: Option<String>,
    /// A request header, repeatable (e.g. `-H 'Accept: application/json'`).
    #[arg(short = 'H', long = "header", value_name = "K: V")]
    headers: Vec<String>,
    /// The request body; `@FILE` reads it from a file (e.g. `-d @order.json`).
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    data: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// A deadline over every attempt and wait, the body's reading included
    /// (e.g. `-m 5`; 0 = no limit, as in curl).
    #[arg(short = 'm', long = "max-time", visible_alias = "deadline", value_parser = duration, value_name = "D")]
    deadline: Option<Duration>,
    /// A timeout for each attempt (e.g. `--attempt-timeout 800ms`; 0 = none).
    #[arg(long, value_parser = duration, value_name = "D")]
    attempt_timeout: Option<Duration>,
    /// The longest Retry-After honoured; a longer one stops the call (e.g. `--max-retry-after 30s`).
    #[arg(long, default_value = "60s", value_parser = duration, value_name = "D")]
    max_retry_after: Duration,
    /// Retry HTTP 500 too (off by default: usually a bug).
    #[arg(long)]
    retry_500: bool,
    /// Send an Idempotency-Key: `auto` generates one for POST/PATCH, anything
    /// else is sent as the key (e.g. `--idempotency-key auto`).
    #[arg(long, value_name = "auto|KEY")]
    idempotency_key: Option<String>,
    /// `-v` prints each attempt and wait on stderr; `-q` only errors.
    #[command(flatten)]
    talk: Verbosity,
    /// `text` writes the final body; `json` only a summary of the call.
    #[command(flatten)]
    format: FormatArgs,
}

/// One attempt, as printed by `--format json`.
#[derive(Debug, Serialize)]
struct AttemptJson {
    attempt: u32,
    status: Option<u16>,
    error: Option<String>,
    hint_ms: Option<u64>,
    delay_ms: u64,
}

/// The summary printed by `--format json`.
#[derive(Debug, Serialize)]
struct Summary {
    final_status: Option<u16>,
    stop_reason: String,
    elapsed_ms: u64,
    idempotency_key: Option<String>,
    attempts: Vec<AttemptJson>,
    /// Why the final response's body could not be read in full (absent when
    /// it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    body_error: Option<String>,
}

/// Why the final response's body was not read in full.
enum BodyError {
    /// Still arriving when the deadline passed.
    Deadline { read: u64 },
    /// The connection failed mid-body.
    Transport { read: u64, error: String },
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Deadline { read } => {
                write!(
                    f,
                    "body: still arriving at the deadline ({read} bytes read)"
                )
            }
            BodyError::Transport { read, error } => {
                write!(f, "body: failed after {read} bytes read: {error}")
            }
        }
    }
}

/// Reads the body chunk by chunk, handing each to `sink` (stdout, or
/// nowhere), until it ends, fails, or `deadline` passes. Never holds more
/// than one chunk.
async fn read_body(
    mut resp: reqwest::Response,
    deadline: Option<tokio::time::Instant>,
    mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<Result<(), BodyError>> {
    let mut read = 0u64;
    loop {
        let next = match deadline {
            Some(d) => match tokio::time::timeout_at(d, resp.chunk()).await {
                Ok(next) => next,
                Err(_) => return Ok(Err(BodyError::Deadline { read })),
            },
            None => resp.chunk().await,
        };
        match next {
            Ok(Some(chunk)) => {
                read += chunk.len() as u64;
                sink(&chunk)?;
            }
            Ok(None) => return Ok(Ok(())),
            Err(e) => {
                let error = stagger::http::error_chain(&e);
                return Ok(Err(BodyError::Transport { read, error }));
            }
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

/// The request the flags describe.
struct Parts {
    method: Method,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
    /// The `Idempotency-Key` sent, if any.
    key: Option<String>,
}

/// The request these flags describe: method, headers, body, and the key sent.
fn request_parts(a: &Args) -> anyhow::Result<Parts> {
    let method = match &a.method {
        Some(m) => Method::from_bytes(m.to_ascii_uppercase().as_bytes())
            .map_err(|_| usage(format!("-X: `{m}` is not an HTTP method")))?,
        None if a.data.is_some() => Method::POST,
        None => Method::GET,
    };
    let mut headers = HeaderMap::new();
    for h in &a.headers {
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
    let body = match &a.data {
        None => None,
        Some(d) => match d.strip_prefix('@') {
            Some(path) => Some(
                std::fs::read(path).map_err(|e| usage(format!("-d: cannot read `{path}`: {e}")))?,
            ),
            None => Some(d.clone().into_bytes()),
        },
    };
    let key = match a.idempotency_key.as_deref() {
        None => None,
        Some("auto") => {
            (method == Method::POST || method == Method::PATCH).then(new_idempotency_key)
        }
        Some(k) => {
            let quoted = if k.len() >= 2 && k.starts_with('"') && k.ends_with('"') {
                k.to_string()
            } else {
                format!("\"{k}\"")
            };
            Some(HeaderValue::from_str(&quoted).map_err(|_| {
                usage("--idempotency-key: the key must be visible ASCII".to_string())
            })?)
        }
    };
    let key = key.map(|k| {
        headers.insert(IDEMPOTENCY_KEY, k.clone());
        k.to_str().unwrap_or_default().to_string()
    });
    let key = key.or_else(|| {
        headers
            .get(IDEMPOTENCY_KEY)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    });
    Ok(Parts {
        method,
        headers,
        body,
        key,
    })
}

fn describe(log: &AttemptLog) -> String {
    let what = match (&log.status, &log.error) {
        (Some(s), _) => format!("HTTP {s}"),
        (None, Some(e)) => e.clone(),
        (None, None) => "no answer".into(),
    };
    let hint = log
        .hint
        .map(|h| format!(" (server hint {} ms)", ms(h)))
        .unwrap_or_default();
    match (log.delay, log.stop) {
        (Some(d), _) => format!(
            "attempt {}: {what}{hint}; waiting {} ms",
            log.attempt,
            ms(d)
        ),
        (None, Some(r)) => format!("attempt {}: {what}{hint}; stop: {r}", log.attempt),
        (None, None) => format!("attempt {}: {what}{hint}", log.attempt),
    }
}

/// Runs `stagger http`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let url = reqwest::Url::parse(&a.url).map_err(|e| usage(format!("URL `{}`: {e}", a.url)))?;
    if url.scheme() != "http" {
        return Err(usage(format!(
            "URL `{}`: only http:// is supported by this build",
            a.url
        )));
    }
    let mut builder = a.policy.policy()?.max_retry_after(a.max_retry_after);
    if let Some(t) = limit(a.attempt_timeout) {
        builder = builder.attempt_timeout(t);
    }
    let policy = builder.build().map_err(flag_error)?;
    let Parts {
        method,
        headers,
        body,
        key,
    } = request_parts(a)?;

    let logs: Arc<Mutex<Vec<AttemptLog>>> = Arc::default();
    let sink = logs.clone();
    let verbose = a.talk.verbose;
    let mut settings = Settings::new(policy)
        .retry_500(a.retry_500)
        .on_attempt(move |log| {
            if verbose {
                eprintln!("stagger: {}", describe(log));
            }
            if let Ok(mut l) = sink.lock() {
                l.push(log.clone());
            }
        });
    let deadline = limit(a.deadline);
    if let Some(d) = deadline {
        settings = settings.timeout(d);
    }
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))?;
    let client = reqwest_middleware::ClientBuilder::new(client)
        .with(RetryMiddleware::new(settings))
        .build();

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let text = !a.format.json();
    let (result, info, body) = rt.block_on(async {
        let deadline = deadline.and_then(|d| tokio::time::Instant::now().checked_add(d));
        let mut req = client.request(method, url).headers(headers);
        if let Some(b) = body {
            req = req.body(b);
        }
        let req = req
            .build()
            .map_err(|e| usage(format!("bad request: {e}")))?;
        let mut ext = http::Extensions::new();
        let result = client.execute_with_extensions(req, &mut ext).await;
        let info = ext.get::<RetryInfo>().copied();
        let (result, body) = match result {
            Ok(resp) => {
                let status = resp.status();
                let mut out = std::io::stdout().lock();
                let body = read_body(resp, deadline, |chunk| {
                    if text {
                        out.write_all(chunk)?;
                        out.flush()?;
                    }
                    Ok(())
                })
                .await?;
                (Ok(status), body)
            }
            Err(e) => (Err(e), Ok(())),
        };
        Ok::<_, anyhow::Error>((result, info, body))
    })?;
    let elapsed = started.elapsed();
    let logs = logs.lock().map(|l| l.clone()).unwrap_or_default();
    let reason = info.map_or(StopReason::NotRetryable, |i| i.reason);
    let timed_out = logs
        .last()
        .is_some_and(|l| l.status.is_none() && l.error.as_deref() == Some("attempt timed out"));

    let code = match (&result, &body) {
        _ if reason == StopReason::Deadline => 28,
        (_, Err(BodyError::Deadline { .. })) => 28,
        (_, Err(BodyError::Transport { .. })) => 1,
        (Ok(s), _) if s.is_success() || s.is_redirection() || s.is_informational() => 0,
        (Ok(_), _) => 22,
        (Err(_), _) if timed_out => 28,
        (Err(reqwest_middleware::Error::Reqwest(e)), _) if e.is_timeout() => 28,
        (Err(reqwest_middleware::Error::Reqwest(e)), _) if e.is_connect() => 7,
        (Err(_), _) => 1,
    };
    let body_error = body.as_ref().err().map(ToString::to_string);

    if a.format.json() {
        let summary = Summary {
            final_status: result.as_ref().ok().map(|s| s.as_u16()),
            stop_reason: reason.as_str().to_string(),
            elapsed_ms: ms(elapsed),
            idempotency_key: key,
            attempts: logs
                .iter()
                .map(|l| AttemptJson {
                    attempt: l.attempt,
                    status: l.status,
                    error: l.error.clone(),
                    hint_ms: l.hint.map(ms),
                    delay_ms: l.delay.map_or(0, ms),
                })
                .collect(),
            body_error: body_error.clone(),
        };
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        if let Err(e) = &result {
            eprintln!("stagger: {}", stagger::http::error_chain(e));
        }
        if body_error.is_none() && (a.talk.verbose || (code != 0 && !a.talk.quiet)) {
            eprintln!(
                "stagger: {} after {} attempt(s) in {} ms",
                reason,
                logs.len(),
                ms(elapsed)
            );
        }
    }
    if let Some(e) = &body_error {
        eprintln!("stagger: {e}");
    }
    Ok(ExitCode::from(code))
}
