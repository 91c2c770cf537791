//! Istio `VirtualService` routes, as Istio's control plane turns them into
//! its sidecars' Envoy retry policies.
//!
//! The rules (Istio's `networking/v1alpha3/virtual_service.proto`, its
//! `route/retry` conversion and the 1.24 change notes):
//! - a route without `retries` gets the mesh's `defaultHttpRetryPolicy`, or
//!   else Istio's own default: 2 retries on
//!   `connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes`,
//!   with 503 as a retriable code only before 1.24
//!   (`EXCLUDE_UNSAFE_503_FROM_DEFAULT_RETRY`);
//! - `attempts` counts retries (1 + attempts tries); 0, or a `retries`
//!   block without `attempts`, turns retries off;
//! - `retryOn` left out keeps the default conditions; numbers in it are
//!   retriable status codes;
//! - `perTryTimeout` defaults to the route's `timeout`, which defaults to
//!   none; `backoff` sets Envoy's base (25 ms by default), the cap stays ten
//!   times the base;
//! - Istio lifts Envoy's `max_retries` circuit breaker to 2^32 − 1, so by
//!   default nothing caps concurrent retries;
//! - a short host (`reviews`) means `reviews.<the VirtualService's
//!   namespace>.svc.cluster.local`, so one short host in two namespaces is
//!   two services: a selector `reviews.NAMESPACE` names one;
//! - `gateways` without `mesh` binds the routes to those gateways only:
//!   the sidecars calling the host do not use them (they get the default
//!   policy), and the layer is the gateway;
//! - a `fault.delay` is injected once per call by Envoy's fault filter,
//!   ahead of the router and its retries.

use serde_json::Value;

use super::envoy::{self, EnvoyRetry};
use super::tree;
use super::{Layer, Options, PathError, PathInput, System};

/// Istio's built-in default conditions.
pub(crate) const DEFAULT_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";
/// Retries in Istio's built-in default.
pub(crate) const DEFAULT_RETRIES: u64 = 2;

/// The `retries` a mesh default gives a route without its own.
pub(crate) fn mesh_retries(m: &MeshDefault) -> Value {
    m.retries.clone()
}

/// A mesh-wide `defaultHttpRetryPolicy`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MeshDefault {
    file: String,
    retries: Value,
}

/// The `defaultHttpRetryPolicy` of a MeshConfig, an IstioOperator's
/// `spec.meshConfig`, or the `istio` ConfigMap's `data.mesh` text.
pub(crate) fn mesh_default(file: &str, docs: &[Value]) -> Result<MeshDefault, PathError> {
    let mut found = Vec::new();
    for d in docs {
        tree::objects_with(d, "defaultHttpRetryPolicy", &mut found);
    }
    let mut nested = Vec::new();
    for d in docs {
        if let Some(mesh) = tree::obj(d, "data")
            .and_then(|m| m.get("mesh"))
            .and_then(Value::as_str)
        {
            nested.extend(tree::documents(file, mesh)?);
        }
    }
    for d in &nested {
        tree::objects_with(d, "defaultHttpRetryPolicy", &mut found);
    }
    let holder = found
        .first()
        .ok_or_else(|| PathError::new(file, "defaultHttpRetryPolicy", "not found"))?;
    let retries = tree::get(holder, "defaultHttpRetryPolicy")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(MeshDefault {
        file: file.to_string(),
        retries,
    })
}

