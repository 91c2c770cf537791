//! resilience4j retry instances in a Spring Boot `application.yml`
//! (`resilience4j.retry.instances.NAME`, or the older `backends.NAME`),
//! with the circuit breaker of the same name.
//!
//! The rules (resilience4j's retry and circuit breaker docs and its
//! Spring Boot configuration properties):
//! - `maxAttempts` counts attempts, the first call included (3 by
//!   default); `waitDuration` is the wait between them (500 ms), grown by
//!   `exponentialBackoffMultiplier` (1.5) up to `exponentialMaxWaitDuration`
//!   when `enableExponentialBackoff` is true;
//! - an instance takes its `baseConfig`'s settings, or the `default`
//!   config's, under its own; `backends` is a kept alias of `instances`;
//!   every `@Retry(name = …)` without an entry of its own takes
//!   `configs.default` whole (`CommonRetryConfigurationProperties`,
//!   `getBackendProperties`), so a file with only `configs.default` is
//!   one layer, named `default`;
//! - `maxRetryAttempts` (removed in 2.0.1) binds to no property of
//!   `InstanceProperties`: Spring ignores it, and `maxAttempts` (or its
//!   default 3) applies;
//! - `retryExceptions` lists what is retried (every exception when empty),
//!   `ignoreExceptions` what never is;
//! - Spring reads a bare number as a `Duration` in milliseconds
//!   (`waitDuration: 100` is 100 ms), and dotted keys
//!   (`resilience4j.retry:`) as nested ones;
//! - Spring's aspects wrap Retry around CircuitBreaker by default
//!   (`retryAspectOrder` below `circuitBreakerAspectOrder`; the lower
//!   order is the outer aspect), so every retry is a breaker call, and an
//!   open breaker fails them at once: after `minimumNumberOfCalls` (100)
//!   calls with `failureRateThreshold` (50 %) failed, for
//!   `waitDurationInOpenState` (60 s).
//!
//! A Spring application whose call failed answers its caller with 500.

use std::time::Duration;

use serde_json::{Map, Value};

use super::rules::{Pause, Rule};
use super::tree;
use super::{Budget, Layer, PathError, PathInput, System};

/// Spring's relaxed keys: `a.b: x` is `a: {b: x}`, merged with its
/// siblings.
fn expand(v: &Value) -> Value {
    let Value::Object(m) = v else {
        return v.clone();
    };
    let mut out = Map::new();
    for (k, x) in m {
        let mut parts = k.split('.').rev();
        let last = parts.next().unwrap_or(k);
        let mut nested = expand(x);
        nested = {
            let mut o = Map::new();
            o.insert(last.to_string(), nested);
            Value::Object(o)
        };
        for p in parts {
            let mut o = Map::new();
            o.insert(p.to_string(), nested);
            nested = Value::Object(o);
        }
        merge(&mut out, nested);
    }
    Value::Object(out)
}

fn merge(into: &mut Map<String, Value>, v: Value) {
    let Value::Object(m) = v else { return };
    for (k, x) in m {
        match (into.get_mut(&k), x) {
            (Some(Value::Object(a)), Value::Object(b)) => merge(a, Value::Object(b)),
            (_, x) => {
                into.insert(k, x);
            }
        }
    }
}

fn section(doc: &Value, name: &str) -> Option<Value> {
    tree::get(&expand(doc), "resilience4j")
        .and_then(|r| tree::get(r, name))
        .cloned()
}

/// Whether a document configures a resilience4j retry.
pub(crate) fn has_retry(d: &Value) -> bool {
    section(d, "retry").is_some()
}

/// The application a document configures (`spring.application.name`, in
/// any of Spring's spellings) and the names of its retry instances.
pub(crate) fn app_and_instances(d: &Value) -> (Option<String>, Vec<String>) {
    let app = tree::get(&expand(d), "spring")
        .and_then(|s| tree::get(s, "application"))
        .and_then(|a| tree::string(a, "name"))
        .map(str::to_string);
    let instances = section(d, "retry").map(|s| names(&s)).unwrap_or_default();
    (app, instances)
}

/// The name of the layer for every instance without an entry of its own,
/// which takes `configs.default`.
const DEFAULT: &str = "default";

