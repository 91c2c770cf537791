//! `stagger http`: a curl-like client whose retries follow stagger's rules,
//! on the reqwest middleware.
//!
//! Its flags are curl's where curl has one with the same meaning (`-X`,
//! `-H`, `-d`, `--data-binary`, `--json`, `-o`, `-i`, `-s`, `-L`,
//! `--max-redirs`, `--connect-timeout`, `-m`, `--retry`, `-A`, `-k`,
//! `--cacert`, `--fail-with-body`), and its exit codes are curl's (see
//! [`EXAMPLES`]). The retries themselves are the library's: what is worth
//! retrying, how long to wait, when to give up.

mod output;
mod request;
#[cfg(feature = "tls")]
mod tls;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use stagger::http::{AttemptLog, RetryInfo, Settings};
use stagger::reqwest::RetryMiddleware;
use stagger::{NotRetried, StopReason};

use crate::args::{duration, flag_error, limit, FormatArgs, PolicyArgs, UsageError, Verbosity};

use output::{BodyError, Dest, Out, WriteError};

const EXAMPLES: &str = "\
Examples:
  stagger http -m 10 https://api.example.com/health
  stagger http -fsS example.com/data.json -o data.json     (no scheme: http)
  stagger http -X POST 127.0.0.1:8080/pay --json '{\"cents\":5}' --idempotency-key auto -v
  stagger http --retry 5 --connect-timeout 2 -L https://example.com/download -o file
  stagger http --cacert ca.pem https://127.0.0.1:8443/health
  stagger http --format json http://127.0.0.1:8080/ | jq .stop_reason

Exit status: as curl's. 0 the final response is 1xx-3xx; 22 it is an HTTP
error: one line on stderr, the body discarded unless --fail-with-body; 28 the
deadline (-m), the last attempt's timeout or --connect-timeout passed; 7 no
connection could be made; 60 the server's certificate was not trusted (see
--cacert, -k); 47 more redirects than --max-redirs; 56 the server reset the
connection; 23 the output could not be written; 2 bad usage (the message
names the flag); 1 any other failure.

A failed call never writes the error page where the body goes, so
`stagger http URL > data.json` leaves data.json empty and exits 22.";