/// One VirtualService route: `selector` is `HOST` or `HOST/ROUTE` (the
/// route's `name` or its index in `http`).
pub(crate) fn layer(
    f: &PathInput<'_>,
    docs: &[Value],
    mesh: Option<&MeshDefault>,
    o: &Options,
) -> Result<Layer, PathError> {
    let services = virtual_services(docs);
    let (host_sel, route_sel) = match f.selector {
        Some(s) => match s.split_once('/') {
            Some((h, r)) => (Some(h), Some(r)),
            None => (Some(s), None),
        },
        None => (None, None),
    };
    let vs = virtual_service(f, &services, host_sel)?;
    let spec = tree::get(vs, "spec").cloned().unwrap_or(Value::Null);
    let routes = tree::list(&spec, "http");
    let (index, route) = http_route(f, &services, vs, routes, route_sel)?;
    let host = label(&services, vs);
    let gateways: Vec<&str> = tree::list(&spec, "gateways")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let gateway_only = !gateways.is_empty() && !gateways.contains(&"mesh");
    let mut selector = if routes.len() > 1 {
        format!("{host}/{}", route_name(index, route))
    } else {
        host.clone()
    };
    if gateway_only {
        selector = format!("{selector} at gateway {}", gateways.join(","));
    }
    let field = |k: &str| format!("spec.http[{index}].{k}");
    let bad = |k: &str, e: String| PathError::new(f.name, &field(k), e);
    let timeout = tree::duration(route, "timeout")
        .map_err(|e| bad("timeout", e))?
        .filter(|d| !d.is_zero());
    let (retries, implicit, source) = match tree::get(route, "retries") {
        Some(r) => (r.clone(), false, field("retries")),
        None => match mesh {
            Some(m) => (
                m.retries.clone(),
                true,
                format!("defaultHttpRetryPolicy in {}", m.file),
            ),
            None => (Value::Null, true, "Istio's default policy".to_string()),
        },
    };
    let mut layer = Layer::new(f.name, System::Istio, selector);
    layer.timeout = timeout;
    apply(&mut layer, &retries, implicit, &source, o)?;
    fault_delay(&mut layer, route, &field("fault.delay"))?;
    if gateway_only {
        layer.assumes.push(format!(
            "binds gateways {} only (no `mesh`): this is the gateway's layer; sidecars calling {host} do not use these routes and get Istio's default policy",
            gateways.join(", ")
        ));
    }
    Ok(layer)
}

/// The hosts a VirtualService routes.
fn hosts_of(vs: &Value) -> Vec<String> {
    tree::get(vs, "spec")
        .map(|s| tree::list(s, "hosts"))
        .unwrap_or(&[])
        .iter()
        .filter_map(|h| h.as_str().map(str::to_string))
        .collect()
}

/// A name for a VirtualService: its first host, with the namespace when
/// another one routes the same host.
fn label(services: &[&Value], vs: &Value) -> String {
    let host = hosts_of(vs).first().cloned().unwrap_or_default();
    let shared = services
        .iter()
        .filter(|o| hosts_of(o).first() == Some(&host))
        .count()
        > 1;
    match namespace_of(vs) {
        Some(ns) if shared && !host.contains('.') => format!("{host}.{ns}"),
        _ => host,
    }
}

/// A route's name, or its index in `http`.
fn route_name(i: usize, r: &Value) -> String {
    tree::string(r, "name").map_or_else(|| i.to_string(), str::to_string)
}

/// The VirtualServices of a file.
fn virtual_services(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| tree::string(d, "kind") == Some("VirtualService"))
        .collect()
}

/// The selectors a file of VirtualServices offers: its VirtualServices
/// (`HOST`) when it holds several; the routes (`HOST/ROUTE`) of its only
/// one, or of the one `under` names, when it has several; else none.
pub(crate) fn selectors(docs: &[Value], under: Option<&str>) -> Vec<String> {
    let services = virtual_services(docs);
    let vs = match under {
        None if services.len() == 1 => services[0],
        None if services.len() > 1 => return service_choices(&services),
        None => return Vec::new(),
        Some(s) if s.contains('/') => return Vec::new(),
        Some(h) => match routing(&services, h).as_slice() {
            [one] => one,
            _ => return Vec::new(),
        },
    };
    let routes = tree::get(vs, "spec").map_or(&[][..], |s| tree::list(s, "http"));
    if routes.len() > 1 {
        route_choices(&services, vs, routes)
    } else {
        Vec::new()
    }
}

/// Every VirtualService as a path names it (`HOST`).
fn service_choices(services: &[&Value]) -> Vec<String> {
    services.iter().map(|vs| label(services, vs)).collect()
}

/// Every route of `vs` as a path names it (`HOST/ROUTE`).
fn route_choices(services: &[&Value], vs: &Value, routes: &[Value]) -> Vec<String> {
    let host = label(services, vs);
    routes
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{host}/{}", route_name(i, r)))
        .collect()
}

/// The VirtualServices that route host `h` (by its name when none does).
fn routing<'a>(services: &[&'a Value], h: &str) -> Vec<&'a Value> {
    let found: Vec<&Value> = services
        .iter()
        .copied()
        .filter(|vs| {
            let ns = namespace_of(vs);
            hosts_of(vs).iter().any(|x| vs_routes(x, ns, h))
        })
        .collect();
    if !found.is_empty() {
        return found;
    }
    services
        .iter()
        .copied()
        .find(|vs| tree::get(vs, "metadata").and_then(|m| tree::string(m, "name")) == Some(h))
        .into_iter()
        .collect()
}

