//! Kubernetes Gateway API retries and budgets, and Envoy Gateway's
//! `BackendTrafficPolicy`.
//!
//! The rules:
//! - `HTTPRoute` `spec.rules[].retry` (GEP-1731, Standard channel since
//!   v1.2): `attempts` is the most times one request is *retried* (so
//!   1 + attempts tries), `codes` the HTTP statuses retried, `backoff` the
//!   least wait between tries; what happens without `attempts`, and which
//!   connection errors are retried, is up to the implementation. Istio's
//!   conversion writes a VirtualService policy: `attempts` (2 when unset),
//!   Istio's own conditions plus the codes, `backoff` as Envoy's base; a
//!   rule without `retry` gets Istio's default policy, as a VirtualService
//!   route without `retries` does. `timeouts.request` bounds the whole
//!   request, `timeouts.backendRequest` each try;
//! - `BackendTrafficPolicy` `retryConstraint` (GEP-3388, `gateway.networking.x-k8s.io`):
//!   `budget.percent` of active requests may be retries (20 by default)
//!   over `budget.interval` (10 s), with `minRetryRate` (10 per 1 s) always
//!   allowed — per client, so many clients allow more;
//! - Envoy Gateway's `BackendTrafficPolicy` `retry` (its
//!   `api/v1alpha1/retry_types.go`): `numRetries` retries (2 by default),
//!   `retryOn.triggers` Envoy's conditions (Envoy Gateway's defaults when
//!   left out) and `retryOn.httpStatusCodes`, `perRetry.timeout` and
//!   `perRetry.backOff`; `circuitBreaker.retryBudget` (percent as a
//!   fraction, `minRetryConcurrency` 3 by default) takes precedence over
//!   `maxParallelRetries` (1024 by default), and a budget of 0 % with no
//!   floor lets no retry through.

use std::time::Duration;

use serde_json::Value;

use super::envoy::{self, EnvoyRetry};
use super::istio::{self, MeshDefault};
use super::rules::{self, Rule};
use super::tree;
use super::{Budget, GatewayImpl, Layer, Options, PathError, PathInput, System};

/// Envoy Gateway's default `retryOn` triggers.
const EG_DEFAULT_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

fn name_of(d: &Value) -> &str {
    tree::get(d, "metadata")
        .and_then(|m| tree::string(m, "name"))
        .unwrap_or("")
}

fn of_kind<'a>(docs: &'a [Value], kinds: &[&str]) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| tree::string(d, "kind").is_some_and(|k| kinds.contains(&k)))
        .collect()
}

/// The kinds of route a Gateway API route reader reads.
const ROUTE_KINDS: [&str; 2] = ["HTTPRoute", "GRPCRoute"];
/// The kinds of policy a GEP-3388 budget is in.
const BUDGET_KINDS: [&str; 2] = ["XBackendTrafficPolicy", "BackendTrafficPolicy"];

/// The names of `objs`, in file order.
fn names(objs: &[&Value]) -> Vec<String> {
    objs.iter().map(|d| name_of(d).to_string()).collect()
}

/// The names of `objs` when there are several (a path names one), else
/// none.
fn several(objs: &[&Value]) -> Vec<String> {
    if objs.len() > 1 {
        names(objs)
    } else {
        Vec::new()
    }
}

/// The routes of a file a path names one of (`ROUTE`), or, under a route
/// (`under` is its name) or in a file of one route, its rules
/// (`ROUTE/RULE`) when it has several; else none.
pub(crate) fn route_selectors(docs: &[Value], under: Option<&str>) -> Vec<String> {
    let routes = of_kind(docs, &ROUTE_KINDS);
    let route = match under {
        None if routes.len() == 1 => routes[0],
        None => return several(&routes),
        Some(s) if s.contains('/') => return Vec::new(),
        Some(s) => match routes.iter().find(|d| name_of(d) == s) {
            Some(r) => r,
            None => return Vec::new(),
        },
    };
    let rules_ = tree::get(route, "spec").map_or(&[][..], |s| tree::list(s, "rules"));
    if rules_.len() > 1 {
        rule_choices(name_of(route), rules_)
    } else {
        Vec::new()
    }
}

