//! One request through the proxy: count its arrival, apply the faults that
//! hold, forward it to the upstream and stream the answer back.
//!
//! Bodies are never collected: the client's body is the upstream request's
//! body and the upstream's body is the answer's, frame by frame, trailers
//! included (gRPC's status travels in them). An HTTP/2 request goes to the
//! upstream over HTTP/2 (h2c with prior knowledge), anything else over
//! HTTP/1.1; headers that only make sense on one hop are not copied.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};

use super::grpc;
use super::mismatch;
use super::record::{self, Event, Recorder};
use crate::fault::{self, Fault, Window};
use crate::reset::ResetHandle;

/// Any error a body may end with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer the proxy gives.
pub type Body = BoxBody<Bytes, BoxError>;

/// The longest a blackholed request is held before its connection is
/// reset (a client with no timeout at all must not pin the proxy forever).
pub const MAX_HOLD: Duration = Duration::from_secs(300);

/// Where requests go.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub(super) scheme: Scheme,
    pub(super) authority: Authority,
}

/// What every connection shares.
pub(super) struct Shared {
    pub start: Instant,
    pub faults: Vec<Window>,
    pub upstream: Upstream,
    pub h1: Client<HttpConnector, Incoming>,
    pub h2: Client<HttpConnector, Incoming>,
    pub rec: Arc<Recorder>,
    /// The bound on a connection to the upstream (and on each question
    /// asked of it when an exchange fails).
    pub connect_timeout: Duration,
    /// Requests seen during a reset fault (every other one is forwarded).
    pub resets: AtomicU64,
}

fn empty() -> Body {
    Empty::new().map_err(|e| match e {}).boxed()
}

fn answer(status: StatusCode, retry_after: bool) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(format!("{status} (stagger proxy fault)\n")))
            .map_err(|e| match e {})
            .boxed(),
    );
    *r.status_mut() = status;
    if retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// The 502 of an upstream that gave no answer: the proxy's own word, not
/// a fault's (none was asked for), saying why.
fn no_answer(why: &str) -> Response<Body> {
    let status = StatusCode::BAD_GATEWAY;
    let mut r = Response::new(
        Full::new(Bytes::from(format!(
            "{status} (stagger proxy: no answer from the upstream: {why}; no fault was injected)\n"
        )))
        .map_err(|e| match e {})
        .boxed(),
    );
    *r.status_mut() = status;
    r
}

/// Serves one request.
pub(super) async fn handle(
    s: Arc<Shared>,
    reset: ResetHandle,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let now = Instant::now();
    s.rec.arrival(req.headers(), now);
    let holding = fault::at(&s.faults, now.saturating_duration_since(s.start));
    match holding.verdict {
        Some(Fault::Blackhole) => {
            s.rec.event(Event::Blackholed);
            // Dropped with the connection when the client gives up.
            tokio::time::sleep(MAX_HOLD).await;
            reset.reset();
            return Ok(Response::new(empty()));
        }
        Some(Fault::Unavailable) => {
            s.rec.event(Event::Answered503);
            return Ok(answer(StatusCode::SERVICE_UNAVAILABLE, true));
        }
        Some(Fault::Throttle) => {
            s.rec.event(Event::Answered429);
            return Ok(answer(StatusCode::TOO_MANY_REQUESTS, true));
        }
        Some(Fault::Reset) => {
            s.rec.event(Event::Reset);
            // Every other request reaches the upstream before the reset:
            // its answer is lost, and the client cannot tell it from one
            // that never arrived.
            if s.resets.fetch_add(1, Relaxed) % 2 == 0 {
                let _ = forward(&s, req).await;
            }
            reset.reset();
            return Ok(Response::new(empty()));
        }
        _ => {}
    }
    if let Some(until) = holding.stall_until {
        s.rec.event(Event::Stalled);
        tokio::time::sleep_until((s.start + until).into()).await;
    }
    if let Some(d) = holding.slow {
        s.rec.event(Event::Slowed);
        tokio::time::sleep(d).await;
    }
    Ok(forward(&s, req).await)
}

/// Headers of one hop only (RFC 9110 §7.6.1), never copied to the next.
const HOP: [HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

fn strip_hop_headers(h: &mut HeaderMap) {
    // Names listed in Connection are hop-by-hop too.
    let listed: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in HOP.iter().chain(&listed) {
        h.remove(n);
    }
    // `te: trailers` is the one TE value HTTP/2 allows, and gRPC needs it.
    if h.get(header::TE)
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"trailers"))
    {
        h.remove(header::TE);
    }
}

