//! The shed layer by priority: the lowest level is shed first and, within
//! a level, retries before first attempts; each level keeps a guaranteed
//! share that a flood of the next one cannot take (today's layer, without
//! priorities, lets it); lower levels are told to come back later; sheds
//! are counted by level and reason. Arrivals are drawn from a seeded
//! generator; admission is decided when a request is called, so each
//! request is polled once and held (its work never ends) or answered. One
//! test does the same over real sockets, an axum server on 127.0.0.1.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use http::{Request, Response, StatusCode};
use stagger::export::ShedReason;
use stagger::limit::Limiter;
use stagger::priority::{Ceilings, Priority};
use stagger::random::{FastRng, RandomSource};
use stagger::tower::{ShedLayer, ShedService};
use stagger::{Event, Observer};
use tower::{Layer, Service};

type Held = Pin<Box<dyn Future<Output = Result<Response<String>, Infallible>> + Send>>;

/// Work that never ends: an admitted request holds its place until dropped.
fn forever() -> tower::util::BoxCloneService<Request<()>, Response<String>, Infallible> {
    tower::util::BoxCloneService::new(tower::service_fn(|_req: Request<()>| {
        std::future::pending::<Result<Response<String>, Infallible>>()
    }))
}

fn req(p: Priority, retry: bool, grpc: bool) -> Request<()> {
    let mut b = Request::get("/").header("x-criticality", p.as_str());
    if retry {
        b = b.header("x-retry-attempt", "2");
    }
    if grpc {
        b = b.header("content-type", "application/grpc");
    }
    b.body(()).unwrap()
}

/// Calls `svc` with `r` and polls the answer once: `None` when admitted
/// (the future is kept in `held`), the shed answer otherwise.
fn send<S>(
    svc: &mut ShedService<S>,
    r: Request<()>,
    held: &mut Vec<Held>,
) -> Option<Response<String>>
where
    ShedService<S>: Service<Request<()>, Response = Response<String>, Error = Infallible>,
    <ShedService<S> as Service<Request<()>>>::Future: Send + 'static,
{
    let mut fut: Held = Box::pin(svc.call(r));
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(resp) => Some(resp.unwrap()),
        Poll::Pending => {
            held.push(fut);
            None
        }
    }
}

/// Every shed event the layer reports.
#[derive(Default)]
struct Seen(Mutex<Vec<(ShedReason, Option<Priority>)>>);

impl Observer for Seen {
    fn on_event(&self, e: &Event) {
        if let Event::Shed { reason, priority } = e {
            self.0.lock().unwrap().push((*reason, *priority));
        }
    }
}

#[tokio::test]
async fn no_class_is_admitted_past_its_ceiling_and_every_shed_is_counted() {
    // Limit 100 with 20 % of each level's share kept for first attempts:
    // the ceilings are 100/98 (critical_plus first/retry), 90/87,
    // 75/72, 60/58.
    let limiter = Limiter::builder(stagger::limit::Algorithm::Fixed(100))
        .reserve(0.2)
        .build()
        .unwrap();
    let seen = Arc::new(Seen::default());
    let layer = ShedLayer::limited(limiter.clone())
        .priorities(Ceilings::default())
        .observer(seen.clone())
        .build();
    let mut svc = layer.layer(forever());
    let mut held = Vec::new();
    // 400 arrivals, a seeded mix of the four named levels, half retries.
    let mut rng = FastRng::seeded(36);
    let mut admitted = [[0u32; 2]; 4];
    let mut offered = [[0u32; 2]; 4];
    for _ in 0..400 {
        let rank = (rng.next_u64() % 4) as u8;
        let retry = rng.next_u64() % 2 == 1;
        let p = Priority::from_rank(rank).unwrap();
        offered[rank as usize][retry as usize] += 1;
        let in_flight = limiter.in_flight();
        match send(&mut svc, req(p, retry, false), &mut held) {
            None => {
                admitted[rank as usize][retry as usize] += 1;
                // Never admitted past its own ceiling.
                let cap = [[100, 98], [90, 87], [75, 72], [60, 58]][rank as usize][retry as usize];
                assert!(in_flight < cap, "{p} retry={retry} admitted at {in_flight}");
            }
            Some(resp) => assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE),
        }
    }
    assert_eq!(
        limiter.in_flight(),
        100,
        "the limit is filled, by the top level last"
    );
    // Counted by level and reason, in the stats and in events.
    let stats = layer.stats();
    let by_level: Vec<u64> = (0..4)
        .map(|r| u64::from(offered[r][0] + offered[r][1] - admitted[r][0] - admitted[r][1]))
        .collect();
    assert_eq!(stats.shed_by_priority[..4], by_level[..]);
    assert_eq!(stats.shed_by_priority[4..], [0; 4]);
    let events = seen.0.lock().unwrap().clone();
    let count =
        |p: Priority, reason| events.iter().filter(|e| **e == (reason, Some(p))).count() as u32;
    for rank in 0..4u8 {
        let p = Priority::from_rank(rank).unwrap();
        let r = rank as usize;
        assert_eq!(
            count(p, ShedReason::FirstAttempt),
            offered[r][0] - admitted[r][0],
            "{p}"
        );
        assert_eq!(
            count(p, ShedReason::Retry),
            offered[r][1] - admitted[r][1],
            "{p}"
        );
    }
    drop(held);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test]
