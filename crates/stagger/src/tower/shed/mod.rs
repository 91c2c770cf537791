//! The server [`ShedLayer`]: a concurrency limit (fixed with a queue, or a
//! [`Limiter`]); when full, retries are turned away before first attempts
//! (and, with priorities, lower levels before higher ones), and work whose
//! caller has given up is dropped before it starts.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, Request, Response};
use tokio::sync::Semaphore;
use tower_layer::Layer;
use tower_service::Service;

mod answer;

use super::deadline::deadline_response;
use crate::grpc::is_grpc;
use crate::grpc::wire::{GRPC_PREVIOUS_ATTEMPTS, GRPC_TIMEOUT};
use crate::guardrails::event::{Observer, ShedReason};
use crate::http::inbound::{inbound_deadline, inbound_priority};
use crate::http::{inbound_attempt, Inbound, TokioClock};
use crate::http::{ENVOY_ATTEMPT_COUNT, PRIORITY, REQUEST_TIMEOUT, RETRY_ATTEMPT};
use crate::limit::{Completion, CpuTrigger, Limiter, Token};
use crate::priority::{Ceilings, Class, Priority};
use crate::time::Clock;

/// Load shedding for a server: at most `max_concurrency` requests run at
/// once and at most `max_queue` wait. A first attempt may wait in the whole
/// queue; a retry (`x-retry-attempt`, Envoy's `x-envoy-attempt-count` or
/// gRPC's `grpc-previous-rpc-attempts` saying attempt ≥ 2) only in its first
/// [`retry_queue`](ShedBuilder::retry_queue) places, so under load retries
/// are shed before first attempts. A shed request gets `503 Service
/// Unavailable` with `Retry-After` drawn uniformly from a range of whole
/// seconds, so the clients it turns away do not come back together.
///
/// Or, with [`ShedLayer::limited`], a [`Limiter`] decides: a static,
/// AIMD or latency-gradient limit on requests in flight, with a share kept
/// for first attempts and no queue (what is not admitted is answered at
/// once). The limiter learns from each admitted request how long it took
/// and whether it ended after its caller's deadline.
///
/// With [`priorities`](ShedBuilder::priorities), each request's level
/// (`x-criticality`; `critical` when it names none or a value not
/// understood) decides too: the lowest level is shed first, within a level
/// retries before first attempts, and each level keeps a guaranteed share
/// of the limit (or of the queue) that a flood of lower work cannot take
/// ([`Ceilings`]). A shed request of a lower level is told to come back
/// later: `Retry-After` (or pushback) ×2 for `sheddable_plus`, ×4 for
/// `sheddable`.
///
/// With [`cpu`](ShedBuilder::cpu), a [`CpuTrigger`] sheds too, beside the
/// limit: when the process's smoothed CPU use is above its threshold, its
/// controller's shed rate is taken from the arriving requests lowest level
/// (and retries) first, whatever the limit says — whichever of the two
/// says "overloaded" first sheds the request.
///
/// Either way, work whose caller's deadline (`x-request-timeout-ms`, or
/// `grpc-timeout` for gRPC) has passed is dropped before it starts — on
/// arrival, or when its turn in the queue comes — with the answer
/// [`DeadlineLayer`](super::DeadlineLayer) gives: `504` (gRPC:
/// `DEADLINE_EXCEEDED`). Put the `ShedLayer` outermost, so a shed request
/// costs no more than reading its headers, and a `DeadlineLayer` inside it
/// to cut work off at the deadline.
///
/// A layer is configured once, through [`ShedLayer::builder`] or
/// [`ShedLayer::limited`], and has no settings of its own to change
/// afterwards: clones of the layer, and every service it makes, share one
/// set of limits and counters.
///
/// ```
/// use stagger::limit::{Gradient, Limiter};
/// use stagger::tower::ShedLayer;
/// use std::time::Duration;
///
/// let shed = ShedLayer::builder(64, 128)
///     .retry_queue(16)
///     .retry_after(Duration::from_secs(1), Duration::from_secs(5))
///     .build();
/// let twin = shed.clone();
/// assert_eq!(shed.stats().shed_retries, 0);
/// assert_eq!(twin.stats(), shed.stats());
///
/// // An adaptive limit: retries may use 80 % of it.
/// let limiter = Limiter::builder(Gradient::new()).reserve(0.2).build()?;
/// let adaptive = ShedLayer::limited(limiter).build();
/// assert_eq!(adaptive.limiter().map(|l| l.limit()), Some(20));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ShedLayer {
    shared: Arc<Shared>,
}