/// Sends `req` to the upstream and streams its answer back (502 if it
/// cannot be reached).
async fn forward(s: &Shared, req: Request<Incoming>) -> Response<Body> {
    let key = record::key(req.headers()).map(str::to_owned);
    let (mut parts, body) = req.into_parts();
    let h2 = parts.version == Version::HTTP_2;
    let pq = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let uri = Uri::builder()
        .scheme(s.upstream.scheme.clone())
        .authority(s.upstream.authority.clone())
        .path_and_query(pq)
        .build();
    let Ok(uri) = uri else {
        return answer(StatusCode::BAD_REQUEST, false);
    };
    parts.uri = uri;
    strip_hop_headers(&mut parts.headers);
    if h2 {
        // HTTP/2 names the host in :authority.
        parts.headers.remove(header::HOST);
    } else {
        parts.version = Version::HTTP_11;
    }
    s.rec.event(Event::Forwarded);
    let client = if h2 { s.h2.clone() } else { s.h1.clone() };
    let rec = s.rec.clone();
    let (authority, timeout) = (s.upstream.authority.clone(), s.connect_timeout);
    // The exchange with the upstream runs to its end in a task of its own:
    // a client that hangs up (its request held by a stall, say) drops this
    // future, but what the upstream served is still counted, so the counts
    // match the upstream's own log.
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let req = Request::from_parts(parts, body);
        let answer = exchange(&client, &rec, req, key, h2, &authority, timeout).await;
        if tx.send(answer).is_err() {
            rec.event(Event::Unclaimed);
        }
    });
    rx.await
        .unwrap_or_else(|_| no_answer("the proxy's forwarding task ended without an answer"))
}

/// One request to the upstream at `authority` and its answer, counted.
async fn exchange(
    client: &Client<HttpConnector, Incoming>,
    rec: &Arc<Recorder>,
    req: Request<Incoming>,
    key: Option<String>,
    h2: bool,
    authority: &Authority,
    timeout: Duration,
) -> Response<Body> {
    match client.request(req).await {
        Ok(resp) => {
            let status = resp.status();
            if let Some(v) = resp.headers().get(header::SERVER) {
                rec.upstream_server(v.to_str().unwrap_or_default());
            }
            // A gRPC call's outcome is its grpc-status, not the HTTP 200.
            let grpc = status == StatusCode::OK && grpc::is_grpc(resp.headers());
            let grpc_now = grpc.then(|| grpc::status(resp.headers())).flatten();
            match grpc_now {
                Some(code) => rec.event(Event::Grpc(code)),
                None if grpc => {}
                None => rec.event(Event::Answered(status.as_u16())),
            }
            let ok = status.is_success() && (!grpc || grpc_now == Some(0));
            if let (true, Some(k)) = (ok, key.as_deref()) {
                rec.keyed_success(k, record::is_replay(resp.headers()));
            }
            let (mut parts, body) = resp.into_parts();
            strip_hop_headers(&mut parts.headers);
            let body = if grpc && grpc_now.is_none() {
                // The status comes in the trailers.
                grpc_counted(body, rec.clone())
            } else {
                body.map_err(BoxError::from).boxed()
            };
            Response::from_parts(parts, body)
        }
        Err(e) => {
            rec.event(Event::UpstreamError);
            let why = mismatch::why_no_answer(&e, h2, authority, timeout).await;
            rec.upstream_error(why.clone());
            no_answer(&why)
        }
    }
}

/// The upstream's body, passed on frame by frame, its trailers' status
/// counted as they go by (UNKNOWN for trailers without one).
fn grpc_counted(body: Incoming, rec: Arc<Recorder>) -> Body {
    body.map_frame(move |f: hyper::body::Frame<Bytes>| {
        if let Some(t) = f.trailers_ref() {
            rec.event(Event::Grpc(grpc::status(t).unwrap_or(grpc::UNKNOWN)));
        }
        f
    })
    .map_err(BoxError::from)
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hop_headers_are_dropped_and_te_trailers_kept() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, x-hop".parse().unwrap());
        h.insert("x-hop", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TRANSFER_ENCODING, "chunked".parse().unwrap());
        h.insert(header::TE, "trailers".parse().unwrap());
        h.insert("x-retry-attempt", "2".parse().unwrap());
        strip_hop_headers(&mut h);
        let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["te", "x-retry-attempt"]);
        h.insert(header::TE, "gzip".parse().unwrap());
        strip_hop_headers(&mut h);
        assert!(!h.contains_key(header::TE));
    }
}
