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
    let retry = EnvoyRetry::read(p, &bad)?;
    if from == "virtual host" {
        layer
            .assumes
            .push("retry_policy from the virtual host (the route has none)".to_string());
    }
    if !apply_retry(&mut layer, retry) {
        layer.retry_on = "nothing (num_retries 0 or no retry_on)".to_string();
    }
    Ok(layer)
}

/// A route of a file: its label (`VHOST/ROUTE`), virtual host and route.
type Route<'a> = (String, &'a Value, &'a Value);

/// The labels of `routes`, in file order.
fn labels<'r, 'a: 'r>(routes: impl IntoIterator<Item = &'r Route<'a>>) -> Vec<String> {
    routes.into_iter().map(|r| r.0.clone()).collect()
}

/// The routes of a file as a path names them (`VHOST/ROUTE`) when it
/// holds several, else none.
pub(crate) fn selectors(docs: &[Value]) -> Vec<String> {
    let routes = routes(docs);
    if routes.len() > 1 {
        labels(&routes)
    } else {
        Vec::new()
    }
}

/// Every route of the file, in file order, labelled `VHOST/ROUTE` (names,
/// else indices); a label a config dump repeats across its route
/// configurations gets `#2`, `#3`.
fn routes(docs: &[Value]) -> Vec<Route<'_>> {
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
    // A config dump repeats names across its route configurations: the
    // second `backend/0` is `backend/0#2`.
    let mut seen = std::collections::HashSet::new();
    if routes
        .iter()
        .all(|r| !r.0.contains('#') && seen.insert(r.0.as_str()))
    {
        return routes;
    }
    for i in 1..routes.len() {
        let dups = routes[..i]
            .iter()
            .filter(|r| r.0 == routes[i].0 || r.0.starts_with(&format!("{}#", routes[i].0)))
            .count();
        if dups > 0 {
            routes[i].0 = format!("{}#{}", routes[i].0, dups + 1);
        }
    }
    routes
}

/// The route the selector names (`VHOST/ROUTE`, a virtual host's name or
/// domain, a route's name), or the only one: its label, virtual host and
/// route.
fn route<'a>(f: &PathInput<'_>, docs: &'a [Value]) -> Result<Route<'a>, PathError> {
    let routes = routes(docs);
    if routes.is_empty() {
        return Err(PathError::new(f.name, "virtual_hosts", "has no routes"));
    }
    let listed = || labels(&routes).join(", ");
    let picked: Vec<&Route<'_>> = match f.selector {
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
                listed()
            ),
        )),
        _ => Err(PathError::new(
            f.name,
            "virtual_hosts",
            format!(
                "holds {} routes ({}): name one as {}:VHOST/ROUTE",
                picked.len(),
                listed(),
                f.name
            ),
        )
        .with_choices(labels(picked.iter().copied()))),
    }
}

/// A route's retry policy as Envoy holds it (`route_components.proto`'s
/// `RetryPolicy`), whichever file wrote it: an Envoy route or EnvoyFilter
/// patch directly, an Istio VirtualService, a Gateway API rule or an Envoy
/// Gateway policy through the policy its control plane writes. A reader
/// fills in its own system's defaults; what it leaves at `None` takes
/// Envoy's.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct EnvoyRetry {
    /// `num_retries`: retries after the first try (`None`: Envoy's 1).
    pub(crate) num_retries: Option<u64>,
    /// `retry_on`'s conditions; with none, Envoy retries nothing.
    pub(crate) retry_on: Vec<String>,
    /// `retriable_status_codes`, retried under `retriable-status-codes`.
    pub(crate) status_codes: Vec<u16>,
    /// `per_try_timeout`; `None` or zero bounds each try by the route's
    /// timeout alone.
    pub(crate) per_try_timeout: Option<Duration>,
    /// `retry_back_off.base_interval` (`None`: Envoy's 25 ms).
    pub(crate) base_interval: Option<Duration>,
    /// `retry_back_off.max_interval` (`None`: ten times the base).
    pub(crate) max_interval: Option<Duration>,
    /// Whether `retriable_request_headers` limits the retried requests
    /// (typically to some methods), so a retry is not taken to repeat a
    /// request that must not run twice.
    pub(crate) header_limited: bool,
}

