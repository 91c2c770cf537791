//! Real Redis and PostgreSQL servers for the store contract, started on free loopback ports.
//!
//! Each server is started once per test binary and shared (tests use keys of their own). A
//! watchdog shell stops it when this process ends, however it ends (a panic, a signal, the test
//! runner's exit): it polls this process's pid and kills the server once it is gone, then removes
//! the server's directory. Without the server binaries a test skips with a message, except under
//! `CI=true`, where it fails.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn missing(what: &str) -> Option<String> {
    assert!(
        !in_ci(),
        "{what} is not installed, and CI=true: the store contract must run against it"
    );
    eprintln!("skipping: {what} is not installed (CI would install it)");
    None
}

fn find(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Starts a shell that kills `pid` (with `signal`) and removes `dir` when this process is gone.
fn watchdog(pid: u32, signal: &str, dir: Option<&Path>) {
    let me = std::process::id();
    let cleanup = dir.map_or(String::new(), |d| {
        format!("; sleep 1; rm -rf '{}'", d.display())
    });
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.3; done; kill -{signal} {pid} 2>/dev/null{cleanup}"
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before it listened: {status}");
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on 127.0.0.1:{port} within 20 s");
}

/// The shared Redis server's URL, or `None` (skip) where Redis is missing outside CI.
pub fn redis_url() -> Option<String> {
    static URL: OnceLock<Option<String>> = OnceLock::new();
    URL.get_or_init(|| {
        let Some(binary) = find("redis-server", &["/usr/bin", "/usr/local/bin", "/usr/sbin"])
        else {
            return missing("redis-server (Debian package redis-server)");
        };
        let port = free_port();
        let mut child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("redis-server starts");
        watchdog(child.id(), "KILL", None);
        wait_for_port(port, &mut child, "redis-server");
        Some(format!("redis://127.0.0.1:{port}/"))
    })
    .clone()
}

/// The shared PostgreSQL server's URL, or `None` (skip) where PostgreSQL is missing outside CI.
///
/// As root (CI), `initdb` and `postgres` run as the `postgres` user, which PostgreSQL requires.
pub fn postgres_url() -> Option<String> {
    static URL: OnceLock<Option<String>> = OnceLock::new();
    URL.get_or_init(|| {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| {
                let mut dirs: Vec<PathBuf> =
                    versions.flatten().map(|e| e.path().join("bin")).collect();
                dirs.sort();
                dirs.pop()
            })
            .filter(|d| d.join("postgres").is_file());
        let Some(bin) = bin else {
            return missing("PostgreSQL (Debian package postgresql)");
        };
        let owner = if is_root() {
            Some(postgres_ids())
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "stagger-idem-pg-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let as_postgres = |program: PathBuf| {
            let mut c = Command::new(program);
            if let Some((uid, gid)) = owner {
                c.uid(uid).gid(gid).env("HOME", &dir);
            }
            c
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown to postgres");
        }
        let data = dir.join("data");
        let out = as_postgres(bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let mut child = as_postgres(bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-k"])
            .arg(&dir)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("postgres starts");
        // SIGQUIT is PostgreSQL's immediate shutdown.
        watchdog(child.id(), "QUIT", Some(&dir));
        wait_for_port(port, &mut child, "postgres");
        // A listening postgres may still refuse sessions while it starts up: wait until it takes
        // one.
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = Command::new(bin.join("pg_isready"))
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-U",
                    "postgres",
                    "-q",
                ])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                break;
            }
            assert!(
                Instant::now() < until,
                "postgres did not accept sessions within 20 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
    })
    .clone()
}

/// The `postgres` user's uid and gid (PostgreSQL refuses to run as root).
fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id runs");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .expect("a postgres user (Debian's postgresql package makes it)")
    };
    (id("-u"), id("-g"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