/// Send an HTTP or HTTPS request, retrying what is worth retrying: 502/503/504
/// and 429 (never sooner than Retry-After), refused connections, timeouts
/// of idempotent requests; POST and PATCH only with an Idempotency-Key.
///
/// The flags that curl has mean what they mean in curl; the retry flags
/// (`--attempts`, `--base`, `--cap`, `--jitter`, `--retry`) are stagger's.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// The URL to request; without a scheme it is http (e.g. `127.0.0.1:8080/health`).
    url: String,
    /// The method (e.g. `-X PUT`); GET, or POST when a body is given.
    #[arg(short = 'X', long = "request", value_name = "METHOD")]
    method: Option<String>,
    /// A request header, repeatable (e.g. `-H 'Accept: application/json'`).
    #[arg(short = 'H', long = "header", value_name = "K: V")]
    headers: Vec<String>,
    /// A form body, repeatable (joined with &); `@FILE` or `@-` (stdin) reads
    /// it without its CR and LF, as curl does (e.g. `-d a=1 -d @form.txt`).
    /// Sends Content-Type: application/x-www-form-urlencoded unless -H sets one.
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    data: Vec<String>,
    /// A body sent byte for byte, repeatable; `@FILE` or `@-` (e.g. `--data-binary @dump.bin`).
    #[arg(long, value_name = "DATA")]
    data_binary: Vec<String>,
    /// A JSON body, with Content-Type and Accept: application/json; `@FILE`
    /// or `@-` (e.g. `--json '{"a":1}'`).
    #[arg(long, value_name = "DATA", conflicts_with_all = ["data", "data_binary"])]
    json: Vec<String>,
    /// Write the body to FILE instead of stdout (e.g. `-o page.html`).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the status line and headers before the body (e.g. `-i`).
    #[arg(short = 'i', long = "include")]
    include: bool,
    /// Write nothing on stderr, errors included (with `-S` errors are shown) (e.g. `-s`).
    #[arg(short = 's', long = "silent")]
    silent: bool,
    /// With `-s`, still write the error line (e.g. `-sS`).
    #[arg(short = 'S', long = "show-error")]
    show_error: bool,
    /// Accepted for curl habits (`curl -fsS`): a failed call always exits
    /// 22 and discards the body here (e.g. `-f`).
    #[arg(short = 'f', long = "fail")]
    _fail: bool,
    /// On an HTTP error, write the body anyway (the exit status stays 22) (e.g. `--fail-with-body`).
    #[arg(long)]
    fail_with_body: bool,
    /// Follow redirects (off by default, as in curl) (e.g. `-L`).
    #[arg(short = 'L', long = "location")]
    location: bool,
    /// At most N redirects with `-L` (e.g. `--max-redirs 5`).
    #[arg(long, default_value_t = 50, value_name = "N")]
    max_redirs: usize,
    /// A limit on making each connection, TLS included (e.g. `--connect-timeout 2`; 0 = none).
    #[arg(long, value_parser = duration, value_name = "D")]
    connect_timeout: Option<Duration>,
    /// The User-Agent sent; an empty one sends none (e.g. `-A 'probe/1.0'`).
    #[arg(short = 'A', long = "user-agent", value_name = "NAME")]
    user_agent: Option<String>,
    /// Trust the certificates in this PEM file instead of the system's (e.g. `--cacert ca.pem`).
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Do not check the server's certificate (testing only) (e.g. `-k`).
    #[arg(short = 'k', long = "insecure")]
    insecure: bool,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Retries after the first attempt, as curl counts them: `--retry 3`
    /// makes up to 4 attempts (e.g. `--retry 3`; replaces --attempts).
    #[arg(long, value_name = "N", conflicts_with = "attempts")]
    retry: Option<u32>,
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
    /// Retry HTTP 500 too (off by default: usually a bug) (e.g. `--retry-500`).
    #[arg(long)]
    retry_500: bool,
    /// Send an Idempotency-Key: `auto` generates one for POST/PATCH, anything
    /// else is sent as the key (e.g. `--idempotency-key auto`).
    #[arg(long, value_name = "auto|KEY")]
    idempotency_key: Option<String>,
    /// `-v` prints each attempt and wait on stderr; `-q` only errors.
    #[command(flatten)]
    talk: Verbosity,
    /// `text` writes the final body; `json` only a summary of the call (the
    /// body goes to `-o` if given).
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
    /// The wait after this attempt; `null` after the last one.
    delay_ms: Option<u64>,
}

/// The summary printed by `--format json`.
#[derive(Debug, Serialize)]
struct Summary {
    final_status: Option<u16>,
    stop_reason: String,
    elapsed_ms: u64,
    idempotency_key: Option<String>,
    /// The final answer was the server's stored answer to an earlier
    /// request with the same key (`Idempotent-Replayed: true`): the write
    /// ran once.
    replayed: bool,
    /// Why a failure that could have cleared was not retried
    /// (`not_idempotent`, `server_said_no`, …); `null` otherwise.
    not_retried: Option<&'static str>,
    attempts: Vec<AttemptJson>,
    /// Why the final response's body could not be read in full (absent when
    /// it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    body_error: Option<String>,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

impl Args {
    /// The flags that describe the request.
    fn flags(&self) -> request::Flags<'_> {
        request::Flags {
            url: &self.url,
            method: self.method.as_deref(),
            headers: &self.headers,
            data: &self.data,
            data_binary: &self.data_binary,
            json: &self.json,
            idempotency_key: self.idempotency_key.as_deref(),
        }
    }

