//! The `idempotent_orders` example answers as its docs say, on one replica and on two sharing a
//! store.

#[cfg(any(feature = "redis", feature = "postgres"))]
use crate::support::servers;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The example binary cargo built beside this test binary.
fn binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("examples/idempotent_orders");
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").is_err(),
        "{} is missing: `cargo test --workspace --all-features` builds it",
        path.display()
    );
    eprintln!("skipping: build the example first (cargo build --example idempotent_orders --all-features)");
    None
}

/// One running replica, killed on drop.
struct Replica {
    child: Child,
    addr: String,
}

impl Replica {
    fn start(args: &[&str]) -> Option<Replica> {
        let mut child = Command::new(binary()?)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the example starts");
        // Its first line names the address it listens on: the readiness signal.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("the example prints its address");
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Some(Replica { child, addr })
    }

    /// Sends one request; the status and body.
    fn send(&self, method: &str, path: &str, key: Option<&str>) -> (u16, String, String) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let key = key.map_or(String::new(), |k| format!("idempotency-key: \"{k}\"\r\n"));
        let body = "{\"sku\":1}";
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nhost: t\r\n{key}content-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer[9..12].parse().unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        (status, head.to_ascii_lowercase(), body.to_owned())
    }

    fn orders(&self) -> serde_json::Value {
        let (status, _, body) = self.send("GET", "/orders", None);
        assert_eq!(status, 200);
        serde_json::from_str(&body).unwrap()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_example_answers_as_documented() {
    let Some(replica) = Replica::start(&["--store", "memory"]) else {
        return;
    };
    for method in ["POST", "PATCH"] {
        let (status, _, body) = replica.send(method, "/api", None);
        assert_eq!(status, 200, "{method}");
        assert!(body.contains("\"success\""), "{body}");
    }
    for method in ["GET", "PUT", "DELETE"] {
        let (status, head, body) = replica.send(method, "/api", Some("bypass"));
        assert_eq!(status, 200, "{method}");
        assert!(body.contains("\"success\""));
        assert!(!head.contains("idempotent-replayed"));
    }
    let (_, first_head, first) = replica.send("POST", "/api", Some("order-1"));
    let (status, head, again) = replica.send("POST", "/api", Some("order-1"));
    assert_eq!(status, 200);
    assert!(!first_head.contains("idempotent-replayed"));
    assert!(head.contains("idempotent-replayed: true"), "{head}");
    assert_eq!(first, again, "the replay is the first answer");
    let orders = replica.orders();
    assert_eq!(orders["count"], 3, "{orders}");
    assert_eq!(orders["by_key"]["order-1"], 1, "{orders}");
}

#[test]
fn without_the_layer_every_retry_executes() {
    let Some(replica) = Replica::start(&["--no-idempotency"]) else {
        return;
    };
    replica.send("POST", "/api", Some("k"));
    let (_, head, _) = replica.send("POST", "/api", Some("k"));
    assert!(!head.contains("idempotent-replayed"));
    assert_eq!(replica.orders()["by_key"]["k"], 2);
}

#[test]
fn a_bad_store_is_refused_with_a_message() {
    let Some(binary) = binary() else { return };
    let out = Command::new(binary)
        .args(["--listen", "127.0.0.1:0", "--store", "mongodb://x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--store") && err.contains("redis://"), "{err}");
}

/// A replica's answer lost to a client timeout, the retry landing on the other replica: with a
/// shared store the retry waits for the first run (409) and gets its answer; with a store per
/// replica it runs the order again. Returns the orders executed and whether the retry's final
/// answer was a replay.
fn lost_answer_retried_on_the_other_replica(store: &str) -> Option<(u64, bool)> {
    let work = ["--store", store, "--work-ms", "400"];
    let a = Replica::start(&work)?;
    let b = Replica::start(&work)?;
    let key = format!("lost-{}", uuid::Uuid::new_v4());
    // The first attempt gives up after 100 ms, while replica A is still working.
    let mut first = TcpStream::connect(&a.addr).unwrap();
    let body = "{\"sku\":1}";
    write!(
        first,
        "POST /api HTTP/1.1\r\nhost: t\r\nidempotency-key: \"{key}\"\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    first
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut lost = String::new();
    assert!(
        first.read_to_string(&mut lost).is_err(),
        "the first answer came in time: {lost}"
    );
    drop(first);
    // The retry goes to replica B, waiting as a 409 says, a bounded number of times.
    let mut last = (0, String::new());
    for _ in 0..50 {
        let (status, head, _) = b.send("POST", "/api", Some(&key));
        last = (status, head);
        if status != 409 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(last.0, 200, "the retry's answer: {}", last.1);
    std::thread::sleep(Duration::from_millis(500)); // A's detached work has ended either way
    let count = |r: &Replica| r.orders()["by_key"][&key].as_u64().unwrap_or(0);
    Some((
        count(&a) + count(&b),
        last.1.contains("idempotent-replayed: true"),
    ))
}

#[test]
fn a_lost_answer_retried_on_another_replica_runs_twice_on_memory_stores() {
    if let Some((executed, replayed)) = lost_answer_retried_on_the_other_replica("memory") {
        assert_eq!((executed, replayed), (2, false));
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_lost_answer_retried_on_another_replica_runs_once_sharing_redis() {
    let Some(url) = servers::redis_url() else {
        return;
    };
    if let Some((executed, replayed)) = lost_answer_retried_on_the_other_replica(&url) {
        assert_eq!((executed, replayed), (1, true));
    }
}

#[cfg(feature = "postgres")]
#[test]
fn a_lost_answer_retried_on_another_replica_runs_once_sharing_postgres() {
    let Some(url) = servers::postgres_url() else {
        return;
    };
    if let Some((executed, replayed)) = lost_answer_retried_on_the_other_replica(&url) {
        assert_eq!((executed, replayed), (1, true));
    }
}

/// Two replicas behind a balancer: the retry lands on the other one. A shared store replays it;
/// a store inside each replica runs it again (which is why the shared stores exist).
fn two_replicas(store: &str) -> Option<(u64, u64)> {
    let a = Replica::start(&["--store", store])?;
    let b = Replica::start(&["--store", store])?;
    let key = format!("fleet-{}", uuid::Uuid::new_v4());
    let (status, _, _) = a.send("POST", "/api", Some(&key));
    assert_eq!(status, 200);
    let (status, _, _) = b.send("POST", "/api", Some(&key));
    assert_eq!(status, 200);
    let count = |r: &Replica| r.orders()["by_key"][&key].as_u64().unwrap_or(0);
    Some((count(&a), count(&b)))
}

#[test]
fn two_replicas_on_memory_stores_both_execute() {
    if let Some((a, b)) = two_replicas("memory") {
        assert_eq!(
            (a, b),
            (1, 1),
            "each replica's own memory knows nothing of the other's"
        );
    }
}

#[cfg(feature = "redis")]
#[test]
fn two_replicas_sharing_redis_execute_once() {
    let Some(url) = servers::redis_url() else {
        return;
    };
    if let Some((a, b)) = two_replicas(&url) {
        assert_eq!(a + b, 1, "executed {a} + {b} times");
    }
}

#[cfg(feature = "postgres")]
#[test]
fn two_replicas_sharing_postgres_execute_once() {
    let Some(url) = servers::postgres_url() else {
        return;
    };
    if let Some((a, b)) = two_replicas(&url) {
        assert_eq!(a + b, 1, "executed {a} + {b} times");
    }
}
