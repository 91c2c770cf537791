//! Instruction counts (callgrind, through gungraun) for each layer and its
//! peer, in one run, on the request shapes of the library's criterion
//! benches (`crates/stagger/benches/`: `http.rs`, `hedge.rs`, `limiter.rs`,
//! `grpc.rs`, `core.rs`).
//!
//! Criterion's medians on a shared machine move by tens of percent from run
//! to run; a count of executed instructions does not, so the ratios between
//! a layer and its peer are comparable across runs and machines.
//!
//! Every benchmark builds its service and a current-thread tokio runtime in
//! its setup (not counted), serves a few warm-up calls there, and then
//! counts [`CALLS`] calls. Divide a count by [`CALLS`] for one call.
//! The runtime and the service are handed back, so their drop is not
//! counted either.
//!
//! ```text
//! cargo install gungraun-runner --version 0.20.0 --locked   # once; valgrind from apt
//! GUNGRAUN_SAVE_SUMMARY=json cargo bench -p stagger-instructions --bench instructions
//! python3 crates/stagger-instructions/benches/instruction_ratios.py
//! ```
//!
//! The script prints each layer's count over its peer's (and the cost of
//! one more blocking retry against backon's).

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::hint::black_box;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use gungraun::{library_benchmark, library_benchmark_group, main};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use stagger::hedging::HedgePolicyConfig;
use stagger::limit::{Aimd, Algorithm, Gradient, Limiter};
use stagger::tower::{RetryLayer, ShedLayer};
use stagger::{Backoff, HedgePolicy, Policy, RetryExt};
use tokio::runtime::Runtime;
use tower::hedge::Hedge;
use tower::retry::Retry;
use tower::{Layer, Service, ServiceExt};

#[path = "../../stagger/tests/peers/mod.rs"]
mod peers;

use peers::{request, CloneAndBackoff, CloneGet, NoRetry, Ok200};

/// Calls counted per benchmark.
const CALLS: usize = 100;
/// Calls served in setup, so first-use costs (thread locals, lazy
/// statics, the runtime's first poll) stay out of the count.
const WARM_UP: usize = 20;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// One call as the criterion benches make it: a fresh clone of the
/// service, readied, called with a fresh request, on the runtime.
fn cloned_call<S, Req>(rt: &Runtime, svc: &S, req: Req) -> bool
where
    S: Service<Req> + Clone,
{
    rt.block_on(svc.clone().oneshot(req)).is_ok()
}

/// One call on the service itself (tower's `Hedge` is not `Clone`).
fn owned_call<S, Req>(rt: &Runtime, svc: &mut S, req: Req) -> bool
where
    S: Service<Req>,
{
    rt.block_on(async { svc.ready().await.ok()?.call(req).await.ok() })
        .is_some()
}

/// `CALLS` calls of `call` (the counted part of every client benchmark).
fn count<T>(mut state: (Runtime, T), call: impl Fn(&Runtime, &mut T) -> bool) -> (Runtime, T) {
    for _ in 0..CALLS {
        black_box(call(&state.0, &mut state.1));
    }
    state
}

/// A runtime and `svc`, warmed up with `call`.
fn warmed<T>(svc: T, call: impl Fn(&Runtime, &mut T) -> bool) -> (Runtime, T) {
    warmed_by(WARM_UP, svc, call)
}

/// A runtime and `svc`, warmed up with `calls` calls.
fn warmed_by<T>(calls: usize, svc: T, call: impl Fn(&Runtime, &mut T) -> bool) -> (Runtime, T) {
    let mut state = (runtime(), svc);
    for _ in 0..calls {
        assert!(call(&state.0, &mut state.1), "warm-up call failed");
    }
    state
}

// --- The HTTP client layer against tower's `Retry` (http.rs) ------------

fn http_call<S>(rt: &Runtime, svc: &mut S) -> bool
where
    S: Service<Request<Full<Bytes>>> + Clone,
{
    cloned_call(rt, svc, request())
}

fn plain() -> (Runtime, Ok200) {
    warmed(Ok200, http_call)
}

