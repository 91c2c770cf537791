//! A failover in front of nothing in particular: the proxy counts the open
//! connections it drops, not the connections refused while it lasts — the
//! kernel refuses those and the proxy never sees them. It printed
//! "connections refused 1" (one per failover) after a failover during
//! which curl saw 10 refusals.

use std::time::{Duration, Instant};

use stagger_gameday::fault;
use stagger_gameday::proxy::{self, Config, Proxy};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_counts_the_open_connections_it_dropped_not_one_per_failover() {
    let mut cfg = Config::new(
        "127.0.0.1:0".parse().unwrap(),
        // Never reached: no request is sent.
        proxy::upstream("UPSTREAM", "http://127.0.0.1:9").unwrap(),
    );
    cfg.faults = vec![fault::parse("failover@600ms+600ms").unwrap()];
    let started = Instant::now();
    let p = Proxy::start(cfg).await.unwrap();
    // Three idle connections, open when the failover begins.
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(TcpStream::connect(p.addr).await.unwrap());
    }
    let at = |ms| tokio::time::sleep_until((started + Duration::from_millis(ms)).into());
    at(900).await;
    // During it, nothing listens: the kernel refuses.
    let mut refused = 0;
    for _ in 0..4 {
        if TcpStream::connect(p.addr).await.is_err() {
            refused += 1;
        }
    }
    assert_eq!(refused, 4, "the listener is closed");
    let r = p.report();
    p.stop();
    assert_eq!((r.failovers, r.failover_dropped), (1, 3), "{r:?}");
    drop(open);
}