    /// Whether the error line is written (`-s` hides it unless `-S`).
    fn errors_shown(&self) -> bool {
        !self.silent || self.show_error
    }

    /// Whether the per-attempt lines are written.
    fn verbose(&self) -> bool {
        self.talk.verbose && !self.silent
    }

    /// The retry policy of the flags; `--retry N` is N + 1 attempts.
    fn policy(&self) -> anyhow::Result<stagger::Policy> {
        let mut flags = self.policy.clone();
        if let Some(n) = self.retry {
            flags.schedule.attempts = Some(crate::args::Attempts(Some(n.saturating_add(1))));
        }
        let mut builder = flags.policy()?.max_retry_after(self.max_retry_after);
        if let Some(t) = limit(self.attempt_timeout) {
            builder = builder.attempt_timeout(t);
        }
        builder.build().map_err(flag_error)
    }

    /// The HTTP client: redirects, connect timeout, User-Agent, TLS trust.
    fn client(&self) -> anyhow::Result<reqwest::Client> {
        let redirects = if self.location {
            reqwest::redirect::Policy::limited(self.max_redirs)
        } else {
            reqwest::redirect::Policy::none()
        };
        let mut b = reqwest::Client::builder().redirect(redirects);
        if let Some(t) = limit(self.connect_timeout) {
            b = b.connect_timeout(t);
        }
        let ua = self
            .user_agent
            .clone()
            .unwrap_or_else(|| format!("stagger/{}", env!("CARGO_PKG_VERSION")));
        if !ua.is_empty() {
            let ua = reqwest::header::HeaderValue::from_str(&ua)
                .map_err(|_| usage("-A: the User-Agent must be visible ASCII".into()))?;
            b = b.user_agent(ua);
        }
        b = self.tls(b)?;
        b.build()
            .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))
    }

    #[cfg(feature = "tls")]
    fn tls(&self, mut b: reqwest::ClientBuilder) -> anyhow::Result<reqwest::ClientBuilder> {
        if let Some(path) = &self.cacert {
            let pem = std::fs::read(path)
                .map_err(|e| usage(format!("--cacert: cannot read {}: {e}", path.display())))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                usage(format!(
                    "--cacert: {} is not PEM certificates: {e}",
                    path.display()
                ))
            })?;
            if certs.is_empty() {
                return Err(usage(format!(
                    "--cacert: no certificate in {}",
                    path.display()
                )));
            }
            if self.insecure {
                // -k checks nothing: the file changes nothing.
                b = b.tls_certs_merge(certs);
            } else {
                // As curl's --cacert: these certificates instead of the
                // system's, as CAs or as the server's own certificate.
                use rustls::pki_types::pem::PemObject;
                let ders = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        usage(format!(
                            "--cacert: {} is not PEM certificates: {e}",
                            path.display()
                        ))
                    })?;
                let config = tls::cacert_config(ders)
                    .map_err(|e| usage(format!("--cacert: {}: {e}", path.display())))?;
                b = b.tls_backend_preconfigured(config);
            }
        } else if !self.insecure {
            // The system's roots. Unreadable ones are skipped: a server
            // they would have vouched for then fails with exit 60.
            // Only these (`tls_certs_only`): reqwest's platform verifier
            // would load the system's roots again for every client.
            let found = rustls_native_certs::load_native_certs();
            let roots = found
                .certs
                .iter()
                .filter_map(|der| reqwest::Certificate::from_der(der.as_ref()).ok());
            b = b.tls_certs_only(roots.collect::<Vec<_>>());
        }
        Ok(b.danger_accept_invalid_certs(self.insecure))
    }

    #[cfg(not(feature = "tls"))]
    fn tls(&self, b: reqwest::ClientBuilder) -> anyhow::Result<reqwest::ClientBuilder> {
        Ok(b)
    }

    /// Where the body goes: `-o`, stdout, or nowhere for `--format json`.
    fn dest(&self) -> Dest {
        match (&self.output, self.format.json()) {
            (Some(p), _) => Dest::File(p.clone()),
            (None, false) => Dest::Stdout,
            (None, true) => Dest::Nowhere,
        }
    }
}