impl EnvoyRetry {
    /// Reads a `retry_policy` written in Envoy's own fields (an Envoy
    /// route, an EnvoyFilter patch); `bad` names a field under the
    /// policy's path.
    pub(crate) fn read(
        p: &Value,
        bad: &dyn Fn(&str, String) -> PathError,
    ) -> Result<EnvoyRetry, PathError> {
        let num_retries =
            tree::uint(p, "numRetries").map_err(|e| bad("retry_policy.num_retries", e))?;
        let retry_on = tree::string(p, "retryOn").map_or_else(Vec::new, |s| {
            s.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect()
        });
        let mut status_codes = Vec::new();
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
            status_codes.push(code);
        }
        let per_try_timeout = tree::duration(p, "perTryTimeout")
            .map_err(|e| bad("retry_policy.per_try_timeout", e))?;
        let (mut base_interval, mut max_interval) = (None, None);
        if let Some(b) = tree::get(p, "retryBackOff") {
            let base = tree::duration(b, "baseInterval")
                .map_err(|e| bad("retry_policy.retry_back_off.base_interval", e))?;
            max_interval = tree::duration(b, "maxInterval")
                .map_err(|e| bad("retry_policy.retry_back_off.max_interval", e))?;
            // Envoy rejects a back-off without a base above zero.
            base_interval = Some(base.filter(|d| !d.is_zero()).ok_or_else(|| {
                bad(
                    "retry_policy.retry_back_off.base_interval",
                    "is required and must be above 0".into(),
                )
            })?);
        }
        Ok(EnvoyRetry {
            num_retries,
            retry_on,
            status_codes,
            per_try_timeout,
            base_interval,
            max_interval,
            header_limited: tree::get(p, "retriableRequestHeaders").is_some(),
        })
    }
}

/// Sets on `layer` what Envoy does with `retry`: the most tries, the rule
/// and its text for the report, whether a retry may repeat a request the
/// dependency already handled, the per-try timeout (the layer's `timeout`,
/// the route's, when the policy sets none) and the fully jittered back-off.
/// A policy with no retries or no `retry_on` condition retries nothing: the
/// layer keeps one try and `false` is returned, for the reader to say why
/// in its own words.
pub(crate) fn apply_retry(layer: &mut Layer, retry: EnvoyRetry) -> bool {
    let base = retry.base_interval.unwrap_or(rules::ENVOY_BASE_INTERVAL);
    layer.pause = Pause::Envoy {
        base,
        max: retry.max_interval.unwrap_or(base * 10),
    };
    layer.per_try_timeout = retry
        .per_try_timeout
        .filter(|d| !d.is_zero())
        .or(layer.timeout);
    let retries = retry.num_retries.unwrap_or(1);
    if retries == 0 || retry.retry_on.is_empty() {
        layer.max_tries = Some(1);
        layer.retry_on = "nothing".to_string();
        layer.non_idempotent = None;
        layer.rule = Rule::Nothing;
        return false;
    }
    let (on, codes) = (retry.retry_on, retry.status_codes);
    layer.max_tries = Some(u32::try_from(retries.saturating_add(1)).unwrap_or(u32::MAX));
    layer.retry_on = rules::describe(&on, &codes);
    layer.non_idempotent = if retry.header_limited {
        None
    } else {
        rules::unsafe_conditions(&on, &codes)
    };
    layer.rule = Rule::Envoy { on, codes };
    true
}

/// The names of the clusters with circuit breakers, in file order.
fn cluster_names(docs: &[Value]) -> Vec<String> {
    let mut clusters = Vec::new();
    for d in docs {
        tree::objects_with(d, "circuitBreakers", &mut clusters);
    }
    clusters
        .iter()
        .filter_map(|c| tree::string(c, "name").map(str::to_string))
        .collect()
}

/// The clusters of a clusters file a path names one of when it holds
/// several, else none.
pub(crate) fn cluster_selectors(docs: &[Value]) -> Vec<String> {
    let names = cluster_names(docs);
    if names.len() > 1 {
        names
    } else {
        Vec::new()
    }
}