fn tower_noop() -> (Runtime, Retry<NoRetry, Ok200>) {
    warmed(Retry::new(NoRetry, Ok200), http_call)
}

fn tower_cloning() -> (Runtime, Retry<CloneAndBackoff, Ok200>) {
    warmed(Retry::new(CloneAndBackoff { attempt: 0 }, Ok200), http_call)
}

type Layered = stagger::tower::RetryService<Ok200>;

fn stagger_default() -> (Runtime, Layered) {
    warmed(RetryLayer::new(Policy::default()).layer(Ok200), http_call)
}

#[library_benchmark]
#[bench::plain_service(setup = plain)]
fn http_plain(state: (Runtime, Ok200)) -> (Runtime, Ok200) {
    count(state, http_call)
}

#[library_benchmark]
#[bench::tower_retry_noop(setup = tower_noop)]
fn http_tower_noop(state: (Runtime, Retry<NoRetry, Ok200>)) -> (Runtime, Retry<NoRetry, Ok200>) {
    count(state, http_call)
}

#[library_benchmark]
#[bench::tower_retry_cloning(setup = tower_cloning)]
fn http_tower_cloning(
    state: (Runtime, Retry<CloneAndBackoff, Ok200>),
) -> (Runtime, Retry<CloneAndBackoff, Ok200>) {
    count(state, http_call)
}

#[library_benchmark]
#[bench::stagger_retry_layer(setup = stagger_default)]
fn http_stagger(state: (Runtime, Layered)) -> (Runtime, Layered) {
    count(state, http_call)
}

library_benchmark_group!(
    name = http_client;
    benchmarks = http_plain, http_tower_noop, http_tower_cloning, http_stagger
);

// --- Hedging against tower's `hedge` (hedge.rs) --------------------------

fn hedge_call<S>(rt: &Runtime, svc: &mut S) -> bool
where
    S: Service<Request<Full<Bytes>>>,
{
    owned_call(rt, svc, request())
}

/// Calls served before a hedging row is counted: enough for a busy
/// client's latency window, whose percentile is then cached for the rest
/// of its bucket (below 1,000 samples every call recomputes it), as it is
/// in the criterion bench's millions of iterations.
const HEDGE_WARM_UP: usize = 1_200;

type TowerHedge = Hedge<Ok200, CloneGet>;
type Hedged = stagger::tower::RetryService<Ok200>;

fn tower_hedge() -> (Runtime, TowerHedge) {
    // p95 after 20 samples over 10 s windows, as in hedge.rs.
    let svc = Hedge::new(Ok200, CloneGet, 20, 0.95, Duration::from_secs(10));
    warmed_by(HEDGE_WARM_UP, svc, hedge_call)
}

fn stagger_hedge() -> (Runtime, Hedged) {
    let p95 = HedgePolicy::new(HedgePolicyConfig::default()).expect("valid policy");
    warmed_by(HEDGE_WARM_UP, RetryLayer::new(p95).layer(Ok200), hedge_call)
}

#[library_benchmark]
#[bench::tower_hedge_p95(setup = tower_hedge)]
fn hedge_tower(state: (Runtime, TowerHedge)) -> (Runtime, TowerHedge) {
    count(state, hedge_call)
}

#[library_benchmark]
#[bench::stagger_hedging_p95(setup = stagger_hedge)]
fn hedge_stagger(state: (Runtime, Hedged)) -> (Runtime, Hedged) {
    count(state, hedge_call)
}

library_benchmark_group!(
    name = hedging;
    benchmarks = hedge_tower, hedge_stagger
);

// --- The shed layer against tower-acc (limiter.rs) -----------------------

type Answer = fn(Request<()>) -> Ready<Result<Response<()>, Infallible>>;
type Shed = stagger::tower::ShedService<tower::util::ServiceFn<Answer>>;
type Unit = fn(()) -> Ready<Result<(), Infallible>>;
type Acc<A> = tower_acc::ConcurrencyLimit<tower::util::ServiceFn<Unit>, A>;

