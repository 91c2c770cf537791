//! `GET /api/decide`: "should this call be retried?", answered by the
//! engine itself.
//!
//! The query describes one failed attempt the way an HTTP client sees it (a
//! status with its `Retry-After`, an I/O error, a gRPC status with its
//! pushback), the request (method, `Idempotency-Key`), the attempt number,
//! the time left before the deadline and the state of a retry budget. This
//! module turns it into facts with the library's own readers
//! ([`stagger::http::response_failure`], [`stagger::http::error_failure`],
//! [`stagger::http::is_idempotent`]) — the functions the reqwest and tower
//! front-ends call — and drives [`Policy::start_attempt`] and
//! [`Policy::decide`] on a virtual clock. It decides nothing itself: every
//! word of the answer comes from what the engine returned.

use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderValue, StatusCode};
use serde::Serialize;
use stagger::guardrails::budget::{Budget, RatioBudget};
use stagger::http::{error_failure, is_idempotent, response_failure};
use stagger::random::FastRng;
use stagger::{
    Call, Class, Decision, Failure, Hint, Idempotency, Jitter, NotRetried, Policy, StopReason,
};

use super::query::BadParam;

mod question;

use question::{io_error, parse, BudgetState, Question, What};

/// One step of the call the engine saw.
#[derive(Debug, Serialize)]
struct Step {
    attempt: u32,
    at_ms: f64,
    decision: String,
}

/// The facts handed to the engine for the attempt asked about.
#[derive(Debug, Serialize)]
struct Facts {
    class: Option<&'static str>,
    hint: Option<String>,
    not_sent: bool,
    idempotency: &'static str,
}