async fn under_overload_the_lowest_level_is_shed_first_then_retries_within_a_level() {
    // A limit of 100; each admitted request ends with probability 0.1 per
    // tick (10 per tick at capacity) and 20 arrive per tick: twice the
    // capacity, a seeded mix of the four levels, half of them retries.
    let limiter = Limiter::builder(stagger::limit::Algorithm::Fixed(100))
        .reserve(0.2)
        .build()
        .unwrap();
    let mut svc = ShedLayer::limited(limiter.clone())
        .priorities(Ceilings::default())
        .build()
        .layer(forever());
    let mut held: Vec<Held> = Vec::new();
    let mut rng = FastRng::seeded(7);
    let (mut admitted, mut offered) = ([0u32; 8], [0u32; 8]);
    for tick in 0..400 {
        held.retain(|_| rng.next_u64() % 10 != 0);
        for _ in 0..20 {
            let class = (rng.next_u64() % 8) as usize;
            let p = Priority::from_rank((class / 2) as u8).unwrap();
            let shed = send(&mut svc, req(p, class % 2 == 1, false), &mut held).is_some();
            // Counted once the limit is full (after a warm-up).
            if tick >= 50 {
                offered[class] += 1;
                admitted[class] += u32::from(!shed);
            }
        }
    }
    let share: Vec<f64> = (0..8)
        .map(|i| f64::from(admitted[i]) / f64::from(offered[i]))
        .collect();
    // The share admitted falls along the shedding order (2 points of
    // slack for the random mix), the top level is served, and the lowest
    // one absorbs the rejections.
    assert!(share.windows(2).all(|w| w[0] + 0.02 >= w[1]), "{share:?}");
    assert!(
        share[0] > 0.95 && share[1] > 0.9,
        "critical_plus is served: {share:?}"
    );
    assert!(
        share[6] < 0.05 && share[7] < 0.05,
        "sheddable absorbs the rejections: {share:?}"
    );
    // Within a level, first attempts fare no worse than retries.
    assert!(
        (0..4).all(|r| share[2 * r] + 0.01 >= share[2 * r + 1]),
        "{share:?}"
    );
}

/// A flood of `critical` then a few `critical_plus`: how many of the
/// latter get in.
fn flood(priorities: bool) -> u32 {
    let limiter = Limiter::fixed(50);
    let mut b = ShedLayer::limited(limiter);
    if priorities {
        b = b.priorities(Ceilings::default());
    }
    let mut svc = b.build().layer(forever());
    let mut held = Vec::new();
    for _ in 0..500 {
        send(&mut svc, req(Priority::CRITICAL, false, false), &mut held);
    }
    (0..20)
        .filter(|_| {
            send(
                &mut svc,
                req(Priority::CRITICAL_PLUS, false, false),
                &mut held,
            )
            .is_none()
        })
        .count() as u32
}

#[tokio::test]
async fn a_flood_of_the_next_level_cannot_starve_the_top_one() {
    // critical may fill 90 % of 50 = 45: 5 places stay for critical_plus.
    assert_eq!(flood(true), 5);
    // Today's layer, blind to priorities, gives the flood every place.
    assert_eq!(flood(false), 0);
}

#[tokio::test]
async fn a_queue_keeps_places_for_the_levels_above() {
    // One running, ten waiting: sheddable may wait in ⌈10 · 0.6⌉ = 6 of
    // the places, critical in 9, critical_plus in all 10.
    let layer = ShedLayer::builder(1, 10)
        .priorities(Ceilings::default())
        .build();
    let mut svc = layer.layer(forever());
    let mut held = Vec::new();
    let mut admitted = |p: Priority, n: usize, held: &mut Vec<Held>| {
        (0..n)
            .filter(|_| send(&mut svc, req(p, false, false), held).is_none())
            .count()
    };
    assert_eq!(
        admitted(Priority::SHEDDABLE, 20, &mut held),
        1 + 6,
        "one runs, six wait"
    );
    assert_eq!(admitted(Priority::CRITICAL, 20, &mut held), 3);
    assert_eq!(admitted(Priority::CRITICAL_PLUS, 20, &mut held), 1);
    assert_eq!(layer.stats().shed_by_priority[..4], [19, 17, 0, 13]);
}

