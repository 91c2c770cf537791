//! `stagger gameday --hosts`: the server and the pods in network namespaces
//! the command creates, a kernel blackhole (nftables drops every packet to
//! the server: connect timeouts), at a short drill shape. Needs Linux, root,
//! iproute2 and nftables; elsewhere it skips with a message, except under
//! `CI=true` where `.ci/run` installs them.
//!
//! A run stopped by SIGINT or SIGTERM, at any moment, must leave `ip netns
//! list` and the machine's `nft list ruleset` as they were, and what a
//! SIGKILL leaves `stagger gameday --cleanup` must remove.
//!
//! Measured on this 2-core machine (debug build): `none` 67 % success,
//! `full+budget+breaker` 67 %, 0.70 attempts arriving per request (1.22
//! made: the rest never left the clients' hosts), recovered 0.5 s after the
//! blackhole.

use crate::common;

use std::io::Read as _;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{code, finish, spawn, stagger, TempDir};
use serde_json::Value;

fn can_run() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false);
    let tools = ["ip", "nft"].iter().all(|t| {
        ["/usr/sbin", "/sbin", "/usr/bin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(t).exists())
    });
    if root && tools && cfg!(target_os = "linux") {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "--hosts needs Linux, root, iproute2 and nftables; .ci/run installs them"
    );
    eprintln!("skipped: --hosts needs Linux, root, iproute2 and nftables");
    false
}

fn leftovers(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Removes whatever namespaces of one child are left, even if the test
/// fails half-way (the child removes its own; this is the second net).
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        for ns in leftovers(&self.0) {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

/// One short drill with a blackhole; the namespaces are checked gone.
fn drill(dir: &TempDir) -> Value {
    let started = Instant::now();
    let child = spawn(
        &[
            "gameday",
            "--drill",
            "--hosts",
            "4",
            "--fault",
            "blackhole",
            "--duration",
            "9s",
            "--fault-at",
            "3s",
            "--strategy",
            "none,full+budget+breaker",
            "--format",
            "json",
        ],
        &dir.0,
        false,
    );
    let sweep = Sweep(format!("stg{}x", child.id()));
    let done = finish(child, started, Duration::from_secs(90));
    assert_eq!(code(&done), Some(0), "stderr: {}", done.stderr);
    assert!(
        leftovers(&sweep.0).is_empty(),
        "the command removed its namespaces"
    );
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(v["params"]["hosts"], 4);
    v
}

fn row(v: &Value, s: &str) -> Value {
    v["strategies"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["strategy"] == s))
        .unwrap_or_else(|| panic!("no row for {s}"))
        .clone()
}

#[test]
fn the_guarded_preset_holds_when_failures_are_connect_timeouts() {
    let _turn = crate::support::storm();
    if !can_run() {
        return;
    }
    let dir = TempDir::new("gameday-hosts");
    // Recovery is a timing on a shared 2-core machine, and connections
    // caught by the blackhole sit in TCP's retransmission backoff after it
    // ends: a run that misses only the 2 s recovery bound is run once more
    // (both values are in the message if the second misses too).
    let mut missed = Vec::new();
    let v = loop {
        let v = drill(&dir);
        let r = row(&v, "full+budget+breaker")["recovery_s"].as_f64();
        if r.is_some_and(|r| r <= 2.0) || missed.len() == 1 {
            missed.push(r);
            break v;
        }
        missed.push(r);
    };
    let recovery = missed.last().copied().flatten();
    assert!(
        recovery.is_some_and(|r| r <= 2.0),
        "recovered within 2 s of the blackhole: {missed:?}"
    );
    let (none, guarded) = (row(&v, "none"), row(&v, "full+budget+breaker"));
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    // The blackhole cost requests: connect timeouts, not refusals.
    assert!(f(&none, "request_success") < 0.9, "{none}");
    assert!(f(&guarded, "amplification") <= 1.3);
    assert!(f(&guarded, "client_amplification") <= 1.3, "{guarded}");
    assert!(f(&guarded, "request_success") >= f(&none, "request_success") - 0.03);
    // Keyed POSTs retried after connect timeouts were never applied twice.
    assert_eq!(guarded["duplicates"], 0);
    // What went into the blackhole arrived in its second (the histogram
    // showed 0 there), and every request has its one first attempt (a
    // blackholed one was counted as "0 first attempts, 1 retry").
    let hole = &none["series"]["first_attempts"].as_array().unwrap()[30..40];
    assert!(hole.iter().all(|n| n.as_u64() > Some(0)), "{hole:?}");
    let (firsts, requests) = (f(&none, "first_attempts"), f(&none, "requests"));
    assert!(
        (firsts - requests).abs() <= 0.01 * requests,
        "{firsts} first attempts, {requests} requests"
    );
}

#[test]
fn a_kernel_fault_without_hosts_is_a_usage_error() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-hosts-bad");
    let done = stagger(
        &["gameday", "--fault", "blackhole", "--duration", "10s"],
        &dir,
    );
    assert_eq!(code(&done), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("--fault: blackhole is a kernel fault"),
        "{}",
        done.stderr
    );
    let done = stagger(&["gameday", "--hosts", "0", "--duration", "10s"], &dir);
    assert_eq!(code(&done), Some(2));
    assert!(
        done.stderr.contains("--hosts: must be between 1 and 16"),
        "{}",
        done.stderr
    );
}

