//! A priority set on an inbound request reaches the calls made while
//! serving it, like the deadline: over HTTP through the reqwest middleware
//! and the tower layer, and over gRPC through a real tonic channel; the
//! call's own `CallOptions` or header win over the inbound one.

use crate::common;
use crate::grpc_support;

use stagger::Backoff;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{bounded, status, Server};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::grpc::MethodPolicy;
use stagger::http::{CallOptions, Inbound, Settings};
use stagger::priority::Priority;
use stagger::reqwest::RetryMiddleware;
use stagger::tower::grpc::RetryLayer as GrpcRetryLayer;
use stagger::tower::{DeadlineLayer, RetryLayer};
use stagger::Policy;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

const LIMIT: Duration = Duration::from_secs(30);

fn policy() -> Policy {
    Policy::builder()
        .max_attempts(3)
        .backoff(Backoff {
            base: Duration::from_millis(1),
            cap: Duration::from_millis(2),
            ..Backoff::new()
        })
        .build()
        .unwrap()
}

fn client() -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(Settings {
            policy: policy(),
            ..Default::default()
        }))
        .build()
}

/// A front service on 127.0.0.1 behind `DeadlineLayer` that calls
/// `downstream` once per request through the reqwest middleware; with
/// `override_to`, the call says its own priority in `CallOptions`.
async fn front(
    downstream: String,
    override_to: Option<Priority>,
) -> (String, tokio::task::JoinHandle<()>) {
    #[derive(Clone)]
    struct Front {
        client: ClientWithMiddleware,
        downstream: String,
        override_to: Option<Priority>,
    }
    async fn handle(State(f): State<Front>) -> StatusCode {
        let mut req = f.client.get(&f.downstream);
        if let Some(p) = f.override_to {
            req = req.with_extension(CallOptions {
                priority: Some(p),
                ..Default::default()
            });
        }
        match req.send().await {
            Ok(r) => StatusCode::from_u16(r.status().as_u16()).unwrap(),
            Err(_) => StatusCode::BAD_GATEWAY,
        }
    }
    let app = Router::new()
        .route("/", get(handle))
        .with_state(Front {
            client: client(),
            downstream,
            override_to,
        })
        .layer(DeadlineLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, task)
}

/// What the back service saw in `x-criticality`, attempt by attempt.
fn seen(back: &Server) -> Vec<Option<String>> {
    back.hits()
        .iter()
        .map(|h| h.header("x-criticality"))
        .collect()
}

#[tokio::test]
async fn an_inbound_priority_reaches_the_outbound_reqwest_call_on_every_attempt() {
    bounded(LIMIT, async {
        // The first attempt fails, so the retry must carry it too.
        let back = Server::start(vec![status(503)]).await;
        let (front_url, task) = front(back.url("/"), None).await;
        let resp = reqwest::Client::new()
            .get(&front_url)
            .header("x-criticality", "SHEDDABLE-PLUS")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(
            seen(&back),
            [Some("sheddable_plus".into()), Some("sheddable_plus".into())]
        );

        // No priority in, none written out (the next hop defaults alike).
        let before = back.hits().len();
        reqwest::Client::new().get(&front_url).send().await.unwrap();
        assert_eq!(seen(&back)[before..], [None]);
        // A value the front does not understand is no priority at all.
        reqwest::Client::new()
            .get(&front_url)
            .header("x-criticality", "urgent")
            .send()
            .await
            .unwrap();
        assert_eq!(seen(&back)[before + 1..], [None]);
        task.abort();
    })
    .await;
}

#[tokio::test]
async fn call_options_override_the_inbound_priority() {
    bounded(LIMIT, async {
        let back = Server::start(vec![]).await;
        let (front_url, task) = front(back.url("/"), Some(Priority::CRITICAL_PLUS)).await;
        reqwest::Client::new()
            .get(&front_url)
            .header("x-criticality", "sheddable")
            .send()
            .await
            .unwrap();
        assert_eq!(seen(&back), [Some("critical_plus".into())]);
        task.abort();
    })
    .await;
}

/// A downstream in process that records `x-criticality` and answers 503
/// once, then 200.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Option<String>>>>);

