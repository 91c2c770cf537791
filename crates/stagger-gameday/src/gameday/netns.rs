//! The network namespaces of `--hosts`: made, entered, and always removed.
//!
//! A game-day that changes the machine and leaves it changed is worse than
//! none, so every namespace this process makes is written down in one
//! process-wide list *before* `ip netns add` runs, and struck off only once
//! it is gone. Three things read that list:
//!
//! - [`Net`]'s drop, on a normal end, an error or a panic (unwinding);
//! - [`watch_signals`]' thread, on SIGINT, SIGTERM or SIGHUP: it takes the
//!   list's lock (so no namespace is half made), removes what is on it,
//!   prints what it removed and exits with 128 + the signal's number, as a
//!   shell reports a process that signal ended;
//! - nothing, after SIGKILL: [`cleanup`] (`stagger gameday --cleanup`)
//!   finds the namespaces of runs whose process is gone by their names.
//!
//! The nftables rules of the kernel faults live in a `table inet stagger`
//! *inside* these namespaces (never in the machine's own), so removing a
//! namespace removes its rules. `nft` is started by a thread that entered
//! the namespace (`setns`; a child process inherits its creator's network
//! namespace), not through `ip netns exec`, which would also make a mount
//! namespace per call that holds a copy of every `/run/netns` mount while
//! it lives.
//!
//! Names: `stg<pid>x<n><role>`, the pid of the process, `n` the run's
//! number within it, `role` one of `sw` (the bridge), `srv` (the server)
//! or `c<h>` (client host `h`); see ip-netns(8) for where iproute2 keeps
//! them (`/run/netns`).

use std::fs::File;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::{Error, ErrorKind};

/// Where iproute2 keeps named network namespaces.
const NETNS_DIR: &str = "/run/netns";

/// The namespaces this process made and has not removed yet.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<String>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `ip ARGS`; the error (the machine's, not the flags': exit 1)
/// says which command failed, and why as its cause.
pub(super) fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::with(ErrorKind::Run, "--hosts: cannot run `ip`", e))?;
    if out.status.success() {
        Ok(())
    } else {
        let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(Error::with(
            ErrorKind::Run,
            format!("--hosts: `ip {}` failed", args.join(" ")),
            std::io::Error::other(why),
        ))
    }
}

/// Runs `f` on this thread after entering network namespace `ns`.
pub(super) fn in_namespace<T>(ns: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    let path = format!("{NETNS_DIR}/{ns}");
    let fd = File::open(&path)
        .map_err(|e| Error::with(ErrorKind::Run, format!("--hosts: cannot open {path}"), e))?;
    nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| Error::with(ErrorKind::Run, format!("--hosts: cannot enter {ns}"), e))?;
    f()
}

/// Feeds `script` to `nft -f -` inside namespace `ns`, from a thread of
/// its own that entered it (the caller's namespace is left alone).
pub(super) fn nft(ns: &str, script: &str) -> Result<(), String> {
    let (ns, script) = (ns.to_string(), script.to_string());
    let thread = std::thread::spawn(move || {
        in_namespace(&ns, || Ok(feed_nft(&ns, &script))).unwrap_or_else(|e| Err(e.to_string()))
    });
    thread
        .join()
        .unwrap_or_else(|_| Err("the nft thread panicked".into()))
}

/// `nft -f -` with `script` on its stdin, in this thread's namespace.
fn feed_nft(ns: &str, script: &str) -> Result<(), String> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run nft in {ns}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(script.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("nft in {ns}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {ns} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this process runs as root (effective uid 0, from procfs).
pub(super) fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Makes namespace `name`, on the list before it exists: a signal that
/// arrives meanwhile waits for the list's lock, then removes it.
fn add(name: &str) -> Result<(), Error> {
    let mut l = live();
    l.push(name.to_string());
    let made = ip(&["netns", "add", name]);
    if made.is_err() {
        // Not made here (say it already existed): not ours to remove.
        l.retain(|n| n != name);
    }
    made
}

/// Removes namespace `name` and checks that it is gone, trying again for
/// a moment while it is still there.
fn delete(name: &str) -> Result<(), String> {
    let path = std::path::Path::new(NETNS_DIR).join(name);
    let mut last = String::new();
    for round in 0..5u32 {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(50) * round);
        }
        // Gone means gone from /run/netns, whatever `ip` said.
        last = match ip(&["netns", "del", name]) {
            Ok(()) => format!("still in {NETNS_DIR} after `ip netns del`"),
            Err(e) => e.to_string(),
        };
        if !path.exists() {
            return Ok(());
        }
    }
    Err(last)
}

