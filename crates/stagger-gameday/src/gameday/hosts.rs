//! `--hosts N`: the game-day off loopback, between network namespaces.
//!
//! On 127.0.0.1 a dead dependency answers "connection refused" in
//! microseconds. On a network a dead host drops the SYN and every attempt
//! waits for its connect timeout — the shape in which retry storms last
//! longest. Here the server runs in a network namespace of its own and the
//! pods are spread over `N` more, each joined by a veth pair to a bridge
//! that lives in one more namespace (nothing is added to the machine's own
//! network namespace). The kernel faults are nftables rules inside the
//! namespaces, on the game-day's timeline:
//!
//! - `blackhole`: every packet to the server's port dropped: new
//!   connections time out (the fleet's connect timeout is half the attempt
//!   timeout, so these end as connect errors, "never sent"), open ones hang;
//! - `reject`: every packet to the server's port answered with a TCP reset;
//! - `partition`: half the client hosts (rounded up) drop their packets to
//!   the server.
//!
//! Names are unique per run (`stg<pid>x<n>…`) and every namespace is removed
//! when the run ends, failed, panicked or stopped by a signal, and by
//! `--cleanup` after a SIGKILL ([`super::netns`]). Sockets are put in a
//! namespace by the thread that makes them: each host's runtime is built on
//! a thread that has entered that namespace (`setns`), and its workers
//! inherit it.

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::netns::{in_namespace, nft, root, Net};
use super::{fleet, server, Arrived, Config, Plan};
use crate::bins::Timeline;
use crate::fault::Fault;
use crate::{Error, ErrorKind};

/// The most client hosts.
pub const MAX_HOSTS: usize = 16;

/// A checked `--hosts`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hosts {
    n: usize,
}

fn found(tool: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| std::path::Path::new(d).join(tool).exists())
}

/// Why `--hosts` cannot run here, if it cannot.
fn unsupported(linux: bool, root: bool, ip: bool, nft: bool) -> Option<String> {
    if !linux {
        return Some("--hosts: network namespaces need Linux".into());
    }
    if !root {
        return Some(
            "--hosts: creating network namespaces needs root (run as root, or without --hosts)"
                .into(),
        );
    }
    match (ip, nft) {
        (false, _) => Some("--hosts: `ip` (iproute2) is not installed".into()),
        (_, false) => Some("--hosts: `nft` (nftables) is not installed".into()),
        _ => None,
    }
}

impl Hosts {
    /// Checks `--hosts N` against the machine and the other flags.
    pub fn check(n: usize, a: &Config) -> Result<Hosts, Error> {
        if n == 0 || n > MAX_HOSTS {
            return Err(Error::usage(format!(
                "--hosts: must be between 1 and {MAX_HOSTS}"
            )));
        }
        if n > a.pods {
            return Err(Error::usage(format!(
                "--hosts: {n} hosts for {} pods; give at most one host per pod",
                a.pods
            )));
        }
        if a.target.is_some() {
            return Err(Error::usage(
                "--hosts: runs the game-day's own server; it does not combine with --target",
            ));
        }
        let why = unsupported(cfg!(target_os = "linux"), root(), found("ip"), found("nft"));
        match why {
            Some(m) => Err(Error::usage(m)),
            None => Ok(Hosts { n }),
        }
    }