/// The GEP-3388 policies of a budget file a path names one of, when it
/// holds several.
pub(crate) fn budget_selectors(docs: &[Value]) -> Vec<String> {
    several(&of_kind(docs, &BUDGET_KINDS))
}

/// The Envoy Gateway policies of a file a path names one of, when it
/// holds several.
pub(crate) fn policy_selectors(docs: &[Value]) -> Vec<String> {
    several(&of_kind(docs, &["BackendTrafficPolicy"]))
}

/// The object `sel` names among `objs` (or the only one), listing the
/// others as choices.
fn pick<'a>(
    f: &PathInput<'_>,
    objs: &[&'a Value],
    sel: Option<&str>,
    what: &str,
) -> Result<&'a Value, PathError> {
    let names = names(objs);
    match sel {
        None if objs.len() == 1 => Ok(objs[0]),
        None => Err(PathError::new(
            f.name,
            "metadata.name",
            format!(
                "holds {} {what}s ({}): name one as {}:NAME",
                objs.len(),
                names.join(", "),
                f.name
            ),
        )
        .with_choices(names)),
        Some(s) => objs
            .iter()
            .copied()
            .find(|d| name_of(d) == s)
            .ok_or_else(|| {
                PathError::new(
                    f.name,
                    "metadata.name",
                    format!("no {what} named {s:?} (here: {})", names.join(", ")),
                )
            }),
    }
}

fn codes(f: &PathInput<'_>, v: &Value, key: &str, field: &str) -> Result<Vec<u16>, PathError> {
    tree::list(v, key)
        .iter()
        .map(|c| {
            c.as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| PathError::new(f.name, field, format!("{c} is not an HTTP status")))
        })
        .collect()
}

/// One `HTTPRoute` rule: `selector` is `ROUTE` or `ROUTE/RULE` (the
/// rule's `name` or index).
pub(crate) fn route(
    f: &PathInput<'_>,
    docs: &[Value],
    mesh: Option<&MeshDefault>,
    o: &Options,
) -> Result<Layer, PathError> {
    let routes = of_kind(docs, &ROUTE_KINDS);
    let (route_sel, rule_sel) = match f.selector {
        Some(s) => match s.split_once('/') {
            Some((r, x)) => (Some(r), Some(x)),
            None => (Some(s), None),
        },
        None => (None, None),
    };
    let route = pick(f, &routes, route_sel, "HTTPRoute")?;
    let name = name_of(route);
    let spec = tree::get(route, "spec").cloned().unwrap_or(Value::Null);
    let rules_ = tree::list(&spec, "rules");
    let (index, rule) = pick_rule(f, rules_, rule_sel, name)?;
    let field = |k: &str| format!("spec.rules[{index}].{k}");
    let bad = |k: &str, e: String| PathError::new(f.name, &field(k), e);
    let timeouts = tree::get(rule, "timeouts").cloned().unwrap_or(Value::Null);
    let timeout = tree::duration(&timeouts, "request")
        .map_err(|e| bad("timeouts.request", e))?
        .filter(|d| !d.is_zero());
    let per_try = tree::duration(&timeouts, "backendRequest")
        .map_err(|e| bad("timeouts.backendRequest", e))?
        .filter(|d| !d.is_zero());
    let selector = if rules_.len() > 1 {
        format!("{name}/{}", rule_label(index, rule))
    } else {
        name.to_string()
    };
    let mut layer = Layer::new(f.name, System::GatewayApi, selector);
    layer.timeout = timeout;
    let r = rule_retry(f, rule, &field)?;
    layer.own_retry = r.present;
    if r.attempts == Some(0) {
        layer.invalid.push(format!(
            "`{}` is 0, below the HTTPRoute CRD's minimum of 1 (`apis/v1/httproute_types.go`): the API server refuses the route, so it never runs; write 1 or more, or leave `retry` out",
            field("retry.attempts")
        ));
    }
    if o.gateway == GatewayImpl::Istio {
        on_istio(&mut layer, r, mesh, o, &field("retry"))?;
    } else if !elsewhere(&mut layer, r, o.gateway) {
        return Ok(layer);
    }
    layer.per_try_timeout = per_try.or(layer.per_try_timeout).or(timeout);
    Ok(layer)
}

