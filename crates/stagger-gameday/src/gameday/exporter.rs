//! `--metrics-addr`: the fleet's metrics for Prometheus to scrape.
//!
//! Every pod (one simulated process of the client service) reports through
//! the library's [`MetricsObserver`] under the documented metric names, with
//! `dependency="gameday-server"`, `pod="pod-N"` (one value per simulated
//! process) and `strategy` labels. One exporter serves them all at
//! `http://ADDR/metrics` in the Prometheus text format, from the start of the
//! game-day to its end, so the shipped recording and alerting rules can be
//! watched against a real storm.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use stagger::export::MetricsObserver;
use stagger::export::Stats;
use stagger::Observer;
use tokio::sync::oneshot;

use crate::{Error, ErrorKind};

/// The `dependency` label of every game-day series.
pub const DEPENDENCY: &str = "gameday-server";

/// Parses `--metrics-addr`: a loopback socket address (the game-day never
/// listens beyond this machine).
pub fn addr(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s
        .parse()
        .map_err(|_| format!("`{s}` is not an address and port (e.g. 127.0.0.1:9464)"))?;
    if !a.ip().is_loopback() {
        return Err(format!(
            "`{s}` is not a loopback address; the game-day only listens on this machine \
             (e.g. 127.0.0.1:9464)"
        ));
    }
    Ok(a)
}

/// The observer of one pod: its counters, plus the metrics facade when the
/// exporter runs.
pub fn pod_observer(
    stats: &Arc<Stats>,
    exported: bool,
    pod: usize,
    strategy: &str,
) -> Arc<dyn Observer> {
    if !exported {
        return stats.clone();
    }
    let metrics = MetricsObserver::for_dependency(DEPENDENCY)
        .label("pod", format!("pod-{pod}"))
        .label("strategy", strategy.to_string());
    Arc::new(vec![
        stats.clone() as Arc<dyn Observer>,
        Arc::new(metrics) as Arc<dyn Observer>,
    ])
}

/// The running exporter: the process's global `metrics` recorder and an
/// HTTP server on a thread of its own, stopped on drop.
#[derive(Debug)]
pub struct Exporter {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Binds `addr`, installs the Prometheus recorder as the process's
    /// `metrics` recorder and starts serving `/metrics`.
    ///
    /// A port that cannot be bound is an [`ErrorKind::Run`] error; a
    /// recorder already set in this process an [`ErrorKind::Usage`] one.
    pub fn start(addr: SocketAddr) -> Result<Exporter, Error> {
        let cannot_listen = |e| {
            Error::with(
                ErrorKind::Run,
                format!("--metrics-addr: cannot listen on {addr}"),
                e,
            )
        };
        let listener = std::net::TcpListener::bind(addr).map_err(cannot_listen)?;
        listener.set_nonblocking(true).map_err(cannot_listen)?;
        let addr = listener.local_addr().map_err(cannot_listen)?;
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder)
            .map_err(|_| Error::usage("--metrics-addr: a metrics recorder is already set"))?;
        MetricsObserver::describe();
        let (tx, rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("stagger-metrics".into())
            .spawn(move || serve(listener, handle, rx))
            .map_err(|e| Error::with(ErrorKind::Run, "cannot start the metrics thread", e))?;
        Ok(Exporter {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `/metrics` until `stop`; the runtime is then shut down within a
/// second whatever connections are still open.
fn serve(listener: std::net::TcpListener, handle: PrometheusHandle, stop: oneshot::Receiver<()>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("stagger gameday: cannot start the metrics runtime");
        return;
    };
    rt.block_on(async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            eprintln!("stagger gameday: cannot serve metrics");
            return;
        };
        // Summaries keep their recent samples until upkeep trims them.
        let upkeep = handle.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                upkeep.run_upkeep();
            }
        });
        let app = axum::Router::new().route(
            "/metrics",
            get(move || {
                let handle = handle.clone();
                async move { handle.render() }
            }),
        );
        tokio::select! {
            r = axum::serve(listener, app) => {
                if let Err(e) = r {
                    eprintln!("stagger gameday: the metrics server stopped: {e}");
                }
            }
            _ = stop => {}
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses() {
        assert!(addr("127.0.0.1:9464").is_ok());
        assert!(addr("[::1]:0").is_ok());
        for bad in ["0.0.0.0:9464", "10.0.0.1:80", "localhost", "127.0.0.1"] {
            let e = addr(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}
