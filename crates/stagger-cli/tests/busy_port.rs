//! A port a server subcommand cannot listen on is the same exit code
//! whichever subcommand it is: 1, the machine's state, not a usage error.

use crate::common;

use std::net::TcpListener;

use common::{code, stagger, TempDir};

#[test]
fn a_busy_port_is_exit_1_for_lab_proxy_and_gameday_alike() {
    let _quiet = crate::support::quiet();
    let dir = TempDir::new("busy-port");
    let held = TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let port = held.local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let port = port.to_string();
    for (args, says) in [
        (
            vec!["lab", "--port", &port],
            format!("--port: cannot listen on {addr}: the port is in use"),
        ),
        (
            vec![
                "proxy",
                "http://127.0.0.1:9",
                "--listen",
                &addr,
                "--duration",
                "1s",
            ],
            format!("--listen: cannot listen on {addr}"),
        ),
        (
            vec![
                "proxy",
                "http://127.0.0.1:9",
                "--listen",
                "127.0.0.1:0",
                "--metrics-addr",
                &addr,
                "--duration",
                "1s",
            ],
            format!("--metrics-addr: cannot listen on {addr}"),
        ),
        (
            vec![
                "gameday",
                "--fault",
                "none",
                "--duration",
                "2s",
                "--metrics-addr",
                &addr,
            ],
            format!("--metrics-addr: cannot listen on {addr}"),
        ),
    ] {
        let done = stagger(&args, &dir);
        assert_eq!(code(&done), Some(1), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(&says), "{args:?}: {}", done.stderr);
        assert_eq!(done.stderr.trim().lines().count(), 1, "{}", done.stderr);
    }
    drop(held);
}
