//! The priority game-day's upstream: a busy loop calibrated once, run on
//! a few threads first in, first out, served over HTTP/1.1 on 127.0.0.1
//! behind the layer under test.

use std::convert::Infallible;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tower::{Layer, Service, ServiceExt};

use crate::Error;

/// Busy-loop iterations that take about `work` on this machine, measured
/// once: the best of a few timed rounds (the least disturbed by others).
pub(super) fn calibrate(work: Duration) -> u64 {
    const ROUND: u64 = 200_000;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        burn(ROUND);
        best = best.min(t0.elapsed().as_secs_f64() / ROUND as f64);
    }
    ((work.as_secs_f64() / best.max(1e-12)) as u64).max(1)
}

/// The CPU work: `n` rounds of a multiply-xorshift the optimiser cannot drop.
pub(super) fn burn(n: u64) -> u64 {
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15_u64);
    for i in 0..n {
        x = (x ^ (x >> 29))
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .wrapping_add(i);
    }
    std::hint::black_box(x)
}

/// The upstream's cores: threads running each request's busy loop in
/// arrival order.
#[derive(Clone)]
pub(super) struct Cpu {
    jobs: mpsc::Sender<tokio::sync::oneshot::Sender<()>>,
    threads: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>,
    /// The threads' Linux thread ids (`/proc/self/task/<tid>`), as each
    /// found its own; none elsewhere.
    tids: Arc<std::sync::Mutex<Vec<u32>>>,
    cores: u32,
}

impl Cpu {
    pub(super) fn start(iterations: u64, cores: u32) -> Cpu {
        let (jobs, rx) = mpsc::channel::<tokio::sync::oneshot::Sender<()>>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let tids = Arc::new(std::sync::Mutex::new(Vec::new()));
        let threads = (0..cores.max(1))
            .map(|_| {
                let rx = rx.clone();
                let tids = tids.clone();
                std::thread::spawn(move || {
                    if let (Some(tid), Ok(mut t)) = (own_tid(), tids.lock()) {
                        t.push(tid);
                    }
                    serve(&rx, iterations);
                })
            })
            .collect();
        Cpu {
            jobs,
            threads: Arc::new(std::sync::Mutex::new(threads)),
            tids,
            cores: cores.max(1),
        }
    }

    /// The threads burning the requests' CPU, by Linux thread id.
    pub(super) fn tids(&self) -> Vec<u32> {
        self.tids.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// How many threads burn the requests' CPU: the upstream's cores.
    pub(super) fn cores(&self) -> u32 {
        self.cores
    }

    async fn work(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.jobs.send(tx).is_ok() {
            let _ = rx.await;
        }
    }

    /// Ends the threads once every clone is gone and the queue is drained.
    pub(super) fn stop(self) {
        let threads = self.threads.lock().map(|mut t| std::mem::take(&mut *t));
        drop(self.jobs);
        for t in threads.unwrap_or_default() {
            let _ = t.join();
        }
    }
}

/// One thread's loop: each request's busy loop, in arrival order, until
/// the queue closes.
fn serve(rx: &std::sync::Mutex<mpsc::Receiver<tokio::sync::oneshot::Sender<()>>>, iterations: u64) {
    loop {
        let next = rx.lock().map(|r| r.recv());
        let Ok(Ok(done)) = next else { return };
        if done.is_closed() {
            continue; // its caller has gone: nothing to do
        }
        burn(iterations);
        let _ = done.send(());
    }
}

/// No layer: the bare upstream.
#[derive(Clone, Copy)]
pub(super) struct Bare;

impl<S> Layer<S> for Bare {
    type Service = S;
    fn layer(&self, inner: S) -> S {
        inner
    }
}

/// A server on 127.0.0.1 whose requests go through `layer` to the CPU;
/// what a layer's error or a shed says is answered 503.
pub(super) async fn start<L>(
    layer: L,
    cpu: &Cpu,
) -> Result<(String, tokio::task::JoinHandle<()>), Error>
where
    L: Layer<Upstream> + Send + 'static,
    L::Service: Service<http::Request<Incoming>, Response = http::Response<String>>
        + Clone
        + Send
        + 'static,
    <L::Service as Service<http::Request<Incoming>>>::Future: Send,
    <L::Service as Service<http::Request<Incoming>>>::Error: Send,
{
    let (listener, addr) = crate::gameday::loopback_listener().await?;
    let svc = layer.layer(Upstream(cpu.clone()));
    let server = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let svc = svc.clone();
            conns.spawn(async move {
                let each = hyper::service::service_fn(move |req| {
                    let svc = svc.clone();
                    async move {
                        Ok::<_, Infallible>(match svc.oneshot(req).await {
                            Ok(r) => r,
                            Err(_) => unavailable(),
                        })
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), each)
                    .await;
            });
        }
    });
    Ok((format!("http://{addr}/"), server))
}

fn unavailable() -> http::Response<String> {
    let mut r = http::Response::new(String::new());
    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    r
}

/// The upstream as a service: burn, then 200.
#[derive(Clone)]
pub(super) struct Upstream(Cpu);

impl Service<http::Request<Incoming>> for Upstream {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<Incoming>) -> Self::Future {
        let cpu = self.0.clone();
        Box::pin(async move {
            cpu.work().await;
            Ok(http::Response::new(String::from("ok")))
        })
    }
}

/// This thread's Linux thread id, from `/proc/thread-self`
/// (`<pid>/task/<tid>`); none where there is no such link.
pub(super) fn own_tid() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}
