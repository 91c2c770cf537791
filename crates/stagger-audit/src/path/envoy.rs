//! Envoy route configurations (YAML or JSON, snake_case or proto-JSON
//! camelCase; a bootstrap, an RDS response, a config dump or a bare list)
//! and the circuit breakers of their clusters.
//!
//! The rules (Envoy's `route_components.proto`, `circuit_breaker.proto`
//! and router filter docs):
//! - no `retry_policy` on the route or its virtual host, no retries; a
//!   route's policy replaces its virtual host's, they are not merged;
//! - `num_retries` counts retries and defaults to 1;
//! - `retry_back_off` defaults to a 25 ms base with a cap of ten times the
//!   base, fully jittered: retry `n` waits in `[0, (2^n − 1) · base)`;
//! - `per_try_timeout` unset means the route's `timeout`, which defaults to
//!   15 s (`0s` turns it off), and covers every retry;
//! - a cluster's `retry_budget` caps concurrent retries at `budget_percent`
//!   (20 %) of active and pending requests, never below
//!   `min_retry_concurrency` (3), and overrides `max_retries`, which is
//!   otherwise 3 retries in flight.

use std::time::Duration;

use serde_json::Value;

use super::rules::{self, Pause, Rule};
use super::tree;
use super::{Budget, Layer, PathError, PathInput, System};

/// Envoy's route timeout when none is set.
const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(15);

/// One route of the file, by `VHOST/ROUTE` (names), a virtual host's name
/// or domain, or a route's name.
pub(crate) fn layer(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let (label, vh, route) = route(f, docs)?;
    let label = &label;
    let action = tree::get(route, "route").cloned().unwrap_or(Value::Null);
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("{label}.{k}"), e);
    let timeout = match tree::duration(&action, "timeout").map_err(|e| bad("timeout", e))? {
        None => Some(DEFAULT_ROUTE_TIMEOUT),
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
    };
    let mut assumes = Vec::new();
    if tree::get(&action, "timeout").is_none() {
        assumes.push("route timeout unset: Envoy's 15 s".to_string());
    }
    let cluster = tree::string(&action, "cluster").unwrap_or("").to_string();
    let (policy, from) = match (
        tree::get(&action, "retryPolicy"),
        tree::get(vh, "retryPolicy"),
    ) {
        (Some(p), _) => (Some(p), "route"),
        (None, Some(p)) => (Some(p), "virtual host"),
        (None, None) => (None, ""),
    };
    let mut layer = Layer::new(f.name, System::Envoy, label.clone());
    layer.retry_on = "nothing (no retry_policy)".to_string();
    layer.timeout = timeout;
    layer.budget = Some(Budget::MaxConcurrent { max: 3 });
    layer.assumes = assumes;
    layer.pause = Pause::envoy_default();
    layer.assumes.push(format!(
        "{cluster:?}: Envoy's default circuit breaker, 3 retries in flight (add the clusters file after this one)"
    ));
    layer.cluster = cluster;
    let Some(p) = policy else {
        return Ok(layer);
    };
    let read = RetryPolicy::read(p, &bad)?;
    let retries = read.retries.unwrap_or(1);
    let on = read.on.unwrap_or_default();
    let codes = read.codes;
    let per_try = read.per_try.or(timeout);
    if let Some((base, max)) = read.back_off {
        let base = base.filter(|d| !d.is_zero()).ok_or_else(|| {
            bad(
                "retry_policy.retry_back_off.base_interval",
                "is required and must be above 0".into(),
            )
        })?;
        layer.pause = Pause::Envoy {
            base,
            max: max.unwrap_or(base * 10),
        };
    }
    if from == "virtual host" {
        layer
            .assumes
            .push("retry_policy from the virtual host (the route has none)".to_string());
    }
    let method_limited = tree::get(p, "retriableRequestHeaders").is_some();
    layer.non_idempotent = if retries == 0 || method_limited {
        None
    } else {
        rules::unsafe_conditions(&on, &codes)
    };
    layer.max_tries = Some(u32::try_from(retries.saturating_add(1)).unwrap_or(u32::MAX));
    layer.retry_on = if retries == 0 || on.is_empty() {
        "nothing (num_retries 0 or no retry_on)".to_string()
    } else {
        rules::describe(&on, &codes)
    };
    layer.per_try_timeout = per_try;
    layer.rule = if retries == 0 {
        Rule::Nothing
    } else {
        Rule::Envoy { on, codes }
    };
    Ok(layer)
}