struct Shared {
    gate: Gate,
    /// The shedding order by priority, when the layer sheds by priority.
    ceilings: Option<Ceilings>,
    cpu: Option<CpuTrigger>,
    observer: Option<Arc<dyn Observer>>,
    retry_after: (u64, u64),
    admitted: AtomicU64,
    shed_first: AtomicU64,
    shed_retries: AtomicU64,
    expired: AtomicU64,
    shed_cpu: AtomicU64,
    shed_by_priority: [AtomicU64; Priority::LEVELS],
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("gate", &self.gate)
            .field("observer", &self.observer.is_some())
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

/// What decides admission.
#[derive(Debug)]
enum Gate {
    /// A fixed number running and a queue, retries waiting only in its
    /// first places.
    Queue {
        permits: Arc<Semaphore>,
        queued: AtomicUsize,
        max_queue: usize,
        retry_queue: usize,
        /// The share of the queue retries may not use, in parts per
        /// million (the priority rule's reserve).
        retry_reserve_ppm: u64,
    },
    /// A limiter; no queue.
    Limit(Limiter),
}

/// What a [`ShedLayer`] has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShedStats {
    /// Requests let through to the service.
    pub admitted: u64,
    /// First attempts answered 503.
    pub shed_first: u64,
    /// Retries answered 503.
    pub shed_retries: u64,
    /// Requests dropped unstarted because their caller's deadline had
    /// passed (on arrival or while queued).
    pub expired: u64,
    /// Requests the CPU trigger shed (also counted as first attempts or
    /// retries shed).
    pub shed_cpu: u64,
    /// Requests shed (first attempts and retries) by level, indexed by
    /// [`Priority::rank`]; all 0 unless the layer sheds by priority.
    pub shed_by_priority: [u64; Priority::LEVELS],
}

/// Configures a [`ShedLayer`]: plain values until [`build`](Self::build)
/// makes the one shared set of limits and counters. Building twice makes
/// two independent layers (sharing the limiter, if one was given).
#[derive(Clone)]
pub struct ShedBuilder {
    max_concurrency: usize,
    max_queue: usize,
    retry_queue: Option<usize>,
    retry_after: (u64, u64),
    limiter: Option<Limiter>,
    ceilings: Option<Ceilings>,
    cpu: Option<CpuTrigger>,
    observer: Option<Arc<dyn Observer>>,
}