/// Removes `names` (newest first) and strikes them off the list; returns
/// one line per namespace that could not be removed.
fn remove(names: &[String]) -> Vec<String> {
    let mut l = live();
    let mut failed = Vec::new();
    for name in names.iter().rev() {
        match delete(name) {
            Ok(()) => l.retain(|n| n != name),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    failed
}

/// How to remove what a run could not.
const CLEANUP_HINT: &str = "`stagger gameday --cleanup` removes what is left";

/// From the first call on, SIGINT, SIGTERM and SIGHUP remove every
/// namespace this process made, print what was removed and exit with 128
/// + the signal's number (130, 143, 129).
pub(super) fn watch_signals() -> Result<(), Error> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    static WATCHING: OnceLock<Result<(), String>> = OnceLock::new();
    let watching = WATCHING.get_or_init(|| {
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .map_err(|e| format!("--hosts: cannot watch SIGINT and SIGTERM: {e}"))?;
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let mut l = live();
                let names = std::mem::take(&mut *l);
                let failed: Vec<String> = names
                    .iter()
                    .rev()
                    .filter_map(|n| delete(n).err().map(|e| format!("{n}: {e}")))
                    .collect();
                let name = signal_hook::low_level::signal_name(sig).unwrap_or("a signal");
                // Not eprintln!: with the terminal gone (SIGHUP) it would
                // panic, and this thread would never reach the exit.
                let line = interrupted(name, &names, &failed);
                let _ = writeln!(std::io::stderr(), "stagger gameday: {line}");
                std::process::exit(128 + sig);
            }
        });
        Ok(())
    });
    watching
        .clone()
        .map_err(|m| Error::with(ErrorKind::Run, m, std::io::Error::other("signals")))
}

/// The line a signal leaves: what it removed, and what it could not.
fn interrupted(signal: &str, names: &[String], failed: &[String]) -> String {
    let mut line = if names.is_empty() {
        format!("{signal}: stopped; no network namespace was up, nothing to remove")
    } else {
        let gone = names.len() - failed.len();
        format!(
            "{signal}: stopped; removed {gone} of {} network namespaces ({}) and the \
             nftables rules in them",
            names.len(),
            names.join(", ")
        )
    };
    if !failed.is_empty() {
        line += &format!("; could not remove {}; {CLEANUP_HINT}", failed.join("; "));
    }
    line
}

/// The namespaces of one run: `names[0]` the server's, then the client
/// hosts', and the switch holding the bridge. Removed by [`Net::remove`]
/// or, failing that, on drop.
pub(super) struct Net {
    /// The hosts' namespaces: the server's first, then the clients'.
    pub names: Vec<String>,
    switch: String,
    made: Vec<String>,
}

impl Net {
    /// Host `h`'s address (0: the server).
    pub fn ip(&self, h: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 251, 0, 1 + h as u8)
    }

    /// The namespaces of this process's next run, `n` client hosts.
    pub fn create(n: usize) -> Result<Net, Error> {
        static RUN: AtomicU32 = AtomicU32::new(0);
        let id = format!("stg{}x{}", std::process::id(), RUN.fetch_add(1, Relaxed));
        Net::create_named(&id, n)
    }

    fn create_named(id: &str, n: usize) -> Result<Net, Error> {
        let mut net = Net {
            names: (0..=n)
                .map(|h| match h {
                    0 => format!("{id}srv"),
                    h => format!("{id}c{h}"),
                })
                .collect(),
            switch: format!("{id}sw"),
            made: Vec::new(),
        };
        // From here on, whatever was made is removed by the drop.
        let sw = net.switch.clone();
        add(&sw)?;
        net.made.push(sw.clone());
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &sw, "link", "set", "br0", "up"])?;
        for h in 0..=n {
            let ns = net.names[h].clone();
            add(&ns)?;
            net.made.push(ns.clone());
            let port = format!("v{h}");
            ip(&[
                "-n", &sw, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns,
            ])?;
            ip(&["-n", &sw, "link", "set", &port, "master", "br0", "up"])?;
            let addr = format!("{}/24", net.ip(h));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Removes every namespace of the run (a namespace's veth ends, the
    /// bridge and its nftables rules go with it); returns one line per
    /// namespace that could not be removed.
    pub fn remove(&mut self) -> Vec<String> {
        let made = std::mem::take(&mut self.made);
        remove(&made)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for f in self.remove() {
            let _ = writeln!(
                std::io::stderr(),
                "stagger gameday: --hosts: could not remove network namespace {f}; {CLEANUP_HINT}"
            );
        }
    }
}

/// What [`cleanup`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Cleanup {
    /// Namespaces removed: left by `--hosts` runs whose process is gone.
    pub removed: Vec<String>,
    /// Namespaces kept: their run's process is still running (its pid).
    pub running: Vec<(String, u32)>,
    /// Namespaces that could not be removed, each with why.
    pub failed: Vec<String>,
}

/// The pid in a `--hosts` namespace's name (`stg<pid>x<n><role>`), or
/// `None` for a name this command does not make.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("stg")?;
    let (pid, rest) = rest.split_once('x')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) {
        return None;
    }
    let run_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let role = &rest[run_len..];
    let known = role == "sw" || role == "srv" || role.strip_prefix('c').is_some_and(digits);
    (run_len > 0 && known).then(|| pid.parse().ok()).flatten()
}

