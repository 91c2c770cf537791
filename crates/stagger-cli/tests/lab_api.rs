//! `stagger lab`'s API over real sockets: the simulation answer is byte for
//! byte what `stagger simulate --format json` prints, bad parameters are a
//! 400 naming them, foreign `Host`s are refused, and the decide endpoint
//! answers with the engine's decision.

use crate::lab_util;

use std::process::Command;

use lab_util::{get, Lab, BIN};

fn cli(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run stagger");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn simulate_answers_exactly_what_the_command_prints() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    for (query, flags) in [
        (
            "model=failover&strategy=none,full&burst=400&runs=20&seed=1",
            vec![
                "--model",
                "failover",
                "--strategy",
                "none,full",
                "--burst",
                "400",
                "--runs",
                "20",
                "--seed",
                "1",
            ],
        ),
        (
            "model=metastable&strategy=full&server_skips_expired=1&runs=3&duration=40s",
            vec![
                "--model",
                "metastable",
                "--strategy",
                "full",
                "--server-skips-expired",
                "--runs",
                "3",
                "--duration",
                "40s",
            ],
        ),
        (
            "drill=1&clients=10&runs=4&strategy=full%2Bbudget%2Bbreaker",
            vec![
                "--drill",
                "--clients",
                "10",
                "--runs",
                "4",
                "--strategy",
                "full+budget+breaker",
            ],
        ),
        (
            "model=layers&layers=2&runs=3",
            vec!["--model", "layers", "--layers", "2", "--runs", "3"],
        ),
    ] {
        let (status, body) = lab.get(&format!("/api/simulate?{query}"));
        assert_eq!(status, 200, "{query}: {body}");
        let mut args = vec!["simulate", "--format", "json"];
        args.extend(flags);
        assert_eq!(body, cli(&args), "{query}");
    }
}

#[test]
fn hedging_answers_exactly_what_the_command_prints() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    for (query, flags) in [
        (
            "model=hedging&requests=20000&seed=3",
            vec!["--requests", "20000", "--seed", "3"],
        ),
        (
            "model=hedging&strategy=none,15ms%2Bbudget,p90&capacity=8&utilisation=0.85&cancel=running&requests=5000&stall_prob=0.05&stall=100ms&hedge_attempts=3",
            vec![
                "--strategy",
                "none,15ms+budget,p90",
                "--capacity",
                "8",
                "--utilisation",
                "0.85",
                "--cancel",
                "running",
                "--requests",
                "5000",
                "--stall-prob",
                "0.05",
                "--stall",
                "100ms",
                "--hedge-attempts",
                "3",
            ],
        ),
        (
            "model=hedging&capacity=inf&requests=3000&latency_median=5ms&latency_sigma=0.5",
            vec![
                "--capacity",
                "inf",
                "--requests",
                "3000",
                "--latency-median",
                "5ms",
                "--latency-sigma",
                "0.5",
            ],
        ),
    ] {
        let (status, body) = lab.get(&format!("/api/simulate?{query}"));
        assert_eq!(status, 200, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect(query);
        assert_eq!(v["model"], "hedging", "{query}");
        let mut args = vec!["simulate", "--model", "hedging", "--format", "json"];
        args.extend(flags);
        assert_eq!(body, cli(&args), "{query}");
    }
    // The command line's default of 200,000 requests is more than one
    // request of the page may cost; the refusal names the parameter.
    let (status, body) = lab.get("/api/simulate?model=hedging");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("requests"), "{body}");
}

#[test]
fn schedule_answers_exactly_what_the_command_prints() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    let (status, body) = lab.get("/api/schedule?jitter=decorrelated&attempts=5&samples=50&seed=3");
    assert_eq!(status, 200, "{body}");
    let cli = cli(&[
        "schedule",
        "--format",
        "json",
        "--jitter",
        "decorrelated",
        "--attempts",
        "5",
        "--samples",
        "50",
        "--seed",
        "3",
    ]);
    assert_eq!(body, cli);
}