/// A clusters file with no route before it on the path: the cluster's
/// caps, on a layer that retries nothing itself (retries are a route's).
pub(crate) fn clusters_alone(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let names = cluster_names(docs);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::{envoyfilter, gateway, istio, GatewayImpl, Options};

    const CONDITIONS: &str =
        "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

    fn read<'a>(name: &'a str, text: &'a str) -> (PathInput<'a>, Vec<Value>) {
        let docs = tree::documents(name, text).unwrap();
        (PathInput::new(name, text, None), docs)
    }

    /// What a layer does with a dead dependency, leaving out what only
    /// names its file.
    fn retrying(l: &Layer) -> (Option<u32>, &Rule, &str, Option<Duration>, &Pause) {
        (
            l.max_tries,
            &l.rule,
            &l.retry_on,
            l.per_try_timeout,
            &l.pause,
        )
    }

    #[test]
    fn what_a_policy_leaves_out_is_envoys_default() {
        let mut l = Layer::new("r.yaml", System::Envoy, "r".into());
        l.timeout = Some(Duration::from_secs(15));
        let retry = EnvoyRetry {
            retry_on: vec!["5xx".into()],
            ..EnvoyRetry::default()
        };
        assert!(apply_retry(&mut l, retry));
        assert_eq!(l.max_tries, Some(2));
        assert_eq!(l.per_try_timeout, Some(Duration::from_secs(15)));
        assert_eq!(l.pause, Pause::envoy_default());
        assert_eq!(l.non_idempotent.as_deref(), Some("5xx"));
        // Retries without a condition retry nothing.
        let retry = EnvoyRetry {
            num_retries: Some(3),
            status_codes: vec![503],
            ..EnvoyRetry::default()
        };
        assert!(!apply_retry(&mut l, retry));
        assert_eq!((l.max_tries, &l.rule), (Some(1), &Rule::Nothing));
        assert_eq!(l.non_idempotent, None);
    }

    // backoff.proto: `base_interval` is required and above zero, whoever
    // writes Envoy's fields.
    #[test]
    fn a_back_off_without_a_base_is_rejected_in_envoys_own_fields() {
        let policy = "retry_policy: {retry_on: 5xx, retry_back_off: {max_interval: 1s}}";
        let route = format!(
            "virtual_hosts:\n- name: v\n  routes:\n  - name: r\n    route: {{cluster: c, {policy}}}\n"
        );
        let patch = format!(
            "kind: EnvoyFilter\nmetadata: {{name: e}}\nspec:\n  configPatches:\n  - applyTo: HTTP_ROUTE\n    patch: {{operation: MERGE, value: {{route: {{{policy}}}}}}}\n"
        );
        let (f, d) = read("route.yaml", &route);
        let e = layer(&f, &d).unwrap_err();
        assert_eq!(e.field, "v/r.retry_policy.retry_back_off.base_interval");
        let (f, d) = read("patch.yaml", &patch);
        let e = envoyfilter::layer(&f, &d, &Options::default()).unwrap_err();
        assert_eq!(
            e.field,
            "spec.configPatches[0].patch.value.retry_policy.retry_back_off.base_interval"
        );
    }

    // The same policy (2 retries on Istio's conditions and 503, a 1 s
    // per-try timeout, a 100 ms back-off base) as an Envoy route, an
    // EnvoyFilter patch, a VirtualService, an Envoy Gateway policy and an
    // HTTPRoute rule under Envoy Gateway and under Istio.
    #[test]
    fn one_retry_written_for_each_system_is_one_layer() {
        let policy = format!(
            "num_retries: 2\n  retry_on: {CONDITIONS}\n  retriable_status_codes: [503]\n  per_try_timeout: 1s\n  retry_back_off: {{base_interval: 100ms}}\n"
        );
        let route = format!(
            "virtual_hosts:\n- name: v\n  domains: ['*']\n  routes:\n  - name: r\n    match: {{prefix: /}}\n    route:\n      cluster: c\n      retry_policy:\n        {}",
            policy.replace("\n  ", "\n        ")
        );
        let patch = format!(
            "kind: EnvoyFilter\nmetadata: {{name: e}}\nspec:\n  configPatches:\n  - applyTo: HTTP_ROUTE\n    patch:\n      operation: REPLACE\n      value:\n        route:\n          retry_policy:\n            {}",
            policy.replace("\n  ", "\n            ")
        );
        let vs = "kind: VirtualService\nmetadata: {name: c}\nspec:\n  hosts: [c]\n  http:\n  - route:\n    - destination: {host: c}\n    retries:\n      attempts: 2\n      retryOn: connect-failure,refused-stream,unavailable,cancelled,503\n      perTryTimeout: 1s\n      backoff: 100ms\n";
        let btp = format!(
            "kind: BackendTrafficPolicy\nmetadata: {{name: p}}\nspec:\n  targetRefs: [{{kind: HTTPRoute, name: c}}]\n  retry:\n    numRetries: 2\n    retryOn:\n      triggers: [{}]\n      httpStatusCodes: [503]\n    perRetry:\n      timeout: 1s\n      backOff: {{baseInterval: 100ms}}\n",
            CONDITIONS.replace(',', ", ")
        );
        let rule = "kind: HTTPRoute\nmetadata: {name: c}\nspec:\n  rules:\n  - timeouts: {backendRequest: 1s}\n    retry: {attempts: 2, codes: [503], backoff: 100ms}\n";
        let o = Options::default();
        let eg = Options {
            gateway: GatewayImpl::EnvoyGateway,
            ..Options::default()
        };
        let (f, d) = read("route.yaml", &route);
        let envoy = layer(&f, &d).unwrap();
        let (f, d) = read("patch.yaml", &patch);
        let filter = envoyfilter::layer(&f, &d, &o).unwrap();
        let (f, d) = read("vs.yaml", vs);
        let virtual_service = istio::layer(&f, &d, None, &o).unwrap();
        let (f, d) = read("btp.yaml", &btp);
        let policy = gateway::envoy_gateway(&f, &d).unwrap();
        let (f, d) = read("httproute.yaml", rule);
        let under_eg = gateway::route(&f, &d, None, &eg).unwrap();
        let under_istio = gateway::route(&f, &d, None, &o).unwrap();

        let want_rule = Rule::Envoy {
            on: CONDITIONS.split(',').map(str::to_string).collect(),
            codes: vec![503],
        };
        let text = format!("{CONDITIONS} [503]");
        let pause = Pause::Envoy {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        let want = (
            Some(3),
            &want_rule,
            text.as_str(),
            Some(Duration::from_secs(1)),
            &pause,
        );
        for l in [
            &envoy,
            &filter,
            &virtual_service,
            &policy,
            &under_eg,
            &under_istio,
        ] {
            assert_eq!(retrying(l), want, "{} ({})", l.file, l.system);
            assert_eq!(
                l.non_idempotent.as_deref(),
                Some("retriable-status-codes [503]"),
                "{}",
                l.file
            );
        }
    }
}