/// Whether `pid` is a running stagger process (a pid reused by another
/// program does not count).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim_end().starts_with("stagger"))
}

/// Removes the namespaces (and so the nftables rules in them) that
/// `--hosts` runs left behind when their process was killed outright
/// (SIGKILL, a power cut): every namespace named as `--hosts` names them
/// whose process is no longer running. Namespaces of runs still going are
/// kept and listed.
pub fn cleanup() -> Result<Cleanup, Error> {
    let mut out = Cleanup::default();
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(e) => e,
        // No namespace was ever made here.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => {
            return Err(Error::with(
                ErrorKind::Run,
                format!("--cleanup: cannot read {NETNS_DIR}"),
                e,
            ))
        }
    };
    let mut ours: Vec<(String, u32)> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| owner(&n).map(|pid| (n, pid)))
        .collect();
    ours.sort();
    let (running_now, stale): (Vec<_>, Vec<_>) =
        ours.into_iter().partition(|(_, pid)| running(*pid));
    out.running = running_now;
    if !stale.is_empty() && !root() {
        return Err(Error::usage(format!(
            "--cleanup: removing network namespaces needs root ({} left: {})",
            stale.len(),
            stale
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    for (name, _) in stale {
        match delete(&name) {
            Ok(()) => out.removed.push(name),
            Err(e) => out.failed.push(format!("{name}: {e}")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_a_hosts_run_makes_are_taken_for_its_own() {
        assert_eq!(owner("stg4242x0sw"), Some(4242));
        assert_eq!(owner("stg4242x13srv"), Some(4242));
        assert_eq!(owner("stg7x2c16"), Some(7));
        for other in [
            "stg",
            "stgx0sw",
            "stg12x0",
            "stg12xsw",
            "stg12x0c",
            "stg12x0cx",
            "stg12x0srvx",
            "stagger",
            "blue",
            "stg1a2x0sw",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
    }

    #[test]
    fn the_line_a_signal_leaves_names_what_it_removed_and_what_it_could_not() {
        let names = ["stg1x0sw".to_string(), "stg1x0srv".to_string()];
        let l = interrupted("SIGTERM", &names, &[]);
        assert!(l.starts_with("SIGTERM: stopped; removed 2 of 2"), "{l}");
        assert!(
            l.contains("stg1x0sw, stg1x0srv") && l.contains("nftables"),
            "{l}"
        );
        let l = interrupted("SIGINT", &names, &["stg1x0srv: busy".into()]);
        assert!(
            l.contains("removed 1 of 2") && l.contains("--cleanup"),
            "{l}"
        );
        let l = interrupted("SIGINT", &[], &[]);
        assert!(l.contains("no network namespace was up"), "{l}");
    }

    fn can_make_namespaces() -> bool {
        let ok = root() && cfg!(target_os = "linux") && ip(&["netns", "list"]).is_ok();
        if !ok {
            eprintln!("skipped: needs Linux, root and iproute2");
        }
        ok
    }

    fn exists(name: &str) -> bool {
        std::path::Path::new(NETNS_DIR).join(name).exists()
    }

    #[test]
    fn a_create_that_fails_half_way_removes_what_it_made_and_nothing_else() {
        if !can_make_namespaces() {
            return;
        }
        let id = format!("stg{}x900", std::process::id());
        // Somebody else's namespace where the second client host's goes.
        let theirs = format!("{id}c2");
        ip(&["netns", "add", &theirs]).unwrap();
        let made = Net::create_named(&id, 3);
        let left: Vec<String> = ["sw", "srv", "c1", "c3"]
            .iter()
            .map(|r| format!("{id}{r}"))
            .filter(|n| exists(n))
            .collect();
        let kept = exists(&theirs);
        let _ = ip(&["netns", "del", &theirs]);
        let e = made.err().expect("the name was taken");
        assert!(e.to_string().contains(&theirs), "{e}");
        assert_eq!(e.kind(), ErrorKind::Run, "the machine's state, exit 1");
        assert!(left.is_empty(), "left behind: {left:?}");
        assert!(kept, "a namespace it did not make was removed");
        assert!(!live().iter().any(|n| n.starts_with(&id)));
    }

    #[test]
    fn a_panic_with_the_namespaces_up_removes_them() {
        if !can_make_namespaces() {
            return;
        }
        let id = format!("stg{}x901", std::process::id());
        let names = std::panic::catch_unwind(|| {
            let net = Net::create_named(&id, 2).unwrap();
            let mut names = net.names.clone();
            names.push(net.switch.clone());
            assert!(names.iter().all(|n| exists(n)));
            std::panic::panic_any(names);
        })
        .unwrap_err()
        .downcast::<Vec<String>>()
        .expect("the names");
        let left: Vec<&String> = names.iter().filter(|n| exists(n)).collect();
        for n in &left {
            let _ = ip(&["netns", "del", n]);
        }
        assert_eq!(names.len(), 4);
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
