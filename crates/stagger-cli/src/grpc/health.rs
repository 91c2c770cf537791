//! `stagger grpc health`'s probe: the standard `grpc.health.v1.Health/Check`
//! call over plain HTTP/2, its messages encoded and decoded by hand (two
//! fields; no protobuf code generation), through the library's gRPC
//! `RetryLayer`.

use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{HeaderValue, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stagger::classify::grpc_code_name;
use stagger::grpc::grpc_status;
use stagger::tower::grpc::{CallReport, RetryLayer};
use stagger::StopReason;
use tower::{Layer, Service, ServiceExt};

/// What to probe.
#[derive(Debug, Clone)]
pub struct Target {
    /// `HOST:PORT`, as the user wrote it (for messages).
    pub addr: String,
    /// The service to ask about (empty: the server as a whole).
    pub service: String,
    /// The connect timeout (`None`: no limit).
    pub connect_timeout: Option<Duration>,
    /// The call's deadline, sent as `grpc-timeout` (`None`: no limit).
    pub deadline: Option<Duration>,
}

/// The names of `HealthCheckResponse.ServingStatus`.
const SERVING_NAMES: [&str; 4] = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];

/// How the probe ended.
pub struct Ending {
    /// The exit code: 0 serving, 2 unreachable, 3 the RPC failed, 4 not serving.
    pub code: u8,
    /// The serving status, when the server answered one.
    pub status: Option<&'static str>,
    /// Why the retry layer stopped.
    pub reason: StopReason,
    /// What to tell the user when there is no status.
    pub message: String,
}

/// The request message: `HealthCheckRequest { service }` in a gRPC frame.
pub(crate) fn request_frame(service: &str) -> Bytes {
    let mut msg = Vec::with_capacity(service.len() + 8);
    if !service.is_empty() {
        msg.push(0x0a);
        let mut n = service.len();
        while n >= 0x80 {
            msg.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        msg.push(n as u8);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut out = vec![0u8];
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(&msg);
    Bytes::from(out)
}

/// The serving status in a `HealthCheckResponse` frame (field 1, a varint;
/// absent means UNKNOWN).
pub(crate) fn serving_status(mut body: Bytes) -> Option<u64> {
    if body.len() < 5 {
        return None;
    }
    body.advance(1);
    let len = body.get_u32() as usize;
    let mut msg = body.get(..len)?;
    let mut status = 0;
    while !msg.is_empty() {
        let (key, rest) = varint(msg)?;
        match key & 7 {
            0 => {
                let (v, rest) = varint(rest)?;
                if key >> 3 == 1 {
                    status = v;
                }
                msg = rest;
            }
            2 => {
                let (n, rest) = varint(rest)?;
                msg = rest.get(n as usize..)?;
            }
            _ => return None,
        }
    }
    Some(status)
}

fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

/// Asks `target`'s health service once through `layer` (which retries as
/// it is configured) and says how that ended.
pub async fn probe(target: &Target, layer: RetryLayer, uri: http::Uri) -> Ending {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(target.connect_timeout);
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build(connector);
    let mut svc = layer.layer(client);
    let mut req = Request::post(uri)
        .version(http::Version::HTTP_2)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    // `--deadline 0` is no limit, as everywhere else: no grpc-timeout.
    if let Some(d) = target.deadline {
        let timeout = stagger::deadline::format_grpc_timeout(d);
        req = req.header(
            "grpc-timeout",
            HeaderValue::from_str(&timeout).unwrap_or(HeaderValue::from_static("10S")),
        );
    }
    let req = req
        .body(Full::new(request_frame(&target.service)))
        .unwrap_or_default();
    let failed = |code, reason, message: String| Ending {
        code,
        status: None,
        reason,
        message,
    };
    let resp = match svc.ready().await {
        Ok(s) => s.call(req).await,
        Err(e) => Err(e),
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            let connect = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<hyper_util::client::legacy::Error>())
                .is_some_and(|h| h.is_connect());
            let code = if connect { 2 } else { 3 };
            return failed(
                code,
                e.info().reason,
                format!("could not reach {}: {e}", target.addr),
            );
        }
    };
    let report = resp
        .extensions()
        .get::<CallReport>()
        .cloned()
        .unwrap_or_default();
    // The library's one reader of grpc-status: a value that is no number
    // is UNKNOWN, as grpc-java reads it, wherever it stands.
    let head_status = grpc_status(resp.headers());
    let collected = match resp.into_body().collect().await {
        Ok(c) => c,
        Err(e) => {
            let reason = report.get().reason.unwrap_or(StopReason::NotRetryable);
            return failed(3, reason, format!("the answer broke off: {e}"));
        }
    };
    let trailer_status = collected.trailers().and_then(grpc_status);
    let summary = report.get();
    let reason = summary.reason.unwrap_or(StopReason::NotRetryable);
    let code = head_status.or(trailer_status).unwrap_or(2);
    if code != 0 {
        let name = grpc_code_name(code).unwrap_or("UNKNOWN");
        return failed(3, reason, format!("the RPC failed: {name} ({reason})"));
    }
    serving(collected.to_bytes(), reason)
}

/// How an OK answer ends the probe: 0 when it says SERVING, 4 for any
/// other status, 3 when it is no HealthCheckResponse.
fn serving(body: Bytes, reason: StopReason) -> Ending {
    match serving_status(body) {
        Some(s) => {
            let name = SERVING_NAMES.get(s as usize).copied().unwrap_or("UNKNOWN");
            Ending {
                code: if s == 1 { 0 } else { 4 },
                status: Some(name),
                reason,
                message: String::new(),
            }
        }
        None => Ending {
            code: 3,
            status: None,
            reason,
            message: "the answer is not a HealthCheckResponse".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_by_hand() {
        assert_eq!(request_frame("").as_ref(), &[0, 0, 0, 0, 0]);
        assert_eq!(
            request_frame("ab").as_ref(),
            &[0, 0, 0, 0, 4, 0x0a, 2, b'a', b'b']
        );
        let long = request_frame(&"x".repeat(200));
        assert_eq!(&long[5..8], &[0x0a, 0xc8, 0x01]);
        assert_eq!(
            serving_status(Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 1])),
            Some(1)
        );
        assert_eq!(
            serving_status(Bytes::from_static(&[0, 0, 0, 0, 0])),
            Some(0)
        );
        assert_eq!(
            serving_status(Bytes::from_static(&[0, 0, 0, 0, 2, 0x08])),
            None
        );
    }
}