impl std::fmt::Debug for ShedBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShedBuilder")
            .field("max_concurrency", &self.max_concurrency)
            .field("max_queue", &self.max_queue)
            .field("retry_queue", &self.retry_queue)
            .field("retry_after", &self.retry_after)
            .field("limiter", &self.limiter.is_some())
            .field("ceilings", &self.ceilings)
            .field("cpu", &self.cpu)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl ShedBuilder {
    /// How many queue places retries may use (at most `max_queue`; 0 sheds
    /// every retry that would have to wait). Default: half the queue. (With
    /// a limiter there is no queue; its
    /// [`reserve`](crate::limit::LimiterBuilder::reserve) plays this part.)
    pub fn retry_queue(mut self, places: usize) -> Self {
        self.retry_queue = Some(places);
        self
    }

    /// The range `Retry-After` is drawn from, rounded down to whole seconds
    /// (`max` below `min` is taken as `min`). Default: 1 to 5 s.
    pub fn retry_after(mut self, min: Duration, max: Duration) -> Self {
        let lo = min.as_secs();
        self.retry_after = (lo, max.as_secs().max(lo));
        self
    }

    /// Sheds by priority under `ceilings` (see [`ShedLayer`]); without
    /// this, every request is treated alike, whatever its `x-criticality`.
    ///
    /// ```
    /// use stagger::limit::{Aimd, Limiter};
    /// use stagger::priority::Ceilings;
    /// use stagger::tower::ShedLayer;
    ///
    /// let limiter = Limiter::builder(Aimd::new()).build()?;
    /// let shed = ShedLayer::limited(limiter).priorities(Ceilings::default()).build();
    /// assert_eq!(shed.stats().shed_by_priority, [0; 8]);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn priorities(mut self, ceilings: Ceilings) -> Self {
        self.ceilings = Some(ceilings);
        self
    }

    /// Sheds by CPU as well (see [`ShedLayer`]): the trigger's shed rate,
    /// lowest level first, beside the limit.
    ///
    /// ```
    /// use stagger::limit::{CpuTrigger, Limiter};
    /// use stagger::priority::Ceilings;
    /// use stagger::tower::ShedLayer;
    ///
    /// # #[cfg(target_os = "linux")] {
    /// let cpu = CpuTrigger::builder().start()?; // 80 %, read every 100 ms
    /// let shed = ShedLayer::limited(Limiter::fixed(256))
    ///     .priorities(Ceilings::default())
    ///     .cpu(cpu)
    ///     .build();
    /// assert_eq!(shed.stats().shed_cpu, 0);
    /// # }
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn cpu(mut self, trigger: CpuTrigger) -> Self {
        self.cpu = Some(trigger);
        self
    }

    /// Reports every request turned away as an [`Event::Shed`](crate::Event::Shed) with its
    /// [`ShedReason`], so a
    /// [`MetricsObserver`](crate::observe::export::MetricsObserver) counts them as
    /// `stagger_shed_total{reason}` (registered at 0 when the layer is
    /// built).
    ///
    /// ```
    /// use stagger::export::Stats;
    /// use stagger::tower::ShedLayer;
    /// use std::sync::Arc;
    ///
    /// let shed = ShedLayer::builder(64, 128).observer(Arc::new(Stats::new())).build();
    /// # let _ = shed;
    /// ```
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The layer, with its limits and counters.
    pub fn build(self) -> ShedLayer {
        if let Some(o) = &self.observer {
            o.on_attach();
        }
        let max_queue = self.max_queue;
        let gate = match self.limiter {
            Some(l) => Gate::Limit(l),
            None => {
                let retry_queue = self.retry_queue.unwrap_or(max_queue / 2).min(max_queue);
                let kept = (max_queue - retry_queue) as u64;
                Gate::Queue {
                    permits: Arc::new(Semaphore::new(
                        self.max_concurrency.clamp(1, Semaphore::MAX_PERMITS),
                    )),
                    queued: AtomicUsize::new(0),
                    max_queue,
                    retry_queue,
                    retry_reserve_ppm: (kept * 1_000_000)
                        .checked_div(max_queue as u64)
                        .unwrap_or(0),
                }
            }
        };
        ShedLayer {
            shared: Arc::new(Shared {
                gate,
                ceilings: self.ceilings,
                cpu: self.cpu,
                observer: self.observer,
                retry_after: self.retry_after,
                admitted: AtomicU64::new(0),
                shed_first: AtomicU64::new(0),
                shed_retries: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                shed_cpu: AtomicU64::new(0),
                shed_by_priority: Default::default(),
            }),
        }
    }
}

impl ShedLayer {
    /// At most `max_concurrency` (at least 1) requests at once and `max_queue`
    /// waiting; retries may use half the queue; `Retry-After` of 1 to 5 s.
    /// Shorthand for `ShedLayer::builder(max_concurrency, max_queue).build()`.
    pub fn new(max_concurrency: usize, max_queue: usize) -> Self {
        Self::builder(max_concurrency, max_queue).build()
    }

    /// Starts configuring a layer of at most `max_concurrency` (at least 1)
    /// requests at once and `max_queue` waiting.
    pub const fn builder(max_concurrency: usize, max_queue: usize) -> ShedBuilder {
        ShedBuilder {
            max_concurrency,
            max_queue,
            retry_queue: None,
            retry_after: (1, 5),
            limiter: None,
            ceilings: None,
            cpu: None,
            observer: None,
        }
    }

    /// Starts configuring a layer whose admission `limiter` decides (no
    /// queue); `Retry-After` of 1 to 5 s unless
    /// [`retry_after`](ShedBuilder::retry_after) says otherwise.
    pub fn limited(limiter: Limiter) -> ShedBuilder {
        ShedBuilder {
            limiter: Some(limiter),
            ..Self::builder(1, 0)
        }
    }

    /// The limiter deciding admission, if the layer was made with one.
    pub fn limiter(&self) -> Option<&Limiter> {
        match &self.shared.gate {
            Gate::Limit(l) => Some(l),
            Gate::Queue { .. } => None,
        }
    }

