//! `stagger http` against servers that misbehave on purpose: a header that
//! never ends, a body that trickles, a Retry-After of 10^30, a redirect
//! loop, a body without Content-Length that never closes. Each call ends by
//! its deadline (or sooner) with a clear error and a documented exit code,
//! and the client's resident memory stays small however much the server
//! sends.
//!
//! The servers are raw sockets on 127.0.0.1 (a well-behaved HTTP library
//! would refuse to send these answers); each one serves a bounded number of
//! connections and stops writing after a bounded time.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// No server here keeps writing longer than this.
const SERVER_LIMIT: Duration = Duration::from_secs(30);
/// The most connections a server accepts.
const MAX_CONNECTIONS: usize = 64;
/// What the client may use, however much the server sends: the binary's own
/// size plus a few buffers, far below what an unbounded buffer reaches
/// when a server streams for seconds over loopback (gigabytes).
const MAX_RSS_KB: u64 = 64 * 1024;

/// A server that runs `misbehave` on every connection after reading its
/// request head, and counts the requests it saw.
async fn serve<F, Fut>(misbehave: F) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>)
where
    F: Fn(TcpStream, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    let base = url.clone();
    tokio::spawn(async move {
        for _ in 0..MAX_CONNECTIONS {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            if read_head(&mut sock).await.is_none() {
                continue;
            }
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(tokio::time::timeout(
                SERVER_LIMIT,
                misbehave(sock, base.clone()),
            ));
        }
    });
    (url, seen)
}

/// Reads a request head (up to 64 KiB).
async fn read_head(sock: &mut TcpStream) -> Option<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while buf.len() < 64 * 1024 {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            return Some(());
        }
    }
    None
}

/// What one run of the binary did.
struct Run {
    out: Output,
    elapsed: Duration,
    /// The largest resident set seen while it ran, in KiB.
    peak_rss_kb: u64,
}

impl Run {
    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.out.stdout)))
    }
}

fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `stagger http ARGS`, sampling its resident memory every 20 ms, and
/// kills it if it outlives 20 s (the test then fails on the time).
async fn stagger(args: &[&str], keep_stdout: bool) -> Run {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_stagger"))
            .arg("http")
            .args(&args)
            .stdout(if keep_stdout {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Drain the pipes on threads so a full pipe never stalls the child.
        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let out_t = std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(s) = stdout.as_mut() {
                let _ = std::io::Read::read_to_end(s, &mut v);
            }
            v
        });
        let err_t = std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = std::io::Read::read_to_end(s, &mut v);
            }
            v
        });
        let mut peak = 0;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if let Some(kb) = rss_kb(pid) {
                peak = peak.max(kb);
            }
            if started.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let elapsed = started.elapsed();
        Run {
            out: Output {
                status,
                stdout: out_t.join().unwrap(),
                stderr: err_t.join().unwrap(),
            },
            elapsed,
            peak_rss_kb: peak,
        }
    })
    .await
    .unwrap()
}

/// The deadline every test gives the call, and what it may overrun by
/// (process start-up and exit on a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(2);
const SLACK: Duration = Duration::from_millis(1500);

