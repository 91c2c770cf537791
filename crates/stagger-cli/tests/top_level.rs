//! The command's front door: the top-level help names every subcommand,
//! and a port a server subcommand cannot listen on is the same exit code
//! (1, the machine's state, not a usage error) whichever subcommand it is.

mod common;

use std::net::TcpListener;

use common::{code, stagger, TempDir};

#[test]
fn the_top_level_help_names_every_subcommand_in_its_first_line() {
    let dir = TempDir::new("help");
    let done = stagger(&["--help"], &dir);
    assert_eq!(code(&done), Some(0), "{}", done.stderr);
    let about = done.stdout.lines().next().unwrap_or_default();
    let commands: Vec<&str> = done
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    for c in ["proxy", "grpc", "lab", "gameday", "audit"] {
        assert!(commands.contains(&c), "{c} in {commands:?}");
    }
    for c in &commands {
        assert!(
            about.contains(&format!(" {c},")) || about.contains(&format!(" {c}.")),
            "the first line names `{c}`: {about}"
        );
    }
}

#[test]
fn a_busy_port_is_exit_1_for_lab_proxy_and_gameday_alike() {
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
