//! A differential test against the implementation the adaptive limiter
//! follows: botocore's own `ClientRateLimiter`, `CubicCalculator`,
//! `RateClocker`, `TokenBucket` and `ThrottlingErrorDetector`, assembled as
//! botocore's `register_retry_handler` assembles them, on a clock the test
//! sets.
//!
//! Seeded runs of calls against a server that throttles above 8 calls a
//! second: for each call the limiter paces the send (first attempts
//! included), the server answers with an AWS error code or success, and
//! the limiter is told. stagger runs the sequence first; botocore is then
//! driven through the same instants, computing its own waits, and after
//! every call the fill rate, the capacity, the tokens, the measured send
//! rate agree within 1e-9, and the wait within 1e-8 s (stagger sleeps
//! whole nanoseconds).
//!
//! botocore comes from the virtualenv `.ci/run` builds
//! (`target/grpc-venv/bin/python`), or failing that from `python3` on the
//! path. Without it the test is skipped with the reason printed, unless
//! `CI` is set, where it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stagger::guardrails::{is_throttling_error_code, AdaptiveLimiter};
use stagger::random::{FastRng, RandomSource};

/// Drives botocore's classes through the instants stagger used; one JSON
/// line per call.
const PEER: &str = r#"
import json, math, sys
from botocore.retries import adaptive, bucket, standard, throttling

class SetClock(bucket.Clock):
    """Time is what the test says; a wait moves it on."""
    def __init__(self):
        self.t = 0.0
    def current_time(self):
        return self.t
    def sleep(self, amount):
        self.t += amount

clock = SetClock()
waited = [0.0]

class ClockCondition:
    """The bucket's condition variable, waiting on the set clock."""
    def __init__(self, inner):
        self.inner = inner
    def __enter__(self):
        return self.inner.__enter__()
    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)
    def wait(self, timeout):
        # At least one step of the float, or a wait shorter than the
        # clock's resolution would never end.
        start = clock.t
        clock.t = max(start + timeout, math.nextafter(start, math.inf))
        waited[0] += clock.t - start
    def notify(self):
        self.inner.notify()

cubic = throttling.CubicCalculator(starting_max_rate=0, start_time=clock.current_time())
token_bucket = bucket.TokenBucket(max_rate=1, clock=clock)
token_bucket._new_fill_rate_condition = ClockCondition(token_bucket._new_fill_rate_condition)
clocker = adaptive.RateClocker(clock)
detector = standard.ThrottlingErrorDetector(retry_event_adapter=standard.RetryEventAdapter())
limiter = adaptive.ClientRateLimiter(
    rate_adjustor=cubic,
    rate_clocker=clocker,
    token_bucket=token_bucket,
    throttling_detector=detector,
    clock=clock,
)
out = []
for call in json.load(sys.stdin):
    clock.t = call["send_ns"] / 1e9
    waited[0] = 0.0
    limiter.on_sending_request(request=None)
    clock.t = call["response_ns"] / 1e9
    parsed = {"Error": {"Code": call["code"]}} if call["code"] else {}
    limiter.on_receiving_response(
        attempts=1,
        operation=None,
        response=(None, parsed),
        caught_exception=None,
        request_dict={"context": {}},
    )
    out.append({
        "wait": waited[0],
        "enabled": limiter._enabled,
        "fill": token_bucket.max_rate,
        "capacity": token_bucket.max_capacity,
        "tokens": token_bucket.available_capacity,
        "measured": clocker.measured_rate,
    })
print(json.dumps(out))
"#;

const TOLERANCE: f64 = 1e-9;

/// One call as stagger ran it, and what its limiter held afterwards.
#[derive(Debug)]
struct Step {
    send_ns: u64,
    response_ns: u64,
    code: Option<&'static str>,
    wait: f64,
    enabled: bool,
    fill: f64,
    capacity: f64,
    tokens: f64,
    measured: f64,
}

fn between(rng: &mut FastRng, lo: u64, hi: u64) -> u64 {
    lo + rng.next_u64() % (hi - lo)
}

