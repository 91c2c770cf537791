//! What crosses a layer and what each system retries: the failure a layer
//! sees from below, whether its rules cover it, what it returns when it
//! gives up, and how long it pauses between tries. The rules here are other
//! systems' documented ones (meshes, proxies, SDKs); the library's own
//! layers are asked of its engine ([`Library`]).

use std::time::Duration;

use stagger::classify::grpc_code_of_http;
use stagger::Backoff;

use super::failure::Failure;
use super::library::Library;
use super::{Dead, Protocol, System};

/// What the dependency's failure is, as the layer just above it sees it.
pub(crate) fn bottom_failure(dead: Dead, protocol: Protocol) -> Failure {
    match (dead, protocol) {
        (Dead::Refused, _) => Failure::ConnectFailure,
        (Dead::Unavailable, Protocol::Http) => Failure::Http(503),
        (Dead::Unavailable, Protocol::Grpc) => Failure::Grpc(UNAVAILABLE),
        (Dead::Blackhole, _) => Failure::Timeout,
    }
}

const UNAVAILABLE: u32 = 14;
const DEADLINE_EXCEEDED: u32 = 4;

fn http_of_grpc(code: u32) -> u16 {
    match code {
        UNAVAILABLE => 503,
        DEADLINE_EXCEEDED => 504,
        8 => 429,
        _ => 500,
    }
}

/// A system's retry rules, as read from its file.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Rule {
    /// Retries nothing.
    #[default]
    Nothing,
    /// Envoy's `retry_on` conditions and `retriable_status_codes` (Istio
    /// writes the same into its sidecars).
    Envoy { on: Vec<String>, codes: Vec<u16> },
    /// Linkerd's `retry.linkerd.io/http` ranges and `/grpc` codes; a
    /// per-try timeout is retried too (timeouts and retries compose).
    Linkerd {
        http: Vec<(u16, u16)>,
        grpc: Vec<u32>,
    },
    /// A retryable `ServiceProfile` route: a 5xx response (the profile's
    /// default failure class).
    Profile,
    /// The library itself (a gRPC service config's method, a stagger
    /// policy file): its engine is asked.
    Library(Library),
    /// The AWS SDK: transient errors, throttling and 500/502/503/504
    /// (`legacy`: any 5xx).
    Aws { legacy: bool },
    /// nginx's `proxy_next_upstream` conditions (`error`, `timeout`,
    /// `invalid_header`, `http_502`, …).
    Nginx { on: Vec<String> },
    /// HAProxy's `retry-on` keywords (`conn-failure`, `empty-response`,
    /// `response-timeout`, status codes, `all-retryable-errors`).
    Haproxy { on: Vec<String> },
    /// Traefik's `retry` middleware: only when the server does not reply.
    Traefik,
    /// A Java client's retried exception classes (simple or qualified
    /// names; none listed retries every exception) minus the ignored ones
    /// (resilience4j's `retryExceptions` and `ignoreExceptions`).
    Java {
        retry: Vec<String>,
        ignore: Vec<String>,
    },
}

/// The exception classes a Spring HTTP client may throw for `f`, most
/// specific first (a 5xx answer is an `HttpServerErrorException`, a refused
/// connection an I/O error).
fn java_exceptions(f: Failure) -> &'static [&'static str] {
    match f {
        Failure::Http(s) if s >= 500 => &[
            "HttpServerErrorException",
            "HttpStatusCodeException",
            "RestClientResponseException",
            "WebClientResponseException",
            "RestClientException",
            "RuntimeException",
            "Exception",
            "Throwable",
        ],
        Failure::Http(_) => &[
            "HttpClientErrorException",
            "HttpStatusCodeException",
            "RestClientResponseException",
            "WebClientResponseException",
            "RestClientException",
            "RuntimeException",
            "Exception",
            "Throwable",
        ],
        Failure::Timeout => &[
            "TimeoutException",
            "SocketTimeoutException",
            "IOException",
            "ResourceAccessException",
            "RestClientException",
            "Exception",
            "Throwable",
        ],
        _ => &[
            "ConnectException",
            "IOException",
            "ResourceAccessException",
            "RestClientException",
            "Exception",
            "Throwable",
        ],
    }
}