/// The VirtualService the selector's host names, or the only one.
fn virtual_service<'a>(
    f: &PathInput<'_>,
    services: &[&'a Value],
    host_sel: Option<&str>,
) -> Result<&'a Value, PathError> {
    let all_hosts: Vec<String> = services.iter().flat_map(|vs| hosts_of(vs)).collect();
    Ok(match host_sel {
        None if services.len() == 1 => services[0],
        None => {
            return Err(PathError::new(
                f.name,
                "",
                format!(
                    "holds {} VirtualServices (hosts {}): name one as {}:HOST",
                    services.len(),
                    all_hosts.join(", "),
                    f.name
                ),
            )
            .with_choices(service_choices(services)))
        }
        Some(h) => {
            let found = routing(services, h);
            match found.as_slice() {
                [one] => *one,
                [] => {
                    return Err(PathError::new(
                        f.name,
                        "spec.hosts",
                        format!(
                            "no VirtualService routes host {h:?} (hosts: {})",
                            all_hosts.join(", ")
                        ),
                    ))
                }
                several => {
                    let names: Vec<String> = several.iter().map(|vs| label(services, vs)).collect();
                    return Err(PathError::new(
                        f.name,
                        "metadata.namespace",
                        format!(
                            "host {h:?} is routed by {} VirtualServices ({}): name one as {}:HOST.NAMESPACE",
                            several.len(),
                            names.join(", "),
                            f.name
                        ),
                    )
                    .with_choices(names));
                }
            }
        }
    })
}

/// The HTTP route the selector names (by name or index), or the only one.
fn http_route<'a>(
    f: &PathInput<'_>,
    services: &[&Value],
    vs: &Value,
    routes: &'a [Value],
    route_sel: Option<&str>,
) -> Result<(usize, &'a Value), PathError> {
    Ok(match route_sel {
        None if routes.len() == 1 => (0, &routes[0]),
        None if routes.is_empty() => {
            return Err(PathError::new(
                f.name,
                "spec.http",
                "has no HTTP routes (a TCP or TLS service is not retried by Istio)",
            ))
        }
        None => {
            let names: Vec<String> = routes
                .iter()
                .enumerate()
                .map(|(i, r)| route_name(i, r))
                .collect();
            let choices = route_choices(services, vs, routes);
            return Err(PathError::new(
                f.name,
                "spec.http",
                format!(
                    "holds {} routes ({}): name one as {}:HOST/ROUTE",
                    routes.len(),
                    names.join(", "),
                    f.name
                ),
            )
            .with_choices(choices));
        }
        Some(r) => routes
            .iter()
            .enumerate()
            .find(|(i, x)| route_name(*i, x) == r)
            .ok_or_else(|| PathError::new(f.name, "spec.http", format!("no route named {r:?}")))?,
    })
}

/// The built-in layer of a sidecar no VirtualService routes: the mesh's
/// `defaultHttpRetryPolicy`, or Istio's default policy.
pub(crate) fn sidecar(f: &PathInput<'_>, mesh: Option<&MeshDefault>, o: &Options) -> Layer {
    let host = f
        .name
        .split_once(':')
        .map(|(_, h)| h)
        .or(f.selector)
        .unwrap_or("the dependency");
    let mut layer = Layer::new(f.name, System::Istio, format!("sidecar to {host}"));
    let (retries, source) = match mesh {
        Some(m) => (
            m.retries.clone(),
            format!("defaultHttpRetryPolicy in {}", m.file),
        ),
        None => (Value::Null, "Istio's default policy".to_string()),
    };
    if apply(&mut layer, &retries, true, &source, o).is_err() {
        // The mesh default was already read once by its own file's layer;
        // an unreadable one falls back to Istio's built-in policy.
        let _ = apply(&mut layer, &Value::Null, true, "Istio's default policy", o);
    }
    layer
}

