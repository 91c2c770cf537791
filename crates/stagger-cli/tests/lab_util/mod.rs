//! Helpers of the `stagger lab` tests: start the real binary on a free
//! loopback port, and a plain HTTP/1.1 GET whose `Host` the test chooses.
#![allow(dead_code)] // each test file uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_stagger");

/// A running `stagger lab`, killed when dropped.
pub struct Lab {
    child: Child,
    pub addr: SocketAddr,
    pub url: String,
}

impl Lab {
    /// Starts `stagger lab --port 0` and reads the URL it prints.
    pub fn start() -> Lab {
        let mut child = Command::new(BIN)
            .args(["lab", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start stagger lab");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("stagger lab printed no URL in 20 s");
        let url = line
            .trim()
            .strip_prefix("stagger lab: ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        let addr: SocketAddr = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("an address in the URL");
        assert!(addr.ip().is_loopback(), "{addr}");
        Lab { child, addr, url }
    }

    /// GET `path` with `Host: <the bound address>`.
    pub fn get(&self, path: &str) -> (u16, String) {
        get(self.addr, path, &self.addr.to_string())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET over a fresh connection: the status and the body.
pub fn get(addr: SocketAddr, path: &str, host: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status code");
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    (
        status,
        if chunked {
            unchunk(body)
        } else {
            body.to_string()
        },
    )
}

fn unchunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}