/// Whether one of `names` (simple or qualified class names) covers `f`.
fn java_covers(names: &[String], f: Failure) -> bool {
    let thrown = java_exceptions(f);
    names.iter().any(|n| {
        let simple = n.rsplit('.').next().unwrap_or(n);
        thrown.contains(&simple)
    })
}

/// Whether Envoy's `retry_on` conditions `on` (with the listed `codes`)
/// retry a try that failed with `f`.
fn envoy_retries(on: &[String], codes: &[u16], f: Failure) -> bool {
    use Failure::*;
    let has = |c: &str| on.iter().any(|o| o == c);
    let any_reset = has("5xx") || has("gateway-error") || has("reset");
    match f {
        ConnectFailure => has("connect-failure") || any_reset,
        Reset | Timeout => any_reset,
        Http(s) => {
            (has("5xx") && s >= 500)
                || (has("gateway-error") && (502..=504).contains(&s))
                || (has("retriable-4xx") && s == 409)
                || (has("retriable-status-codes") && codes.contains(&s))
        }
        Grpc(c) => {
            let name = match c {
                1 => "cancelled",
                4 => "deadline-exceeded",
                8 => "resource-exhausted",
                13 => "internal",
                14 => "unavailable",
                _ => return false,
            };
            has(name)
        }
    }
}

impl Rule {
    /// Whether a try that failed with `f` is retried under this rule.
    pub(crate) fn retries(&self, f: Failure, protocol: Protocol) -> bool {
        use Failure::*;
        match self {
            Rule::Nothing => false,
            Rule::Envoy { on, codes } => envoy_retries(on, codes, f),
            Rule::Linkerd { http, grpc } => match f {
                Timeout => !http.is_empty() || !grpc.is_empty(),
                ConnectFailure | Reset => match protocol {
                    Protocol::Http => http.iter().any(|(a, b)| (*a..=*b).contains(&503)),
                    Protocol::Grpc => grpc.contains(&UNAVAILABLE),
                },
                Http(s) => http.iter().any(|(a, b)| (*a..=*b).contains(&s)),
                Grpc(c) => grpc.contains(&c),
            },
            Rule::Profile => match f {
                ConnectFailure | Reset => protocol == Protocol::Http,
                Http(s) => s >= 500,
                Grpc(_) | Timeout => false,
            },
            Rule::Library(l) => l.ask(f).attempts > 1,
            Rule::Aws { legacy } => match f {
                ConnectFailure | Reset | Timeout => true,
                Http(s) => s == 429 || matches!(s, 500 | 502..=504) || (*legacy && s >= 500),
                Grpc(c) => matches!(c, UNAVAILABLE | 8),
            },
            Rule::Nginx { on } => {
                let has = |c: &str| on.iter().any(|o| o == c);
                match f {
                    ConnectFailure | Reset => has("error"),
                    Timeout => has("timeout"),
                    Http(s) => has(&format!("http_{s}")),
                    // A gRPC status is an answer (HTTP 200 with its status in
                    // the trailers): `error` fires only while connecting,
                    // sending or reading the response header, and nginx has
                    // no condition on a gRPC status.
                    Grpc(_) => false,
                }
            }
            Rule::Haproxy { on } => {
                let has = |c: &str| on.iter().any(|o| o == c || o == "all-retryable-errors");
                let code = |s: u16| {
                    on.iter().any(|o| o == &s.to_string())
                        || (matches!(s, 500 | 502..=504)
                            && on.iter().any(|o| o == "all-retryable-errors"))
                };
                match f {
                    ConnectFailure => has("conn-failure"),
                    Reset => has("empty-response"),
                    Timeout => has("response-timeout"),
                    Http(s) => code(s),
                    Grpc(_) => false,
                }
            }
            Rule::Traefik => matches!(f, ConnectFailure | Reset),
            Rule::Java { retry, ignore } => {
                let f = match (f, protocol) {
                    (Grpc(_), _) => Http(500),
                    (other, _) => other,
                };
                !java_covers(ignore, f) && (retry.is_empty() || java_covers(retry, f))
            }
        }
    }

    /// The most tries of a request whose tries fail with `f`, when the
    /// rule itself says (the library's engine); `None` leaves it to the
    /// layer's count.
    pub(crate) fn tries_on(&self, f: Failure) -> Option<u32> {
        match self {
            Rule::Library(l) => Some(l.ask(f).attempts),
            _ => None,
        }
    }