/// A route's retry policy (`retries`, `Null` for Istio's default) onto
/// `layer`, whose `timeout` is the route's.
pub(crate) fn apply(
    layer: &mut Layer,
    retries: &Value,
    implicit: bool,
    source: &str,
    o: &Options,
) -> Result<(), PathError> {
    let retry = envoy_retry(&layer.file, retries, source, o)?;
    onto(layer, retry, implicit, source, o);
    Ok(())
}

/// The Envoy policy Istio writes for `retries` (`Null`: its default
/// policy); `source` names the policy in errors.
fn envoy_retry(
    file: &str,
    retries: &Value,
    source: &str,
    o: &Options,
) -> Result<EnvoyRetry, PathError> {
    let bad_r = |k: &str, e: String| PathError::new(file, &format!("{source}.{k}"), e);
    let attempts = if retries.is_null() {
        DEFAULT_RETRIES
    } else {
        tree::uint(retries, "attempts")
            .map_err(|e| bad_r("attempts", e))?
            .unwrap_or(0)
    };
    // Istio replaces its default conditions only with a non-empty
    // `retryOn` (`if in.RetryOn != ""` in its retry conversion).
    let written = tree::string(retries, "retryOn").filter(|s| !s.is_empty());
    let (on, mut codes): (Vec<String>, Vec<u16>) = match written {
        Some(s) => parse_retry_on(s).map_err(|e| bad_r("retryOn", e))?,
        None => (
            DEFAULT_ON.split(',').map(str::to_string).collect(),
            Vec::new(),
        ),
    };
    if o.istio.minor < 24 && written.is_none() {
        codes.push(503);
    }
    let per_try_timeout =
        tree::duration(retries, "perTryTimeout").map_err(|e| bad_r("perTryTimeout", e))?;
    // `backoff` is Envoy's base; a zero one leaves Envoy's default.
    let base_interval = tree::duration(retries, "backoff")
        .map_err(|e| bad_r("backoff", e))?
        .filter(|b| !b.is_zero());
    Ok(EnvoyRetry {
        num_retries: Some(attempts),
        retry_on: on,
        status_codes: codes,
        per_try_timeout,
        base_interval,
        ..EnvoyRetry::default()
    })
}

/// The Envoy policy Istio wrote for a route (from `source`) onto `layer`,
/// whose `timeout` is the route's, with the assumptions Istio's defaults
/// add; `implicit` when nobody wrote the policy.
pub(crate) fn onto(
    layer: &mut Layer,
    retry: EnvoyRetry,
    implicit: bool,
    source: &str,
    o: &Options,
) {
    layer.assumes.push(format!(
        "Istio 1.{} defaults{}",
        o.istio.minor,
        if o.istio.minor >= 24 {
            " (503 not in the implicit policy)"
        } else {
            " (503 in the implicit policy)"
        }
    ));
    layer.assumes.push(
        "Istio lifts Envoy's max_retries to 2^32-1: nothing caps concurrent retries".to_string(),
    );
    if retry.num_retries == Some(0) {
        layer.assumes.push(format!(
            "{source}: attempts 0 (or left out) turns retries off"
        ));
    }
    let retries = envoy::apply_retry(layer, retry);
    layer.implicit = implicit && retries;
}

/// `retryOn` as Istio reads it: Envoy conditions and, for numbers,
/// retriable status codes (adding `retriable-status-codes`).
fn parse_retry_on(s: &str) -> Result<(Vec<String>, Vec<u16>), String> {
    let mut on = Vec::new();
    let mut codes = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.chars().all(|c| c.is_ascii_digit()) {
            let code: u16 = part
                .parse()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| format!("{part} is not an HTTP status"))?;
            codes.push(code);
        } else {
            on.push(part.to_string());
        }
    }
    if !codes.is_empty() && !on.iter().any(|o| o == "retriable-status-codes") {
        on.push("retriable-status-codes".to_string());
    }
    Ok((on, codes))
}