/// The route the selector names (`VHOST/ROUTE`, a virtual host's name or
/// domain, a route's name), or the only one: its label, virtual host and
/// route.
fn route<'a>(
    f: &PathInput<'_>,
    docs: &'a [Value],
) -> Result<(String, &'a Value, &'a Value), PathError> {
    let mut configs = Vec::new();
    for d in docs {
        tree::objects_with(d, "virtualHosts", &mut configs);
    }
    // (label, virtual host, route)
    let mut routes: Vec<(String, &Value, &Value)> = Vec::new();
    for c in &configs {
        for (vi, vh) in tree::list(c, "virtualHosts").iter().enumerate() {
            let vname =
                tree::string(vh, "name").map_or_else(|| format!("vhost{vi}"), str::to_string);
            for (ri, r) in tree::list(vh, "routes").iter().enumerate() {
                let rname = tree::string(r, "name").map_or_else(|| ri.to_string(), str::to_string);
                routes.push((format!("{vname}/{rname}"), vh, r));
            }
        }
    }
    if routes.is_empty() {
        return Err(PathError::new(f.name, "virtual_hosts", "has no routes"));
    }
    // A config dump repeats names across its route configurations: the
    // second `backend/0` is `backend/0#2`.
    for i in 1..routes.len() {
        let dups = routes[..i]
            .iter()
            .filter(|r| r.0 == routes[i].0 || r.0.starts_with(&format!("{}#", routes[i].0)))
            .count();
        if dups > 0 {
            routes[i].0 = format!("{}#{}", routes[i].0, dups + 1);
        }
    }
    let labels = || {
        routes
            .iter()
            .map(|r| r.0.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let picked: Vec<&(String, &Value, &Value)> = match f.selector {
        None => routes.iter().collect(),
        Some(s) => routes
            .iter()
            .filter(|(label, vh, r)| {
                label == s
                    || tree::string(vh, "name") == Some(s)
                    || tree::string(r, "name") == Some(s)
                    || tree::list(vh, "domains")
                        .iter()
                        .any(|d| d.as_str() == Some(s))
            })
            .collect(),
    };
    match picked.as_slice() {
        [one] => Ok((one.0.clone(), one.1, one.2)),
        [] => Err(PathError::new(
            f.name,
            "virtual_hosts",
            format!(
                "no route matches {:?} (routes: {})",
                f.selector.unwrap_or(""),
                labels()
            ),
        )),
        _ => Err(PathError::new(
            f.name,
            "virtual_hosts",
            format!(
                "holds {} routes ({}): name one as {}:VHOST/ROUTE",
                picked.len(),
                labels(),
                f.name
            ),
        )
        .with_choices(picked.iter().map(|r| r.0.clone()).collect())),
    }
}

/// An Envoy retry policy's fields as written (`None`: left out), for the
/// route reader here and the EnvoyFilter reader, which default them
/// differently.
pub(crate) struct RetryPolicy {
    pub(crate) retries: Option<u64>,
    pub(crate) on: Option<Vec<String>>,
    pub(crate) codes: Vec<u16>,
    /// `0s` reads as unset.
    pub(crate) per_try: Option<Duration>,
    /// `retry_back_off`'s base and max, when it is there.
    pub(crate) back_off: Option<(Option<Duration>, Option<Duration>)>,
}

impl RetryPolicy {
    /// Reads `p`; `bad` names a field under the policy's path.
    pub(crate) fn read(
        p: &Value,
        bad: &dyn Fn(&str, String) -> PathError,
    ) -> Result<RetryPolicy, PathError> {
        let retries =
            tree::uint(p, "numRetries").map_err(|e| bad("retry_policy.num_retries", e))?;
        let on = tree::string(p, "retryOn").map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        });
        let mut codes = Vec::new();
        for c in tree::list(p, "retriableStatusCodes") {
            let code = c
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| {
                    bad(
                        "retry_policy.retriable_status_codes",
                        format!("{c} is not an HTTP status"),
                    )
                })?;
            codes.push(code);
        }
        let per_try = tree::duration(p, "perTryTimeout")
            .map_err(|e| bad("retry_policy.per_try_timeout", e))?
            .filter(|d| !d.is_zero());
        let back_off = match tree::get(p, "retryBackOff") {
            None => None,
            Some(b) => Some((
                tree::duration(b, "baseInterval")
                    .map_err(|e| bad("retry_policy.retry_back_off.base_interval", e))?,
                tree::duration(b, "maxInterval")
                    .map_err(|e| bad("retry_policy.retry_back_off.max_interval", e))?,
            )),
        };
        Ok(RetryPolicy {
            retries,
            on,
            codes,
            per_try,
            back_off,
        })
    }
}