/// The engine's answer.
#[derive(Debug, Serialize)]
struct Answer {
    /// `retry` or `stop`.
    decision: &'static str,
    /// `retry after 1.234s` or `stop: not_retryable`.
    summary: String,
    after_ms: Option<f64>,
    stop_reason: Option<&'static str>,
    not_retried: Option<&'static str>,
    /// The attempt the decision is about (earlier than asked when the call
    /// stopped before getting there).
    attempt: u32,
    max_attempts: u32,
    facts: Facts,
    why: Vec<String>,
    /// Every decision of the call, the earlier attempts failing the same way.
    steps: Vec<Step>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn policy(q: &Question, t0: Instant) -> Result<Policy, BadParam> {
    let mut b = Policy::builder()
        .backoff(q.backoff)
        .max_attempts(q.max_attempts);
    if q.budget != BudgetState::None {
        let budget = RatioBudget::default();
        let requests = if q.budget == BudgetState::Room {
            1000
        } else {
            100
        };
        for _ in 0..requests {
            budget.on_request(t0);
        }
        if q.budget == BudgetState::Spent {
            let f = Failure::transient();
            // Bounded: a budget of 100 requests grants a few dozen retries.
            for _ in 0..10_000 {
                if budget.try_withdraw(&f, t0).is_none() {
                    break;
                }
            }
        }
        b = b.budget(budget);
    }
    b.build()
        .map_err(|e| BadParam::new(e.field(), e.problem().to_string()))
}

/// The failure of an attempt as the HTTP front-end reads it.
fn failure(q: &Question) -> Result<Option<Failure>, BadParam> {
    let now = SystemTime::now();
    let mut headers = HeaderMap::new();
    Ok(match &q.what {
        What::Status(s) => {
            if let Some(v) = &q.retry_after {
                let v = HeaderValue::from_str(v)
                    .map_err(|_| BadParam::new("retry_after", "is not a header value"))?;
                headers.insert(http::header::RETRY_AFTER, v);
            }
            response_failure(*s, &headers, q.retry_500, now)
        }
        What::Grpc(code) => {
            headers.insert("grpc-status", HeaderValue::from(*code));
            if let Some(v) = &q.pushback {
                let v = HeaderValue::from_str(v)
                    .map_err(|_| BadParam::new("pushback", "is not a header value"))?;
                headers.insert("grpc-retry-pushback-ms", v);
            }
            response_failure(StatusCode::OK, &headers, q.retry_500, now)
        }
        What::Io(name) => {
            let e = io_error(name).ok_or_else(|| BadParam::new("io", "unknown"))?;
            Some(error_failure(&e))
        }
    })
}

/// Idempotency as the HTTP front-end declares it: a gRPC call's contract is
/// its method's retry policy (none given here), an HTTP request's its
/// method or its `Idempotency-Key`.
fn idempotency(q: &Question) -> Idempotency {
    let mut headers = HeaderMap::new();
    if q.key {
        headers.insert(
            stagger::http::IDEMPOTENCY_KEY,
            HeaderValue::from_static("\"lab\""),
        );
    }
    match q.what {
        What::Grpc(_) => Idempotency::Unspecified,
        _ if is_idempotent(&q.method, &headers) => Idempotency::Idempotent,
        _ => Idempotency::NotIdempotent,
    }
}

/// Drives the call: attempts 1..=`attempt` each fail with `f`; returns the
/// steps, the last decision, the attempt it is about, and the call.
fn drive(
    q: &Question,
    f: Option<Failure>,
    deadline: Option<Duration>,
) -> Result<(Vec<Step>, Decision, u32, Call<FastRng>), BadParam> {
    let t0 = Instant::now();
    let policy = policy(q, t0)?;
    let mut call = Call::seeded(q.seed).idempotency(idempotency(q));
    if let Some(d) = deadline {
        call = call.deadline(t0 + d);
    }
    call.start_clock(t0);
    let mut now = t0;
    let mut steps = Vec::new();
    let mut last = Decision::Stop(StopReason::Success);
    for n in 1..=q.attempt {
        if let Err(reason) = policy.start_attempt(&mut call, now) {
            last = Decision::Stop(reason);
            steps.push(Step {
                attempt: n,
                at_ms: ms(now - t0),
                decision: summary(last),
            });
            return Ok((steps, last, n, call));
        }
        last = match f {
            Some(f) => policy.decide(&mut call, f, now),
            None => policy.decide(&mut call, stagger::Outcome::Success, now),
        };
        steps.push(Step {
            attempt: n,
            at_ms: ms(now - t0),
            decision: summary(last),
        });
        match last {
            Decision::Retry { after } if n < q.attempt => now += after,
            Decision::Retry { .. } => {}
            Decision::Stop(_) => return Ok((steps, last, n, call)),
        }
    }
    Ok((steps, last, q.attempt, call))
}

fn summary(d: Decision) -> String {
    match d {
        Decision::Retry { after } => format!("retry after {}", humantime_ms(after)),
        Decision::Stop(r) => format!("stop: {r}"),
    }
}

fn humantime_ms(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1}ms", ms(d))
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

fn class_words(c: Class) -> &'static str {
    match c {
        Class::Transient => {
            "transient: likely to clear (a refused or reset connection, 502/503/504, 429, UNAVAILABLE)"
        }
        Class::Unknown => {
            "result unknown (a timeout, 408, DEADLINE_EXCEEDED): the work may have happened, so \
             only an idempotent call is repeated"
        }
        Class::OnlyWithHint => "retried only when the server sends a pushback saying when",
        Class::Permanent => "permanent: the request itself is wrong (or 500, a bug): never retried",
        Class::Cancelled => "the caller cancelled: never retried",
        _ => "a class this page does not describe",
    }
}

fn reason_words(r: StopReason, not_retried: Option<NotRetried>) -> String {
    let base = match r {
        StopReason::Success => "the attempt succeeded: nothing to retry",
        StopReason::NotRetryable => "the failure is not worth retrying",
        StopReason::AttemptsExhausted => "max attempts were made",
        StopReason::Deadline => {
            "the wait plus another attempt would not finish before the deadline, so the call \
             stops now instead of sleeping in vain"
        }
        StopReason::Budget => {
            "the retry budget refused: this client already spends its share of retries"
        }
        StopReason::BreakerOpen => "the circuit breaker is open",
        StopReason::Throttled => "adaptive throttling rejected the attempt",
        StopReason::HintTooLong => {
            "the server asked for a wait longer than max_retry_after (60 s): not worth holding the call"
        }
        StopReason::Cancelled => "the caller cancelled",
        _ => "a reason this page does not describe",
    };
    let extra = match not_retried {
        Some(NotRetried::NotIdempotent) => {
            " — a POST or PATCH without an Idempotency-Key reached the server; repeating it could do the work twice"
        }
        Some(NotRetried::ServerSaidNo) => " — the server (or a layer below) said not to retry",
        Some(NotRetried::ServingRetry) => " — this call serves an inbound retry (one-layer rule)",
        Some(_) => " — the request body cannot be replayed",
        None => "",
    };
    format!("{base}{extra}")
}