impl<B> Service<Request<B>> for Recorder {
    type Response = Response<Full<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let mut l = self.0.lock().unwrap();
        let value = req
            .headers()
            .get("x-criticality")
            .map(|v| v.to_str().unwrap().to_owned());
        let first = l.is_empty();
        l.push(value);
        let mut resp = Response::new(Full::default());
        if first {
            *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        std::future::ready(Ok(resp))
    }
}

#[tokio::test]
async fn an_inbound_priority_reaches_the_outbound_tower_call_unless_it_names_its_own() {
    bounded(LIMIT, async {
        let down = Recorder::default();
        let log = down.0.clone();
        let outbound = RetryLayer::new(policy()).layer(down);
        // The server: DeadlineLayer reads the inbound request; the handler
        // calls downstream, once plainly and once with its own header.
        let handler = tower::service_fn(move |req: Request<()>| {
            let mut out = outbound.clone();
            async move {
                let mut call = Request::get("http://down.invalid/")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                if req.headers().contains_key("x-own") {
                    call.headers_mut()
                        .insert("x-criticality", "5".parse().unwrap());
                }
                let r = ServiceExt::<Request<Full<Bytes>>>::ready(&mut out)
                    .await
                    .unwrap()
                    .call(call)
                    .await
                    .unwrap();
                Ok::<_, std::convert::Infallible>(Response::new(r.status().to_string()))
            }
        });
        let mut server = DeadlineLayer::new().layer(handler);
        let inbound = Request::get("/")
            .header("x-criticality", "Sheddable")
            .body(())
            .unwrap();
        let resp = server.ready().await.unwrap().call(inbound).await.unwrap();
        assert_eq!(resp.body(), "200 OK");
        assert_eq!(
            *log.lock().unwrap(),
            [Some("sheddable".into()), Some("sheddable".into())]
        );

        log.lock().unwrap().clear();
        let own = Request::get("/")
            .header("x-criticality", "sheddable")
            .header("x-own", "1")
            .body(())
            .unwrap();
        server.ready().await.unwrap().call(own).await.unwrap();
        assert_eq!(
            log.lock().unwrap()[0].as_deref(),
            Some("5"),
            "the request's own header is kept"
        );
    })
    .await;
}

fn grpc_layer() -> GrpcRetryLayer {
    GrpcRetryLayer::builder()
        .default_policy(
            MethodPolicy::builder()
                .max_attempts(3)
                .initial_backoff(Duration::from_millis(1))
                .max_backoff(Duration::from_millis(2))
                .retryable_codes([14])
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

#[tokio::test]
async fn an_inbound_priority_reaches_the_outbound_grpc_call_as_metadata() {
    bounded(LIMIT, async {
        use grpc_support::{start, Fault, Script};
        let script = Script::new([Fault::TrailersOnly(14, None)]);
        let addr = start(script.clone()).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let svc = ServiceBuilder::new()
            .layer(grpc_layer().body(tonic::body::Body::new))
            .service(channel);
        let check = || HealthCheckRequest {
            service: "shop".into(),
        };

        // Serving an inbound request read from its headers, as
        // `DeadlineLayer` does.
        let mut h = HeaderMap::new();
        h.insert("x-criticality", "sheddable_plus".parse().unwrap());
        let inbound = Inbound::from_headers(&h, std::time::Instant::now());
        let mut client = HealthClient::new(svc.clone());
        inbound
            .scope(async { client.check(check()).await.unwrap() })
            .await;
        let got: Vec<Option<String>> = script
            .received()
            .iter()
            .map(|r| {
                r.headers
                    .get("x-criticality")
                    .map(|v| v.to_str().unwrap().to_owned())
            })
            .collect();
        assert_eq!(
            got,
            [Some("sheddable_plus".into()), Some("sheddable_plus".into())]
        );

        // The call's own options win, through tonic's request extensions.
        let mut req = tonic::Request::new(check());
        req.extensions_mut().insert(CallOptions {
            priority: Some(Priority::CRITICAL_PLUS),
            ..Default::default()
        });
        let mut client = HealthClient::new(svc);
        Inbound::new(1, None)
            .with_priority(Priority::SHEDDABLE)
            .scope(async { client.check(req).await.unwrap() })
            .await;
        let last = script
            .received()
            .last()
            .unwrap()
            .headers
            .get("x-criticality")
            .cloned();
        assert_eq!(last.unwrap(), "critical_plus");
    })
    .await;
}