fn assert_bounded(r: &Run) {
    // Shown with --nocapture: what each hostile server cost.
    eprintln!(
        "exit {:?} after {:?}, peak RSS {} KiB; stderr: {}",
        r.code(),
        r.elapsed,
        r.peak_rss_kb,
        r.stderr().trim()
    );
    assert!(
        r.elapsed < DEADLINE + SLACK,
        "took {:?}; stderr: {}",
        r.elapsed,
        r.stderr()
    );
    assert!(
        r.peak_rss_kb < MAX_RSS_KB,
        "resident memory reached {} KiB",
        r.peak_rss_kb
    );
    assert!(!r.stderr().contains("panicked"), "{}", r.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_that_never_ends_stops_at_the_deadline() {
    let _quiet = crate::support::quiet();
    // One header line, a kilobyte every 10 ms, never a line end.
    let (url, seen) = serve(|mut sock, _| async move {
        let _ = sock.write_all(b"HTTP/1.1 200 OK\r\nx-endless: ").await;
        let chunk = [b'a'; 1024];
        while sock.write_all(&chunk).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let r = stagger(&[&url, "--deadline", "2s", "--format", "json"], true).await;
    assert_bounded(&r);
    assert_eq!(r.code(), Some(28), "{}", r.stderr());
    let v = r.json();
    assert_eq!(v["stop_reason"], "deadline");
    assert!(v["final_status"].is_null());
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_flood_is_refused_not_buffered() {
    let _quiet = crate::support::quiet();
    // A header as fast as the socket takes it: the client refuses a head
    // larger than its limit instead of buffering it.
    let (url, seen) = serve(|mut sock, _| async move {
        let _ = sock.write_all(b"HTTP/1.1 200 OK\r\nx-endless: ").await;
        let chunk = vec![b'a'; 64 * 1024];
        while sock.write_all(&chunk).await.is_ok() {}
    })
    .await;
    let r = stagger(
        &[
            &url,
            "--deadline",
            "2s",
            "--base",
            "1ms",
            "--format",
            "json",
        ],
        true,
    )
    .await;
    assert_bounded(&r);
    assert_ne!(r.code(), Some(0), "{}", r.stderr());
    let v = r.json();
    assert!(v["final_status"].is_null());
    let attempts = v["attempts"].as_array().unwrap();
    assert!(!attempts.is_empty());
    assert!(attempts[0]["error"].as_str().is_some(), "{v}");
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed) <= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_trickles_stops_at_the_deadline() {
    let _quiet = crate::support::quiet();
    // 100 bytes promised, one a second.
    let (url, _) = serve(|mut sock, _| async move {
        let _ = sock
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
            .await;
        for _ in 0..100 {
            if sock.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await;
    let r = stagger(&[&url, "--deadline", "2s"], true).await;
    assert_bounded(&r);
    assert_eq!(r.code(), Some(28), "{}", r.stderr());
    assert!(r.stderr().contains("deadline"), "{}", r.stderr());
    // What arrived was passed on, not held back.
    assert!(!r.out.stdout.is_empty() && r.out.stdout.len() < 100);

    let r = stagger(&[&url, "--deadline", "2s", "--format", "json"], true).await;
    assert_bounded(&r);
    assert_eq!(r.code(), Some(28), "{}", r.stderr());
    let v = r.json();
    assert_eq!(v["final_status"], 200);
    assert!(
        v["body_error"].as_str().unwrap().contains("deadline"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_of_ten_to_the_thirty_is_not_waited_for() {
    let _quiet = crate::support::quiet();
    let (url, seen) = serve(|mut sock, _| async move {
        let _ = sock
            .write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1000000000000000000000000000000\r\ncontent-length: 4\r\n\r\nbusy",
            )
            .await;
    })
    .await;
    // Under a deadline: the wait cannot fit, so the call stops at once.
    let r = stagger(&[&url, "--deadline", "2s", "--format", "json"], true).await;
    assert_bounded(&r);
    assert!(r.elapsed < Duration::from_secs(1), "{:?}", r.elapsed);
    assert_eq!(r.code(), Some(28));
    let v = r.json();
    assert_eq!(v["stop_reason"], "deadline");
    assert_eq!(v["final_status"], 503);
    assert_eq!(v["attempts"].as_array().unwrap().len(), 1);
    // Without one: longer than --max-retry-after, so not honoured either.
    let r = stagger(&[&url], true).await;
    assert!(r.elapsed < Duration::from_secs(1), "{:?}", r.elapsed);
    assert_eq!(r.code(), Some(22));
    assert!(r.stderr().contains("hint_too_long"), "{}", r.stderr());
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_loop_is_cut_and_not_retried() {
    let _quiet = crate::support::quiet();
    let (url, seen) = serve(|mut sock, base| async move {
        let head = format!(
            "HTTP/1.1 302 Found\r\nlocation: {base}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        let _ = sock.write_all(head.as_bytes()).await;
    })
    .await;
    let r = stagger(
        &[
            &url,
            "-L",
            "--max-redirs",
            "10",
            "--deadline",
            "2s",
            "--base",
            "1ms",
            "--format",
            "json",
        ],
        true,
    )
    .await;
    assert_bounded(&r);
    // curl's "too many redirects".
    assert_eq!(r.code(), Some(47), "{}", r.stderr());
    let v = r.json();
    assert_eq!(v["stop_reason"], "not_retryable");
    let attempts = v["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{v}");
    assert!(
        attempts[0]["error"].as_str().unwrap().contains("redirect"),
        "{v}"
    );
    // Ten redirects followed, then it gives up.
    assert!(seen.load(std::sync::atomic::Ordering::Relaxed) <= 11);
    // Without -L, as in curl, the 302 itself is the answer.
    let before = seen.load(std::sync::atomic::Ordering::Relaxed);
    let r = stagger(&[&url, "--deadline", "2s", "--format", "json"], true).await;
    assert_eq!(r.code(), Some(0), "{}", r.stderr());
    assert_eq!(r.json()["final_status"], 302);
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_length_that_never_closes_stops_at_the_deadline() {
    let _quiet = crate::support::quiet();
    // No Content-Length, no chunking: the body runs until the connection
    // closes, and this one streams as fast as the client reads.
    let (url, _) = serve(|mut sock, _| async move {
        let _ = sock.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await;
        let chunk = vec![b'z'; 64 * 1024];
        while sock.write_all(&chunk).await.is_ok() {}
    })
    .await;
    for format in ["text", "json"] {
        let r = stagger(&[&url, "--deadline", "2s", "--format", format], false).await;
        assert_bounded(&r);
        assert_eq!(r.code(), Some(28), "{format}: {}", r.stderr());
        assert!(r.stderr().contains("deadline"), "{}", r.stderr());
    }
}

/// A server that resets every connection once it has read the request:
/// the reset is retried, and the call ends with curl's 56 ("failure in
/// receiving network data"), not a generic 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_exits_56_as_curl_does() {
    let _quiet = crate::support::quiet();
    let (url, seen) = serve(|sock, _| async move {
        // A zero linger makes the close a reset.
        let _ = sock.set_zero_linger();
        drop(sock);
    })
    .await;
    let r = stagger(&[&url, "--retry", "1"], false).await;
    assert_bounded(&r);
    assert_eq!(r.code(), Some(56), "{}", r.stderr());
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 2);
}