fn hint_words(h: Option<Hint>) -> Option<String> {
    h.map(|h| match h {
        Hint::RetryAfter(d) => format!("Retry-After {}", humantime_ms(d)),
        Hint::Pushback(d) => format!("pushback {}", humantime_ms(d)),
        Hint::DoNotRetry => "do not retry".to_string(),
        Hint::Invalid => "invalid hint (ignored; the backoff is used)".to_string(),
        _ => "a hint".to_string(),
    })
}

/// `GET /api/decide`.
pub(crate) fn decide(q: &str) -> Result<String, BadParam> {
    let question = parse(q)?;
    let f = failure(&question)?;
    // The deadline is `remaining` after the failure asked about: find when
    // that is on the virtual clock (the earlier waits, same seed), then
    // replay the call with the deadline set.
    let deadline = match question.remaining {
        None => None,
        Some(r) => {
            let (steps, _, _, _) = drive(&question, f, None)?;
            let at = steps.last().map_or(0.0, |s| s.at_ms);
            Some(Duration::from_secs_f64(at / 1e3) + r)
        }
    };
    let (steps, decision, attempt, call) = drive(&question, f, deadline)?;
    let idem = idempotency(&question);
    let mut why = fact_words(f, idem);
    let (kind, after_ms, stop_reason) = match decision {
        Decision::Retry { after } => {
            why.extend(retry_words(&question, f, attempt));
            ("retry", Some(ms(after)), None)
        }
        Decision::Stop(r) => {
            why.push(reason_words(r, call.not_retried()));
            ("stop", None, Some(r.as_str()))
        }
    };
    let answer = Answer {
        decision: kind,
        summary: summary(decision),
        after_ms,
        stop_reason,
        not_retried: call.not_retried().map(|n| n.as_str()),
        attempt,
        max_attempts: question.max_attempts,
        facts: Facts {
            class: f.map(|f| f.class.as_str()),
            hint: hint_words(f.and_then(|f| f.hint)),
            not_sent: f.is_some_and(|f| f.not_sent),
            idempotency: match idem {
                Idempotency::Idempotent => "idempotent",
                Idempotency::NotIdempotent => "not_idempotent",
                _ => "unspecified",
            },
        },
        why,
        steps,
    };
    serde_json::to_string(&answer).map_err(|e| BadParam::new("", e.to_string()))
}

/// Why, as far as the facts go: the failure's class, whether it was sent,
/// and the request's idempotency.
fn fact_words(f: Option<Failure>, idem: Idempotency) -> Vec<String> {
    let mut why = Vec::new();
    match f {
        None => why.push("not a failure (2xx/3xx, or grpc-status 0)".to_string()),
        Some(f) => {
            why.push(format!("class {}", class_words(f.class)));
            if f.not_sent {
                why.push(
                    "the request surely never reached the server, so repeating it is safe \
                     whatever its method"
                        .to_string(),
                );
            }
        }
    }
    why.push(match idem {
        Idempotency::Idempotent => {
            "the request is idempotent (its method, or an Idempotency-Key)".into()
        }
        Idempotency::NotIdempotent => {
            "the request is not idempotent (POST/PATCH without an Idempotency-Key)".into()
        }
        _ => "idempotency unspecified (a gRPC call without a retry policy listing the code)".into(),
    });
    why
}