/// An instance's settings over its base config's (or `default`'s); an
/// instance without an entry takes `configs.default` when there is one.
fn settings(sec: &Value, name: &str) -> Option<Value> {
    let instances = tree::get(sec, "instances").or_else(|| tree::get(sec, "backends"));
    let configs = tree::get(sec, "configs");
    let own = match instances.and_then(|i| tree::get(i, name)) {
        Some(own) => own.clone(),
        None if name == DEFAULT && configs.and_then(|c| tree::obj(c, DEFAULT)).is_some() => {
            Value::Object(Map::new())
        }
        None => return None,
    };
    let base = tree::string(&own, "baseConfig").unwrap_or("default");
    let mut out = configs
        .and_then(|c| tree::obj(c, base))
        .cloned()
        .unwrap_or_default();
    if let Value::Object(m) = own {
        for (k, v) in m {
            out.insert(k, v);
        }
    }
    Some(Value::Object(out))
}

fn names(sec: &Value) -> Vec<String> {
    let own: Vec<String> = tree::get(sec, "instances")
        .or_else(|| tree::get(sec, "backends"))
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let default = tree::get(sec, "configs").and_then(|c| tree::obj(c, DEFAULT));
    if own.is_empty() && default.is_some() {
        return vec![DEFAULT.to_string()];
    }
    own
}

/// Spring's `Duration`: a bare number in milliseconds, `100ms`, `5s`,
/// `1m`, `2h`, `1d`, or ISO-8601 `PT1S` (the audit's one grammar).
fn spring_duration(v: &Value, key: &str) -> Result<Option<Duration>, String> {
    let Some(x) = tree::get(v, key) else {
        return Ok(None);
    };
    let bad = || format!("`{key}` must be a duration such as 100ms or 5s, not {x}");
    let s = match x {
        Value::Number(n) => {
            return n
                .as_u64()
                .map(|n| Some(Duration::from_millis(n)))
                .ok_or_else(bad)
        }
        Value::String(s) => s.trim().to_string(),
        _ => return Err(bad()),
    };
    stagger::config::parse_duration(&s, stagger::config::Bare::Millis)
        .map(Some)
        .map_err(|_| bad())
}

