//! The idempotency game-day on real sockets: a retried write takes effect
//! once when the server honours `Idempotency-Key`, and twice or more when
//! it does not, in the same run.
//!
//! Two copies of the `idempotent_orders` example (from the
//! `stagger-idempotency` crate) run side by side, one with the layer and its
//! memory store, one with `--no-idempotency`. Each sits behind its own
//! `stagger proxy`, whose `reset` fault loses answers after the upstream
//! has served them. The clients are `stagger http` processes, each a keyed
//! POST whose attempt timeout is shorter than the handler's `--work-ms`, so
//! every first attempt gives up after its order was made and the call can
//! only succeed through a retry. The orders the handler really executed are
//! read from each service's `GET /orders`.
//!
//! Bounds: ten calls per service, seven attempts each, a deadline per call;
//! every process is a [`Proc`] that is killed when dropped, so a failing
//! assertion leaves nothing running.
//!
//! The example is a cargo example of another crate, so this test finds it
//! beside its own binary (`target/<profile>/examples`), where
//! `cargo test --workspace` builds it; when it is missing, the test builds
//! it first.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::BIN;

/// Calls per service.
const CALLS: usize = 10;
/// How long the handler works after recording the order, ms.
const WORK_MS: u64 = 1000;
/// Each attempt's timeout: shorter than the work, so the first attempt's
/// answer is always lost.
const ATTEMPT_TIMEOUT: &str = "300ms";
/// The gap between two calls' starts.
const GAP: Duration = Duration::from_millis(200);
/// The longest any process of this test may run.
const LIMIT: Duration = Duration::from_secs(60);

/// A child process, killed and reaped when dropped.
struct Proc {
    name: String,
    child: Option<Child>,
}