/// Why a retry, and the wait: the attempt, the hint or jitter that sets
/// the wait, and the backoff's range.
fn retry_words(question: &Question, f: Option<Failure>, attempt: u32) -> Vec<String> {
    let mut why = Vec::new();
    why.push(format!(
        "attempt {attempt} of {} failed; {}",
        question.max_attempts,
        match f.and_then(|f| f.hint) {
            Some(Hint::RetryAfter(_)) => format!(
                "never sooner than the server's Retry-After, plus up to one backoff step \
                 of {} jitter so clients told the same time do not return together",
                question.backoff.jitter
            ),
            Some(Hint::Pushback(_)) => {
                "a gRPC pushback is waited exactly, and the backoff restarts".to_string()
            }
            _ => format!(
                "the wait is drawn by the {} jitter",
                question.backoff.jitter
            ),
        }
    ));
    let pushback = matches!(f.and_then(|f| f.hint), Some(Hint::Pushback(_)));
    if question.backoff.jitter != Jitter::Decorrelated && !pushback {
        let (lo, hi) = question.backoff.range(attempt);
        why.push(format!(
            "backoff before retry {attempt}: b = {}, drawn from [{}, {}){}",
            humantime_ms(question.backoff.backoff(attempt)),
            humantime_ms(lo),
            humantime_ms(hi),
            if matches!(f.and_then(|f| f.hint), Some(Hint::RetryAfter(_))) {
                " and added to the Retry-After"
            } else {
                ""
            }
        ));
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(q: &str) -> serde_json::Value {
        serde_json::from_str(&decide(q).unwrap()).unwrap()
    }

    #[test]
    fn post_without_key_is_not_repeated_but_with_one_it_is() {
        let a = answer("status=503&method=POST");
        assert_eq!(a["stop_reason"], "not_retryable");
        assert_eq!(a["not_retried"], "not_idempotent");
        let a = answer("status=503&method=POST&idempotency_key=1");
        assert_eq!(a["decision"], "retry");
    }

    /// The reason under a Retry-After read "backoff step" then 26 spaces:
    /// a line of the message had lost its continuation.
    #[test]
    fn every_reason_reads_as_plain_sentences() {
        for q in [
            "status=503&retry_after=2&attempt=2",
            "status=503",
            "grpc=UNAVAILABLE&pushback=50",
        ] {
            for line in answer(q)["why"].as_array().unwrap() {
                let line = line.as_str().unwrap();
                assert!(!line.contains("  "), "{q}: {line:?}");
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor_and_the_deadline_wins() {
        let a = answer("status=503&retry_after=2&attempt=2");
        assert_eq!(a["decision"], "retry");
        let after = a["after_ms"].as_f64().unwrap();
        // h + U(0, b_2): b_2 = 200 ms.
        assert!((2000.0..2200.0).contains(&after), "{after}");
        let a = answer(
            "status=503&method=POST&idempotency_key=1&retry_after=2&remaining=1.5s&attempt=2",
        );
        assert_eq!(a["stop_reason"], "deadline");
        assert_eq!(a["attempt"], 2);
    }

    #[test]
    fn io_and_grpc_failures_use_the_front_end_readers() {
        let a = answer("io=connection_refused&method=POST");
        assert_eq!(a["decision"], "retry", "never sent: safe to repeat");
        assert_eq!(a["facts"]["not_sent"], true);
        let a = answer("io=timed_out&method=POST");
        assert_eq!(a["stop_reason"], "not_retryable");
        assert_eq!(answer("grpc=UNAVAILABLE")["decision"], "retry");
        assert_eq!(answer("grpc=14")["decision"], "retry");
        assert_eq!(
            answer("grpc=RESOURCE_EXHAUSTED")["stop_reason"],
            "not_retryable"
        );
        assert_eq!(
            answer("grpc=RESOURCE_EXHAUSTED&pushback=300")["after_ms"],
            300.0
        );
        assert_eq!(answer("status=404")["stop_reason"], "not_retryable");
        assert_eq!(answer("status=200")["stop_reason"], "success");
    }

    #[test]
    fn attempts_and_budget_stop_the_call() {
        assert_eq!(
            answer("status=503&attempt=3")["stop_reason"],
            "attempts_exhausted"
        );
        assert_eq!(
            answer("status=503&attempt=2&budget=spent")["stop_reason"],
            "budget"
        );
        assert_eq!(
            answer("status=503&attempt=2&budget=room")["decision"],
            "retry"
        );
        assert_eq!(
            answer("status=429&retry_after=3600")["stop_reason"],
            "hint_too_long"
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        for (q, p) in [
            ("status=abc", "status"),
            ("status=503&io=connection_reset", "io"),
            ("io=gremlins", "io"),
            ("grpc=NOPE", "grpc"),
            ("attempt=9", "attempt"),
            ("remaining=soon", "remaining"),
            ("remaining=500000000000000000s", "remaining"),
            ("budget=lots", "budget"),
            ("colour=red", "colour"),
            ("base=2s&cap=1s", "cap"),
        ] {
            assert_eq!(decide(q).unwrap_err().parameter, p, "{q}");
        }
    }
}
