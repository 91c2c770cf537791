//! The scripted server of `common`, in process: a tower service that the
//! client layers wrap directly, with no socket in between. It answers from
//! the same [`Fault`] script and records the same [`Hit`]s, stamped with
//! tokio's clock, so a test under `#[tokio::test(start_paused = true)]`
//! sees every wait exactly and sleeps for none of them (a [`Fault::Slow`]
//! reply sleeps in virtual time too).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::Service;

use super::{Fault, Hit};

/// A scripted service: each request takes the next fault from the script (a
/// plain 200 when the script is empty). Clones share the script and the
/// record.
#[derive(Clone, Default)]
pub struct Scripted {
    script: Arc<Mutex<VecDeque<Fault>>>,
    hits: Arc<Mutex<Vec<Hit>>>,
    up_at: Option<Instant>,
    refusals: Arc<Mutex<Vec<Instant>>>,
}

impl Scripted {
    /// A service answering with `script`, then 200s.
    pub fn new(script: Vec<Fault>) -> Self {
        Scripted {
            script: Arc::new(Mutex::new(script.into())),
            ..Scripted::default()
        }
    }

    /// Refuses every request (an I/O error of kind `ConnectionRefused`, as a
    /// connector reports a port nothing listens on) until `after` has passed
    /// on tokio's clock; then it serves its script.
    pub fn down_for(mut self, after: Duration) -> Self {
        self.up_at = Some(Instant::now() + after);
        self
    }

    /// A URL to send requests to (the service ignores it).
    pub fn url(&self, path: &str) -> String {
        format!("http://stagger.test{path}")
    }

    /// The requests served, in order.
    pub fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// When each refused request came, in order.
    pub fn refusals(&self) -> Vec<Instant> {
        self.refusals.lock().unwrap().clone()
    }

    /// Gaps between consecutive requests served.
    pub fn gaps(&self) -> Vec<Duration> {
        let h = self.hits();
        h.windows(2).map(|w| w[1].at - w[0].at).collect()
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<B> Service<Request<B>> for Scripted
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: std::fmt::Debug + Send,
{
    type Response = Response<Full<Bytes>>;
    type Error = std::io::Error;
    type Future = BoxFuture<Result<Self::Response, std::io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let now = Instant::now();
        if self.up_at.is_some_and(|up| now < up) {
            self.refusals.lock().unwrap().push(now);
            return Box::pin(std::future::ready(Err(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))));
        }
        let fault = self.script.lock().unwrap().pop_front();
        let hits = Arc::clone(&self.hits);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.expect("request body").to_bytes();
            hits.lock().unwrap().push(Hit {
                at: now.into_std(),
                method: parts.method.to_string(),
                headers: parts.headers,
                body_len: body.len(),
                body: body.to_vec(),
            });
            let (code, extra) = match fault {
                None => (200, Vec::new()),
                Some(Fault::Status(c, h)) => (c, h),
                Some(Fault::Slow(d, c)) => {
                    tokio::time::sleep(d).await;
                    (c, Vec::new())
                }
            };
            let mut resp = Response::new(Full::new(Bytes::from(format!("status {code}"))));
            *resp.status_mut() = StatusCode::from_u16(code).unwrap();
            for (k, v) in extra {
                resp.headers_mut().insert(k, v.parse().unwrap());
            }
            Ok(resp)
        })
    }
}