#[test]
fn bad_parameters_are_a_400_naming_them() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    for (query, param) in [
        ("/api/simulate?burst=lots", "burst"),
        ("/api/simulate?runs=5000", "runs"),
        ("/api/simulate?model=sideways", "model"),
        ("/api/simulate?out=%2Ftmp%2Fx", "out"),
        ("/api/simulate?colour=red", "colour"),
        (
            "/api/simulate?outage_start=9s&outage_end=3s&runs=1",
            "outage_end",
        ),
        ("/api/schedule?samples=99999999", "samples"),
        ("/api/decide?status=503&attempt=0", "attempt"),
        ("/api/decide?grpc=SIDEWAYS", "grpc"),
    ] {
        let (status, body) = lab.get(query);
        assert_eq!(status, 400, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(v["parameter"], param, "{query}: {body}");
        assert!(!v["error"].as_str().unwrap().is_empty());
    }
    // The server is still there after all of them.
    assert_eq!(lab.get("/api/decide?status=503").0, 200);
}

#[test]
fn decide_without_a_failure_is_a_400_naming_the_parameter() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    for query in ["/api/decide", "/api/decide?method=GET&attempt=1"] {
        let (status, body) = lab.get(query);
        assert_eq!(status, 400, "{query}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(v["parameter"], "status", "{query}: {body}");
        let error = v["error"].as_str().unwrap();
        assert!(error.contains("io") && error.contains("grpc"), "{error}");
    }
}

#[test]
fn a_foreign_host_is_refused() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    let port = lab.addr.port();
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "127.0.0.1:1",
        "",
    ] {
        let (status, _) = get(lab.addr, "/api/decide?status=503", host);
        assert_eq!(status, 403, "Host: {host:?}");
        assert_eq!(get(lab.addr, "/", host).0, 403, "Host: {host:?}");
    }
    assert_eq!(get(lab.addr, "/", &format!("localhost:{port}")).0, 200);
    assert_eq!(get(lab.addr, "/", &format!("LOCALHOST:{port}")).0, 200);
    assert_eq!(get(lab.addr, "/", &lab.addr.to_string()).0, 200);
}

#[test]
fn the_page_and_its_assets_are_served_from_the_binary() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    let (status, page) = lab.get("/");
    assert_eq!(status, 200);
    for asset in [
        "/app.js",
        "/scenes.js",
        "/app.css",
        "/uPlot.iife.min.js",
        "/uPlot.min.css",
        "/LICENSE-uPlot.txt",
    ] {
        assert!(
            page.contains(asset) || asset.starts_with("/LICENSE"),
            "{asset} not linked"
        );
        let (status, body) = lab.get(asset);
        assert_eq!(status, 200, "{asset}");
        assert!(!body.is_empty(), "{asset}");
    }
    assert!(lab.get("/LICENSE-uPlot.txt").1.contains("MIT License"));
    assert_eq!(lab.get("/nothing-here").0, 404);
}

#[test]
fn decide_answers_with_the_engines_decision() {
    let _quiet = crate::support::any();
    let lab = Lab::start();
    let ask = |q: &str| -> serde_json::Value {
        let (status, body) = lab.get(&format!("/api/decide?{q}"));
        assert_eq!(status, 200, "{q}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let a = ask("status=503&method=POST&idempotency_key=1&retry_after=2&remaining=1.5s&attempt=2");
    assert_eq!(a["summary"], "stop: deadline");
    let a = ask("status=503&method=POST&idempotency_key=1&retry_after=2&remaining=10s&attempt=2");
    assert_eq!(a["decision"], "retry");
    assert!(
        a["after_ms"].as_f64().unwrap() >= 2000.0,
        "never sooner than Retry-After"
    );
    assert_eq!(
        ask("io=connection_refused&method=POST")["decision"],
        "retry"
    );
    assert_eq!(ask("grpc=UNAVAILABLE")["decision"], "retry");
    assert_eq!(ask("status=404")["stop_reason"], "not_retryable");
}
