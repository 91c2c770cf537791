//! The metastable model's server strategies, on seeded runs with stated
//! tolerances: a FIFO server keeps the loop, dropping expired work brings
//! part of the goodput back, and a concurrency limit that sheds retries
//! first brings it back to the offered rate.

use std::time::Duration;

use stagger_sim::{simulate, Model, Options, Params, Row, Server, Strategy};

fn rows(servers: &str, strategies: &str) -> Vec<Row> {
    let mut p = Params::defaults(Model::Metastable);
    p.runs = 2;
    p.duration = Duration::from_secs(60);
    p.servers = Server::parse_list(servers).unwrap();
    let s = Strategy::parse_list(strategies).unwrap();
    simulate(&p, &s, &Options::default()).unwrap().strategies
}

fn row<'a>(rows: &'a [Row], server: &str, strategy: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.server.as_deref() == Some(server) && r.strategy == strategy)
        .unwrap_or_else(|| panic!("no row {strategy} @ {server}"))
}

#[test]
fn the_server_side_breaks_the_loop_only_with_a_limit_that_sheds_retries_first() {
    let all = rows("fifo,deadline-drop,adaptive,aimd", "none,full");
    assert_eq!(all.len(), 8, "one row per server × client strategy");
    let offered = 280.0;
    for r in &all {
        let before = r.goodput_before.unwrap();
        assert!(
            (0.97 * offered..300.0).contains(&before),
            "{} {before}",
            r.strategy
        );
    }
    // fifo: the Bronson loop holds, with or without retries (2 attempts).
    for s in ["none", "full"] {
        let r = row(&all, "fifo", s);
        assert!(
            r.goodput_after.unwrap() < 5.0,
            "{s} @ fifo: {:?}",
            r.goodput_after
        );
        assert_eq!(r.recovered, Some(false));
    }
    // deadline-drop: without retries all goodput is back at once; with
    // full-jitter retries only part of it, and the run does not recover.
    let none = row(&all, "deadline-drop", "none");
    assert!(none.goodput_after.unwrap() > 0.97 * offered);
    assert_eq!(none.recovered, Some(true));
    let full = row(&all, "deadline-drop", "full");
    let g = full.goodput_after.unwrap();
    assert!(
        (0.2 * offered..0.7 * offered).contains(&g),
        "full @ deadline-drop: {g}"
    );
    assert_eq!(full.recovered, Some(false));
    // A limit that sheds retries first: back to the offered rate, the run
    // recovers, and the shedding costs a few per cent of the attempts (the
    // gradient also dips at its re-probes, AIMD less).
    for server in ["adaptive", "aimd"] {
        let r = row(&all, server, "full");
        let g = r.goodput_after.unwrap();
        assert!(g > 0.97 * offered, "full @ {server}: {g}");
        assert_eq!(r.recovered, Some(true), "full @ {server}");
        assert!(r.recovery_s.unwrap() < 5.0, "{:?}", r.recovery_s);
        let shed = r.shed_share.unwrap();
        assert!(shed > 0.0 && shed < 0.08, "{server}: {shed}");
        assert!(r.amplification < 1.25, "{}", r.amplification);
        // Requests sent during the outage (a sixth of a 60 s run) are lost
        // whatever the server does; nearly all others succeed.
        assert!(r.request_success > 0.8, "{}", r.request_success);
    }
}

#[test]
fn a_static_limit_above_what_the_deadline_allows_is_only_deadline_drop() {
    // 1000 in flight at 300/s is over 3 s of queue for callers who wait 1 s:
    // the limit is never reached, nothing is shed.
    let all = rows("deadline-drop,static:1000,static:100", "full");
    let (dd, high, low) = (&all[0], &all[1], &all[2]);
    assert_eq!(high.goodput_after, dd.goodput_after);
    assert_eq!(high.shed_share, Some(0.0));
    assert_eq!(high.recovered, Some(false));
    // 100 in flight is a third of a second of queue: it recovers.
    assert_eq!(low.recovered, Some(true));
}

#[test]
fn the_older_flag_is_deadline_drop_and_rows_name_their_server() {
    let mut p = Params::defaults(Model::Metastable);
    p.runs = 1;
    p.duration = Duration::from_secs(30);
    p.server_skips_expired = true;
    let s = Strategy::parse_list("full").unwrap();
    let old = simulate(&p, &s, &Options::default()).unwrap();
    p.server_skips_expired = false;
    p.servers = Server::parse_list("deadline-drop").unwrap();
    let new = simulate(&p, &s, &Options::default()).unwrap();
    let (a, b) = (&old.strategies[0], &new.strategies[0]);
    assert_eq!(a.server.as_deref(), Some("deadline-drop"));
    assert_eq!((a.attempts, a.goodput_after), (b.attempts, b.goodput_after));
    let json = serde_json::to_value(&new).unwrap();
    assert_eq!(json["strategies"][0]["server"], "deadline-drop");
    assert_eq!(json["params"]["servers"][0], "deadline-drop");
}

#[test]
fn bad_server_names_are_refused_with_the_flag() {
    for bad in ["lifo", "static:0", "static:x", "fifo,,adaptive"] {
        let e = Server::parse_list(bad).unwrap_err();
        assert_eq!(e.flag(), "server", "{bad}");
    }
    let ok = Server::parse_list("fifo,deadline-drop,adaptive,aimd,gradient,static:8").unwrap();
    let names: Vec<String> = ok.iter().map(ToString::to_string).collect();
    assert_eq!(
        names,
        [
            "fifo",
            "deadline-drop",
            "adaptive",
            "aimd",
            "gradient",
            "static:8"
        ]
    );
}
