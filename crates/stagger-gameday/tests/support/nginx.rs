//! A real upstream nobody here wrote: Debian's nginx, started with a
//! temporary prefix and config on 127.0.0.1 (`daemon off`, one process),
//! killed and its directory removed on drop.
//!
//! Every location answers `200 applied` to any method (`return`, so a POST
//! body is read and dropped), except `/files/`, which serves the static
//! file [`Nginx::FILE`] — a read endpoint: nginx answers 405 to a POST
//! there. The access log has one line per request
//! nginx served: method, URI, status, protocol, `x-retry-attempt`,
//! `Idempotency-Key`.
//!
//! Without nginx a test skips with a message, except under `CI=true`,
//! where `.ci/run` installs it and its absence is a failure.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One line of the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    pub method: String,
    pub uri: String,
    pub status: u16,
    pub protocol: String,
    pub retry_attempt: Option<String>,
    pub key: Option<String>,
}

/// A running nginx.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    /// HTTP/1.1 listener.
    pub h1: SocketAddr,
    /// h2c (HTTP/2 with prior knowledge) listener.
    pub h2: SocketAddr,
}

fn binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
    l.local_addr().unwrap()
}

impl Nginx {
    /// The path of the static file nginx serves (GET only).
    pub const FILE: &'static str = "/files/page.txt";

    /// Starts nginx, or `None` (with a message) where it is not installed
    /// outside CI.
    pub fn start() -> Option<Nginx> {
        let Some(bin) = binary() else {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("nginx is not installed; .ci/run installs Debian's nginx package");
            }
            eprintln!("skipped: nginx is not installed (apt-get install nginx)");
            return None;
        };
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "stagger-nginx-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let (h1, h2) = (free_port(), free_port());
        let d = dir.display();
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
error_log {d}/logs/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    log_format stagger '$request_method $uri $status $server_protocol $http_x_retry_attempt $http_idempotency_key';
    access_log {d}/logs/access.log stagger;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 100000;
    http2_max_requests 100000;
    client_max_body_size 64m;
    server {{
        listen {h1};
        listen {h2} http2;
        location / {{ return 200 "applied\n"; }}
        location /files/ {{ root {d}/www; }}
    }}
}}
"#
        );
        std::fs::create_dir_all(dir.join("www/files")).unwrap();
        std::fs::write(dir.join("www").join(&Nginx::FILE[1..]), "a page\n").unwrap();
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(bin)
            .arg("-p")
            .arg(&dir)
            .arg("-e")
            .arg(dir.join("logs/error.log"))
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nginx starts");
        let mut n = Nginx { child, dir, h1, h2 };
        n.wait_ready();
        Some(n)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log =
                    std::fs::read_to_string(self.dir.join("logs/error.log")).unwrap_or_default();
                panic!("nginx exited at start ({status}): {log}");
            }
            let up = |a| TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok();
            if up(self.h1) && up(self.h2) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "nginx did not listen within 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The access log so far.
    pub fn log(&self) -> Vec<Logged> {
        read_log(&self.dir.join("logs/access.log"))
    }

    /// The access log once it has `n` lines or more, or as it is after
    /// 10 s: nginx writes a request's line after answering it, so a
    /// client may hold the answer before the line exists (on a busy
    /// machine, for a while).
    pub fn log_of(&self, n: usize) -> Vec<Logged> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log();
            if log.len() >= n || Instant::now() >= deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The HTTP/1.1 URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.h1)
    }
}

fn read_log(path: &Path) -> Vec<Logged> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let opt = |s: &str| (s != "-").then(|| s.to_string());
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 6, "an access log line of 6 fields: {l}");
            Logged {
                method: f[0].into(),
                uri: f[1].into(),
                status: f[2].parse().unwrap(),
                protocol: f[3].into(),
                retry_attempt: opt(f[4]),
                key: opt(f[5]),
            }
        })
        .collect()
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