/// A rule's label: its `name`, or its index.
fn rule_label(i: usize, r: &Value) -> String {
    tree::string(r, "name").map_or_else(|| i.to_string(), str::to_string)
}

/// Every rule of route `name` as a path names it: `ROUTE/RULE`.
fn rule_choices(name: &str, rules_: &[Value]) -> Vec<String> {
    rules_
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{name}/{}", rule_label(i, r)))
        .collect()
}

/// The rule `rule_sel` names, or the only one (`name`, the route's, labels
/// the choices).
fn pick_rule<'a>(
    f: &PathInput<'_>,
    rules_: &'a [Value],
    rule_sel: Option<&str>,
    name: &str,
) -> Result<(usize, &'a Value), PathError> {
    match rule_sel {
        None if rules_.len() == 1 => Ok((0, &rules_[0])),
        None if rules_.is_empty() => Err(PathError::new(f.name, "spec.rules", "has no rules")),
        None => {
            let choices = rule_choices(name, rules_);
            let named: Vec<String> = choices.iter().map(|c| format!("{}:{c}", f.name)).collect();
            Err(PathError::new(
                f.name,
                "spec.rules",
                format!(
                    "holds {} rules: name one as {}",
                    rules_.len(),
                    named.join(" or ")
                ),
            )
            .with_choices(choices))
        }
        Some(x) => rules_
            .iter()
            .enumerate()
            .find(|(i, r)| rule_label(*i, r) == x)
            .ok_or_else(|| PathError::new(f.name, "spec.rules", format!("no rule {x:?}"))),
    }
}

/// A rule's `retry` stanza (`field` names a key of the rule in errors).
fn rule_retry(
    f: &PathInput<'_>,
    rule: &Value,
    field: &dyn Fn(&str) -> String,
) -> Result<RuleRetry, PathError> {
    let bad = |k: &str, e: String| PathError::new(f.name, &field(k), e);
    let retry = tree::get(rule, "retry");
    let listed = match retry {
        Some(r) => codes(f, r, "codes", &field("retry.codes"))?,
        None => Vec::new(),
    };
    let attempts = match retry {
        Some(r) => tree::uint(r, "attempts").map_err(|e| bad("retry.attempts", e))?,
        None => None,
    };
    let backoff = match retry {
        Some(r) => tree::duration(r, "backoff").map_err(|e| bad("retry.backoff", e))?,
        None => None,
    };
    Ok(RuleRetry {
        present: retry.is_some(),
        listed,
        attempts,
        backoff,
    })
}

/// A rule's `retry` stanza as read.
struct RuleRetry {
    present: bool,
    listed: Vec<u16>,
    attempts: Option<u64>,
    backoff: Option<Duration>,
}

/// Istio's conversion: a VirtualService policy with its own conditions
/// plus the codes, or its default policy for a rule without `retry`.
fn on_istio(
    layer: &mut Layer,
    r: RuleRetry,
    mesh: Option<&MeshDefault>,
    o: &Options,
    at: &str,
) -> Result<(), PathError> {
    if r.present {
        // The policy Istio's conversion writes: its conditions, the codes.
        let mut on: Vec<String> = [
            "connect-failure",
            "refused-stream",
            "unavailable",
            "cancelled",
        ]
        .map(str::to_string)
        .to_vec();
        if !r.listed.is_empty() {
            on.push("retriable-status-codes".into());
        }
        let retry = EnvoyRetry {
            num_retries: Some(r.attempts.unwrap_or(2)),
            retry_on: on,
            status_codes: r.listed,
            base_interval: r.backoff.filter(|b| !b.is_zero()),
            ..EnvoyRetry::default()
        };
        istio::onto(layer, retry, false, at, o);
    } else {
        let retries = mesh.map_or(Value::Null, istio::mesh_retries);
        let source = "Istio's default policy (the rule has no retry)";
        istio::apply(layer, &retries, true, source, o)?;
    }
    if r.present && r.attempts.is_none() {
        layer
            .assumes
            .push("attempts unset: Istio's conversion uses 2".into());
    }
    layer.assumes.push("run by Istio: its conditions (connect-failure, refused-stream, unavailable, cancelled) plus the rule's codes".into());
    Ok(())
}

