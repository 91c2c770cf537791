//! Helpers shared by the integration tests: run the real `stagger` binary
//! in a temp dir of its own, bounded in time.
#![allow(dead_code)] // each test file uses its own subset

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_stagger");

/// How long the scheduler may add on top of a deadline in these tests
/// (process start-up, a loaded 2-core machine, the kill and the reap).
pub const SLACK: Duration = Duration::from_millis(300);

/// A directory of its own for one test, removed when the test ends.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("stagger-run-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    pub fn read(&self, file: &str) -> String {
        fs::read_to_string(self.path(file)).unwrap_or_default()
    }

    /// How many lines a script appended to `file` (one per attempt).
    pub fn count(&self, file: &str) -> usize {
        self.read(file).lines().count()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub struct Done {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

pub fn spawn(args: &[&str], dir: &Path, stdin: bool) -> Child {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stagger")
}

/// Waits for `child`, killing it and failing the test after `limit`.
pub fn finish(child: Child, started: Instant, limit: Duration) -> Done {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.expect("wait for stagger");
            Done {
                status: out.status,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                elapsed: started.elapsed(),
            }
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("stagger {pid} ran longer than {limit:?}");
        }
    }
}

/// Runs `stagger ARGS` in `dir` with `input` on stdin, bounded by `limit`.
pub fn stagger_with(args: &[&str], dir: &TempDir, input: Option<&[u8]>, limit: Duration) -> Done {
    let started = Instant::now();
    let mut child = spawn(args, &dir.0, input.is_some());
    if let (Some(bytes), Some(mut pipe)) = (input, child.stdin.take()) {
        pipe.write_all(bytes).expect("write stdin");
    }
    finish(child, started, limit)
}

pub fn stagger(args: &[&str], dir: &TempDir) -> Done {
    stagger_with(args, dir, None, Duration::from_secs(10))
}

pub fn code(d: &Done) -> Option<i32> {
    d.status.code()
}

/// Polls for `file` to appear (a child saying it has started).
pub fn wait_for(dir: &TempDir, file: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while !dir.path(file).exists() {
        assert!(Instant::now() < until, "{file} never appeared");
        thread::sleep(Duration::from_millis(10));
    }
}

pub fn send(signal: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {signal} {pid}");
}

pub fn json(d: &Done) -> serde_json::Value {
    let line = d.stdout.lines().last().expect("a report line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}