fn answer(_: Request<()>) -> Ready<Result<Response<()>, Infallible>> {
    ready(Ok(Response::new(())))
}

fn unit(_: ()) -> Ready<Result<(), Infallible>> {
    ready(Ok(()))
}

fn shed_call(rt: &Runtime, svc: &mut Shed) -> bool {
    cloned_call(rt, svc, Request::new(()))
}

fn acc_call<A>(rt: &Runtime, svc: &mut Acc<A>) -> bool
where
    Acc<A>: Service<()> + Clone,
{
    cloned_call(rt, svc, ())
}

fn shed(algorithm: Algorithm) -> (Runtime, Shed) {
    let limiter = Limiter::builder(algorithm)
        .seed(1)
        .build()
        .expect("limiter");
    let svc = ShedLayer::limited(limiter)
        .build()
        .layer(tower::service_fn(answer as Answer));
    warmed(svc, shed_call)
}

fn shed_aimd() -> (Runtime, Shed) {
    shed(Algorithm::Aimd(Aimd {
        initial: 1000,
        ..Aimd::new()
    }))
}

fn shed_gradient() -> (Runtime, Shed) {
    shed(Algorithm::Gradient(Gradient {
        initial: 1000,
        ..Gradient::new()
    }))
}

fn acc_aimd() -> (Runtime, Acc<tower_acc::Aimd>) {
    let algorithm = tower_acc::Aimd::builder()
        .initial_limit(1000)
        .max_limit(1000)
        .build();
    let svc =
        tower_acc::ConcurrencyLimitLayer::new(algorithm).layer(tower::service_fn(unit as Unit));
    warmed(svc, acc_call)
}

fn acc_gradient() -> (Runtime, Acc<tower_acc::Gradient2>) {
    let algorithm = tower_acc::Gradient2::builder()
        .initial_limit(1000)
        .max_limit(1000)
        .build();
    let svc =
        tower_acc::ConcurrencyLimitLayer::new(algorithm).layer(tower::service_fn(unit as Unit));
    warmed(svc, acc_call)
}

#[library_benchmark]
#[bench::stagger_shed_aimd(setup = shed_aimd)]
#[bench::stagger_shed_gradient(setup = shed_gradient)]
fn shed_stagger(state: (Runtime, Shed)) -> (Runtime, Shed) {
    count(state, shed_call)
}

#[library_benchmark]
#[bench::tower_acc_aimd(setup = acc_aimd)]
fn shed_acc_aimd(state: (Runtime, Acc<tower_acc::Aimd>)) -> (Runtime, Acc<tower_acc::Aimd>) {
    count(state, acc_call)
}

/// tower-acc's AIMD around the same `http` service as the shed layer's
/// (the unit rows above are the criterion bench's shape).
fn acc_aimd_http() -> (Runtime, AccHttp) {
    let algorithm = tower_acc::Aimd::builder()
        .initial_limit(1000)
        .max_limit(1000)
        .build();
    let svc =
        tower_acc::ConcurrencyLimitLayer::new(algorithm).layer(tower::service_fn(answer as Answer));
    warmed(svc, acc_http_call)
}

type AccHttp = tower_acc::ConcurrencyLimit<tower::util::ServiceFn<Answer>, tower_acc::Aimd>;

fn acc_http_call(rt: &Runtime, svc: &mut AccHttp) -> bool {
    cloned_call(rt, svc, Request::new(()))
}

#[library_benchmark]
#[bench::tower_acc_aimd_http(setup = acc_aimd_http)]
fn shed_acc_http(state: (Runtime, AccHttp)) -> (Runtime, AccHttp) {
    count(state, acc_http_call)
}

#[library_benchmark]
#[bench::tower_acc_gradient2(setup = acc_gradient)]
fn shed_acc_gradient(
    state: (Runtime, Acc<tower_acc::Gradient2>),
) -> (Runtime, Acc<tower_acc::Gradient2>) {
    count(state, acc_call)
}

library_benchmark_group!(
    name = shedding;
    benchmarks = shed_stagger, shed_acc_aimd, shed_acc_http, shed_acc_gradient
);