/// Another implementation, nothing without `retry` (then `false`: the
/// layer is done):
/// - Envoy Gateway translates the rule's `retry` into Envoy's policy with
///   its own default triggers and, when the rule lists no `codes`, its
///   default retriable status 503 (envoyproxy/gateway
///   `internal/gatewayapi/route.go`, `processRouteRetry`, and
///   `internal/xds/translator/route.go`, `buildRetryPolicy`); a timed-out
///   try is not among those triggers;
/// - any other follows GEP-1731: the codes, and connection errors
///   ("disconnect, reset, timeout, TCP failure"), a timed-out try included.
fn elsewhere(layer: &mut Layer, r: RuleRetry, g: GatewayImpl) -> bool {
    if !r.present {
        layer.retry_on = "nothing (no retry on the rule)".into();
        layer.assumes.push(format!(
            "run by {}: no retry without a retry stanza",
            impl_name(g)
        ));
        return false;
    }
    let n = r.attempts.unwrap_or(2);
    if r.attempts.is_none() {
        layer
            .assumes
            .push("attempts unset: implementation-specific, counted as 2".into());
    }
    let (on, listed): (Vec<String>, Vec<u16>) = match g {
        GatewayImpl::EnvoyGateway => {
            let codes = if r.listed.is_empty() {
                layer
                    .assumes
                    .push("no codes: Envoy Gateway's default retriable status 503".into());
                vec![503]
            } else {
                r.listed
            };
            (
                EG_DEFAULT_ON.split(',').map(str::to_string).collect(),
                codes,
            )
        }
        _ => (
            ["connect-failure", "reset", "retriable-status-codes"]
                .map(str::to_string)
                .to_vec(),
            r.listed,
        ),
    };
    let retry = EnvoyRetry {
        num_retries: Some(n),
        retry_on: on,
        status_codes: listed,
        base_interval: r.backoff.filter(|b| !b.is_zero()),
        ..EnvoyRetry::default()
    };
    envoy::apply_retry(layer, retry);
    layer.assumes.push(match g {
        GatewayImpl::EnvoyGateway => "run by Envoy Gateway: its default triggers (connect-failure, refused-stream, unavailable, cancelled) and the codes; a timed-out try is not retried".to_string(),
        _ => format!(
            "run by {}: connection errors (disconnect, reset, timeout, TCP failure, as GEP-1731 asks) and the rule's codes are retried",
            impl_name(g)
        ),
    });
    true
}

fn impl_name(g: GatewayImpl) -> &'static str {
    match g {
        GatewayImpl::Istio => "Istio",
        GatewayImpl::EnvoyGateway => "Envoy Gateway",
        GatewayImpl::Generic => "the gateway",
    }
}