/// Runs `stagger http`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let request::Parts {
        url,
        method,
        headers,
        body,
        key,
    } = request::parts(&a.flags()).map_err(usage)?;
    let shown_url = url.to_string();
    let logs: Arc<Mutex<Vec<AttemptLog>>> = Arc::default();
    let (client, deadline) = client(a, &logs)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let dest = a.dest();
    let outcome = rt.block_on(async {
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
                // An HTTP error's page never lands where the data goes.
                let keep = !status_fails(status) || a.fail_with_body;
                let mut out = Out::open(if keep { &dest } else { &Dest::Nowhere })?;
                if a.include && keep {
                    out.write(&output::head(&resp))?;
                }
                let body = output::read_body(resp, deadline, &mut out).await?;
                (Ok(status), body)
            }
            Err(e) => (Err(e), Ok(())),
        };
        Ok::<_, anyhow::Error>((result, info, body))
    });
    let (result, info, body) = match outcome {
        Ok(o) => o,
        Err(e) => match e.downcast::<WriteError>() {
            // curl's "write error".
            Ok(w) => {
                if a.errors_shown() {
                    eprintln!("stagger: {w}");
                }
                return Ok(ExitCode::from(23));
            }
            Err(e) => return Err(e),
        },
    };
    let elapsed = started.elapsed();
    let logs = logs.lock().map(|l| l.clone()).unwrap_or_default();
    let reason = info.map_or(StopReason::NotRetryable, |i| i.reason);
    let code = exit_code(&result, &body, reason, &logs);
    let body_error = body.as_ref().err().map(ToString::to_string);

    let done = Done {
        result: &result,
        body_error: body_error.clone(),
        reason,
        code,
        elapsed,
        key,
        replayed: info.is_some_and(|i| i.replayed),
        not_retried: info.and_then(|i| i.not_retried),
        logs: &logs,
        url: &shown_url,
    };
    done.print(a)?;
    if let Some(e) = body_error.filter(|_| a.errors_shown()) {
        eprintln!("stagger: {e}");
    }
    Ok(ExitCode::from(code))
}

/// curl's exit code for how the call ended: 28 past the deadline, 22 for
/// an HTTP error, 1 for a body broken off, else curl's code for the error.
fn exit_code(
    result: &Result<reqwest::StatusCode, reqwest_middleware::Error>,
    body: &Result<(), BodyError>,
    reason: StopReason,
    logs: &[AttemptLog],
) -> u8 {
    let timed_out = logs
        .last()
        .is_some_and(|l| l.status.is_none() && l.error.as_deref() == Some("attempt timed out"));
    match (result, body) {
        _ if reason == StopReason::Deadline => 28,
        (_, Err(BodyError::Deadline { .. })) => 28,
        (_, Err(BodyError::Transport { .. })) => 1,
        (Ok(s), _) if status_fails(*s) => 22,
        (Ok(_), _) => 0,
        (Err(e), _) => request::curl_exit_code(e, timed_out),
    }
}

/// The client with the retry middleware, each attempt logged into `logs`
/// (and shown with `-v`), and the deadline over the whole call.
fn client(
    a: &Args,
    logs: &Arc<Mutex<Vec<AttemptLog>>>,
) -> anyhow::Result<(reqwest_middleware::ClientWithMiddleware, Option<Duration>)> {
    let policy = a.policy()?;
    let sink = logs.clone();
    let verbose = a.verbose();
    let deadline = limit(a.deadline);
    let settings = Settings {
        policy,
        retry_500: a.retry_500,
        on_attempt: Some(Arc::new(move |log: &AttemptLog| {
            if verbose {
                eprintln!("stagger: {}", request::attempt_line(log));
            }
            if let Ok(mut l) = sink.lock() {
                l.push(log.clone());
            }
        })),
        timeout: deadline,
        ..Default::default()
    };
    let client = reqwest_middleware::ClientBuilder::new(a.client()?)
        .with(RetryMiddleware::new(settings))
        .build();

    Ok((client, deadline))
}

