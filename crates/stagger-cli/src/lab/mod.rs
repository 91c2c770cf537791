//! `stagger lab`: the simulator and the decision engine in a browser.
//!
//! The server, its assets, its limits and the decide endpoint are
//! [`stagger_lab`]; this module parses the flags, hands the server the
//! two endpoints that read a query as the flags of `stagger simulate` /
//! `stagger schedule` (the definitions live here, in the binary) and prints
//! the URL.

mod flags;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use stagger_lab::{self as lab, BadParam, Endpoints};
use stagger_sim::Options;

use crate::simulate::hedging as simulate_hedging;
use crate::simulate::priority as simulate_priority;
use crate::{schedule, simulate};

/// Serve the interactive lab: the failover chart, jitter, layers,
/// contention, the metastable model, "should this call be retried?",
/// hedging and priorities, all on the real engine, in a browser. Prints the URL and serves until
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
  /api/simulate?model=priority&load=0.5,1,2,3&critical_share=0.2&duration=10s&runs=5
      the priority model: critical and sheddable success at each load, with
      and without priorities (at most 2 million simulated arrivals)
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
  reports 130). 1 it could not run: a --port or --bind it cannot listen on
  (a port in use, an address not on this machine), or the server failed
  while serving. 2 bad usage.")]
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
    /// `-q` keeps stderr for errors only (the URL still goes to stdout);
    /// `-v` is accepted for symmetry.
    #[command(flatten)]
    talk: crate::args::Verbosity,
}

/// Runs the subcommand: binds, prints the URL, serves until interrupted.
pub fn run(a: &Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Not a usage error: the flags are fine, the machine is not (exit 1,
        // as `proxy --listen` and `gameday --metrics-addr`).
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(a.bind, a.port))
            .await
            .map_err(|e| cannot_listen(a.bind, a.port, &e))?;
        let addr = listener.local_addr()?;
        let url = lab::url(addr);
        println!("stagger lab: {url}");
        if !a.talk.quiet {
            eprintln!("serving until interrupted (Ctrl-C)");
        }
        if a.open {
            open_browser(&url);
        }
        let endpoints = Endpoints {
            simulate: api_simulate,
            schedule: api_schedule,
        };
        lab::serve(listener, addr, endpoints).await?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The error of a port the lab cannot listen on, saying what to do.
fn cannot_listen(bind: IpAddr, port: u16, e: &std::io::Error) -> anyhow::Error {
    let addr = SocketAddr::new(bind, port);
    match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
            "--port: cannot listen on {addr}: the port is in use (give another --port, or 0 for a free one)"
        ),
        _ => anyhow::anyhow!("--port: cannot listen on {addr}: {e}"),
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

/// One thread per request: the server runs several at once.
const ONE_THREAD: Options<'static> = Options {
    threads: 1,
    progress: None,
};

/// `GET /api/simulate`: exactly what `stagger simulate --format json`
/// prints for the same flags.
fn api_simulate(q: &str) -> Result<String, BadParam> {
    let args: simulate::Args = flags::flags("simulate", q)?;
    if args.is_priority() {
        let (w, loads, seeds) = simulate_priority::params(&args.priority()).map_err(usage)?;
        lab::check_priority(&w, &loads, seeds.len())?;
        return Ok(simulate_priority::simulate(&w, &loads, &seeds) + "\n");
    }
    if args.is_hedging() {
        let run = args.hedging(1);
        lab::check_hedging_servers(run.capacity)?;
        let (p, strategies) = simulate_hedging::params(&run).map_err(usage)?;
        lab::check_hedging(&p, &strategies)?;
        let (_, doc) = simulate_hedging::simulate(&p, &strategies, &ONE_THREAD).map_err(usage)?;
        return Ok(doc + "\n");
    }
    let (p, strategies) = args.params().map_err(usage)?;
    lab::check_simulation(&p, &strategies)?;
    let (_, doc) = simulate::simulate(&p, &strategies, &ONE_THREAD).map_err(usage)?;
    Ok(doc + "\n")
}

/// `GET /api/schedule`: exactly what `stagger schedule --format json`
/// prints for the same flags.
fn api_schedule(q: &str) -> Result<String, BadParam> {
    let args: schedule::Args = flags::flags("schedule", q)?;
    let attempts = args.policy.schedule.limit().map_err(usage)?;
    lab::check_schedule(attempts.saturating_sub(1) as usize, args.samples)?;
    let doc = schedule::json(&args).map_err(usage)?;
    Ok(doc + "\n")
}

fn usage(e: anyhow::Error) -> BadParam {
    BadParam::from_usage(&format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_parameters_are_named() {
        let simulate = api_simulate;
        let schedule = api_schedule;
        for (q, parameter) in [
            ("runs=100000", "runs"),
            ("burst=9999999", "burst"),
            ("model=metastable&duration=1h&runs=1", "duration"),
            ("model=metastable&rate=2000&duration=300s&runs=20", "runs"),
            ("model=hedging", "requests"),
            ("model=priority&load=0.5,4&duration=300s&runs=20", "runs"),
            ("model=priority&load=0,2", "load"),
            ("model=priority&critical_share=1.5", "critical_share"),
            ("model=hedging&requests=30000&hedge_attempts=4", "requests"),
            (
                "model=hedging&requests=1000&capacity=5000&utilisation=0.5",
                "capacity",
            ),
            (
                "model=hedging&requests=1000&utilisation=1.5&capacity=4",
                "utilisation",
            ),
            ("out=/tmp/x", "out"),
            ("model=nonsense", "model"),
            ("strategy=full,bogus&runs=1", "strategy"),
        ] {
            let e = simulate(q).unwrap_err();
            assert_eq!(e.parameter(), parameter, "{q}: {}", e.message());
        }
        let e = simulate("model=metastable&rate=2000&duration=300s&runs=20").unwrap_err();
        assert!(
            e.message().contains("the work this server does"),
            "{}",
            e.message()
        );
        assert!(simulate("runs=1&duration=5s").is_ok());
        assert!(simulate("model=hedging&requests=20000").is_ok());
        // What the page's priority scene asks for.
        let page = "model=priority&load=0.5,0.75,1,1.25,1.5,1.75,2,2.25,2.5,2.75,3\
                    &critical_share=0.2&duration=10s&runs=5&seed=1";
        assert!(simulate(page).is_ok());
        for (q, parameter) in [
            ("attempts=4294967295&samples=0", "attempts"),
            ("samples=1000000", "samples"),
            ("jitter=purple", "jitter"),
        ] {
            let e = schedule(q).unwrap_err();
            assert_eq!(e.parameter(), parameter, "{q}: {}", e.message());
        }
    }

    #[test]
    fn a_small_simulation_answers_json() {
        let doc = api_simulate("strategy=full&runs=2&duration=10s").unwrap();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["model"], "failover");
        assert_eq!(v["strategies"][0]["strategy"], "full");
        assert_eq!(v["strategies"][0]["runs"], 2);
    }
}
