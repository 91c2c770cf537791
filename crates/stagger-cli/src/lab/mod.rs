//! `stagger lab`: the simulator and the decision engine in a browser.
//!
//! A small web server on loopback with a single-page app whose assets are
//! compiled into the binary (it works offline). The page draws what two
//! JSON endpoints answer, and both are the command line's own code:
//!
//! - `GET /api/simulate?…` and `GET /api/schedule?…` turn the query into the
//!   flags of `stagger simulate` / `stagger schedule` (same names without the
//!   dashes), parse them with the same clap definitions and answer with the
//!   bytes `--format json` prints;
//! - `GET /api/decide?…` builds the facts of one failed attempt the way the
//!   HTTP front-end does and asks the engine for its decision ([`decide`]).
//!
//! The server lives in the binary, next to the flag definitions it reuses:
//! the library crates stay free of clap, and no handler plumbing crosses a
//! crate boundary. It owns only sockets, bounds and the `Host` check.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use crate::args::UsageError;

mod api;
mod decide;
mod query;
mod server;

/// Serve the interactive lab: the failover chart, jitter, layers,
/// contention, the metastable model, "should this call be retried?" and
/// hedging, all on the real engine, in a browser. Prints the URL and serves until
/// interrupted.
///
/// Examples:
///   stagger lab
///   stagger lab --port 8080 --open
#[derive(Debug, clap::Args)]
#[command(after_help = "The page calls a JSON API you can use directly:
  /api/simulate?model=failover&strategy=none,full&burst=400&runs=20&seed=1
      the same options as `stagger simulate` (names without the dashes) and
      exactly the JSON `stagger simulate --format json` prints
  /api/simulate?model=hedging&strategy=none,20ms,p95&capacity=10&utilisation=0.9&requests=20000
      the hedging model, likewise (at most 400,000 requests × strategies × attempts)
  /api/schedule?jitter=decorrelated&attempts=6&samples=1000
      the JSON of `stagger schedule --format json`
  /api/decide?status=503&method=POST&idempotency_key=1&retry_after=2&remaining=1.5s&attempt=2
      the engine's decision for one failure (or io=connection_refused, grpc=UNAVAILABLE)

Examples:
  stagger lab
  stagger lab --port 8080 --open
  stagger lab --port 0 --bind ::1

Exit status:
  The lab serves until interrupted: Ctrl-C ends it by the signal (a shell
  reports 130). 2 bad usage, a --port or --bind it cannot listen on included;
  1 the server failed while serving.")]
pub struct Args {
    /// TCP port; 0 picks a free one (e.g. `--port 8080`).
    #[arg(long, default_value_t = 7878, value_name = "P")]
    port: u16,
    /// Address to listen on (e.g. `--bind 127.0.0.1`). Only requests whose
    /// Host header names this address or `localhost` are answered.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST), value_name = "ADDR")]
    bind: IpAddr,
    /// Open the page in the default browser (xdg-open / open).
    #[arg(long)]
    open: bool,
}

/// Runs the subcommand: binds, prints the URL, serves until interrupted.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(a.bind, a.port))
            .await
            .map_err(|e| {
                UsageError(format!(
                    "--port: cannot listen on {}:{}: {e}",
                    a.bind, a.port
                ))
            })?;
        let addr = listener.local_addr()?;
        let url = format!("http://{}/", display_addr(addr));
        println!("stagger lab: {url}");
        eprintln!("serving until interrupted (Ctrl-C)");
        if a.open {
            open_browser(&url);
        }
        server::serve(listener, addr).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// `127.0.0.1:7878`, `[::1]:7878`: the address as a URL authority.
fn display_addr(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V6(ip) => format!("[{ip}]:{}", addr.port()),
        IpAddr::V4(ip) => format!("{ip}:{}", addr.port()),
    }
}

/// Asks the desktop to open `url`; a failure is only reported.
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener)
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            // Reap it when it exits (xdg-open returns at once).
            std::thread::spawn(move || child.wait());
        }
        Err(e) => {
            eprintln!("stagger lab: --open: could not start {opener}: {e}; open {url} yourself")
        }
    }
}
