//! A differential test against a peer nobody here wrote: the `openai` Python
//! package's retry rules (`_should_retry` and `_calculate_retry_timeout` of
//! its client), over a table of statuses and hint headers.
//!
//! Each row says what the two should agree on: the decision and the wait
//! (a hinted wait: stagger waits the hint plus up to one backoff step, so
//! its wait lies in `[h, h + b_1)` of the package's `h`), the decision only
//! (each uses its own backoff), or neither — a difference stagger makes on
//! purpose, listed in docs/behaviour.md §3. A row of the last kind fails
//! when the package changes to agree, so the documentation is kept true.
//!
//! The package is installed into a virtualenv under the target directory
//! on first use. Without Python or network the test is skipped with the
//! reason printed, unless `CI` is set, where it fails.

#![cfg(feature = "http")]

use stagger::Backoff;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderValue, StatusCode};
use stagger::http::response_failure;
use stagger::{Call, Decision, Idempotency, Policy};

/// Asks the package, for each case, whether it retries and how long it
/// waits before the first retry.
const PEER: &str = r#"
import json, sys
try:
    import httpx2 as httpx
except ImportError:
    import httpx
from openai import OpenAI
from openai._models import FinalRequestOptions

client = OpenAI(api_key="differential", base_url="http://127.0.0.1:9/")
options = FinalRequestOptions.construct(method="get", url="/")
answers = []
for case in json.load(sys.stdin):
    response = httpx.Response(case["status"], headers=case["headers"])
    retry = client._should_retry(response)
    wait = client._calculate_retry_timeout(client.max_retries, options, response.headers)
    answers.append({"retry": retry, "wait": wait})
print(json.dumps(answers))
"#;

/// What a row expects of the two.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// The same decision, and stagger's wait in `[h − tol, h + b_1 + tol)`
    /// of the package's hinted wait `h`.
    SameWait(Duration),
    /// The same decision; each waits its own backoff (or the call stops).
    SameDecision,
    /// The same decision, but stagger waits outside the package's bounds.
    OtherWait,
    /// Opposite decisions (documented in docs/behaviour.md §3).
    Differs,
}