    /// One strategy: namespaces up, server and fleets in them, the kernel
    /// fault on schedule, everything down again.
    pub fn run(
        &self,
        plan: &Plan,
        fleet_cfg: fleet::Config,
        grace: Duration,
    ) -> Result<(fleet::Outcome, Arrived), Error> {
        super::netns::watch_signals()?;
        let net = Net::create(self.n)?;
        let start = Instant::now() + Duration::from_millis(300);
        let line = Timeline::new(start, plan.fleet.duration + grace);
        let server_cfg = server::Config {
            bind: IpAddr::V4(net.ip(0)),
            ..plan.server
        };
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server_ns = net.names[0].clone();
        let server = std::thread::spawn(move || {
            in_namespace(&server_ns, move || {
                let rt = runtime()?;
                let seen = rt.block_on(async move {
                    let srv = server::Server::start(server_cfg, line).await?;
                    let _ = addr_tx.send(srv.addr);
                    let _ = stop_rx.await;
                    let st = srv.stats.clone();
                    srv.stop();
                    Ok::<_, std::io::Error>(arrived(&st))
                });
                rt.shutdown_timeout(Duration::from_secs(1));
                seen.map_err(|e| Error::with(ErrorKind::Run, "--hosts: the server failed", e))
            })
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|e| Error::with(ErrorKind::Run, "--hosts: the server did not start", e))?;
        let faults = self.schedule_fault(plan, &net, addr.port(), start);
        let url = format!("http://{addr}/work");
        let mut fleets = Vec::new();
        for h in 0..self.n {
            let cfg = share(&fleet_cfg, h, self.n);
            let ns = net.names[h + 1].clone();
            let url = url.clone();
            fleets.push(std::thread::spawn(move || {
                in_namespace(&ns, move || {
                    let rt = runtime()?;
                    let out = rt.block_on(fleet::run(cfg, &url, line, grace));
                    rt.shutdown_timeout(Duration::from_secs(1));
                    out
                })
            }));
        }
        let mut out: Option<fleet::Outcome> = None;
        let mut failed = None;
        for f in fleets {
            match f.join() {
                Ok(Ok(o)) => {
                    out = Some(match out {
                        Some(acc) => acc.merge(o),
                        None => o,
                    })
                }
                Ok(Err(e)) => failed = Some(e),
                Err(_) => failed = Some(Error::usage("--hosts: a client host's thread panicked")),
            }
        }
        let _ = stop_tx.send(());
        let seen = server
            .join()
            .map_err(|_| Error::usage("--hosts: the server's thread panicked"))??;
        if let Some(f) = faults {
            let _ = f.join();
        }
        drop(net);
        match (failed, out) {
            (Some(e), _) => Err(e),
            (None, Some(o)) => Ok((o, seen)),
            (None, None) => Err(Error::usage("--hosts: no client host ran")),
        }
    }

    /// The nftables rules of a kernel fault, put in at its start and taken
    /// out at its end by a thread of their own.
    fn schedule_fault(
        &self,
        plan: &Plan,
        net: &Net,
        port: u16,
        start: Instant,
    ) -> Option<std::thread::JoinHandle<()>> {
        let s = &plan.server;
        let server_ip = net.ip(0);
        let rules: Vec<(String, String)> = match s.fault {
            Some(Fault::Blackhole) => vec![(
                net.names[0].clone(),
                format!("add rule inet stagger input tcp dport {port} drop\n"),
            )],
            Some(Fault::Reject) => vec![(
                net.names[0].clone(),
                format!("add rule inet stagger input tcp dport {port} reject with tcp reset\n"),
            )],
            Some(Fault::Partition) => net.names[1..]
                .iter()
                .take(self.n.div_ceil(2))
                .map(|ns| {
                    (
                        ns.clone(),
                        format!("add rule inet stagger output ip daddr {server_ip} drop\n"),
                    )
                })
                .collect(),
            _ => return None,
        };
        let (from, to) = (start + s.fault_start, start + s.fault_end);
        Some(std::thread::spawn(move || {
            std::thread::sleep(from.saturating_duration_since(Instant::now()));
            for (ns, rule) in &rules {
                let table = "add table inet stagger\n\
                     add chain inet stagger input { type filter hook input priority 0; }\n\
                     add chain inet stagger output { type filter hook output priority 0; }\n";
                if let Err(e) = nft(ns, &format!("{table}{rule}")) {
                    eprintln!("stagger gameday: --hosts: {e}");
                }
            }
            std::thread::sleep(to.saturating_duration_since(Instant::now()));
            for (ns, _) in &rules {
                let _ = nft(ns, "delete table inet stagger\n");
            }
        }))
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| Error::with(ErrorKind::Run, "cannot start the tokio runtime", e))
}

fn arrived(st: &server::Stats) -> Arrived {
    Arrived {
        first: st.first.snapshot(),
        retries: st.retries.snapshot(),
        completed: st.completed.snapshot(),
        abandoned: st.abandoned.snapshot(),
        rejected: st.rejected.snapshot(),
        duplicates: st.duplicates.load(Relaxed),
        deduplicated: st.deduplicated.load(Relaxed),
        shed: None,
        notes: Vec::new(),
    }
}

/// Host `h`'s share of the fleet (of `n`): its pods and clients, its part
/// of the rate and of the request cap, its own breaker seeds.
fn share(c: &fleet::Config, h: usize, n: usize) -> fleet::Config {
    let part = |x: usize, h: usize| x / n + usize::from(h < x % n);
    let clients = part(c.clients, h).max(1);
    let f = clients as f64 / c.clients as f64;
    fleet::Config {
        clients,
        pods: part(c.pods, h).clamp(1, clients),
        first_client: c.first_client + (0..h).map(|g| part(c.clients, g)).sum::<usize>(),
        rate: c.rate * f,
        ramp_to: c.ramp_to.map(|r| r * f),
        max_requests: ((c.max_requests as f64 * f).ceil() as u64).max(1),
        seed: c.seed.wrapping_add(1_000_003 * h as u64),
        ..*c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_that_cannot_run_say_why_naming_the_flag() {
        let e = unsupported(false, true, true, true).unwrap();
        assert!(e.starts_with("--hosts: ") && e.contains("Linux"), "{e}");
        let e = unsupported(true, false, true, true).unwrap();
        assert!(e.contains("root"), "{e}");
        assert!(unsupported(true, true, true, false)
            .unwrap()
            .contains("nftables"));
        assert!(unsupported(true, true, false, true)
            .unwrap()
            .contains("iproute2"));
        assert_eq!(unsupported(true, true, true, true), None);
    }

    #[test]
    fn the_fleet_is_shared_over_the_hosts_without_losing_a_client() {
        let c = fleet::Config {
            clients: 402,
            pods: 401,
            rate: 201.0,
            duration: Duration::from_secs(10),
            deadline: Duration::from_secs(2),
            schedule: stagger_sim::Schedule {
                attempts: Some(5),
                base: Duration::from_millis(100),
                cap: Duration::from_secs(10),
                attempt_timeout: Some(Duration::from_millis(500)),
                measure_latency: true,
            },
            strategy: "full".parse().unwrap(),
            max_requests: 1000,
            seed: 1,
            metrics: false,
            keys: true,
            method: fleet::Method::Post,
            ramp_to: None,
            first_client: 0,
        };
        let parts: Vec<fleet::Config> = (0..4).map(|h| share(&c, h, 4)).collect();
        assert_eq!(parts.iter().map(|p| p.clients).sum::<usize>(), 402);
        assert_eq!(parts.iter().map(|p| p.pods).sum::<usize>(), 401);
        let rate: f64 = parts.iter().map(|p| p.rate).sum();
        assert!((rate - 201.0).abs() < 1e-9);
        assert!(parts.iter().all(|p| p.pods <= p.clients));
        assert_ne!(parts[0].seed, parts[1].seed);
        // Order names never repeat across hosts.
        let firsts: Vec<usize> = parts.iter().map(|p| p.first_client).collect();
        assert_eq!(firsts, [0, 101, 202, 302]);
    }
}
