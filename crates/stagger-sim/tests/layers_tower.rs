//! The layers model against the real thing: three of the library's tower
//! `RetryLayer`s chained in one process, each hop's server half a
//! `DeadlineLayer` (which reads the caller's attempt and marks a failure
//! given up below), over a scripted dependency, under paused tokio time.
//! The same policies and the same script go through the model's
//! [`one_request`]; the attempts that reach the dependency agree, request
//! by request, with the one-layer rule, with the hop rule alone and with
//! neither — with per-layer token buckets too, whose counts are where a
//! model that decides the rule itself goes wrong.

use stagger::Backoff;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use stagger::guardrails::budget::TokenBucket;
use stagger::http::Settings;
use stagger::random::{FastRng, RandomSource};
use stagger::tower::{DeadlineLayer, ReplayBody, RetryLayer};
use stagger::Policy;
use stagger_sim::layers::one_request;
use stagger_sim::RetryAt;
use tower::{Layer, Service, ServiceExt};

type Bottom = Request<ReplayBody<ReplayBody<ReplayBody<Full<Bytes>>>>>;

/// Each layer's client: 4 attempts, millisecond backoff, and a token
/// bucket of its own when `bucket`.
fn policy(bucket: bool) -> Policy {
    let b = Policy::builder().max_attempts(4).backoff(Backoff {
        base: Duration::from_millis(1),
        cap: Duration::from_millis(4),
        ..Backoff::new()
    });
    match bucket {
        true => b.budget(TokenBucket::default()).build().unwrap(),
        false => b.build().unwrap(),
    }
}

/// The dependency's script: each answer fails with probability `f`, drawn
/// in call order from one seed, so the model and the stack see the same.
fn script(f: f64, seed: u64) -> impl FnMut() -> bool {
    let mut rng = FastRng::seeded(seed);
    move || rng.next_f64() < f
}

/// Attempts at the dependency per user request, through the real stack.
async fn real(mode: RetryAt, bucket: bool, requests: usize, f: f64, seed: u64) -> Vec<u64> {
    let hits = Arc::new(Mutex::new(0u64));
    let fails = Arc::new(Mutex::new(script(f, seed)));
    let (h, s) = (hits.clone(), fails.clone());
    let dependency = tower::service_fn(move |_req: Bottom| {
        *h.lock().unwrap() += 1;
        let failed = (s.lock().unwrap())();
        async move {
            let status = if failed { 503 } else { 200 };
            Ok::<_, Infallible>(
                Response::builder()
                    .status(status)
                    .body(Full::<Bytes>::default())
                    .unwrap(),
            )
        }
    });
    let client_rule = mode != RetryAt::EveryLayer;
    let mark = mode == RetryAt::OneLayer;
    let client = |p: Policy| {
        RetryLayer::new(Settings {
            policy: p,
            one_layer: client_rule,
            ..Default::default()
        })
    };
    let server = DeadlineLayer::new().one_layer(mark);
    let c = client(policy(bucket)).layer(dependency);
    let b = client(policy(bucket)).layer(server.layer(c));
    let mut a = client(policy(bucket)).layer(server.layer(b));
    let mut out = Vec::with_capacity(requests);
    for _ in 0..requests {
        let before = *hits.lock().unwrap();
        let req = Request::get("http://a.test/")
            .body(Full::<Bytes>::default())
            .unwrap();
        let resp = a.ready().await.unwrap().call(req).await.unwrap();
        let _ = resp.status();
        out.push(*hits.lock().unwrap() - before);
        // The next user request a second later, as the model's arrivals.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    out
}

/// The same through the model.
fn model(mode: RetryAt, bucket: bool, requests: usize, f: f64, seed: u64) -> Vec<u64> {
    let chain = [policy(bucket), policy(bucket), policy(bucket)];
    let refs: Vec<&Policy> = chain.iter().collect();
    let mut fails = script(f, seed);
    let origin = std::time::Instant::now();
    (0..requests)
        .map(|k| {
            let now = origin + Duration::from_secs(k as u64);
            one_request(&refs, mode, now, &mut fails).bottom
        })
        .collect()
}

const MODES: [RetryAt; 3] = [RetryAt::EveryLayer, RetryAt::OneLayer, RetryAt::HopRule];

#[tokio::test(start_paused = true)]
async fn the_model_and_three_tower_retry_layers_agree_on_a_dead_dependency() {
    for (mode, expected) in MODES.into_iter().zip([64, 4, 19]) {
        let real = real(mode, false, 3, 1.0, 1).await;
        assert_eq!(real, [expected; 3], "{mode:?}: the stack");
        assert_eq!(model(mode, false, 3, 1.0, 1), real, "{mode:?}: the model");
    }
}

#[tokio::test(start_paused = true)]
async fn the_model_and_the_stack_agree_when_each_layer_has_a_token_bucket() {
    // The buckets drain over the requests: the bottom one first, then the
    // upper ones by the failures that came back marked, which a real stack
    // counts against its bucket like any other.
    for mode in MODES {
        let real = real(mode, true, 30, 1.0, 1).await;
        assert_eq!(model(mode, true, 30, 1.0, 1), real, "{mode:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_model_and_the_stack_agree_on_a_scripted_flaky_dependency() {
    for mode in MODES {
        for (bucket, seed) in [(false, 3), (true, 4)] {
            let real = real(mode, bucket, 40, 0.5, seed).await;
            assert_eq!(
                model(mode, bucket, 40, 0.5, seed),
                real,
                "{mode:?}, bucket {bucket}"
            );
        }
    }
}
