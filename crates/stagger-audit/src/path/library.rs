//! The library's own layers on the path — a gRPC service config's method
//! and a stagger policy file — asked, not modelled: for each failure the
//! path passes up, the facts the library's front-end reads from it, and the
//! engine's answer for one call that keeps failing so: how many attempts go
//! out, and the wait before each retry.

use stagger::classify::{grpc_code, grpc_code_of_http, http_status, io_error};
use stagger::config::{MethodConfig, PolicyFile, RetryOn, ServiceConfig};
use stagger::{Class, Idempotency};

use super::failure::Failure;
use crate::amplify::{self, Alone, Engine};

/// A layer that is the library itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Library {
    /// The gRPC layer on one method: `config` holds that method alone,
    /// under the default name, without its throttling bucket (budgets are
    /// reported apart).
    Grpc(Box<ServiceConfig>),
    /// A policy file's client, without its budget and breaker (reported
    /// apart).
    Stagger(Box<PolicyFile>),
}

impl Library {
    /// The gRPC layer of `config` on `method`, one of its entries.
    pub(crate) fn grpc(config: &ServiceConfig, method: &MethodConfig) -> Self {
        let mut one = config.clone();
        one.methods = vec![method.clone()];
        one.methods[0].names = vec![(String::new(), String::new())];
        Library::Grpc(Box::new(one))
    }

    /// The client of policy file `file`.
    pub(crate) fn stagger(file: &PolicyFile) -> Self {
        let mut alone = file.clone();
        alone.budget = None;
        alone.breaker = false;
        Library::Stagger(Box::new(alone))
    }

    /// The facts the library's front-end reads from failure `f`:
    ///
    /// - no answer: the class of the I/O error (a refused connection never
    ///   left the client), or the library's timeout (result unknown);
    /// - gRPC: the status, a proxy's plain HTTP answer mapped as gRPC maps
    ///   it, classed by the method's listed codes;
    /// - a policy file: the library's classification, a status the file's
    ///   `retry_on` lists being worth retrying too.
    pub(crate) fn facts(&self, f: Failure) -> stagger::Failure {
        use std::io::ErrorKind;
        let class = match (f, self) {
            (Failure::ConnectFailure, _) => {
                return stagger::Failure::new(io_error(&ErrorKind::ConnectionRefused.into()))
                    .not_sent()
            }
            (Failure::Reset, _) => io_error(&ErrorKind::ConnectionReset.into()),
            (Failure::Timeout, _) => return stagger::Failure::timeout(),
            (Failure::Http(s), Library::Grpc(c)) => class_of(c, grpc_code_of_http(s)),
            (Failure::Grpc(code), Library::Grpc(c)) => class_of(c, code),
            (Failure::Http(s), Library::Stagger(p)) if p.retry_on.contains(&RetryOn::Http(s)) => {
                Class::Transient
            }
            (Failure::Grpc(c), Library::Stagger(p)) if p.retry_on.contains(&RetryOn::Grpc(c)) => {
                Class::Transient
            }
            (Failure::Http(s), Library::Stagger(_)) => http_status(s, false),
            (Failure::Grpc(c), Library::Stagger(_)) => grpc_code(c),
        };
        stagger::Failure::new(class)
    }

    /// The call's idempotency as the front-end declares it: the gRPC layer
    /// declares a method whose policy lists codes safe to repeat; a policy
    /// file declares nothing (the library's HTTP front-ends read it from the
    /// request's method, which the path does not know).
    fn idempotency(&self) -> Idempotency {
        match self {
            Library::Grpc(_) => Idempotency::Idempotent,
            Library::Stagger(_) => Idempotency::Unspecified,
        }
    }

    /// A fresh engine, or `None` when the layer has none (a method without
    /// a policy).
    fn engine(&self) -> Option<Engine> {
        match self {
            Library::Grpc(c) => match c.hedge_policy_with("", "", None) {
                Ok(Some(h)) => Some(Engine::Hedge(h)),
                _ => c
                    .policy_with("", "", None)
                    .ok()
                    .flatten()
                    .map(Engine::Retry),
            },
            Library::Stagger(p) => {
                let b = p.policy_builder().ok()?;
                b.build().ok().map(Engine::Retry)
            }
        }
    }

    /// The engine's answer for one call whose every attempt fails with `f`:
    /// one attempt, no wait, when there is no engine.
    pub(crate) fn ask(&self, f: Failure) -> Alone {
        match self.engine() {
            Some(e) => amplify::alone(&e, self.facts(f), self.idempotency()),
            None => Alone {
                attempts: 1,
                waits: Vec::new(),
            },
        }
    }
}

/// The class of gRPC status `code` under the one method's listed codes.
fn class_of(c: &ServiceConfig, code: u32) -> Class {
    c.methods
        .first()
        .map_or(Class::Permanent, |m| m.policy.class_of(code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn grpc(codes: &str) -> Library {
        let json = format!(
            r#"{{"methodConfig":[{{"name":[{{"service":"a.A"}}],"retryPolicy":{{"maxAttempts":3,
            "initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
            "retryableStatusCodes":[{codes}]}}}}]}}"#
        );
        let c = ServiceConfig::from_json(&json).unwrap();
        Library::grpc(&c, &c.methods[0])
    }

    #[test]
    fn a_proxy_answer_is_read_as_grpc_maps_it_then_classed_by_the_listed_codes() {
        let l = grpc(r#""UNAVAILABLE""#);
        assert_eq!(l.ask(Failure::Http(503)).attempts, 3);
        assert_eq!(l.ask(Failure::Http(500)).attempts, 1);
        assert_eq!(l.ask(Failure::Grpc(13)).attempts, 1);
        let l = grpc(r#""INTERNAL""#);
        assert_eq!(l.ask(Failure::Http(400)).attempts, 3);
        assert_eq!(l.ask(Failure::Grpc(14)).attempts, 1);
    }

    #[test]
    fn the_waits_are_the_engines_own() {
        // A6's schedule: 0.1 s then 0.2 s, each at the middle of its jitter.
        let l = grpc(r#""UNAVAILABLE""#);
        let waits = l.ask(Failure::Grpc(14)).waits;
        assert_eq!(waits.len(), 2);
        let mid = |d: Duration, at: f64| (d.as_secs_f64() - at).abs() < 0.005;
        assert!(mid(waits[0], 0.1) && mid(waits[1], 0.2), "{waits:?}");
    }
}
