//! The question of `GET /api/decide`, parsed: which failure (an HTTP
//! status, an I/O error as a client library surfaces it, a gRPC status),
//! the request, the attempt, the deadline, the budget and the backoff.

use std::io;
use std::time::Duration;

use http::{Method, StatusCode};
use stagger::{Backoff, Jitter};

use super::super::query::{pairs, BadParam};
use stagger_sim::duration;

/// I/O failures the page offers, as the error a client library would
/// surface.
const IO_ERRORS: [(&str, &str); 8] = [
    ("connection_refused", "connection refused"),
    ("connection_reset", "connection reset by peer"),
    ("connection_aborted", "connection aborted"),
    ("broken_pipe", "broken pipe"),
    ("unexpected_eof", "unexpected end of file"),
    ("timed_out", "operation timed out"),
    (
        "dns_temporary",
        "failed to lookup address information: Temporary failure in name resolution",
    ),
    (
        "dns_not_found",
        "failed to lookup address information: Name or service not known",
    ),
];

pub(super) fn io_error(name: &str) -> Option<io::Error> {
    let kind = match name {
        "connection_refused" => io::ErrorKind::ConnectionRefused,
        "connection_reset" => io::ErrorKind::ConnectionReset,
        "connection_aborted" => io::ErrorKind::ConnectionAborted,
        "broken_pipe" => io::ErrorKind::BrokenPipe,
        "unexpected_eof" => io::ErrorKind::UnexpectedEof,
        "timed_out" => io::ErrorKind::TimedOut,
        "dns_temporary" | "dns_not_found" => io::ErrorKind::Other,
        _ => return None,
    };
    let text = IO_ERRORS.iter().find(|(n, _)| *n == name)?.1;
    Some(io::Error::new(kind, text))
}

/// What failed.
#[derive(Debug, Clone)]
pub(super) enum What {
    Status(StatusCode),
    Io(String),
    Grpc(u32),
}