#[tokio::test]
async fn lower_levels_are_told_to_come_back_later() {
    let layer = ShedLayer::limited(Limiter::fixed(1))
        .priorities(Ceilings::default())
        .build();
    let mut svc = layer.layer(forever());
    let mut held = Vec::new();
    assert!(send(
        &mut svc,
        req(Priority::CRITICAL_PLUS, false, false),
        &mut held
    )
    .is_none());
    let draw = |svc: &mut ShedService<_>, p, grpc, held: &mut Vec<Held>| -> Vec<u64> {
        (0..300)
            .map(|_| {
                let resp = send(svc, req(p, false, grpc), held).expect("full: shed");
                let name = if grpc {
                    "grpc-retry-pushback-ms"
                } else {
                    "retry-after"
                };
                resp.headers()[name].to_str().unwrap().parse().unwrap()
            })
            .collect()
    };
    // The default range is 1 – 5 s: ×1 for critical, ×2 sheddable_plus,
    // ×4 sheddable, in whole seconds (HTTP) and milliseconds (gRPC).
    for (p, f) in [
        (Priority::CRITICAL, 1),
        (Priority::SHEDDABLE_PLUS, 2),
        (Priority::SHEDDABLE, 4),
    ] {
        let secs = draw(&mut svc, p, false, &mut held);
        assert!(
            secs.iter().all(|s| (f..=5 * f).contains(s)),
            "{p}: {secs:?}"
        );
        let ms = draw(&mut svc, p, true, &mut held);
        assert!(
            ms.iter().all(|m| (1000 * f..=5000 * f).contains(m)),
            "{p}: {ms:?}"
        );
        // Jittered over the whole range: the mean of 300 uniform draws is
        // within 15 % of the middle (about 8 standard errors), and draws
        // differ.
        let mean = ms.iter().sum::<u64>() as f64 / ms.len() as f64;
        let mid = 3000.0 * f as f64;
        assert!((mean - mid).abs() < 0.15 * mid, "{p}: mean {mean}");
        assert!(secs.iter().any(|s| *s != secs[0]), "{p}: {secs:?}");
    }
}

/// Sends one HTTP/1.1 request with `x-criticality: level` to `addr` and
/// reads the answer: its status and `Retry-After`.
async fn raw_get(addr: std::net::SocketAddr, level: &str) -> (u16, Option<u64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req =
        format!("GET / HTTP/1.1\r\nhost: x\r\nx-criticality: {level}\r\nconnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).await.unwrap();
    let status = text[9..12].parse().unwrap();
    let after = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_owned)
        })
        .map(|v| v.trim().parse().unwrap());
    (status, after)
}

#[tokio::test]
async fn over_real_sockets_the_header_decides_who_gets_the_kept_place() {
    use axum::routing::get;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    // A limit of 2; every level below critical_plus may fill half of it.
    let limiter = Limiter::fixed(2);
    let shed = ShedLayer::limited(limiter.clone())
        .priorities(Ceilings::new(&[1.0, 0.5]).unwrap())
        .build();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started = Arc::new(AtomicU32::new(0));
    let (g, n) = (gate.clone(), started.clone());
    let app = axum::Router::new()
        .route(
            "/",
            get(move || {
                let (g, n) = (g.clone(), n.clone());
                async move {
                    n.fetch_add(1, Ordering::SeqCst);
                    let _ = g.acquire().await.unwrap();
                    "done"
                }
            }),
        )
        .layer(shed.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let test = async {
        // A critical request takes the one place its level may fill…
        let first = tokio::spawn(raw_get(addr, "CRITICAL"));
        while started.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // …so a sheddable one is refused at once, told 4 – 20 s…
        let (status, after) = raw_get(addr, "sheddable").await;
        assert_eq!(status, 503);
        assert!((4..=20).contains(&after.unwrap()), "{after:?}");
        // …and a critical_plus one gets the place kept for it.
        let top = tokio::spawn(raw_get(addr, "critical-plus"));
        while started.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(limiter.in_flight(), 2);
        gate.add_permits(2);
        assert_eq!(first.await.unwrap().0, 200);
        assert_eq!(top.await.unwrap().0, 200);
        assert_eq!(shed.stats().shed_by_priority[3], 1);
    };
    let bounded = tokio::time::timeout(Duration::from_secs(20), test).await;
    server.abort();
    bounded.expect("the exchange finished in 20 s");
}