fn flag(v: &Value, key: &str) -> bool {
    match tree::get(v, key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
        _ => false,
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    tree::list(v, key)
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// One retry instance, by name.
/// The retry instances of a file a path names one of when it holds
/// several, else none.
pub(crate) fn selectors(docs: &[Value]) -> Vec<String> {
    let null = Value::Null;
    let doc = docs.iter().find(|d| has_retry(d)).unwrap_or(&null);
    let all = names(&section(doc, "retry").unwrap_or(Value::Null));
    if all.len() > 1 {
        all
    } else {
        Vec::new()
    }
}

pub(crate) fn layer(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let doc = docs
        .iter()
        .find(|d| has_retry(d))
        .cloned()
        .unwrap_or(Value::Null);
    let retry = section(&doc, "retry").unwrap_or(Value::Null);
    let all = names(&retry);
    let name = instance_name(f, &all)?;
    let at = format!("resilience4j.retry.instances.{name}");
    let s = settings(&retry, &name).ok_or_else(|| {
        PathError::new(
            f.name,
            &at,
            format!("no instance {name:?} (instances: {})", all.join(", ")),
        )
    })?;
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("{at}.{k}"), e);
    let attempts = tree::uint(&s, "maxAttempts").map_err(|e| bad("maxAttempts", e))?;
    let wait = spring_duration(&s, "waitDuration")
        .map_err(|e| bad("waitDuration", e))?
        .unwrap_or(Duration::from_millis(500));
    let mut layer = Layer::new(f.name, System::Resilience4j, name.clone());
    let own = tree::get(&retry, "instances")
        .or_else(|| tree::get(&retry, "backends"))
        .and_then(|i| tree::get(i, &name))
        .is_some();
    if !own {
        layer.assumes.push(
            "configs.default: every @Retry instance without an entry of its own takes it".into(),
        );
    }
    if tree::get(&s, "maxRetryAttempts").is_some() {
        let stated = if own {
            at.clone()
        } else {
            "resilience4j.retry.configs.default".to_string()
        };
        layer.invalid.push(format!(
            "`{stated}.maxRetryAttempts` binds to nothing (removed in resilience4j 2.0.1): Spring ignores it, so {}; write maxAttempts (it counts the first call)",
            match attempts {
                Some(n) => format!("maxAttempts {n} applies"),
                None => "the default 3 applies".to_string(),
            }
        ));
    }
    if attempts.is_none() {
        layer
            .assumes
            .push("maxAttempts unset: resilience4j's 3".into());
    }
    if tree::get(&s, "waitDuration").is_some_and(Value::is_number) {
        layer.assumes.push(format!(
            "waitDuration without a unit: Spring reads milliseconds ({wait:?})"
        ));
    }
    let attempts = attempts.unwrap_or(3);
    let (factor, max) = if flag(&s, "enableExponentialBackoff") {
        let m = tree::number(&s, "exponentialBackoffMultiplier")
            .map_err(|e| bad("exponentialBackoffMultiplier", e))?
            .unwrap_or(1.5);
        let cap = spring_duration(&s, "exponentialMaxWaitDuration")
            .map_err(|e| bad("exponentialMaxWaitDuration", e))?
            .unwrap_or(Duration::from_secs(86_400));
        (m, cap)
    } else {
        (1.0, wait)
    };
    layer.pause = Pause::Steps {
        base: wait,
        factor,
        max,
    };
    let retry_ex = strings(&s, "retryExceptions");
    let ignore = strings(&s, "ignoreExceptions");
    layer.retry_on = if retry_ex.is_empty() {
        "every exception".to_string()
    } else {
        retry_ex
            .iter()
            .map(|e| e.rsplit('.').next().unwrap_or(e))
            .collect::<Vec<_>>()
            .join(",")
    };
    layer.assumes.push("a 5xx answer is an HttpServerErrorException, a refused connection an I/O error (Spring's RestTemplate)".into());
    layer.max_tries = Some(u32::try_from(attempts.max(1)).unwrap_or(u32::MAX));
    layer.rule = if attempts <= 1 {
        Rule::Nothing
    } else {
        Rule::Java {
            retry: retry_ex,
            ignore,
        }
    };
    if attempts <= 1 {
        layer.retry_on = "nothing (maxAttempts 1)".into();
    }
    breaker(&mut layer, f, &doc, &retry, &name)?;
    Ok(layer)
}

/// The instance the selector names, or the only one of `all`.
fn instance_name(f: &PathInput<'_>, all: &[String]) -> Result<String, PathError> {
    match f.selector {
        Some(s) => Ok(s.to_string()),
        None if all.len() == 1 => Ok(all[0].clone()),
        None if all.is_empty() => Err(PathError::new(
            f.name,
            "resilience4j.retry.instances",
            "has no instances",
        )),
        None => Err(PathError::new(
            f.name,
            "resilience4j.retry.instances",
            format!(
                "holds {} instances ({}): name one as {}:NAME",
                all.len(),
                all.join(", "),
                f.name
            ),
        )
        .with_choices(all.to_vec())),
    }
}

/// The circuit breaker of the same name, as what cuts the retries.
fn breaker(
    layer: &mut Layer,
    f: &PathInput<'_>,
    doc: &Value,
    retry: &Value,
    name: &str,
) -> Result<(), PathError> {
    let Some(cb) = section(doc, "circuitbreaker") else {
        return Ok(());
    };
    let Some(s) = settings(&cb, name) else {
        return Ok(());
    };
    let at = format!("resilience4j.circuitbreaker.instances.{name}");
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("{at}.{k}"), e);
    let calls = tree::uint(&s, "minimumNumberOfCalls")
        .map_err(|e| bad("minimumNumberOfCalls", e))?
        .unwrap_or(100);
    let rate = tree::number(&s, "failureRateThreshold")
        .map_err(|e| bad("failureRateThreshold", e))?
        .unwrap_or(50.0);
    let window = tree::uint(&s, "slidingWindowSize")
        .map_err(|e| bad("slidingWindowSize", e))?
        .unwrap_or(100);
    let open = spring_duration(&s, "waitDurationInOpenState")
        .map_err(|e| bad("waitDurationInOpenState", e))?
        .unwrap_or(Duration::from_secs(60));
    let order = |sec: &Value, key: &str, default: i64| {
        tree::get(sec, key)
            .and_then(Value::as_i64)
            .unwrap_or(default)
    };
    // Spring's Ordered.LOWEST_PRECEDENCE − 4 and − 3.
    let lowest = i64::from(i32::MAX);
    let retry_order = order(retry, "retryAspectOrder", lowest - 4);
    let cb_order = order(&cb, "circuitBreakerAspectOrder", lowest - 3);
    let how = if retry_order < cb_order {
        "Retry wraps it, so every retry is a breaker call"
    } else {
        "it wraps Retry, so one failed call of it is all of the retries"
    };
    layer.cut_by = Some(format!(
        "circuit breaker {name} in {}: open after {calls} calls with {} % failed (window {window}), for {open:?}; {how}, and once open the calls fail at once",
        layer.file_name(),
        rate
    ));
    layer.budget = Some(Budget::Drains {
        what: "circuit breaker",
    });
    Ok(())
}