    /// Counters so far (shared by every clone and service).
    pub fn stats(&self) -> ShedStats {
        ShedStats {
            admitted: self.shared.admitted.load(Ordering::Relaxed),
            shed_first: self.shared.shed_first.load(Ordering::Relaxed),
            shed_retries: self.shared.shed_retries.load(Ordering::Relaxed),
            expired: self.shared.expired.load(Ordering::Relaxed),
            shed_cpu: self.shared.shed_cpu.load(Ordering::Relaxed),
            shed_by_priority: std::array::from_fn(|i| {
                self.shared.shed_by_priority[i].load(Ordering::Relaxed)
            }),
        }
    }
}

impl<S> Layer<S> for ShedLayer {
    type Service = ShedService<S>;

    fn layer(&self, inner: S) -> ShedService<S> {
        ShedService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`ShedLayer`].
#[derive(Debug, Clone)]
pub struct ShedService<S> {
    inner: S,
    shared: Arc<Shared>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, ReqB, ResB> Service<Request<ReqB>> for ShedService<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ShedFuture<S, ReqB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness of the inner service is awaited inside the future, once
        // a place is granted; shedding must answer at once.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let shared = self.shared.clone();
        let arrival = Arrival::read(&req, &shared);
        let Arrival {
            grpc,
            now,
            deadline,
            class,
            ..
        } = arrival;
        if shared
            .cpu
            .as_ref()
            .is_some_and(|cpu| cpu.sheds(class, &mut crate::random::FastRng::fresh()))
        {
            return ShedFuture::answer(shared.refuse(class, ShedReason::Cpu, grpc));
        }
        if deadline.is_some_and(|d| d <= now) {
            // The caller has no time left: drop the work unstarted.
            shared.expire();
            return ShedFuture::answer(deadline_response(grpc));
        }
        let inner = self.inner.clone();
        match &shared.gate {
            Gate::Limit(limiter) => match shared.acquire(limiter, class, now) {
                Err(_) => ShedFuture::answer(shared.shed(class, grpc)),
                Ok(token) => {
                    shared.admitted.fetch_add(1, Ordering::Relaxed);
                    // The place keeps the layer's state alive: the limiter
                    // is reached through it, not cloned.
                    let held = Held {
                        shared,
                        token: Some(token),
                        deadline,
                    };
                    ShedFuture::admitted(inner, req, held)
                }
            },
            Gate::Queue { .. } => ShedFuture::queued(queue(shared, inner, req, arrival)),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a request through a [`ShedService`]: the layer's own
    /// answer at once (503 shed, 429 under the CPU trigger, the deadline's
    /// answer), or the inner service's once the request holds a place. A
    /// request admitted by a limiter is not boxed: its place, the inner
    /// service and the inner call travel in this future.
    pub struct ShedFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S, ReqB>,
        // The place held, given back when the call ends (or the future is
        // dropped).
        held: Option<Held>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        Answer { response: Option<S::Response> },
        Waiting { inner: S, req: Option<Request<ReqB>> },
        Calling { #[pin] call: S::Future },
        Queued { queued: BoxFuture<S::Response, S::Error> },
    }
}

impl<S: Service<Request<ReqB>>, ReqB> ShedFuture<S, ReqB> {
    fn answer(response: S::Response) -> Self {
        ShedFuture {
            state: State::Answer {
                response: Some(response),
            },
            held: None,
        }
    }

    fn admitted(inner: S, req: Request<ReqB>, held: Held) -> Self {
        ShedFuture {
            state: State::Waiting {
                inner,
                req: Some(req),
            },
            held: Some(held),
        }
    }

    fn queued(queued: BoxFuture<S::Response, S::Error>) -> Self {
        ShedFuture {
            state: State::Queued { queued },
            held: None,
        }
    }
}

impl<S: Service<Request<ReqB>>, ReqB> Future for ShedFuture<S, ReqB> {
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let call = match this.state.as_mut().project() {
                StateProj::Answer { response } => {
                    let response = response
                        .take()
                        .expect("ShedFuture polled after it completed");
                    return Poll::Ready(Ok(response));
                }
                StateProj::Queued { queued } => return queued.as_mut().poll(cx),
                StateProj::Waiting { inner, req } => {
                    // Readiness of the inner service is awaited here, once
                    // the place is granted: shedding answers at once.
                    if let Err(e) = std::task::ready!(inner.poll_ready(cx)) {
                        release(this.held, false);
                        return Poll::Ready(Err(e));
                    }
                    let req = req.take().expect("ShedFuture polled after it completed");
                    inner.call(req)
                }
                StateProj::Calling { call } => {
                    let result = std::task::ready!(call.poll(cx));
                    release(this.held, result.is_ok());
                    return Poll::Ready(result);
                }
            };
            this.state.set(State::Calling { call });
        }
    }
}

