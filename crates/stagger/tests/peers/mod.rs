//! The services and tower policies the layer benchmarks and the allocation
//! count put stagger beside: a plain always-ready service, and the tower
//! policies a tower user writes in place of stagger's layers.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::Service;

/// The plain service every variant wraps: always ready, answers 200 at once.
#[derive(Clone, Copy)]
pub struct Ok200;

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

/// tower's `Retry` policy that never retries nor clones: the floor.
#[derive(Clone, Copy)]
pub struct NoRetry;

impl<Req, Res, E> tower::retry::Policy<Req, Res, E> for NoRetry {
    type Future = Ready<()>;

    fn retry(&mut self, _req: &mut Req, _result: &mut Result<Res, E>) -> Option<Self::Future> {
        None
    }

    fn clone_request(&mut self, _req: &Req) -> Option<Req> {
        None
    }
}

/// tower's `Retry` policy a tower user writes to get what stagger does: the
/// request cloned (head and body) for the next attempt and stamped with its
/// `x-retry-attempt`, a backoff of 100 ms × 2^n on a 5xx, up to 3 attempts.
#[derive(Clone, Copy)]
pub struct CloneAndBackoff {
    pub attempt: u32,
}

impl<Res, E> tower::retry::Policy<Request<Full<Bytes>>, Response<Res>, E> for CloneAndBackoff {
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

/// tower's hedge policy: GETs may be hedged, cloned and stamped as above.
#[derive(Clone, Copy)]
pub struct CloneGet;

impl tower::hedge::Policy<Request<Full<Bytes>>> for CloneGet {
    fn clone_request(&self, req: &Request<Full<Bytes>>) -> Option<Request<Full<Bytes>>> {
        Some(stamped_copy(req, 2))
    }

    fn can_retry(&self, req: &Request<Full<Bytes>>) -> bool {
        req.method() == http::Method::GET
    }
}

/// A copy of `req` (head and body) carrying `x-retry-attempt: attempt`.
pub fn stamped_copy(req: &Request<Full<Bytes>>, attempt: u32) -> Request<Full<Bytes>> {
    let mut copy = Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy.headers_mut()
        .insert("x-retry-attempt", http::HeaderValue::from(attempt));
    copy
}

/// The request every side serves: a GET with one header and no body.
pub fn request() -> Request<Full<Bytes>> {
    Request::get("http://127.0.0.1/item?id=7")
        .header("accept", "application/json")
        .body(Full::default())
        .expect("valid request")
}