impl Proc {
    fn new(name: impl Into<String>, child: Child) -> Proc {
        Proc {
            name: name.into(),
            child: Some(child),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for the process to end by itself (at most `limit`), then
    /// returns its status and what it wrote on stdout.
    fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("a running child");
        let until = Instant::now() + limit;
        let status = loop {
            if let Some(s) = child.try_wait().expect("poll a child") {
                break s;
            }
            if Instant::now() >= until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} ran longer than {limit:?}", self.name);
            }
            thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut pipe) = child.stdout.take() {
            let _ = pipe.read_to_string(&mut out);
        }
        (status, out)
    }

    /// Asks the process to stop (SIGINT) and waits for it.
    fn interrupt(self, limit: Duration) -> (ExitStatus, String) {
        let ok = Command::new("kill")
            .args(["-INT", &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot interrupt {}", self.name);
        self.wait(limit)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The example's binary, built if it is not there yet.
fn example() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a target directory")
        .to_path_buf();
    let bin = profile_dir.join("examples").join("idempotent_orders");
    if !bin.exists() {
        let mut build = Command::new(env!("CARGO"));
        build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "-q", "-p", "stagger-idempotency"])
            .args(["--example", "idempotent_orders", "--all-features"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let ok = build.status().is_ok_and(|s| s.success());
        assert!(
            ok && bin.exists(),
            "cannot build the idempotent_orders example"
        );
    }
    bin
}

/// Starts the example on a free port; returns it and its address.
fn start_service(idempotent: bool) -> (Proc, SocketAddr) {
    let mut cmd = Command::new(example());
    cmd.args(["--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--work-ms", &WORK_MS.to_string()]);
    if !idempotent {
        cmd.arg("--no-idempotency");
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start idempotent_orders");
    let stdout = child.stdout.take().expect("its stdout");
    let proc = Proc::new("idempotent_orders", child);
    // "idempotent_orders listening on http://ADDR (…)", read on a thread
    // of its own so a silent service cannot hang the test.
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("idempotent_orders never said where it listens");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (proc, addr)
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Starts `stagger proxy` in front of `upstream`, losing answers by
/// resetting connections for its first second.
fn start_proxy(upstream: SocketAddr) -> (Proc, SocketAddr) {
    let listen = free_port();
    let child = Command::new(BIN)
        .args(["proxy", &format!("http://{upstream}")])
        .args(["--listen", &listen.to_string()])
        .args(["--fault", "reset@0s+1s", "--duration", "60s"])
        .args(["--format", "json", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start stagger proxy");
    let proc = Proc::new("stagger proxy", child);
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&listen, Duration::from_millis(100)).is_err() {
        assert!(Instant::now() < until, "stagger proxy never listened");
        thread::sleep(Duration::from_millis(20));
    }
    (proc, listen)
}

/// One keyed order through `proxy`, by `stagger http`.
fn order(proxy: SocketAddr, key: &str) -> Proc {
    let child = Command::new(BIN)
        .args(["http", &format!("http://{proxy}/api"), "-X", "POST"])
        .args(["--data-binary", "{\"sku\":1}", "--idempotency-key", key])
        .args(["--attempts", "7", "--base", "100ms", "--cap", "1s"])
        .args(["--attempt-timeout", ATTEMPT_TIMEOUT, "-m", "20s"])
        .args(["--format", "json", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start stagger http");
    Proc::new(format!("stagger http ({key})"), child)
}

/// What the handler executed: `GET /orders` from the service itself.
fn executed(service: SocketAddr) -> (u64, BTreeMap<String, u64>) {
    let mut s = TcpStream::connect_timeout(&service, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /orders HTTP/1.1\r\nhost: {service}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read /orders");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let by_key = v["by_key"]
        .as_object()
        .unwrap_or_else(|| panic!("no by_key in {v}"))
        .iter()
        .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
        .collect();
    (v["count"].as_u64().unwrap_or(0), by_key)
}

/// One call as its client saw it.
struct Seen {
    key: String,
    succeeded: bool,
    replayed: bool,
    /// An attempt was answered 409: the key was still in flight.
    in_flight: bool,
    /// The stop reason and each attempt's status or error, for the log.
    how: String,
}

fn seen(key: String, (status, out): (ExitStatus, String)) -> Seen {
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {key}: {out:?}"));
    Seen {
        key,
        succeeded: status.success(),
        replayed: v["replayed"] == true,
        in_flight: v["attempts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["status"] == 409)),
        how: format!(
            "{}: {}",
            v["stop_reason"],
            v["attempts"]
                .as_array()
                .map(|a| a
                    .iter()
                    .map(|x| x["status"].as_u64().map_or_else(
                        || x["error"].as_str().unwrap_or("?").to_string(),
                        |c| c.to_string()
                    ))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        ),
    }
}

#[test]
fn a_retried_write_runs_once_with_the_layer_and_twice_without_it_in_the_same_run() {
    let _turn = crate::support::storm();
    let (with_service, with_addr) = start_service(true);
    let (without_service, without_addr) = start_service(false);
    let (with_proxy, with_front) = start_proxy(with_addr);
    let (without_proxy, without_front) = start_proxy(without_addr);

    let mut calls = Vec::new();
    for i in 0..CALLS {
        let (a, b) = (format!("with-{i}"), format!("without-{i}"));
        calls.push((true, a.clone(), order(with_front, &a)));
        calls.push((false, b.clone(), order(without_front, &b)));
        thread::sleep(GAP);
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for (layer, key, proc) in calls {
        let s = seen(key, proc.wait(LIMIT));
        if layer {
            with.push(s);
        } else {
            without.push(s);
        }
    }
    // Every handler that started has answered the proxy (the work takes
    // WORK_MS), so the proxy has counted every 2xx the services sent.
    thread::sleep(Duration::from_millis(WORK_MS + 200));
    let (with_count, with_runs) = executed(with_addr);
    let (without_count, without_runs) = executed(without_addr);
    let (_, with_report) = with_proxy.interrupt(Duration::from_secs(10));
    let (_, without_report) = without_proxy.interrupt(Duration::from_secs(10));
    drop((with_service, without_service));
    let report = |out: &str| -> serde_json::Value {
        serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out:?}"))
    };
    let (with_report, without_report) = (report(&with_report), report(&without_report));

    // With the layer: no key ran twice, and every call its client saw
    // succeed ran exactly once.
    assert_eq!(with_count, with_runs.values().sum::<u64>());
    for (key, n) in &with_runs {
        assert!(
            *n <= 1,
            "{key} executed {n} times with the layer: {with_runs:?}"
        );
    }
    let ok: Vec<&Seen> = with.iter().filter(|s| s.succeeded).collect();
    for s in &ok {
        assert_eq!(
            with_runs.get(&s.key),
            Some(&1),
            "{} succeeded but ran {:?} times: {with_runs:?}",
            s.key,
            with_runs.get(&s.key)
        );
    }
    // Not vacuous: the calls got through by retrying, on replays.
    assert!(ok.len() >= CALLS / 2, "{} of {CALLS} succeeded", ok.len());
    assert!(with.iter().any(|s| s.replayed), "no client saw a replay");
    assert!(
        with.iter().any(|s| s.in_flight),
        "no retry met its key in flight"
    );
    assert_eq!(with_report["duplicates"], 0, "{with_report}");
    assert!(with_report["replayed"].as_u64() > Some(0), "{with_report}");

    // Without it, in the same run: the retries ran the same orders again.
    assert_eq!(without_count, without_runs.values().sum::<u64>());
    let twice: u64 = without_runs.values().map(|n| n.saturating_sub(1)).sum();
    assert!(
        twice > 0,
        "no duplicate without the layer: {without_runs:?}"
    );
    assert!(
        without_report["duplicates"].as_u64() > Some(0),
        "{without_report}"
    );
    assert_eq!(without_report["replayed"], 0, "{without_report}");
    assert!(without.iter().all(|s| !s.replayed));
    for s in with.iter().filter(|s| !s.succeeded) {
        eprintln!("with the layer, {} failed: {}", s.key, s.how);
    }
    eprintln!(
        "with the layer: {} of {CALLS} calls succeeded, executed {with_count} orders \
         for {} keys, proxy replayed {}; without: {} succeeded, executed {without_count} \
         orders for {} keys ({twice} duplicates), proxy saw {} executed twice",
        ok.len(),
        with_runs.len(),
        with_report["replayed"],
        without.iter().filter(|s| s.succeeded).count(),
        without_runs.len(),
        without_report["duplicates"],
    );
}
