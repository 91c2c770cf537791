//! A fault-injecting reverse proxy: the game-day's faults in front of any
//! real HTTP/1.1 or HTTP/2 service.
//!
//! The game-day's own server proves what a retry policy does to a
//! dependency that stumbles; a user's question is what it does to *their*
//! dependency. The proxy sits in front of it, injects the same faults on a
//! schedule ([`crate::fault`]: `stall`, `failover`, `503`, `429`, `reset`,
//! `slow:MS`, `blackhole`, several at once) and records every request's
//! arrival, first attempt or retry ([`record`]), so the arrival histogram
//! — the picture of a retry storm or of its absence — can be drawn for
//! any client fleet.
//!
//! Everything is streamed (no body is collected), bounded (at most
//! [`Config::max_connections`] connections, a header read timeout, a
//! bounded key memory, a histogram of at most [`MAX_SPAN`]) and the
//! command listens on loopback unless told otherwise.
//!
//! The calling protocol: [`upstream`] and [`crate::fault::parse`] check the
//! user's words; [`Proxy::start`] (inside a tokio runtime) listens and
//! serves; [`Proxy::report`] tells what it saw so far; [`Proxy::stop`]
//! ends it. [`run`] does all of it on a runtime of its own until a stop
//! signal or a duration, for `stagger proxy`.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::Scheme;
use http::Uri;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::bins::Timeline;
use crate::fault::{Fault, Window};
use crate::listen::{accept_loop, Downtime};
use crate::reset::Resettable;
use crate::{Error, ErrorKind};

mod forward;
pub mod grpc;
mod mismatch;
pub mod record;
mod render;
mod stats;

pub use forward::{Upstream, MAX_HOLD};
pub use record::Report;

use forward::Shared;

/// The longest histogram kept (later arrivals are counted in the totals
/// but not binned).
pub const MAX_SPAN: Duration = Duration::from_secs(3600);

/// What a proxy should do.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it listens.
    pub listen: SocketAddr,
    /// Where it forwards.
    pub upstream: Upstream,
    /// The faults, in time since the proxy started; where two answering
    /// faults hold at once the first listed wins.
    pub faults: Vec<Window>,
    /// How long the histogram covers (at most [`MAX_SPAN`]).
    pub span: Duration,
    /// Timeout of a connection to the upstream.
    pub connect_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Where `/stats` and `/metrics` are served (`None`: nowhere).
    pub stats_addr: Option<SocketAddr>,
    /// What draws the histogram that `/stats?format=svg` serves (`None`:
    /// that address answers 404). This crate draws nothing: `stagger proxy`
    /// passes the report crate's chart.
    pub chart: Option<fn(&Report) -> String>,
    /// What writes the histogram as text, what `/stats` serves (`None`:
    /// `/stats` serves the report's JSON). `stagger proxy` passes the report
    /// crate's.
    pub text: Option<fn(&Report) -> String>,
}

impl Config {
    /// A proxy from `listen` to `upstream` with no fault, the defaults
    /// elsewhere.
    pub fn new(listen: SocketAddr, upstream: Upstream) -> Config {
        Config {
            listen,
            upstream,
            faults: Vec::new(),
            span: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(2),
            max_connections: 4096,
            stats_addr: None,
            chart: None,
            text: None,
        }
    }
}

/// Parses the upstream, `http://HOST:PORT` (a path is refused: requests
/// keep their own). The error names `flag`.
pub fn upstream(flag: &str, s: &str) -> Result<Upstream, String> {
    let uri: Uri = s
        .parse()
        .map_err(|_| format!("{flag}: `{s}` is not a URL (e.g. http://127.0.0.1:8080)"))?;
    match uri.scheme() {
        Some(x) if *x == Scheme::HTTP => {}
        Some(x) => {
            return Err(format!(
                "{flag}: `{s}`: scheme `{x}` is not forwarded; the proxy speaks http \
                 (HTTP/1.1 and h2c)"
            ))
        }
        None => {
            return Err(format!(
                "{flag}: `{s}` has no scheme (e.g. http://127.0.0.1:8080)"
            ))
        }
    }
    let Some(authority) = uri.authority().cloned() else {
        return Err(format!("{flag}: `{s}` has no host"));
    };
    if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
        return Err(format!(
            "{flag}: `{s}`: a path is not forwarded; requests keep their own (give http://HOST:PORT)"
        ));
    }
    Ok(Upstream {
        scheme: Scheme::HTTP,
        authority,
    })
}