/// A route's `fault.delay`: Envoy's fault filter holds the request before
/// the router sends it, so the delay comes once per call, not per try; a
/// `percentage` of the requests (`percentage.value`, or the older integer
/// `percent`) makes its mean that share of `fixedDelay`.
fn fault_delay(layer: &mut Layer, route: &Value, at: &str) -> Result<(), PathError> {
    let Some(delay) = tree::get(route, "fault").and_then(|f| tree::get(f, "delay")) else {
        return Ok(());
    };
    let bad = |k: &str, e: String| PathError::new(&layer.file, &format!("{at}.{k}"), e);
    let fixed = tree::duration(delay, "fixedDelay")
        .map_err(|e| bad("fixedDelay", e))?
        .unwrap_or_default();
    let percent = match tree::get(delay, "percentage") {
        Some(p) => tree::number(p, "value").map_err(|e| bad("percentage.value", e))?,
        None => tree::number(delay, "percent").map_err(|e| bad("percent", e))?,
    };
    let share = percent.map_or(1.0, |p| (p / 100.0).clamp(0.0, 1.0));
    if percent.is_none() {
        layer
            .assumes
            .push("fault.delay without a percentage: counted on every request".into());
    }
    layer.delay = fixed.mul_f64(share);
    layer.assumes.push(format!(
        "fault.delay {fixed:?} on {} % of requests: {:?} on average, once per call before the first try",
        share * 100.0,
        layer.delay
    ));
    Ok(())
}

fn namespace_of(vs: &Value) -> Option<&str> {
    tree::get(vs, "metadata").and_then(|m| tree::string(m, "namespace"))
}

/// A selector as a cluster-local name: `reviews.ns` and `reviews.ns.svc`
/// are `reviews.ns.svc.cluster.local`.
fn expand(want: &str) -> String {
    let parts: Vec<&str> = want.split('.').collect();
    match parts.as_slice() {
        [_, _] => format!("{want}.svc.cluster.local"),
        [_, _, "svc"] => format!("{want}.cluster.local"),
        _ => want.to_string(),
    }
}

/// Whether a host of a VirtualService in namespace `ns` is the selected
/// one: a short host is the service of that namespace, so a selector that
/// names a namespace must name the VirtualService's.
fn vs_routes(host: &str, ns: Option<&str>, want: &str) -> bool {
    match ns {
        Some(ns) if !host.contains('.') && !host.contains('*') && want.contains('.') => {
            format!("{host}.{ns}.svc.cluster.local") == expand(want)
        }
        _ => host_matches(host, want),
    }
}

/// Whether a VirtualService host matches the selector: exact, by short
/// name (`reviews` and `reviews.default.svc.cluster.local`), or a `*.`
/// wildcard.
fn host_matches(host: &str, want: &str) -> bool {
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_string();
    host == want
        || (!host.contains('*')
            && short(host) == short(want)
            && (!host.contains('.') || !want.contains('.')))
        || host
            .strip_prefix("*.")
            .is_some_and(|suffix| want.ends_with(&format!(".{suffix}")))
        || host == "*"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_by_full_name_short_name_and_wildcard() {
        assert!(host_matches("reviews", "reviews"));
        assert!(host_matches("reviews", "reviews.default.svc.cluster.local"));
        assert!(host_matches("reviews.default.svc.cluster.local", "reviews"));
        assert!(!host_matches("reviews.a.svc", "reviews.b.svc"));
        assert!(host_matches("*.example.com", "api.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
    }

    #[test]
    fn numbers_in_retry_on_are_status_codes() {
        let (on, codes) = parse_retry_on("gateway-error, 503,connect-failure").unwrap();
        assert_eq!(
            on,
            ["gateway-error", "connect-failure", "retriable-status-codes"]
        );
        assert_eq!(codes, [503]);
        assert!(parse_retry_on("5xx,999").unwrap_err().contains("999"));
    }

    /// Istio's retry conversion (`pilot/pkg/networking/core/route/retry`)
    /// parses `retryOn` only when it is not empty: an empty one keeps the
    /// default conditions, which retry a refused connection; a list of
    /// separators alone names no condition, and Envoy retries nothing.
    #[test]
    fn an_empty_retry_on_keeps_istios_default_conditions() {
        let attempts = |on: &str| {
            let vs = format!(
                "kind: VirtualService\nmetadata: {{name: a}}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {{host: a}}\n    retries: {{attempts: 2, retryOn: \"{on}\"}}\n"
            );
            let input = crate::path::PathInput::new("vs.yaml", &vs, None);
            crate::path::audit_path(&[input], &Options::default())
                .unwrap()
                .dead
                .bottom_attempts
        };
        assert_eq!(attempts(""), 3.0);
        assert_eq!(attempts("connect-failure"), 3.0);
        assert_eq!(attempts(","), 1.0);
        assert_eq!(attempts("retriable-4xx"), 1.0);
    }
}