/// Gives a place back as its call ended.
fn release(held: &mut Option<Held>, answered: bool) {
    if let Some(mut held) = held.take() {
        held.finish(answered);
    }
}

impl<S: Service<Request<ReqB>>, ReqB> std::fmt::Debug for ShedFuture<S, ReqB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ShedFuture")
    }
}

/// What the layer reads of an arriving request before it decides.
#[derive(Clone, Copy)]
struct Arrival {
    retry: bool,
    grpc: bool,
    now: std::time::Instant,
    deadline: Option<std::time::Instant>,
    class: Class,
}

impl Arrival {
    fn read<B>(req: &Request<B>, shared: &Shared) -> Self {
        let headers = req.headers();
        let seen = Seen::scan(headers);
        // Every spelling of a retry: `x-retry-attempt`, a mesh's
        // `x-envoy-attempt-count` and gRPC's
        // `grpc-previous-rpc-attempts`.
        let retry = seen.attempt && inbound_attempt(headers) > 1;
        let grpc = seen.content_type && is_grpc(headers);
        let now = TokioClock.now();
        let inbound = req.extensions().get::<Inbound>();
        let deadline = match inbound {
            Some(inbound) => inbound.deadline(),
            None if seen.timeout => inbound_deadline(headers, now),
            None => None,
        };
        // The level is read only by a layer that sheds by it.
        let priority = shared.ceilings.is_some().then(|| match inbound {
            Some(inbound) => inbound.priority(),
            None if seen.priority => inbound_priority(headers).unwrap_or_default(),
            None => Priority::default(),
        });
        let class = Class::new(priority.unwrap_or_default(), retry);
        Arrival {
            retry,
            grpc,
            now,
            deadline,
            class,
        }
    }
}

/// Which of the headers [`Arrival::read`] looks up a request carries,
/// found in one pass over its names: most requests carry none of them, and
/// a name compared is cheaper than a name hashed and looked up.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    attempt: bool,
    content_type: bool,
    timeout: bool,
    priority: bool,
}

impl Seen {
    fn scan(headers: &HeaderMap) -> Self {
        let mut seen = Seen::default();
        for name in headers.keys() {
            if *name == CONTENT_TYPE {
                seen.content_type = true;
            } else if *name == RETRY_ATTEMPT
                || *name == ENVOY_ATTEMPT_COUNT
                || *name == GRPC_PREVIOUS_ATTEMPTS
            {
                seen.attempt = true;
            } else if *name == REQUEST_TIMEOUT || *name == GRPC_TIMEOUT {
                seen.timeout = true;
            } else if *name == PRIORITY {
                seen.priority = true;
            }
        }
        seen
    }
}

/// A request at a queue gate: a free place at once, else a place in the
/// queue (if its level's share of the queue has room), else shed.
fn queue<S, ReqB, ResB>(
    shared: Arc<Shared>,
    mut inner: S,
    req: Request<ReqB>,
    arrival: Arrival,
) -> BoxFuture<Response<ResB>, S::Error>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    ReqB: Send + 'static,
    ResB: Default + Send + 'static,
{
    let Arrival {
        retry,
        grpc,
        deadline,
        class,
        ..
    } = arrival;
    let Gate::Queue {
        permits,
        queued,
        max_queue,
        retry_queue,
        retry_reserve_ppm,
    } = &shared.gate
    else {
        unreachable!("called for a queue gate")
    };
    let permit = permits.clone().try_acquire_owned().ok();
    let waits = permit.is_none();
    if waits {
        let limit = match &shared.ceilings {
            Some(c) => c.cap_ppm(*max_queue as u64, class, *retry_reserve_ppm) as usize,
            None if retry => *retry_queue,
            None => *max_queue,
        };
        let got = queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q < limit).then_some(q + 1)
            })
            .is_ok();
        if !got {
            return Box::pin(async move { Ok(shared.shed(class, grpc)) });
        }
    }
    let slot = waits.then(|| QueueSlot(shared.clone()));
    Box::pin(async move {
        let _permit = match permit {
            Some(p) => p,
            None => {
                let Gate::Queue { permits, .. } = &shared.gate else {
                    unreachable!("a queued request has a queue")
                };
                let p = permits.clone().acquire_owned().await;
                drop(slot);
                match p {
                    Ok(p) => p,
                    // The semaphore is never closed.
                    Err(_) => return Ok(shared.shed(class, grpc)),
                }
            }
        };
        if deadline.is_some_and(|d| d <= TokioClock.now()) {
            // Its caller gave up while it waited.
            shared.expire();
            return Ok(deadline_response(grpc));
        }
        shared.admitted.fetch_add(1, Ordering::Relaxed);
        poll_fn(|cx| inner.poll_ready(cx)).await?;
        inner.call(req).await
    })
}