// --- The gRPC layer against the bare service, in process (grpc.rs) -------

/// Answers a trailers-only OK at once.
#[derive(Clone, Copy)]
struct GrpcOk;

impl<B> Service<Request<B>> for GrpcOk {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Full<Bytes>>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<B>) -> Self::Future {
        let mut answer = Response::new(Full::default());
        let headers = answer.headers_mut();
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        ready(Ok(answer))
    }
}

fn grpc_request() -> Request<Full<Bytes>> {
    Request::post("http://127.0.0.1/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .expect("valid request")
}

fn grpc_call<S>(rt: &Runtime, svc: &mut S) -> bool
where
    S: Service<Request<Full<Bytes>>> + Clone,
{
    cloned_call(rt, svc, grpc_request())
}

type GrpcLayered = <stagger::tower::grpc::RetryLayer as Layer<GrpcOk>>::Service;

fn grpc_plain() -> (Runtime, GrpcOk) {
    warmed(GrpcOk, grpc_call)
}

fn grpc_stagger() -> (Runtime, GrpcLayered) {
    let layer = stagger::tower::grpc::RetryLayer::builder()
        .default_policy(
            stagger::grpc::MethodPolicy::builder()
                .build()
                .expect("valid policy"),
        )
        .throttling(10.0, 0.1)
        .build()
        .expect("valid layer");
    warmed(layer.layer(GrpcOk), grpc_call)
}

#[library_benchmark]
#[bench::plain_service(setup = grpc_plain)]
fn grpc_bare(state: (Runtime, GrpcOk)) -> (Runtime, GrpcOk) {
    count(state, grpc_call)
}

#[library_benchmark]
#[bench::stagger_grpc_layer(setup = grpc_stagger)]
fn grpc_layer(state: (Runtime, GrpcLayered)) -> (Runtime, GrpcLayered) {
    count(state, grpc_call)
}

library_benchmark_group!(
    name = grpc_inprocess;
    benchmarks = grpc_bare, grpc_layer
);

// --- A blocking retry against backon's (core.rs) -------------------------

/// A closure failing `fails` times then succeeding, retried by stagger
/// with no backoff and no sleep.
fn stagger_retries(fails: u32) -> u32 {
    let policy = Policy::builder()
        .max_attempts(fails + 1)
        .backoff(Backoff {
            base: Duration::ZERO,
            ..Backoff::new()
        })
        .build()
        .expect("valid policy");
    let mut total = 0;
    for _ in 0..CALLS {
        let mut n = 0;
        let once = (|| {
            n += 1;
            if n <= fails {
                Err(())
            } else {
                Ok(black_box(n))
            }
        })
        .retry(&policy)
        .sleep(|_| {})
        .call();
        total += once.unwrap_or(0);
    }
    total
}

/// The same with backon: jittered exponential from zero, no sleep.
fn backon_retries(fails: u32) -> u32 {
    let mut total = 0;
    for _ in 0..CALLS {
        let mut n = 0;
        let once = backon::BlockingRetryable::retry(
            || {
                n += 1;
                if n <= fails {
                    Err(())
                } else {
                    Ok(black_box(n))
                }
            },
            backon::ExponentialBuilder::default()
                .with_min_delay(Duration::ZERO)
                .with_jitter()
                .with_max_times(fails as usize),
        )
        .sleep(|_| {})
        .call();
        total += once.unwrap_or(0);
    }
    total
}

#[library_benchmark]
#[bench::x1(1)]
#[bench::x10(10)]
fn retries_stagger(fails: u32) -> u32 {
    stagger_retries(black_box(fails))
}

#[library_benchmark]
#[bench::x1(1)]
#[bench::x10(10)]
fn retries_backon(fails: u32) -> u32 {
    backon_retries(black_box(fails))
}

library_benchmark_group!(
    name = retries;
    benchmarks = retries_stagger, retries_backon
);

main!(
    library_benchmark_groups = http_client,
    hedging,
    shedding,
    grpc_inprocess,
    retries
);