struct Row {
    status: u16,
    headers: Vec<(&'static str, String)>,
    expect: Expect,
}

fn row(status: u16, headers: &[(&'static str, &str)], expect: Expect) -> Row {
    Row {
        status,
        headers: headers.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        expect,
    }
}

fn table() -> Vec<Row> {
    use Expect::*;
    let exact = SameWait(Duration::from_millis(1));
    let in_30s = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
    vec![
        row(503, &[], SameDecision),
        row(502, &[], SameDecision),
        row(504, &[], SameDecision),
        row(408, &[], SameDecision),
        row(429, &[("retry-after", "2")], exact),
        row(429, &[("retry-after-ms", "1500")], exact),
        row(
            429,
            &[("retry-after-ms", "1500"), ("retry-after", "9")],
            exact,
        ),
        row(503, &[("retry-after-ms", "250.5")], exact),
        row(
            503,
            &[("retry-after-ms", "soon"), ("retry-after", "3")],
            exact,
        ),
        Row {
            status: 429,
            headers: vec![("retry-after", in_30s)],
            expect: SameWait(Duration::from_millis(1500)),
        },
        // Past the package's two-minute ceiling neither retries (stagger
        // here with `max_retry_after` set to the same two minutes).
        row(503, &[("retry-after", "200")], SameDecision),
        row(503, &[("retry-after-ms", "300000")], SameDecision),
        row(503, &[("x-should-retry", "false")], SameDecision),
        row(
            503,
            &[("x-should-retry", "false"), ("retry-after", "1")],
            SameDecision,
        ),
        row(409, &[("x-should-retry", "true")], SameDecision),
        row(400, &[("x-should-retry", "true")], SameDecision),
        row(400, &[], SameDecision),
        row(404, &[], SameDecision),
        row(503, &[("retry-after", "0")], SameDecision),
        // Where stagger differs on purpose.
        row(409, &[], Differs),
        row(500, &[], Differs),
        row(503, &[("x-envoy-overloaded", "true")], Differs),
        row(
            503,
            &[("x-envoy-overloaded", "true"), ("x-should-retry", "true")],
            Differs,
        ),
        row(400, &[("x-should-retry", "TRUE")], Differs),
        row(429, &[("retry-after", "1.5")], OtherWait),
        row(503, &[("x-ms-retry-after-ms", "5000")], OtherWait),
    ]
}

/// The first backoff step of the policy below: a hinted wait is `h + U(0, B1)`.
const B1: Duration = Duration::from_millis(100);

/// stagger's decision for a GET answered with `row`: retry after how long,
/// or no retry.
fn stagger(row: &Row, seed: u64) -> Option<Duration> {
    let policy = Policy::builder()
        .backoff(Backoff {
            base: B1,
            ..Backoff::new()
        })
        .max_retry_after(Duration::from_secs(120))
        .build()
        .unwrap();
    let mut headers = HeaderMap::new();
    for (k, v) in &row.headers {
        headers.append(*k, HeaderValue::from_str(v).unwrap());
    }
    let status = StatusCode::from_u16(row.status).unwrap();
    let failure = response_failure(status, &headers, false, SystemTime::now())?;
    let now = Instant::now();
    let mut call = Call::seeded(seed).idempotency(Idempotency::Idempotent);
    policy.start_attempt(&mut call, now).unwrap();
    match policy.decide(&mut call, failure, now) {
        Decision::Retry { after } => Some(after),
        Decision::Stop(_) => None,
    }
}

/// The virtualenv with the package, made on first use.
fn peer_python() -> Result<PathBuf, String> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .ok_or("no target directory")?
        .to_path_buf();
    let venv = target.join("openai-venv");
    let python = venv.join("bin").join("python");
    let imports = |py: &Path| {
        Command::new(py)
            .args(["-c", "import openai"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if imports(&python) {
        return Ok(python);
    }
    let run = |cmd: &mut Command, what: &str| match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{what} could not start: {e}")),
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    )?;
    run(
        Command::new(venv.join("bin").join("pip")).args(["install", "-q", "openai"]),
        "pip install openai",
    )?;
    if imports(&python) {
        Ok(python)
    } else {
        Err("openai installed but does not import".into())
    }
}

/// The package's answers for every row: (retries, wait).
fn peer(python: &Path, rows: &[Row]) -> Vec<(bool, Duration)> {
    let cases: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| serde_json::json!({"status": r.status, "headers": r.headers}))
        .collect();
    let mut child = Command::new(python)
        .args(["-c", PEER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the peer");
    let input = serde_json::to_vec(&cases).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "peer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    answers
        .iter()
        .map(|a| {
            let wait = a["wait"].as_f64().unwrap().max(0.0);
            (a["retry"].as_bool().unwrap(), Duration::from_secs_f64(wait))
        })
        .collect()
}

#[test]
fn stagger_and_the_openai_package_agree_where_documented() {
    let python = match peer_python() {
        Ok(p) => p,
        Err(why) if std::env::var_os("CI").is_some() => panic!("the openai package: {why}"),
        Err(why) => {
            eprintln!("skipped: the openai package is not available ({why})");
            return;
        }
    };
    let rows = table();
    let answers = peer(&python, &rows);
    assert_eq!(answers.len(), rows.len());
    for (i, (row, &(peer_retries, peer_wait))) in rows.iter().zip(&answers).enumerate() {
        let ours = stagger(row, i as u64);
        let what = format!(
            "{} {:?}: openai {} after {peer_wait:?}, stagger {ours:?}",
            row.status,
            row.headers,
            if peer_retries { "retries" } else { "stops" },
        );
        match row.expect {
            Expect::Differs => assert_ne!(ours.is_some(), peer_retries, "{what}"),
            _ => assert_eq!(ours.is_some(), peer_retries, "{what}"),
        }
        let Some(wait) = ours else { continue };
        match row.expect {
            Expect::SameWait(tol) => {
                let low = peer_wait.saturating_sub(tol);
                assert!(wait >= low && wait < peer_wait + B1 + tol, "{what}");
            }
            Expect::OtherWait => {
                assert!(wait + B1 < peer_wait || wait > peer_wait + B1, "{what}");
            }
            Expect::SameDecision | Expect::Differs => {}
        }
    }
}