/// A place in a limiter, held while the request runs: released with how it
/// ended when the service answers, or when the future is dropped (the
/// caller hung up, or a layer outside cut the work off at the deadline).
struct Held {
    shared: Arc<Shared>,
    token: Option<Token>,
    deadline: Option<std::time::Instant>,
}

impl Held {
    /// Releases the place: work that ended after its caller's deadline is
    /// a sign of overload; an error from the service says nothing of load.
    fn finish(&mut self, answered: bool) {
        let Some(token) = self.token.take() else {
            return;
        };
        let now = TokioClock.now();
        let how = if self.deadline.is_some_and(|d| d <= now) {
            Completion::Overloaded
        } else if answered {
            Completion::Served
        } else {
            Completion::Cancelled
        };
        if let Gate::Limit(limiter) = &self.shared.gate {
            limiter.release(token, how, now);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// A place in the queue, given back when the request leaves it (admitted
/// or dropped by its caller).
struct QueueSlot(Arc<Shared>);

impl Drop for QueueSlot {
    fn drop(&mut self) {
        if let Gate::Queue { queued, .. } = &self.0.gate {
            queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_pass_reading_of_an_arrival_finds_every_header_the_lookups_find() {
        let layer = ShedLayer::builder(4, 4)
            .priorities(Ceilings::default())
            .build();
        let now = TokioClock.now();
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("accept", "*/*"), ("user-agent", "x")],
            &[("x-retry-attempt", "2")],
            &[("x-envoy-attempt-count", "3")],
            &[
                ("grpc-previous-rpc-attempts", "1"),
                ("content-type", "application/grpc"),
            ],
            &[("content-type", "application/grpc"), ("grpc-timeout", "5S")],
            &[
                ("content-type", "application/json"),
                ("x-request-timeout-ms", "900"),
            ],
            &[("x-criticality", "sheddable"), ("host", "a")],
        ];
        for headers in cases {
            let mut req = Request::new(());
            for (name, value) in *headers {
                req.headers_mut().insert(
                    http::HeaderName::from_static(name),
                    http::HeaderValue::from_static(value),
                );
            }
            let got = Arrival::read(&req, &layer.shared);
            let h = req.headers();
            assert_eq!(got.retry, inbound_attempt(h) > 1, "{headers:?}");
            assert_eq!(got.grpc, is_grpc(h), "{headers:?}");
            // Both deadlines are read against their own `now`: compare
            // whether one is present, and its distance from that `now`.
            let expected = inbound_deadline(h, now).map(|d| d - now);
            assert_eq!(got.deadline.map(|d| d - got.now), expected, "{headers:?}");
            let priority = inbound_priority(h).unwrap_or_default();
            assert_eq!(got.class, Class::new(priority, got.retry), "{headers:?}");
        }
    }

    #[test]
    fn the_builder_settles_the_limits_whatever_the_order() {
        let queue = |l: &ShedLayer| match &l.shared.gate {
            Gate::Queue {
                permits,
                max_queue,
                retry_queue,
                ..
            } => (permits.available_permits(), *max_queue, *retry_queue),
            Gate::Limit(_) => unreachable!(),
        };
        let a = ShedLayer::builder(0, 4).retry_queue(10).build();
        assert_eq!(queue(&a), (1, 4, 4));
        let b = ShedLayer::new(8, 5);
        assert_eq!((queue(&b).2, b.shared.retry_after), (2, (1, 5)));
        assert!(b.limiter().is_none());
        let c = ShedLayer::builder(2, 2)
            .retry_after(Duration::from_millis(3900), Duration::from_secs(1))
            .build();
        assert_eq!(c.shared.retry_after, (3, 3));
        // Clones share the one state; a second build does not.
        let builder = ShedLayer::builder(2, 2);
        let (x, y) = (builder.clone().build(), builder.build());
        assert!(Arc::ptr_eq(&x.shared, &x.clone().shared));
        assert!(!Arc::ptr_eq(&x.shared, &y.shared));
    }
}