/// A GEP-3388 `retryConstraint` as a ratio budget, with its targets.
fn constraint(f: &PathInput<'_>, docs: &[Value]) -> Result<(Budget, String), PathError> {
    let pols = of_kind(docs, &BUDGET_KINDS);
    let p = pick(f, &pols, f.selector, "BackendTrafficPolicy")?;
    let spec = tree::get(p, "spec").cloned().unwrap_or(Value::Null);
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("spec.retryConstraint.{k}"), e);
    let rc = tree::get(&spec, "retryConstraint")
        .cloned()
        .unwrap_or(Value::Null);
    let budget = tree::get(&rc, "budget").cloned().unwrap_or(Value::Null);
    let percent = tree::number(&budget, "percent")
        .map_err(|e| bad("budget.percent", e))?
        .unwrap_or(20.0);
    let interval = tree::duration(&budget, "interval")
        .map_err(|e| bad("budget.interval", e))?
        .unwrap_or(Duration::from_secs(10));
    let min = tree::get(&rc, "minRetryRate")
        .cloned()
        .unwrap_or(Value::Null);
    let count = tree::uint(&min, "count")
        .map_err(|e| bad("minRetryRate.count", e))?
        .unwrap_or(10);
    let per = tree::duration(&min, "interval")
        .map_err(|e| bad("minRetryRate.interval", e))?
        .unwrap_or(Duration::from_secs(1));
    if per.is_zero() {
        return Err(bad("minRetryRate.interval", "must be above 0".into()));
    }
    let targets: Vec<String> = tree::list(&spec, "targetRefs")
        .iter()
        .map(|t| {
            format!(
                "{} {}",
                tree::string(t, "kind").unwrap_or("Service"),
                tree::string(t, "name").unwrap_or("?")
            )
        })
        .collect();
    let note = format!(
        "retryConstraint of {} for {}: {percent} % of active requests over {interval:?}, at least {count} per {per:?}, per client (GEP-3388)",
        name_of(p),
        if targets.is_empty() { "its targets".to_string() } else { targets.join(", ") }
    );
    Ok((
        Budget::Ratio {
            ratio: percent / 100.0,
            floor_per_second: count as f64 / per.as_secs_f64(),
        },
        note,
    ))
}

/// Adds a GEP-3388 budget to the gateway or mesh layer before it.
pub(crate) fn add_budget(
    layer: &mut Layer,
    f: &PathInput<'_>,
    docs: &[Value],
) -> Result<(), PathError> {
    let (b, note) = constraint(f, docs)?;
    layer.budget = Some(b);
    layer.assumes.push(format!("{note} (from {})", f.name));
    Ok(())
}

/// A GEP-3388 budget alone: a layer that retries nothing itself and caps
/// the retries of the routes to its targets.
pub(crate) fn budget_layer(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let (b, note) = constraint(f, docs)?;
    let mut layer = Layer::new(f.name, System::GatewayApi, "retryConstraint".into());
    layer.retry_on = "nothing itself (a budget for the routes to its targets: put it after the route on the path)".into();
    layer.budget = Some(b);
    layer.assumes.push(note);
    Ok(layer)
}

/// An Envoy Gateway `BackendTrafficPolicy`, by its name or its target
/// route's.
pub(crate) fn envoy_gateway(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let pols = of_kind(docs, &["BackendTrafficPolicy"]);
    let p = backend_policy(f, &pols)?;
    let spec = tree::get(p, "spec").cloned().unwrap_or(Value::Null);
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("spec.{k}"), e);
    let t = targets(p);
    let sel = if t.is_empty() {
        name_of(p).to_string()
    } else {
        format!("{} → {}", name_of(p), t.join(","))
    };
    let mut layer = Layer::new(f.name, System::EnvoyGateway, sel);
    let cb = tree::get(&spec, "circuitBreaker")
        .cloned()
        .unwrap_or(Value::Null);
    let zero = |k: &str| tree::uint(&cb, k).ok().flatten() == Some(0);
    if zero("maxConnections") || zero("maxParallelRequests") {
        // Envoy's cluster circuit breaker: no connection, or no request in
        // flight, is ever allowed, so every request overflows with 503
        // before it reaches the dependency.
        layer.overflows_all = true;
        layer.assumes.push(
            "a circuit breaker threshold of 0 (maxConnections or maxParallelRequests): every request overflows at once (503) and none reaches the dependency".into(),
        );
    } else if zero("maxPendingRequests") {
        layer.assumes.push(
            "maxPendingRequests 0: a request that finds every connection busy overflows at once (503)"
                .into(),
        );
    }
    let Some(retry) = tree::get(&spec, "retry").cloned() else {
        layer.retry_on = "nothing (no retry in the policy)".into();
        return Ok(layer);
    };
    let n = tree::uint(&retry, "numRetries").map_err(|e| bad("retry.numRetries", e))?;
    if n.is_none() {
        layer
            .assumes
            .push("numRetries unset: Envoy Gateway's 2".into());
    }
    let n = n.unwrap_or(2);
    let retry_on = tree::get(&retry, "retryOn").cloned().unwrap_or(Value::Null);
    let listed = codes(
        f,
        &retry_on,
        "httpStatusCodes",
        "spec.retry.retryOn.httpStatusCodes",
    )?;
    let envoy_retry = EnvoyRetry {
        num_retries: Some(n),
        retry_on: triggers(&retry_on, &mut layer.assumes),
        status_codes: listed,
        ..per_retry(&retry, &bad)?
    };
    layer.budget = Some(eg_budget(f, &cb, &mut layer.assumes)?);
    let zero_budget = matches!(
        layer.budget,
        Some(Budget::Concurrent {
            percent,
            min_concurrency: 0
        }) if percent == 0.0
    );
    let described = rules::describe(&envoy_retry.retry_on, &envoy_retry.status_codes);
    if zero_budget {
        // Envoy would retry, but no retry fits the budget.
        envoy::apply_retry(&mut layer, envoy_retry);
        layer.max_tries = Some(1);
        layer.rule = Rule::Nothing;
        layer.non_idempotent = None;
        layer.retry_on =
            format!("nothing: a zero retry budget overflows every retry ({described})");
    } else if !envoy::apply_retry(&mut layer, envoy_retry) {
        layer.retry_on = "nothing (numRetries 0)".into();
    }
    Ok(layer)
}

