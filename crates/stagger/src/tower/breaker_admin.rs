//! The breakers' admin endpoint: a small tower service over a
//! [`BreakerControl`], like Spring Boot Actuator's `circuitbreakers`.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::{ready, Ready};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;

use crate::guardrails::{BreakerControl, Transition};

/// An HTTP endpoint over a [`BreakerControl`] that a service mounts on its
/// admin router: `GET` lists every attached breaker and its state, `POST`
/// changes them.
///
/// **Access.** The endpoint checks no credentials: whoever can reach it can
/// force a dependency open. Mount it behind the application's own
/// authentication, on an admin listener, never on the public router.
///
/// - `GET` → `200` with `{"breakers":[{"name":"payments","state":"closed"},…]}`.
/// - `POST ?to=<transition>` applies it to every breaker, or to one with
///   `&name=<name>`. `<transition>` is `disable`, `metrics_only`,
///   `force_open`, `close_and_reset`, or `open_for` with `&ms=<millis>`.
///   An optional `&reason=<text>` says who and why (logged with the
///   `tracing` feature). Answers `200` with the states after, `400` for a
///   bad query, `404` for an unknown name.
/// - Other methods: `405` with `Allow: GET, POST`.
///
/// Names and reasons are matched and logged as sent (no percent-decoding
/// beyond `+` and `%XX`).
///
/// ```
/// use stagger::guardrails::BreakerControl;
/// use stagger::tower::BreakerAdmin;
/// use stagger::Breaker;
///
/// let control = BreakerControl::new();
/// control.attach("payments", &Breaker::default());
/// let admin = BreakerAdmin::new(control);
/// // axum: Router::new().nest_service("/admin/breakers", admin), behind auth.
/// # let _ = admin;
/// ```
#[derive(Debug, Clone)]
pub struct BreakerAdmin {
    control: BreakerControl,
}

impl BreakerAdmin {
    /// The endpoint over `control`.
    pub const fn new(control: BreakerControl) -> Self {
        BreakerAdmin { control }
    }

    fn answer(&self, method: &Method, query: Option<&str>) -> Response<Full<Bytes>> {
        let now = Instant::now();
        match *method {
            Method::GET => self.states(StatusCode::OK, now),
            Method::POST => match self.post(query.unwrap_or(""), now) {
                Ok(()) => self.states(StatusCode::OK, now),
                Err((status, problem)) => {
                    json(status, format!("{{\"error\":{}}}", quoted(&problem)))
                }
            },
            _ => {
                let mut r = json(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "{\"error\":\"use GET or POST\"}".into(),
                );
                r.headers_mut()
                    .insert(header::ALLOW, header::HeaderValue::from_static("GET, POST"));
                r
            }
        }
    }

    fn post(&self, query: &str, now: Instant) -> Result<(), (StatusCode, String)> {
        let bad = |what: String| (StatusCode::BAD_REQUEST, what);
        let (mut to, mut name, mut ms, mut reason) = (None, None, None, String::new());
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v).ok_or_else(|| bad(format!("`{k}` is not valid percent-encoding")))?;
            match k {
                "to" => to = Some(v),
                "name" => name = Some(v),
                "ms" => {
                    let n = v
                        .parse::<u64>()
                        .map_err(|_| bad(format!("`ms` must be whole milliseconds, not `{v}`")))?;
                    ms = Some(Duration::from_millis(n));
                }
                "reason" => reason = v,
                _ => return Err(bad(format!("unknown parameter `{k}`"))),
            }
        }
        let to = to.ok_or_else(|| bad("`to` is missing: say which transition".into()))?;
        let transition = match (to.as_str(), ms) {
            ("disable", None) => Transition::Disable,
            ("metrics_only", None) => Transition::MetricsOnly,
            ("force_open", None) => Transition::ForceOpen,
            ("close_and_reset", None) => Transition::CloseAndReset,
            ("open_for", Some(d)) => Transition::OpenFor(d),
            ("open_for", None) => return Err(bad("`open_for` needs `ms`".into())),
            (_, Some(_)) if is_known(&to) => {
                return Err(bad(format!("`ms` goes with `open_for` only, not `{to}`")))
            }
            _ => {
                return Err(bad(format!(
                    "unknown transition `{to}`: use disable, metrics_only, force_open, close_and_reset or open_for"
                )))
            }
        };
        match name {
            Some(n) => self
                .control
                .transition_one(&n, transition, &reason, now)
                .map(|_| ())
                .ok_or((StatusCode::NOT_FOUND, format!("no breaker named `{n}`"))),
            None => {
                self.control.transition(transition, &reason, now);
                Ok(())
            }
        }
    }

    fn states(&self, status: StatusCode, now: Instant) -> Response<Full<Bytes>> {
        let mut body = String::from("{\"breakers\":[");
        for (i, (name, state)) in self.control.states(now).iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            let _ = write!(
                body,
                "{{\"name\":{},\"state\":\"{}\"}}",
                quoted(name),
                state.as_str()
            );
        }
        body.push_str("]}");
        json(status, body)
    }
}

fn is_known(to: &str) -> bool {
    matches!(
        to,
        "disable" | "metrics_only" | "force_open" | "close_and_reset"
    )
}

fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

/// `s` as a JSON string.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A query value with `+` and `%XX` decoded; `None` if it is not UTF-8 or
/// a `%` is not followed by two hex digits.
fn decode(v: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(v.len());
    let mut it = v.bytes();
    while let Some(b) = it.next() {
        match b {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hi = (it.next()? as char).to_digit(16)?;
                let lo = (it.next()? as char).to_digit(16)?;
                bytes.push((hi * 16 + lo) as u8);
            }
            b => bytes.push(b),
        }
    }
    String::from_utf8(bytes).ok()
}

impl<B> tower_service::Service<Request<B>> for BreakerAdmin {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        ready(Ok(self.answer(req.method(), req.uri().query())))
    }
}
