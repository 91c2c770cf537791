//! `stagger proxy` end to end: the real binary in front of a real nginx on
//! 127.0.0.1, its histogram at exit, on `/stats` and `/metrics` while it
//! runs, and its answers to bad flags.

use crate::common;

use crate::nginx;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use common::{code, finish, send, spawn, stagger, TempDir};

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One HTTP/1.1 request on a connection of its own: (status, body).
fn request(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: 0\r\nconnection: close\r\n{extra}\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn wait_listening(addr: SocketAddr) {
    let until = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
        assert!(
            Instant::now() < until,
            "stagger proxy never listened on {addr}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_proxy_counts_what_nginx_served_and_prints_the_histogram() {
    let _turn = crate::support::storm();
    let Some(nginx) = nginx::Nginx::start() else {
        return;
    };
    let dir = TempDir::new("proxy-nginx");
    let (listen, stats) = (free_port(), free_port());
    let (l, s) = (listen.to_string(), stats.to_string());
    let out = dir.path("report");
    let started = Instant::now();
    let child = spawn(
        &[
            "proxy",
            &nginx.url(),
            "--listen",
            &l,
            "--metrics-addr",
            &s,
            "--duration",
            "3s",
            "--fault",
            "503@1s+1s",
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ],
        &dir.0,
        false,
    );
    wait_listening(listen);
    wait_listening(stats);
    let t0 = Instant::now();
    let (mut got_503, mut retries) = (0u64, 0u64);
    for i in 0..24u64 {
        let extra = if i % 3 == 0 {
            retries += 1;
            "x-retry-attempt: 2\r\n"
        } else {
            ""
        };
        let (status, _) = request(listen, "POST", "/work", extra);
        if status == 503 {
            got_503 += 1;
        } else {
            assert_eq!(status, 200);
        }
        thread::sleep(
            (t0 + Duration::from_millis(90 * (i + 1))).saturating_duration_since(Instant::now()),
        );
    }
    let (code_stats, live) = request(stats, "GET", "/stats?format=json", "");
    assert_eq!(code_stats, 200);
    let live: serde_json::Value = serde_json::from_str(&live).unwrap();
    assert_eq!(
        live["first_attempts"].as_u64().unwrap() + live["retries"].as_u64().unwrap(),
        24
    );
    let (_, metrics) = request(stats, "GET", "/metrics", "");
    assert!(
        metrics.contains(&format!(
            "stagger_proxy_arrivals_total{{attempt=\"retry\"}} {retries}"
        )),
        "{metrics}"
    );
    let (_, text) = request(stats, "GET", "/stats", "");
    assert!(text.contains("arrivals per second"), "{text}");
    let done = finish(child, started, Duration::from_secs(20));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    let v: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["first_attempts"], 24 - retries);
    assert_eq!(v["retries"], retries);
    assert_eq!(v["answered_503"], got_503);
    assert!(got_503 >= 5, "the 503 second answered {got_503}");
    let logged = nginx.log().len() as u64;
    assert_eq!(v["forwarded"], logged, "nothing lost, nothing invented");
    assert_eq!(logged, 24 - got_503);
    let svg = std::fs::read_to_string(out.join("histogram.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("#d9534f"),
        "retries drawn"
    );
    assert!(std::fs::read_to_string(out.join("histogram.txt"))
        .unwrap()
        .contains("[503]"));
    assert!(out.join("stats.json").exists());
}

#[test]
fn sigterm_stops_the_proxy_with_its_histogram() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("proxy-sigterm");
    let listen = free_port().to_string();
    let started = Instant::now();
    let child = spawn(
        &["proxy", "http://127.0.0.1:9", "--listen", &listen],
        &dir.0,
        false,
    );
    wait_listening(listen.parse().unwrap());
    // No upstream there: a 502, counted as a first attempt.
    assert_eq!(request(listen.parse().unwrap(), "GET", "/", "").0, 502);
    send("-TERM", child.id());
    let done = finish(child, started, Duration::from_secs(10));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    assert!(
        done.stdout
            .starts_with("1 requests arrived: 1 first attempts"),
        "{}",
        done.stdout
    );
    assert!(done.stdout.contains("unreachable 1"), "{}", done.stdout);
}

#[test]
fn a_malformed_fault_names_the_flag_and_the_part() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("proxy-bad");
    for (args, says) in [
        (
            &["--fault", "stall@1+x"][..],
            "--fault: `stall@1+x`: duration:",
        ),
        (
            &["--fault", "boom@1+2"][..],
            "--fault: `boom@1+2`: kind: unknown fault `boom`",
        ),
        (
            &["--fault", "slow@1+2"][..],
            "--fault: `slow@1+2`: kind: slow needs its delay",
        ),
        (&["--fault", "503@soon"][..], "--fault: `503@soon`: start:"),
        (&["--metrics-addr", "0.0.0.0:9"][..], "--metrics-addr"),
    ] {
        let mut all = vec!["proxy", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let done = stagger(&all, &dir);
        assert_eq!(code(&done), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(says), "{args:?}: {}", done.stderr);
        assert!(!done.stderr.contains("panicked"), "{}", done.stderr);
    }
    let done = stagger(&["proxy", "https://127.0.0.1:9"], &dir);
    assert_eq!(code(&done), Some(2));
    assert!(
        done.stderr
            .contains("UPSTREAM: `https://127.0.0.1:9`: scheme"),
        "{}",
        done.stderr
    );
}

#[test]
fn overlapping_faults_and_faults_past_the_duration_are_refused_with_a_line() {
    let _turn = crate::support::quiet();
    let dir = TempDir::new("proxy-overlap");
    for (args, says) in [
        (
            &["--fault", "stall@1+2", "--fault", "503@2+2"][..],
            "--fault: `503@2s+2s` overlaps `stall@1s+2s` from 2s to 3s",
        ),
        (
            &["--fault", "503@30s+2s", "--duration", "10s"][..],
            "--fault: `503@30s+2s` starts at 30s, when --duration 10s has already stopped",
        ),
    ] {
        let mut all = vec!["proxy", "http://127.0.0.1:9", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let done = stagger(&all, &dir);
        assert_eq!(code(&done), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(says), "{args:?}: {}", done.stderr);
        assert_eq!(done.stderr.lines().count(), 1, "{}", done.stderr);
    }
    // Cut short by --duration: it runs (0.5 s; the bound leaves room for
    // a loaded machine), and says so.
    let done = common::stagger_with(
        &[
            "proxy",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--fault",
            "stall@200ms+5s",
            "--fault",
            "slow:10@0+1",
            "--duration",
            "500ms",
        ],
        &dir,
        None,
        Duration::from_secs(30),
    );
    assert_eq!(code(&done), Some(0), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("stagger proxy: --fault `stall@0.2s+5s` is cut short at 0.5s by --duration"),
        "{}",
        done.stderr
    );
}