/// A running proxy; [`Proxy::stop`] (or dropping its runtime) ends it.
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where `/stats` and `/metrics` are served, if anywhere.
    pub stats_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    span_end: Instant,
    accept: JoinHandle<()>,
    stats: Option<JoinHandle<()>>,
    kill: watch::Sender<u64>,
}

impl Proxy {
    /// Listens on [`Config::listen`] and serves; the faults' times count
    /// from now. Must run inside a tokio runtime.
    pub async fn start(cfg: Config) -> Result<Proxy, Error> {
        Proxy::start_at(cfg, Instant::now()).await
    }

    /// The same with the faults' times counted from `start` (the
    /// game-day's timeline).
    pub(crate) async fn start_at(cfg: Config, start: Instant) -> Result<Proxy, Error> {
        let cannot = |what: String| move |e| Error::with(ErrorKind::Run, what, e);
        let listener = TcpListener::bind(cfg.listen)
            .await
            .map_err(cannot(format!("--listen: cannot listen on {}", cfg.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(cannot("--listen: no local address".into()))?;
        let span = cfg.span.min(MAX_SPAN);
        let line = Timeline::new(start, span);
        let client = |h2: bool| {
            let mut conn = HttpConnector::new();
            conn.set_nodelay(true);
            conn.set_connect_timeout(Some(cfg.connect_timeout));
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(Duration::from_secs(30))
                .pool_max_idle_per_host(1024)
                .http2_only(h2);
            b.build(conn)
        };
        let shared = Arc::new(Shared {
            start,
            faults: cfg.faults.clone(),
            upstream: cfg.upstream.clone(),
            h1: client(false),
            h2: client(true),
            rec: Arc::new(record::Recorder::new(line)),
            connect_timeout: cfg.connect_timeout,
            resets: AtomicU64::new(0),
        });
        let (kill, _) = watch::channel(0u64);
        let stats = match cfg.stats_addr {
            Some(a) => {
                Some(stats::start(a, shared.clone(), start + span, cfg.chart, cfg.text).await?)
            }
            None => None,
        };
        let stats_addr = stats.as_ref().map(|s| s.0);
        let accept = tokio::spawn(self::accept(
            listener,
            addr,
            shared.clone(),
            kill.clone(),
            Arc::new(Semaphore::new(cfg.max_connections.max(1))),
        ));
        Ok(Proxy {
            addr,
            stats_addr,
            shared,
            span_end: start + span,
            accept,
            stats: stats.map(|s| s.1),
            kill,
        })
    }

    /// What it saw so far.
    pub fn report(&self) -> Report {
        let now = Instant::now().min(self.span_end);
        self.shared.rec.report(&self.shared.faults, now)
    }

    /// The live counters (the game-day reads its bins from them).
    pub(crate) fn recorder(&self) -> &record::Recorder {
        &self.shared.rec
    }

    /// Stops listening and drops every open connection.
    pub fn stop(self) {
        self.accept.abort();
        if let Some(s) = &self.stats {
            s.abort();
        }
        self.kill.send_modify(|g| *g += 1);
    }
}

/// Accepts connections through the one accept loop (failovers close the
/// listener there); during a blackhole connections are accepted and never
/// answered; past [`Config::max_connections`] one is closed at once rather
/// than queued.
async fn accept(
    listener: TcpListener,
    addr: SocketAddr,
    s: Arc<Shared>,
    kill: watch::Sender<u64>,
    room: Arc<Semaphore>,
) {
    // Every connection served holds a permit: the open ones are the rest.
    let most = room.available_permits();
    let downtime = Downtime::new(
        s.faults
            .iter()
            .filter(|w| w.kind == Fault::Failover)
            .map(|w| (s.start + w.start, w.end().map(|e| s.start + e))),
    );
    let counted = s.clone();
    let open = room.clone();
    let down = move || {
        let dropped = most.saturating_sub(open.available_permits());
        counted.rec.failover(dropped as u64);
    };
    let serve = move |stream: TcpStream, kill: watch::Receiver<u64>| {
        let t = Instant::now().saturating_duration_since(s.start);
        let hole = s
            .faults
            .iter()
            .find(|w| w.kind == Fault::Blackhole && w.holds(t));
        if let Some(w) = hole {
            s.rec.event(record::Event::Blackholed);
            let until = w.end().map_or(forward::MAX_HOLD, |e| e.saturating_sub(t));
            tokio::spawn(hold(stream, until.min(forward::MAX_HOLD), kill, s.clone()));
            return;
        }
        if let Ok(permit) = room.clone().try_acquire_owned() {
            tokio::spawn(connection(stream, s.clone(), kill, permit));
        }
    };
    accept_loop(listener, addr, downtime, kill, "proxy", down, serve).await;
}

/// A blackholed connection: open, never answered, closed when the fault
/// ends. The head of an HTTP/1.1 request sent on it is read, so the
/// request counts as an arrival of the second it came in, first attempt or
/// retry by its headers (an HTTP/2 connection's requests are not read).
async fn hold(
    mut stream: TcpStream,
    until: Duration,
    mut kill: watch::Receiver<u64>,
    s: Arc<Shared>,
) {
    use tokio::io::AsyncReadExt;
    let end = tokio::time::Instant::now() + until;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            n = stream.read(&mut buf), if head.len() < 64 * 1024 => match n {
                Ok(n) if n > 0 => {
                    head.extend_from_slice(&buf[..n]);
                    if let Some(h) = request_head(&head) {
                        s.rec.arrival(&h, Instant::now());
                        head.clear();
                    }
                }
                _ => break,
            },
            _ = tokio::time::sleep_until(end) => break,
            _ = kill.changed() => break,
        }
    }
    drop(stream);
}

/// The headers of the HTTP/1.x request head at the start of `bytes`, once
/// it is complete; `None` before (or for HTTP/2, whose headers are
/// compressed).
fn request_head(bytes: &[u8]) -> Option<http::HeaderMap> {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
    let text = std::str::from_utf8(&bytes[..end]).ok()?;
    let mut lines = text.split("\r\n");
    if !lines.next()?.contains("HTTP/1.") {
        return None;
    }
    let mut h = http::HeaderMap::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.trim().as_bytes()),
            http::HeaderValue::from_str(value.trim()),
        ) {
            h.append(n, v);
        }
    }
    Some(h)
}