/// An Envoy Gateway `BackendTrafficPolicy` read into the layer of the
/// HTTPRoute rule it targets (`false`, the route untouched, when it
/// targets another): the route's own `retry` replaces the policy's
/// (envoyproxy/gateway `internal/ir/xds.go`, `HTTPRoute.GetRetry`, returns
/// the route's before the policy's), and the policy's retry applies only
/// to a rule without one; its circuit breaker and retry budget hold
/// either way (they are the cluster's).
pub(crate) fn policy_under_route(
    route: &mut Layer,
    f: &PathInput<'_>,
    docs: &[Value],
) -> Result<bool, PathError> {
    let name = route.selector.split('/').next().unwrap_or("").to_string();
    let pols = of_kind(docs, &["BackendTrafficPolicy"]);
    let Some(p) = pols.iter().find(|p| targets(p).contains(&name)) else {
        return Ok(false);
    };
    let one = PathInput::new(f.name, f.text, Some(name_of(p)));
    let policy = envoy_gateway(&one, docs)?;
    route.budget = policy.budget;
    route.overflows_all |= policy.overflows_all;
    route.system = System::EnvoyGateway;
    route.selector = format!("{} ← {}", route.selector, name_of(p));
    if route.own_retry {
        route.assumes.push(format!(
            "the rule's own retry replaces BackendTrafficPolicy {}'s (Envoy Gateway takes a route's retry before a policy's); the policy's circuit breaker still holds",
            name_of(p)
        ));
    } else {
        route.max_tries = policy.max_tries;
        route.retry_on = policy.retry_on;
        route.rule = policy.rule;
        route.pause = policy.pause;
        route.non_idempotent = policy.non_idempotent;
        route.per_try_timeout = policy.per_try_timeout.or(route.per_try_timeout);
        route.assumes.push(format!(
            "no retry on the rule: BackendTrafficPolicy {}'s applies",
            name_of(p)
        ));
    }
    for a in policy.assumes {
        if !route.assumes.contains(&a) {
            route.assumes.push(a);
        }
    }
    route.invalid.extend(policy.invalid);
    Ok(true)
}

/// The targets a BackendTrafficPolicy names.
fn targets(p: &Value) -> Vec<String> {
    tree::get(p, "spec")
        .map(|s| tree::list(s, "targetRefs"))
        .unwrap_or(&[])
        .iter()
        .filter_map(|t| tree::string(t, "name").map(str::to_string))
        .collect()
}

