//! The fleet alert, live: a real Prometheus server (Debian's `prometheus`
//! package, which `.ci/run` installs) scrapes two short game-days through
//! `stagger gameday --metrics-addr`, evaluates the shipped recording and
//! alerting rules every second, and its HTTP API must show
//! `RetryAmplificationHigh` firing for a retry storm without a budget and
//! silent for the same storm with one.
//!
//! The one change to the shipped rules: the alert's `for: 1m` becomes
//! `for: 10s` in a test copy, so the test takes half a minute, not two.
//! Everything listens on 127.0.0.1 and every wait is bounded.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, BIN};
use serde_json::Value;

const SHIPPED_FOR: &str = "expr: stagger:retry_ratio:rate1m > 0.2\n        for: 1m";
const TEST_FOR: &str = "expr: stagger:retry_ratio:rate1m > 0.2\n        for: 10s";

/// The `prometheus` binary on PATH, if installed.
fn prometheus_bin() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("prometheus"))
            .find(|p| p.is_file())
    })
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed (and reaped) when the test ends, pass or fail.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo_file(path: &str) -> String {
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET path` on 127.0.0.1:port; the body of a 200 answer.
fn get(port: u16, path: &str) -> Option<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let ok = head.starts_with("HTTP/1.") && head.split(' ').nth(1) == Some("200");
    ok.then(|| body.to_string())
}

/// An instant query through Prometheus's HTTP API: each series' labels and value.
fn query(port: u16, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let Some(body) = get(port, &format!("/api/v1/query?query={}", encode(promql))) else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(v["status"], "success", "{promql}: {body}");
    v["data"]["result"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| {
                    let labels = r["metric"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                                .collect()
                        })
                        .unwrap_or_default();
                    let value = r["value"][1]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(f64::NAN);
                    (labels, value)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A game-day of the retry storm with its metrics on `port`, output in `dir`.
fn gameday(dir: &Path, name: &str, strategy: &str, port: u16) -> Killed {
    let out = File::create(dir.join(format!("{name}.json"))).expect("create stdout file");
    let err = File::create(dir.join(format!("{name}.err"))).expect("create stderr file");
    let metrics = format!("127.0.0.1:{port}");
    // A dead dependency (503 to everything from the first second), 100
    // calls/s from 2 simulated processes. Immediate retries, 5 attempts:
    // 4 retries per call. With a ratio budget (10 % plus a floor of 10
    // retries per 10 s per process) the ratio stays near 12 %.
    let child = Command::new(BIN)
        .args([
            "gameday",
            "--fault",
            "dead",
            "--strategy",
            strategy,
            "--duration",
            "25s",
            "--rate",
            "100",
            "--clients",
            "20",
            "--pods",
            "2",
            "--format",
            "json",
            "--metrics-addr",
            &metrics,
        ])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start stagger gameday");
    Killed(child)
}

#[test]
fn retry_amplification_high_fires_for_a_storm_and_stays_silent_with_a_budget_or_an_open_breaker() {
    let _turn = crate::support::storm();
    let Some(prometheus) = prometheus_bin() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "prometheus is not installed, and CI must run this test (.ci/run installs it)"
        );
        eprintln!(
            "SKIPPED retry_amplification_high_fires_for_a_storm_and_stays_silent_with_a_budget_or_an_open_breaker: \
             no `prometheus` binary on PATH (apt-get install prometheus)"
        );
        return;
    };
    let dir = TempDir::new("prometheus-alert");

    // The shipped rules, with the alert's `for:` shortened.
    let alerts = repo_file("deploy/prometheus/stagger.alerts.yml");
    assert!(alerts.contains(SHIPPED_FOR), "the shipped alert waits 1m");
    fs::write(
        dir.path("stagger.alerts.yml"),
        alerts.replace(SHIPPED_FOR, TEST_FOR),
    )
    .unwrap();
    fs::write(
        dir.path("stagger.rules.yml"),
        repo_file("deploy/prometheus/stagger.rules.yml"),
    )
    .unwrap();

    let (storm_port, budget_port, breaker_port, prom_port) =
        (free_port(), free_port(), free_port(), free_port());
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {rules}\n  - {alerts}\n\
         scrape_configs:\n\
         \x20 - job_name: storm\n    static_configs:\n      - targets: ['127.0.0.1:{storm_port}']\n\
         \x20 - job_name: budgeted\n    static_configs:\n      - targets: ['127.0.0.1:{budget_port}']\n\
         \x20 - job_name: breaker\n    static_configs:\n      - targets: ['127.0.0.1:{breaker_port}']\n",
        rules = dir.path("stagger.rules.yml").display(),
        alerts = dir.path("stagger.alerts.yml").display(),
    );
    fs::write(dir.path("prometheus.yml"), config).unwrap();
    let log = File::create(dir.path("prometheus.log")).unwrap();
    let _prometheus = Killed(
        Command::new(&prometheus)
            .arg(format!(
                "--config.file={}",
                dir.path("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    let until = Instant::now() + Duration::from_secs(30);
    while get(prom_port, "/-/ready").is_none() {
        assert!(
            Instant::now() < until,
            "prometheus not ready after 30s:\n{}",
            dir.read("prometheus.log")
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let mut storm = gameday(&dir.0, "storm", "immediate", storm_port);
    let mut budgeted = gameday(&dir.0, "budgeted", "immediate+budget", budget_port);
    // The breaker protects the dead dependency: once it opens, calls fail
    // fast and nothing is retried, so the amplification alert must stay
    // silent exactly while the breaker does its job.
    let mut breaker = gameday(&dir.0, "breaker", "immediate+breaker", breaker_port);

    // Watch once a second until both game-days have ended (at most 90 s).
    let mut fired = BTreeSet::new();
    let mut ratios: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut refusals = 0.0f64;
    let mut breaker_refused = 0.0f64;
    let until = Instant::now() + Duration::from_secs(90);
    let mut exits = (None, None, None);
    while exits.0.is_none() || exits.1.is_none() || exits.2.is_none() {
        assert!(Instant::now() < until, "the game-days ran past 90s");
        std::thread::sleep(Duration::from_secs(1));
        for (labels, _) in query(
            prom_port,
            r#"ALERTS{alertname="RetryAmplificationHigh",alertstate="firing"}"#,
        ) {
            fired.insert(labels.get("job").cloned().unwrap_or_default());
        }
        for (labels, v) in query(
            prom_port,
            r#"stagger:retry_ratio:rate1m{dependency="gameday-server"}"#,
        ) {
            ratios
                .entry(labels.get("job").cloned().unwrap_or_default())
                .or_default()
                .push(v);
        }
        for (_, v) in query(
            prom_port,
            r#"stagger:budget_refusals:rate1m{job="budgeted"}"#,
        ) {
            refusals = refusals.max(v);
        }
        for (_, v) in query(
            prom_port,
            r#"stagger:breaker_refused_calls:rate1m{job="breaker"}"#,
        ) {
            breaker_refused = breaker_refused.max(v);
        }
        exits.0 = exits.0.or_else(|| storm.0.try_wait().ok().flatten());
        exits.1 = exits.1.or_else(|| budgeted.0.try_wait().ok().flatten());
        exits.2 = exits.2.or_else(|| breaker.0.try_wait().ok().flatten());
    }
    let seen = format!(
        "fired: {fired:?}\nretry ratios seen per job: {ratios:?}\nstorm stderr: {}\nbudgeted stderr: {}\nbreaker stderr: {}",
        dir.read("storm.err"),
        dir.read("budgeted.err"),
        dir.read("breaker.err")
    );
    eprintln!("{seen}");
    assert!(
        [exits.0, exits.1, exits.2]
            .iter()
            .all(|e| e.is_some_and(|s| s.success())),
        "a game-day failed: {exits:?}\n{seen}"
    );
    // Both jobs were scraped and their ratio computed for most of the run,
    // so the budgeted job's silence is a verdict, not missing data.
    for job in ["storm", "budgeted", "breaker"] {
        let n = ratios.get(job).map_or(0, Vec::len);
        assert!(n >= 10, "{job}: only {n} readings of the ratio\n{seen}");
    }
    let max = |job: &str| ratios[job].iter().copied().fold(0.0, f64::max);
    assert!(max("storm") > 2.0, "the storm retries 4× per call\n{seen}");
    assert!(
        fired.contains("storm"),
        "RetryAmplificationHigh never fired for the storm\n{seen}"
    );
    assert!(
        !fired.contains("budgeted"),
        "RetryAmplificationHigh fired with a budget\n{seen}"
    );
    assert!(max("budgeted") < 0.2, "the budget holds the ratio\n{seen}");
    assert!(refusals > 0.0, "the budget refused retries\n{seen}");
    assert!(
        !fired.contains("breaker"),
        "RetryAmplificationHigh fired while the breaker protected the dependency\n{seen}"
    );
    assert!(
        max("breaker") < 0.2,
        "an open breaker retries nothing\n{seen}"
    );
    assert!(
        breaker_refused > 0.0,
        "the breaker refused calls (it was open)\n{seen}"
    );
}

#[test]
fn metrics_addr_must_be_loopback_and_free() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("metrics-addr");
    let done = common::stagger(
        &[
            "gameday",
            "--duration",
            "2s",
            "--metrics-addr",
            "0.0.0.0:9464",
        ],
        &dir,
    );
    assert_eq!(common::code(&done), Some(2), "stderr: {}", done.stderr);
    assert!(done.stderr.contains("--metrics-addr"), "{}", done.stderr);
    assert!(done.stderr.contains("loopback"), "{}", done.stderr);

    // A port already taken: the game-day cannot run (exit 1), and says why
    // before sending a single request.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let done = common::stagger(
        &[
            "gameday",
            "--fault",
            "none",
            "--duration",
            "2s",
            "--metrics-addr",
            &addr,
        ],
        &dir,
    );
    assert_eq!(common::code(&done), Some(1), "stderr: {}", done.stderr);
    assert!(
        done.stderr.contains("--metrics-addr: cannot listen on"),
        "{}",
        done.stderr
    );
    assert!(!done.stderr.contains("of traffic"), "{}", done.stderr);
}