/// Serves one connection, HTTP/1.1 or HTTP/2 (told by its first bytes),
/// until it closes or the proxy drops it.
async fn connection(
    stream: TcpStream,
    s: Arc<Shared>,
    mut kill: watch::Receiver<u64>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    let stream = Resettable::new(stream);
    let reset = stream.handle();
    let svc = hyper::service::service_fn(move |req| forward::handle(s.clone(), reset.clone(), req));
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(256);
    let conn = b.serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = kill.changed() => {}
    }
}

/// Runs a proxy on a runtime of its own until `stop` receives (or is
/// dropped) or `duration` has passed, and returns what it saw. `ready` is
/// called with the listening addresses once it serves.
pub fn run(
    cfg: Config,
    duration: Option<Duration>,
    stop: std::sync::mpsc::Receiver<()>,
    ready: impl FnOnce(SocketAddr, Option<SocketAddr>),
) -> Result<Report, Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::with(ErrorKind::Run, "cannot start the tokio runtime", e))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    // The std channel is waited on by a thread of its own.
    std::thread::spawn(move || {
        let _ = stop.recv();
        let _ = tx.send(());
    });
    let result = rt.block_on(async move {
        let proxy = Proxy::start(cfg).await?;
        ready(proxy.addr, proxy.stats_addr);
        let forever = Duration::from_secs(86_400 * 365);
        tokio::select! {
            _ = tokio::time::sleep(duration.unwrap_or(forever)) => {}
            _ = rx => {}
        }
        let report = proxy.report();
        proxy.stop();
        Ok::<_, Error>(report)
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_is_an_http_url_without_a_path() {
        let u = upstream("UPSTREAM", "http://127.0.0.1:8080").unwrap();
        assert_eq!(u.authority.as_str(), "127.0.0.1:8080");
        assert!(upstream("UPSTREAM", "http://127.0.0.1:8080/").is_ok());
        for (bad, says) in [
            ("https://x:1", "scheme `https`"),
            ("127.0.0.1:80", "no scheme"),
            ("http://x:1/api", "a path is not forwarded"),
            ("ht tp://", "not a URL"),
        ] {
            let e = upstream("UPSTREAM", bad).unwrap_err();
            assert!(
                e.starts_with("UPSTREAM: ") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }
}