    /// What the layer's answer to `f` rests on that its file cannot say,
    /// for the report's assumptions.
    pub(crate) fn assumes_on(&self, f: Failure) -> Option<&'static str> {
        match (self, f) {
            (Rule::Library(Library::Stagger(_)), Failure::Timeout) => Some(
                "the call declares no idempotency (a policy file cannot): the library does not retry a timed-out attempt",
            ),
            (Rule::Library(Library::Grpc(_)), Failure::ConnectFailure) => Some(
                "a refused connection counts against maxAttempts: transparent retries a gRPC client may add (stagger's gRPC layer: RetryLayerBuilder::transparent_retries) are not counted",
            ),
            _ => None,
        }
    }

    /// After try `n` failed with `f`: the wait before the next try, or
    /// `None` when the layer stops (its rules do not cover `f`, or `n`
    /// reached `max_tries` or the engine's own count).
    pub(crate) fn next(
        &self,
        f: Failure,
        protocol: Protocol,
        n: u32,
        max_tries: u32,
        pause: &Pause,
    ) -> Option<Duration> {
        if n >= max_tries {
            return None;
        }
        match self {
            Rule::Library(l) => {
                let asked = l.ask(f);
                let i = usize::try_from(n.saturating_sub(1)).unwrap_or(usize::MAX);
                (n < asked.attempts).then(|| asked.waits.get(i).copied().unwrap_or_default())
            }
            _ => self.retries(f, protocol).then(|| pause.mean(n)),
        }
    }

    /// What a layer of `system` returns to the layer above when it gives up
    /// after failure `f`: a proxy answers a refused or reset connection with
    /// 503 and its own timeout with 504 (for gRPC, the codes gRPC maps them
    /// to); a service whose client gave up answers its caller the same way,
    /// and with DEADLINE_EXCEEDED for its own deadline.
    pub(crate) fn passes_up(&self, f: Failure, protocol: Protocol, system: System) -> Failure {
        use Failure::*;
        match (system, f, protocol) {
            // nginx and Traefik answer a refused or reset connection with
            // 502 Bad Gateway (HAProxy and Envoy with 503).
            (System::Nginx | System::Traefik, ConnectFailure | Reset, Protocol::Http) => {
                return Http(502)
            }
            // A Spring application whose call failed answers its caller
            // with 500 unless it maps the exception.
            (System::Resilience4j, _, Protocol::Http) => return Http(500),
            _ => {}
        }
        match (f, protocol) {
            (ConnectFailure | Reset, Protocol::Http) => Http(503),
            (ConnectFailure | Reset, Protocol::Grpc) => Grpc(UNAVAILABLE),
            (Timeout, Protocol::Http) => Http(504),
            (Timeout, Protocol::Grpc) if system.is_mesh() => Grpc(UNAVAILABLE),
            (Timeout, Protocol::Grpc) => Grpc(DEADLINE_EXCEEDED),
            (Http(s), Protocol::Grpc) => Grpc(grpc_code_of_http(s)),
            (Grpc(c), Protocol::Http) => Http(http_of_grpc(c)),
            (other, _) => other,
        }
    }
}

/// How long a layer waits before its retry, on average.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Pause {
    /// No wait.
    #[default]
    None,
    /// Envoy's fully jittered back-off: retry `n` waits in
    /// `[0, (2^n − 1) · base)`, capped at `max`.
    Envoy { base: Duration, max: Duration },
    /// The library's schedule (gRPC A6, a policy file, the AWS SDK's).
    Library(Backoff),
    /// No jitter: retry `n` waits `base · factor^(n−1)`, at most `max`
    /// (resilience4j, HAProxy's turn-around, Traefik's interval).
    Steps {
        base: Duration,
        factor: f64,
        max: Duration,
    },
}

/// Envoy's retry back-off base when a policy sets none.
pub(crate) const ENVOY_BASE_INTERVAL: Duration = Duration::from_millis(25);

impl Pause {
    /// Envoy's defaults: 25 ms base, ten times that as the cap.
    pub(crate) fn envoy_default() -> Self {
        Pause::Envoy {
            base: ENVOY_BASE_INTERVAL,
            max: ENVOY_BASE_INTERVAL * 10,
        }
    }

