//! Python grpcio as the interop peer: finds the interpreter and runs the
//! scripts beside this file on 127.0.0.1.
//!
//! The interpreter is `$STAGGER_GRPC_PYTHON`, else
//! `<workspace>/target/grpc-venv/bin/python` (made by `.ci/run`). When it is
//! missing the tests print a note and pass, unless `CI` is set, where a
//! missing peer is a failure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// The Python with grpcio, or `None` (after a printed note) outside CI.
pub fn python() -> Option<PathBuf> {
    let path = std::env::var_os("STAGGER_GRPC_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/grpc-venv/bin/python")
        });
    if path.exists() {
        return Some(path);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    assert!(
        !ci,
        "CI is set but the grpcio peer {} is missing (.ci/run makes it)",
        path.display()
    );
    eprintln!(
        "note: skipping the grpcio interop test: no {} (set STAGGER_GRPC_PYTHON)",
        path.display()
    );
    None
}

/// A script of this directory (the same path from either crate's tests).
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../stagger/tests/interop")
        .join(name)
}

/// `fault_server.py` running with a script of steps.
pub struct FaultServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<String>>>,
    pub port: u16,
}

impl FaultServer {
    pub fn start(python: &Path, steps: &str) -> FaultServer {
        let mut child = Command::new(python)
            .arg(script("fault_server.py"))
            .arg(steps)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start fault_server.py");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = lines.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(p) = line.strip_prefix("PORT ") {
                    let _ = tx.send(p.trim().parse::<u16>().unwrap());
                } else {
                    sink.lock().unwrap().push(line);
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("fault_server.py printed its port");
        FaultServer {
            child,
            stdin,
            lines,
            port,
        }
    }

    /// The `REQ …` lines, one per request the server received, once at
    /// least `expected` have been read from its stdout (a line printed
    /// before the answer may be read after it), plus a moment for any more.
    pub fn requests(&self, expected: usize) -> Vec<String> {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while self.lines.lock().unwrap().len() < expected && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `retry_client.py PORT CALLS`: the status name of each call.
pub fn retry_client(python: &Path, port: u16, calls: usize) -> Vec<String> {
    let out = Command::new(python)
        .arg(script("retry_client.py"))
        .arg(port.to_string())
        .arg(calls.to_string())
        .output()
        .expect("run retry_client.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("[]");
    line.trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}