/// A clusters file with no route before it on the path: the cluster's
/// caps, on a layer that retries nothing itself (retries are a route's).
pub(crate) fn clusters_alone(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let mut clusters = Vec::new();
    for d in docs {
        tree::objects_with(d, "circuitBreakers", &mut clusters);
    }
    let names: Vec<String> = clusters
        .iter()
        .filter_map(|c| tree::string(c, "name").map(str::to_string))
        .collect();
    let name = match (f.selector, names.as_slice()) {
        (Some(s), _) => s.to_string(),
        (None, [one]) => one.clone(),
        (None, _) => {
            return Err(PathError::new(
                f.name,
                "name",
                format!(
                    "holds {} clusters ({}): name one as {}:CLUSTER",
                    names.len(),
                    names.join(", "),
                    f.name
                ),
            )
            .with_choices(names))
        }
    };
    let mut layer = Layer::new(f.name, System::Envoy, format!("cluster {name}"));
    layer.retry_on =
        "nothing itself (circuit breakers: put the routes file before it on the path)".into();
    layer.cluster = name;
    add_clusters(&mut layer, &PathInput::new(f.name, f.text, None), docs)?;
    Ok(layer)
}

/// The circuit breakers of `layer`'s cluster, from a clusters file
/// (`selector` names the cluster when the route's is not in it).
pub(crate) fn add_clusters(
    layer: &mut Layer,
    f: &PathInput<'_>,
    docs: &[Value],
) -> Result<(), PathError> {
    let mut clusters = Vec::new();
    for d in docs {
        tree::objects_with(d, "circuitBreakers", &mut clusters);
    }
    let names: Vec<&str> = clusters
        .iter()
        .filter_map(|c| tree::string(c, "name"))
        .collect();
    let routed = layer.cluster.clone();
    let want = f.selector.unwrap_or(&routed);
    let cluster = clusters
        .iter()
        .find(|c| tree::string(c, "name") == Some(want))
        .ok_or_else(|| {
            PathError::new(
                f.name,
                "name",
                format!(
                    "the route sends to cluster {routed:?}, which is not here (clusters: {}); name one as {}:CLUSTER",
                    names.join(", "),
                    f.name
                ),
            )
        })?;
    let cb = tree::get(cluster, "circuitBreakers")
        .cloned()
        .unwrap_or(Value::Null);
    let thresholds = tree::list(&cb, "thresholds");
    let default = thresholds
        .iter()
        .find(|t| matches!(tree::string(t, "priority"), None | Some("DEFAULT")))
        .cloned()
        .unwrap_or(Value::Null);
    let bad = |k: &str, e: String| {
        PathError::new(
            f.name,
            &format!("{want}.circuit_breakers.thresholds.{k}"),
            e,
        )
    };
    layer
        .assumes
        .retain(|a| !a.contains("Envoy's default circuit breaker"));
    layer.budget = Some(match tree::get(&default, "retryBudget") {
        Some(b) => Budget::Concurrent {
            percent: tree::number(b, "budgetPercent")
                .map_err(|e| bad("retry_budget.budget_percent", e))?
                .unwrap_or(20.0),
            min_concurrency: tree::uint(b, "minRetryConcurrency")
                .map_err(|e| bad("retry_budget.min_retry_concurrency", e))?
                .map_or(3, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        },
        None => Budget::MaxConcurrent {
            max: tree::uint(&default, "maxRetries")
                .map_err(|e| bad("max_retries", e))?
                .unwrap_or(3),
        },
    });
    layer.assumes.push(format!(
        "cluster {want:?}'s circuit breakers from {}",
        f.name
    ));
    Ok(())
}
