//! `stagger proxy`: the game-day's faults in front of a real service.
//!
//! Parses the flags into a [`stagger_gameday::proxy::Config`], runs the proxy
//! until `--duration` or SIGINT/SIGTERM, then prints the arrival histogram
//! (text or JSON) and writes it to `--out`. The proxy itself is
//! `stagger_gameday::proxy`.
//!
//! Exit codes: 0 the proxy ran and stopped; 1 it could not run (a port
//! could not be bound); 2 bad usage, naming the flag and the part.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use stagger_gameday::fault;
use stagger_gameday::gameday::exporter;
use stagger_gameday::proxy::{self, Config};

use crate::args::{duration, gameday_error, FormatArgs, UsageError, Verbosity};

/// Put a fault-injecting reverse proxy in front of a real service.
///
/// Example: `stagger proxy http://127.0.0.1:8080 --fault stall@10s+2s --fault 503@20s+5s`
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Faults (KIND@START+DURATION, from the proxy's start; +DURATION left out: to the end):
  stall       hold requests until the stall ends, then forward them
  failover    close the listener: connections refused, open ones dropped
  503, 429    answer at once with Retry-After: 1, forward nothing
  reset       reset the connection (RST) instead of answering; every other
              request is forwarded first
  slow:MS     wait MS milliseconds before forwarding
  blackhole   accept and never answer

Examples:
  stagger proxy http://127.0.0.1:8080 --fault stall@10s+2s
  stagger proxy http://127.0.0.1:50051 --listen 127.0.0.1:50052 --fault reset@5+3 --fault slow:200@0+30
  stagger proxy http://127.0.0.1:8080 --duration 60s --metrics-addr 127.0.0.1:9465 --out ./proxy-report

Faults may not overlap, except slow:MS, which adds its delay to whatever
else holds; a fault may not start after --duration (one cut short by it
is said).

A request is counted as a retry when it carries x-retry-attempt >= 2,
grpc-previous-rpc-attempts >= 1, or an Idempotency-Key seen before.

Exit status: 0 the proxy ran and stopped; 1 it could not run (say a port
could not be bound); 2 bad usage (the message names the flag and the part)."
)]
pub struct Args {
    /// Where requests go: `http://HOST:PORT`; HTTP/2 clients are forwarded
    /// over h2c, others over HTTP/1.1 (e.g. `http://127.0.0.1:8080`).
    #[arg(value_name = "UPSTREAM")]
    pub upstream: String,
    /// Where the proxy listens (loopback unless you give another address).
    #[arg(long, default_value = "127.0.0.1:8480", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// A fault, `KIND@START+DURATION`; give several (e.g. `--fault
    /// stall@10s+2s --fault slow:200@15s+5s`).
    #[arg(long = "fault", value_name = "KIND@START+DURATION")]
    pub faults: Vec<String>,
    /// Stop after this long (default: at SIGINT or SIGTERM; e.g. `--duration 60s`).
    #[arg(long, value_parser = duration, value_name = "D")]
    pub duration: Option<Duration>,
    /// Serve the histogram at http://ADDR/stats (`?format=json`, `?format=svg`)
    /// and the counters at /metrics while the proxy runs (a loopback
    /// address, e.g. `--metrics-addr 127.0.0.1:9465`).
    #[arg(long, value_parser = exporter::addr, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Timeout of a connection to the upstream.
    #[arg(long, default_value = "2s", value_parser = duration, value_name = "D")]
    pub connect_timeout: Duration,
    /// At exit, also write stats.json, histogram.txt and histogram.svg here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    #[command(flatten)]
    pub format: FormatArgs,
    #[command(flatten)]
    pub talk: Verbosity,
}

impl Args {
    fn config(&self) -> anyhow::Result<Config> {
        let upstream = proxy::upstream("UPSTREAM", &self.upstream).map_err(UsageError)?;
        let faults = self
            .faults
            .iter()
            .map(|f| fault::parse(f))
            .collect::<Result<Vec<_>, _>>()
            .map_err(UsageError)?;
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(UsageError("--duration: must be more than 0".into()).into());
        }
        for note in fault::check(&faults, self.duration).map_err(UsageError)? {
            eprintln!("stagger proxy: {note}");
        }
        if self.connect_timeout.is_zero() {
            return Err(UsageError("--connect-timeout: must be more than 0".into()).into());
        }
        let mut c = Config::new(self.listen, upstream);
        c.faults = faults;
        c.span = self
            .duration
            .map_or(proxy::MAX_SPAN, |d| d + Duration::from_secs(1));
        c.connect_timeout = self.connect_timeout;
        c.stats_addr = self.metrics_addr;
        c.chart = Some(stagger_report::proxy::chart);
        c.text = Some(stagger_report::proxy::text);
        Ok(c)
    }
}

/// Runs `stagger proxy`.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let cfg = a.config()?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--out: cannot create {}", dir.display()))?;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("cannot watch SIGINT and SIGTERM")?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = tx.send(());
        }
    });
    let talk = !a.talk.quiet;
    let faults: Vec<String> = cfg.faults.iter().map(|w| w.to_string()).collect();
    let upstream = a.upstream.clone();
    let report = proxy::run(cfg, a.duration, rx, |addr, stats| {
        if talk {
            eprintln!(
                "stagger proxy: http://{addr} -> {upstream}{}",
                if faults.is_empty() {
                    String::new()
                } else {
                    format!(", faults {}", faults.join(", "))
                }
            );
            if let Some(s) = stats {
                eprintln!(
                    "stagger proxy: histogram at http://{s}/stats, metrics at http://{s}/metrics"
                );
            }
        }
    })
    .map_err(gameday_error)?;
    handle.close();
    let json = serde_json::to_string_pretty(&report)?;
    if a.format.json() {
        println!("{json}");
    } else {
        print!("{}", stagger_report::proxy::text(&report));
    }
    if let Some(dir) = &a.out {
        for (name, body) in [
            ("stats.json", format!("{json}\n")),
            ("histogram.txt", stagger_report::proxy::text(&report)),
            ("histogram.svg", stagger_report::proxy::chart(&report)),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, body).with_context(|| format!("--out: writing {}", p.display()))?;
        }
        if talk {
            eprintln!(
                "stagger proxy: histogram in {}",
                dir.join("histogram.svg").display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