/// The pid in a `--hosts` namespace's name, `stg<pid>x<n><role>`.
fn owner(name: &str) -> Option<u32> {
    name.strip_prefix("stg")?.split_once('x')?.0.parse().ok()
}

/// What a run must leave as it found it: the namespaces (but those of
/// other stagger processes on this machine, which come and go on their
/// own) and the machine's own nftables ruleset.
#[derive(Debug, PartialEq, Eq)]
struct NetState {
    namespaces: Vec<String>,
    ruleset: String,
}

fn net_state(run: Option<u32>) -> NetState {
    let mut namespaces: Vec<String> = leftovers("")
        .into_iter()
        .filter(|n| owner(n).is_none_or(|pid| Some(pid) == run))
        .collect();
    namespaces.sort();
    let out = Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .expect("run nft");
    assert!(out.status.success(), "nft list ruleset");
    NetState {
        namespaces,
        ruleset: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// Whether namespace `ns` holds the kernel fault's `table inet stagger`
/// (entered with nsenter, which makes no mount namespace).
fn has_fault_table(ns: &str) -> bool {
    Command::new("nsenter")
        .arg(format!("--net=/run/netns/{ns}"))
        .args(["nft", "list", "table", "inet", "stagger"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A `gameday --hosts` child, SIGKILLed and its namespaces swept if the
/// test ends before it does.
struct Hosts {
    child: Child,
    stderr: Option<JoinHandle<String>>,
    /// Its namespaces' prefix, `stg<pid>x`.
    prefix: String,
}

impl Hosts {
    /// Two strategies of a blackhole at 2 s on two client hosts.
    fn start(dir: &TempDir) -> Hosts {
        let mut child = Command::new(common::BIN)
            .args([
                "gameday",
                "--drill",
                "--hosts",
                "2",
                "--fault",
                "blackhole",
                "--duration",
                "8s",
                "--fault-at",
                "2s",
                "--strategy",
                "none,full",
                "--format",
                "json",
            ])
            .current_dir(&dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start stagger");
        let mut pipe = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            s
        });
        let prefix = format!("stg{}x", child.id());
        Hosts {
            child,
            stderr: Some(stderr),
            prefix,
        }
    }

    /// Waits (at most 30 s) until `ready` holds, failing if the run ends.
    fn wait_for(&mut self, what: &str, ready: impl Fn() -> bool) {
        let until = Instant::now() + Duration::from_secs(30);
        while !ready() {
            if let Ok(Some(s)) = self.child.try_wait() {
                panic!("the run ended ({s}) before {what}: {}", self.stderr());
            }
            assert!(Instant::now() < until, "no {what} within 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&mut self) -> String {
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }

    /// The exit code (`None`: ended by a signal) and stderr, within `limit`.
    fn exit(&mut self, limit: Duration) -> (Option<i32>, String) {
        let until = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().expect("wait for stagger") {
                return (s.code(), self.stderr());
            }
            assert!(
                Instant::now() < until,
                "still running {limit:?} after the signal"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its namespaces now.
    fn namespaces(&self) -> Vec<String> {
        leftovers(&self.prefix)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(Sweep(self.prefix.clone()));
    }
}

#[test]
fn ctrl_c_during_a_blackhole_leaves_no_namespace_and_no_nft_rule() {
    let _turn = crate::support::storm();
    if !can_run() {
        return;
    }
    let dir = TempDir::new("gameday-hosts-int");
    let before = net_state(None);
    let mut run = Hosts::start(&dir);
    let srv = format!("{}0srv", run.prefix);
    run.wait_for("the blackhole's rule in the server's namespace", || {
        has_fault_table(&srv)
    });
    common::send("-INT", run.child.id());
    let (code, stderr) = run.exit(Duration::from_secs(15));
    assert_eq!(code, Some(130), "{stderr}");
    assert!(
        stderr.contains("SIGINT: stopped; removed 4 of 4 network namespaces"),
        "{stderr}"
    );
    assert!(stderr.contains(&srv), "{stderr}");
    assert_eq!(run.namespaces(), Vec::<String>::new());
    assert_eq!(net_state(Some(run.child.id())), before);
}

#[test]
fn sigterm_while_the_namespaces_are_being_made_leaves_none() {
    let _turn = crate::support::storm();
    if !can_run() {
        return;
    }
    let dir = TempDir::new("gameday-hosts-term");
    let before = net_state(None);
    let mut run = Hosts::start(&dir);
    // The bridge's namespace is made first: the others are on their way.
    let sw = format!("{}0sw", run.prefix);
    run.wait_for("the bridge's namespace", || {
        std::path::Path::new("/run/netns").join(&sw).exists()
    });
    common::send("-TERM", run.child.id());
    let (code, stderr) = run.exit(Duration::from_secs(15));
    assert_eq!(code, Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM: stopped; removed"), "{stderr}");
    assert!(!stderr.contains("could not remove"), "{stderr}");
    assert_eq!(run.namespaces(), Vec::<String>::new());
    assert_eq!(net_state(Some(run.child.id())), before);
}

#[test]
fn cleanup_removes_what_a_killed_gameday_left() {
    let _turn = crate::support::storm();
    if !can_run() {
        return;
    }
    let dir = TempDir::new("gameday-hosts-kill");
    let before = net_state(None);
    let mut run = Hosts::start(&dir);
    let srv = format!("{}0srv", run.prefix);
    run.wait_for("the blackhole's rule in the server's namespace", || {
        has_fault_table(&srv)
    });
    common::send("-KILL", run.child.id());
    let (killed, _) = run.exit(Duration::from_secs(15));
    assert_eq!(killed, None, "ended by SIGKILL");
    // Nothing runs after a SIGKILL: the namespaces are left, rule and all.
    let left = run.namespaces();
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(has_fault_table(&srv));
    let done = stagger(&["gameday", "--cleanup"], &dir);
    assert_eq!(code(&done), Some(0), "{}", done.stderr);
    for ns in &left {
        assert!(
            done.stdout.contains(&format!("removed {ns} ")),
            "{ns}: {}",
            done.stdout
        );
    }
    assert_eq!(run.namespaces(), Vec::<String>::new());
    assert_eq!(net_state(Some(run.child.id())), before);
    let again = stagger(&["gameday", "--cleanup"], &dir);
    assert_eq!(code(&again), Some(0), "{}", again.stderr);
    assert!(
        !again.stdout.contains(&run.prefix),
        "removed once: {}",
        again.stdout
    );
}

#[test]
fn cleanup_takes_no_other_flag() {
    let _turn = crate::support::any();
    let dir = TempDir::new("gameday-hosts-cleanup-bad");
    let done = stagger(&["gameday", "--cleanup", "--hosts", "2"], &dir);
    assert_eq!(code(&done), Some(2), "{}", done.stderr);
    assert!(done.stderr.contains("--cleanup"), "{}", done.stderr);
}