/// `calls` calls arriving every 0–250 ms, taking 5–80 ms, against a server
/// that throttles a call when 8 or more were sent in the second before
/// it, answering with one of the SDKs' throttling codes; one call in
/// twenty fails otherwise.
fn run_stagger(seed: u64, calls: usize) -> Vec<Step> {
    const THROTTLES: [&str; 4] = [
        "ThrottlingException",
        "SlowDown",
        "RequestLimitExceeded",
        "TooManyRequestsException",
    ];
    let mut rng = FastRng::seeded(seed);
    let t0 = Instant::now();
    let limiter = AdaptiveLimiter::new(t0);
    let mut sent: Vec<u64> = Vec::new();
    let mut arrival = 0u64;
    let mut steps = Vec::with_capacity(calls);
    for _ in 0..calls {
        arrival += between(&mut rng, 0, 250_000) * 1_000;
        let mut at = arrival;
        while let Err(wait) = limiter.acquire(t0 + Duration::from_nanos(at)) {
            at += wait.as_nanos() as u64;
        }
        let wait = Duration::from_nanos(at - arrival);
        let recent = sent.iter().filter(|&&s| s + 1_000_000_000 > at).count();
        sent.push(at);
        let code = if recent >= 8 {
            Some(THROTTLES[(rng.next_u64() % 4) as usize])
        } else if rng.next_u64() % 20 == 0 {
            Some("InternalError")
        } else {
            None
        };
        let response_ns = at + between(&mut rng, 5_000, 80_000) * 1_000;
        limiter.record(
            code.is_some_and(is_throttling_error_code),
            t0 + Duration::from_nanos(response_ns),
        );
        let s = limiter.snapshot();
        steps.push(Step {
            send_ns: arrival,
            response_ns,
            code,
            wait: wait.as_secs_f64(),
            enabled: s.enabled,
            fill: s.fill_rate,
            capacity: s.capacity,
            tokens: s.tokens,
            measured: s.measured_rate,
        });
        // The next call arrives after this one answered (one caller).
        arrival = response_ns;
    }
    steps
}

fn botocore_python() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/grpc-venv/bin/python");
    let imports = |py: &Path| {
        Command::new(py)
            .args(["-c", "import botocore.retries.adaptive"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if imports(&venv) {
        return Ok(venv);
    }
    let system = PathBuf::from("python3");
    if imports(&system) {
        return Ok(system);
    }
    Err("botocore imports neither in target/grpc-venv nor in python3 (.ci/run installs it)".into())
}

fn run_botocore(python: &Path, steps: &[Step]) -> Vec<serde_json::Value> {
    let calls: Vec<_> = steps
        .iter()
        .map(|s| {
            serde_json::json!({
                "send_ns": s.send_ns,
                "response_ns": s.response_ns,
                "code": s.code,
            })
        })
        .collect();
    let mut child = Command::new(python)
        .args(["-c", PEER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(serde_json::to_string(&calls).unwrap().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "botocore driver failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON list")
}

#[test]
fn the_adaptive_limiter_agrees_with_botocore_after_every_call() {
    let python = match botocore_python() {
        Ok(p) => p,
        Err(why) if std::env::var_os("CI").is_some() => panic!("the botocore peer: {why}"),
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let mut throttles = 0;
    let mut waits = 0;
    for seed in [1u64, 2, 3] {
        let ours = run_stagger(seed, 700);
        let theirs = run_botocore(&python, &ours);
        assert_eq!(theirs.len(), ours.len());
        for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
            let num = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
            let close = |what: &str, a: f64, b: f64| {
                assert!(
                    (a - b).abs() <= TOLERANCE,
                    "seed {seed}, call {i}: {what} stagger {a} botocore {b} ({o:?})"
                );
            };
            assert_eq!(
                o.enabled,
                t["enabled"].as_bool().unwrap(),
                "seed {seed}, call {i}"
            );
            // A wait is slept in whole nanoseconds (rounded up, once or
            // twice per send): it agrees to 1e-8 s.
            assert!(
                (o.wait - num("wait")).abs() <= 1e-8,
                "seed {seed}, call {i}: wait stagger {} botocore {} ({o:?})",
                o.wait,
                num("wait")
            );
            close("fill rate", o.fill, num("fill"));
            close("capacity", o.capacity, num("capacity"));
            close("tokens", o.tokens, num("tokens"));
            close("measured rate", o.measured, num("measured"));
            throttles += usize::from(o.code.is_some_and(is_throttling_error_code));
            waits += usize::from(o.wait > 0.0);
        }
    }
    // The runs exercise what they claim to: throttles, and paced sends.
    assert!(throttles > 50, "{throttles} throttles");
    assert!(waits > 100, "{waits} waits");
}