/// The BackendTrafficPolicy whose target route the selector names, else
/// the one its own name picks (or the only one).
fn backend_policy<'a>(f: &PathInput<'_>, pols: &[&'a Value]) -> Result<&'a Value, PathError> {
    let by_target = f.selector.and_then(|s| {
        pols.iter()
            .copied()
            .find(|p| targets(p).iter().any(|t| t == s))
    });
    match by_target {
        Some(p) => Ok(p),
        None => pick(f, pols, f.selector, "BackendTrafficPolicy"),
    }
}

/// `retryOn.triggers`, or Envoy Gateway's defaults (said in `assumes`).
fn triggers(retry_on: &Value, assumes: &mut Vec<String>) -> Vec<String> {
    let triggers: Vec<String> = tree::list(retry_on, "triggers")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if triggers.is_empty() {
        assumes.push(format!(
            "no retryOn.triggers: Envoy Gateway's defaults ({EG_DEFAULT_ON})"
        ));
        EG_DEFAULT_ON.split(',').map(str::to_string).collect()
    } else {
        triggers
    }
}

/// `perRetry`: the per-try timeout and the back-off, on a policy that
/// says nothing else yet (a `backOff` without `baseInterval` takes
/// Envoy's 25 ms).
fn per_retry(
    retry: &Value,
    bad: &dyn Fn(&str, String) -> PathError,
) -> Result<EnvoyRetry, PathError> {
    let per = tree::get(retry, "perRetry").cloned().unwrap_or(Value::Null);
    let per_try_timeout =
        tree::duration(&per, "timeout").map_err(|e| bad("retry.perRetry.timeout", e))?;
    let back_off = tree::get(&per, "backOff").unwrap_or(&Value::Null);
    let base_interval = tree::duration(back_off, "baseInterval")
        .map_err(|e| bad("retry.perRetry.backOff.baseInterval", e))?;
    let max_interval = tree::duration(back_off, "maxInterval")
        .map_err(|e| bad("retry.perRetry.backOff.maxInterval", e))?;
    Ok(EnvoyRetry {
        per_try_timeout,
        base_interval,
        max_interval,
        ..EnvoyRetry::default()
    })
}

/// The cap on concurrent retries: `retryBudget` (its `percent` a fraction,
/// 20 % and a floor of 3 by default) over `maxParallelRetries` (1024).
fn eg_budget(
    f: &PathInput<'_>,
    cb: &Value,
    assumes: &mut Vec<String>,
) -> Result<Budget, PathError> {
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("spec.circuitBreaker.{k}"), e);
    let Some(b) = tree::get(cb, "retryBudget") else {
        return match tree::uint(cb, "maxParallelRetries")
            .map_err(|e| bad("maxParallelRetries", e))?
        {
            Some(max) => Ok(Budget::MaxConcurrent { max }),
            None => {
                assumes.push(
                    "no retryBudget or maxParallelRetries: Envoy Gateway's 1024 retries in flight"
                        .into(),
                );
                Ok(Budget::MaxConcurrent { max: 1024 })
            }
        };
    };
    let percent = match tree::get(b, "percent") {
        Some(p) if p.is_object() => {
            let num = tree::number(p, "numerator")
                .map_err(|e| bad("retryBudget.percent.numerator", e))?
                .unwrap_or(0.0);
            let den = tree::number(p, "denominator")
                .map_err(|e| bad("retryBudget.percent.denominator", e))?
                .unwrap_or(100.0);
            if den == 0.0 {
                0.0
            } else {
                num * 100.0 / den
            }
        }
        Some(_) => tree::number(b, "percent")
            .map_err(|e| bad("retryBudget.percent", e))?
            .unwrap_or(20.0),
        None => 20.0,
    };
    let min = tree::uint(b, "minRetryConcurrency")
        .map_err(|e| bad("retryBudget.minRetryConcurrency", e))?
        .unwrap_or(3);
    Ok(Budget::Concurrent {
        percent,
        min_concurrency: u32::try_from(min).unwrap_or(u32::MAX),
    })
}
