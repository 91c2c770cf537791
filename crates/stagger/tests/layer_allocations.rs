//! Allocations per successful request through each stagger layer, beside
//! the tower peer a tower user would write in its place, counted with a
//! global allocator wrapper (deterministic: the same code allocates the
//! same number of times on any machine, whatever its load).
//!
//! The peers: tower's `Retry` with a policy that clones the request for a
//! second attempt and stamps its attempt number (what a tower user writes
//! to get stagger's headers and replay), and tower's `hedge` with a fixed
//! delay. Every side serves the same request shape (one header, an empty
//! body) from the same always-ready service on the same runtime.

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use stagger::tower::RetryLayer;
use stagger::{HedgeDelay, HedgePolicy, Policy};
use tower::retry::{Policy as TowerPolicy, Retry};
use tower::{Layer, Service, ServiceExt};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const REQUESTS: usize = 200;

/// Always ready, answers 200 at once.
#[derive(Clone, Copy)]
struct Ok200;

impl<B> Service<Request<B>> for Ok200 {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Ready<Result<Response<()>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        ready(Ok(Response::new(())))
    }
}

/// What a tower user writes: clone the request for the next attempt and
/// stamp its number, back off on a 5xx.
#[derive(Clone, Copy)]
struct CloneAndBackoff {
    attempt: u32,
}

impl<Res, E> TowerPolicy<Request<Full<Bytes>>, Response<Res>, E> for CloneAndBackoff {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _req: &mut Request<Full<Bytes>>,
        result: &mut Result<Response<Res>, E>,
    ) -> Option<Self::Future> {
        let failed = result
            .as_ref()
            .map_or(true, |r| r.status().is_server_error());
        if !failed || self.attempt >= 3 {
            return None;
        }
        self.attempt += 1;
        Some(tokio::time::sleep(Duration::from_millis(
            100 << self.attempt,
        )))
    }

    fn clone_request(&mut self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        Some(stamped_copy(req, self.attempt + 1))
    }
}

/// A copy of `req` (head and body) carrying `x-retry-attempt: attempt`.
fn stamped_copy(req: &Request<Full<Bytes>>, attempt: u32) -> Request<Full<Bytes>> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy.headers_mut()
        .insert("x-retry-attempt", http::HeaderValue::from(attempt));
    copy
}

/// tower's hedge policy: every request may be hedged, cloned as above.
#[derive(Clone, Copy)]
struct CloneGet;

impl tower::hedge::Policy<Request<Full<Bytes>>> for CloneGet {
    fn clone_request(&self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        Some(stamped_copy(req, 2))
    }

    fn can_retry(&self, _req: &Request<Full<Bytes>>) -> bool {
        true
    }
}

fn request() -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1/item?id=7")
        .header("accept", "application/json")
        .body(Full::default())
        .expect("valid request")
}

/// Allocations per request of `REQUESTS` requests through `svc`,
/// on a current-thread runtime (the requests are built outside the count).
fn per_request<S>(rt: &tokio::runtime::Runtime, mut svc: S) -> f64
where
    S: Service<Request<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let requests: Vec<_> = (0..REQUESTS).map(|_| request()).collect();
    // Warm up thread-locals and the runtime outside the count.
    rt.block_on(async { svc.ready().await.unwrap().call(request()).await.unwrap() });
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    rt.block_on(async {
        for r in requests {
            let resp = svc.ready().await.unwrap().call(r).await.unwrap();
            drop(resp);
        }
    });
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / REQUESTS as f64
}

// One test function, so no other test thread allocates while we count.
#[test]
fn a_successful_request_allocates_no_more_than_its_tower_peer() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let plain = per_request(&rt, Ok200);
    let tower_retry = per_request(&rt, Retry::new(CloneAndBackoff { attempt: 0 }, Ok200));
    let retry = per_request(&rt, RetryLayer::new(Policy::default()).layer(Ok200));
    let fixed = || {
        HedgePolicy::builder()
            .delay(HedgeDelay::Fixed(Duration::from_millis(20)))
            .build()
            .unwrap()
    };
    let tower_hedge = per_request(
        &rt,
        tower::hedge::Hedge::new_with_mock_latencies(
            Ok200,
            CloneGet,
            10,
            0.95,
            Duration::from_secs(10),
            &[20; 20],
        ),
    );
    let hedge = per_request(&rt, RetryLayer::new(fixed()).layer(Ok200));
    println!(
        "allocations per successful request: plain {plain}, tower Retry (cloning) {tower_retry}, \
         stagger RetryLayer {retry}, tower hedge {tower_hedge}, stagger hedging {hedge}"
    );
    assert!(
        retry <= tower_retry,
        "RetryLayer {retry} > tower Retry with a cloning policy {tower_retry}"
    );
    assert!(
        hedge <= tower_hedge,
        "RetryLayer hedging {hedge} > tower hedge {tower_hedge}"
    );
}