/// How a call ended, for the one line or the JSON summary.
struct Done<'a> {
    result: &'a Result<reqwest::StatusCode, reqwest_middleware::Error>,
    body_error: Option<String>,
    reason: StopReason,
    code: u8,
    elapsed: Duration,
    key: Option<String>,
    replayed: bool,
    not_retried: Option<NotRetried>,
    logs: &'a [AttemptLog],
    url: &'a str,
}

impl Done<'_> {
    /// The JSON summary on stdout with `--format json`; otherwise, when the
    /// body was read whole, one line on stderr saying why it failed (or,
    /// with `-v`, how it went).
    fn print(self, a: &Args) -> anyhow::Result<()> {
        let Done {
            result,
            body_error,
            reason,
            code,
            elapsed,
            key,
            replayed,
            not_retried,
            logs,
            url: shown_url,
        } = self;
        if a.format.json() {
            let summary = Summary {
                final_status: result.as_ref().ok().map(|s| s.as_u16()),
                stop_reason: reason.as_str().to_string(),
                elapsed_ms: ms(elapsed),
                idempotency_key: key,
                replayed,
                not_retried: not_retried.map(|n| n.as_str()),
                attempts: logs
                    .iter()
                    .map(|l| AttemptJson {
                        attempt: l.attempt,
                        status: l.status,
                        error: l.error.clone(),
                        hint_ms: l.hint.map(ms),
                        delay_ms: l.delay.map(ms),
                    })
                    .collect(),
                body_error: body_error.clone(),
            };
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, &summary)?;
            writeln!(out)?;
        } else if body_error.is_none() {
            let n = logs.len();
            let plural = if n == 1 { "" } else { "s" };
            let why = not_retried.map(held_back).unwrap_or_default();
            let how = format!(
                "{reason}{why} after {n} attempt{plural} in {}",
                crate::run::human(elapsed)
            );
            let what = match &result {
                Ok(s) => format!(
                    "HTTP {} {} from {shown_url}",
                    s.as_u16(),
                    s.canonical_reason().unwrap_or("")
                ),
                Err(e) => {
                    certificate_problem(a, e).unwrap_or_else(|| stagger::http::error_chain(e))
                }
            };
            // One line: why it failed, or with -v how it went.
            if (code != 0 && a.errors_shown()) || a.verbose() {
                eprintln!("stagger: {what} ({how})");
            }
        }
        Ok(())
    }
}

/// Why a failure that could have cleared was not retried, as the one
/// stderr line says it after the stop reason; for a request that is not
/// idempotent, the flag that makes retrying it safe.
fn held_back(n: NotRetried) -> String {
    match n {
        NotRetried::NotIdempotent => ": not_idempotent, a POST or PATCH that reached the server \
             is sent once; add `--idempotency-key auto` to retry it (the server must honour \
             the key)"
            .into(),
        other => format!(": {}", other.as_str()),
    }
}

/// What was wrong with the server's certificate and which flag changes
/// it, when that is why the call failed.
#[cfg(feature = "tls")]
fn certificate_problem(a: &Args, e: &reqwest_middleware::Error) -> Option<String> {
    let cacert = a.cacert.as_ref().map(|p| p.display().to_string());
    tls::explain(e, cacert.as_deref())
}

#[cfg(not(feature = "tls"))]
fn certificate_problem(_: &Args, _: &reqwest_middleware::Error) -> Option<String> {
    None
}

/// An HTTP error: what curl's `--fail` fails on.
fn status_fails(s: reqwest::StatusCode) -> bool {
    s.is_client_error() || s.is_server_error()
}