    /// The mean wait before retry `n` (1-based).
    pub(crate) fn mean(&self, n: u32) -> Duration {
        match self {
            Pause::None => Duration::ZERO,
            Pause::Envoy { base, max } => {
                let factor = 2f64.powi(n.min(60) as i32) - 1.0;
                let upper = base.mul_f64(factor.min(1e9)).min(*max);
                upper / 2
            }
            Pause::Library(b) => {
                let (lo, hi) = b.range(n);
                (lo + hi) / 2
            }
            Pause::Steps { base, factor, max } => {
                let grown = factor.powi(n.saturating_sub(1).min(60) as i32).min(1e9);
                base.mul_f64(grown).min(*max)
            }
        }
    }
}

/// Conditions and codes for the report.
pub(crate) fn describe(on: &[String], codes: &[u16]) -> String {
    let mut s = on.join(",");
    if !codes.is_empty() {
        let c: Vec<String> = codes.iter().map(u16::to_string).collect();
        s.push_str(&format!(" [{}]", c.join(",")));
    }
    s
}

/// The conditions of `on` that repeat a request the application may have
/// handled (a 5xx answer or a reset after the request was sent), named
/// for the finding; `None` when every condition is "never sent".
pub(crate) fn unsafe_conditions(on: &[String], codes: &[u16]) -> Option<String> {
    let mut bad: Vec<String> = on
        .iter()
        .filter(|c| {
            matches!(
                c.as_str(),
                "5xx" | "gateway-error" | "reset" | "retriable-4xx"
            )
        })
        .cloned()
        .collect();
    if on.iter().any(|c| c == "retriable-status-codes") && !codes.is_empty() {
        let c: Vec<String> = codes.iter().map(u16::to_string).collect();
        bad.push(format!("retriable-status-codes [{}]", c.join(",")));
    }
    (!bad.is_empty()).then(|| bad.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envoy(on: &str, codes: &[u16]) -> Rule {
        Rule::Envoy {
            on: on.split(',').map(str::to_string).collect(),
            codes: codes.to_vec(),
        }
    }

    // Envoy's router docs: `5xx` covers a reset or a connect failure too,
    // `gateway-error` only 502-504 (and resets), `connect-failure` only that.
    #[test]
    fn envoy_conditions_as_the_router_documents_them() {
        let p = Protocol::Http;
        assert!(envoy("5xx", &[]).retries(Failure::ConnectFailure, p));
        assert!(envoy("5xx", &[]).retries(Failure::Http(500), p));
        assert!(!envoy("gateway-error", &[]).retries(Failure::Http(500), p));
        assert!(envoy("gateway-error", &[]).retries(Failure::Http(503), p));
        assert!(!envoy("connect-failure", &[]).retries(Failure::Http(503), p));
        assert!(envoy("retriable-status-codes", &[503]).retries(Failure::Http(503), p));
        assert!(!envoy("retriable-status-codes", &[]).retries(Failure::Http(503), p));
        assert!(envoy("unavailable", &[]).retries(Failure::Grpc(14), Protocol::Grpc));
        assert!(!envoy("unavailable", &[]).retries(Failure::Grpc(13), Protocol::Grpc));
    }

    // Envoy's docs: retry N waits in [0, (2^N - 1) * 25 ms), capped at 250 ms.
    #[test]
    fn envoy_pause_means() {
        let p = Pause::envoy_default();
        assert_eq!(p.mean(1), Duration::from_micros(12_500));
        assert_eq!(p.mean(2), Duration::from_micros(37_500));
        assert_eq!(p.mean(3), Duration::from_micros(87_500));
        assert_eq!(p.mean(4), Duration::from_millis(125));
        assert_eq!(p.mean(30), Duration::from_millis(125));
    }

    #[test]
    fn a_proxy_answers_a_refused_connection_with_unavailability() {
        let r = Rule::Nothing;
        let up = |f, p, s| r.passes_up(f, p, s);
        assert_eq!(
            up(Failure::ConnectFailure, Protocol::Http, System::Envoy),
            Failure::Http(503)
        );
        assert_eq!(
            up(Failure::ConnectFailure, Protocol::Grpc, System::Envoy),
            Failure::Grpc(14)
        );
        assert_eq!(
            up(Failure::Http(504), Protocol::Grpc, System::Istio),
            Failure::Grpc(14)
        );
        assert_eq!(
            up(Failure::Timeout, Protocol::Grpc, System::Grpc),
            Failure::Grpc(4)
        );
    }
}