/// The question, parsed.
#[derive(Debug, Clone)]
pub(super) struct Question {
    pub(super) what: What,
    pub(super) method: Method,
    pub(super) key: bool,
    pub(super) retry_after: Option<String>,
    pub(super) pushback: Option<String>,
    pub(super) remaining: Option<Duration>,
    pub(super) attempt: u32,
    pub(super) max_attempts: u32,
    pub(super) budget: BudgetState,
    pub(super) retry_500: bool,
    pub(super) backoff: Backoff,
    pub(super) seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BudgetState {
    None,
    Room,
    Spent,
}

fn switch(param: &str, v: &str) -> Result<bool, BadParam> {
    match v {
        "" | "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(BadParam::new(param, format!("`{v}` is not 1 or 0"))),
    }
}

fn number<T: std::str::FromStr>(param: &str, v: &str) -> Result<T, BadParam> {
    v.trim()
        .parse()
        .map_err(|_| BadParam::new(param, format!("`{v}` is not a whole number")))
}

pub(super) fn parse(q: &str) -> Result<Question, BadParam> {
    let mut what = None;
    let mut question = Question {
        what: What::Status(StatusCode::SERVICE_UNAVAILABLE),
        method: Method::GET,
        key: false,
        retry_after: None,
        pushback: None,
        remaining: None,
        attempt: 1,
        max_attempts: 3,
        budget: BudgetState::None,
        retry_500: false,
        backoff: Backoff::new(),
        seed: 1,
    };
    let mut shape = (None, None, None);
    for (k, v) in pairs(q)? {
        let p = k.as_str();
        match failure(p, &v)? {
            Some(w) => {
                if what.replace(w).is_some() {
                    return Err(BadParam::new(
                        p,
                        "give one failure: status, io or grpc".to_string(),
                    ));
                }
            }
            None => question.set(p, &k, &v, &mut shape)?,
        }
    }
    if question
        .remaining
        .is_some_and(|r| r > Duration::from_secs(86_400))
    {
        return Err(BadParam::new("remaining", "must be at most 24h"));
    }
    if !(1..=20).contains(&question.max_attempts) {
        return Err(BadParam::new("attempts", "must be between 1 and 20"));
    }
    if question.attempt == 0 || question.attempt > question.max_attempts {
        return Err(BadParam::new(
            "attempt",
            format!("must be between 1 and attempts ({})", question.max_attempts),
        ));
    }
    question.backoff = backoff(shape)?;
    // Nothing is assumed: a question without a failure is not answered.
    question.what = what.ok_or_else(|| {
        BadParam::new(
            "status",
            "give the failure asked about: status (an HTTP status), io (an I/O error) or grpc \
             (a gRPC status)",
        )
    })?;
    Ok(question)
}

/// The failure asked about, when `p` names one (`status`, `io`, `grpc`).
fn failure(p: &str, v: &str) -> Result<Option<What>, BadParam> {
    Ok(match p {
        "status" => {
            let code: u16 = number(p, v)?;
            let s = StatusCode::from_u16(code)
                .map_err(|_| BadParam::new(p, format!("`{v}` is not an HTTP status (100–999)")))?;
            Some(What::Status(s))
        }
        "io" => {
            if io_error(v).is_none() {
                let names: Vec<&str> = IO_ERRORS.iter().map(|(n, _)| *n).collect();
                return Err(BadParam::new(
                    p,
                    format!("`{v}` is not one of {}", names.join(", ")),
                ));
            }
            Some(What::Io(v.to_string()))
        }
        "grpc" => {
            let up = v.trim().to_ascii_uppercase();
            let code = match stagger::classify::GRPC_CODE_NAMES
                .iter()
                .position(|c| *c == up)
            {
                Some(i) => i as u32,
                None => number::<u32>(p, v)
                    .ok()
                    .filter(|c| *c < 17)
                    .ok_or_else(|| {
                        BadParam::new(p, format!("`{v}` is not a gRPC status name or code 0–16"))
                    })?,
            };
            Some(What::Grpc(code))
        }
        _ => None,
    })
}

/// The backoff's base, cap and jitter as the query set them.
type Shape = (Option<Duration>, Option<Duration>, Option<Jitter>);

impl Question {
    /// Sets what parameter `p` (written `k`) says, other than the failure.
    fn set(&mut self, p: &str, k: &str, v: &str, shape: &mut Shape) -> Result<(), BadParam> {
        match p {
            "method" => {
                self.method = Method::from_bytes(v.trim().to_ascii_uppercase().as_bytes())
                    .map_err(|_| BadParam::new(p, format!("`{v}` is not an HTTP method")))?;
            }
            "idempotency_key" => self.key = switch(p, v)?,
            "retry_500" => self.retry_500 = switch(p, v)?,
            "retry_after" => self.retry_after = Some(v.to_string()).filter(|v| !v.is_empty()),
            "pushback" | "pushback_ms" => {
                self.pushback = Some(v.to_string()).filter(|v| !v.is_empty())
            }
            "remaining" => {
                self.remaining = match v.trim() {
                    "" | "none" => None,
                    t => Some(duration(t).map_err(|e| BadParam::new(p, e))?),
                }
            }
            "attempt" => self.attempt = number(p, v)?,
            "attempts" | "max_attempts" => self.max_attempts = number(p, v)?,
            "budget" => {
                self.budget = match v {
                    "" | "none" => BudgetState::None,
                    "room" => BudgetState::Room,
                    "spent" => BudgetState::Spent,
                    _ => {
                        return Err(BadParam::new(
                            p,
                            format!("`{v}` is not none, room or spent"),
                        ))
                    }
                }
            }
            "base" => shape.0 = Some(duration(v).map_err(|e| BadParam::new(p, e))?),
            "cap" => shape.1 = Some(duration(v).map_err(|e| BadParam::new(p, e))?),
            "jitter" => {
                shape.2 = Some(
                    v.parse::<Jitter>()
                        .map_err(|e| BadParam::new(p, e.problem().to_string()))?,
                )
            }
            "seed" => self.seed = number(p, v)?,
            _ => {
                return Err(BadParam::new(
                    p,
                    format!("`{k}` is not a parameter of decide"),
                ))
            }
        }
        Ok(())
    }
}

/// The backoff the query shaped, checked.
fn backoff((base, cap, jitter): Shape) -> Result<Backoff, BadParam> {
    let d = Backoff::new();
    let b = Backoff {
        base: base.unwrap_or(d.base),
        cap: cap.unwrap_or(d.cap),
        jitter: jitter.unwrap_or(d.jitter),
        ..d
    };
    b.validate()
        .map_err(|e| BadParam::new(e.field(), e.problem().to_string()))?;
    Ok(b)
}
