//! Linkerd: a `ServiceProfile` route, or the `retry.linkerd.io/*`
//! annotations on an HTTPRoute, GRPCRoute or Service (Linkerd 2.16+).
//!
//! The rules (Linkerd's retries reference and its policy controller and
//! profile translator):
//! - a profile retries only routes marked `isRetryable`, whatever the verb,
//!   with no count per request: its `retryBudget` limits them (by default
//!   20 % more load plus 10 retries a second over 10 s); a `retryBudget`
//!   given in part is taken as written, the missing fields as zero, and a
//!   missing `ttl` makes Linkerd reject the profile;
//! - a profile route's `timeout` covers its retries (10 s when unset);
//! - annotations: `retry.linkerd.io/http` (`5xx`, `gateway-error`, `xxx`,
//!   `xxx-yyy`), `/grpc` (cancelled, deadline-exceeded, internal,
//!   resource-exhausted, unavailable), `/limit` (retries, 1 when unset,
//!   and `"0"` is read as unset) and `/timeout` (per try; a timed-out try
//!   is retried); `timeout.linkerd.io/request` bounds the whole request;
//! - a Service with a ServiceProfile ignores the annotations: on a path
//!   with both for one Service, the route's annotations retry nothing.

use std::time::Duration;

use serde_json::Value;

use super::rules::{Pause, Rule};
use super::tree;
use super::{Budget, Layer, PathError, PathInput, System};

/// A profile route's timeout when none is set.
const PROFILE_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn layer(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let profiles = profiles(docs);
    if !profiles.is_empty() {
        return profile(f, &profiles);
    }
    annotated(f, docs)
}

fn profiles(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| tree::string(d, "kind") == Some("ServiceProfile"))
        .collect()
}

/// The routes a path names one of: a ServiceProfile's routes (`ROUTE`),
/// or else the annotated routes and Services (`NAME`), when the file holds
/// several; else none.
pub(crate) fn selectors(docs: &[Value]) -> Vec<String> {
    let profiles = profiles(docs);
    let names = if profiles.is_empty() {
        annotated_docs(docs)
            .iter()
            .map(|d| name_of(d).to_string())
            .collect()
    } else {
        profile_routes(&profiles)
            .iter()
            .map(|(_, r)| route_label(r))
            .collect::<Vec<_>>()
    };
    if names.len() > 1 {
        names
    } else {
        Vec::new()
    }
}

/// A profile route's name.
fn route_label(r: &Value) -> String {
    tree::string(r, "name").unwrap_or("").to_string()
}

/// Every route of the profiles, with its profile.
fn profile_routes<'a>(profiles: &[&'a Value]) -> Vec<(&'a Value, &'a Value)> {
    let mut routes = Vec::new();
    for p in profiles {
        let spec = tree::get(p, "spec").unwrap_or(&Value::Null);
        for r in tree::list(spec, "routes") {
            routes.push((*p, r));
        }
    }
    routes
}

/// The routes and Services that may carry retry annotations.
fn annotated_docs(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| {
            matches!(
                tree::string(d, "kind"),
                Some("HTTPRoute" | "GRPCRoute" | "Service")
            )
        })
        .collect()
}

fn name_of(d: &Value) -> &str {
    tree::get(d, "metadata")
        .and_then(|m| tree::string(m, "name"))
        .unwrap_or("")
}

fn profile(f: &PathInput<'_>, profiles: &[&Value]) -> Result<Layer, PathError> {
    let (p, route) = profile_route(f, profiles)?;
    let label = |r: &Value| tree::string(r, "name").unwrap_or("").to_string();
    let spec = tree::get(p, "spec").unwrap_or(&Value::Null);
    let name = label(route);
    let bad = |k: &str, e: String| PathError::new(f.name, k, e);
    let mut layer = Layer::new(f.name, System::Linkerd, format!("{} {name}", name_of(p)));
    layer.profile = true;
    layer.service = Some(short(name_of(p)).to_string());
    layer.timeout = Some(
        tree::duration(route, "timeout")
            .map_err(|e| bad("spec.routes.timeout", e))?
            .unwrap_or(PROFILE_TIMEOUT),
    );
    let budget = profile_budget(spec, &mut layer.assumes, &bad)?;
    layer.budget = Some(budget);
    if tree::get(route, "isRetryable").and_then(Value::as_bool) == Some(true) {
        layer.max_tries = None;
        layer.rule = Rule::Profile;
        layer.retry_on =
            "5xx (isRetryable; no count per request, the budget limits it)".to_string();
        let method = tree::get(route, "condition").and_then(|c| tree::string(c, "method"));
        if !matches!(method, Some("GET" | "HEAD" | "OPTIONS" | "PUT" | "DELETE")) {
            layer.non_idempotent = Some(format!(
                "isRetryable on a route that matches {}",
                method.map_or("any method".to_string(), |m| m.to_string())
            ));
        }
    } else {
        layer.retry_on = "nothing (isRetryable not set)".to_string();
    }
    Ok(layer)
}

/// The profile route the selector names, or the only one: its profile
/// and the route.
fn profile_route<'a>(
    f: &PathInput<'_>,
    profiles: &[&'a Value],
) -> Result<(&'a Value, &'a Value), PathError> {
    // (profile, route)
    let routes = profile_routes(profiles);
    let label = route_label;
    let names = || {
        routes
            .iter()
            .map(|(_, r)| label(r))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if routes.is_empty() {
        return Err(PathError::new(
            f.name,
            "spec.routes",
            "has no routes: nothing is retried",
        ));
    }
    Ok(match f.selector {
        None if routes.len() == 1 => routes[0],
        None => {
            return Err(PathError::new(
                f.name,
                "spec.routes",
                format!(
                    "holds {} routes ({}): name one as {}:ROUTE",
                    routes.len(),
                    names(),
                    f.name
                ),
            )
            .with_choices(routes.iter().map(|(_, r)| label(r)).collect()))
        }
        Some(s) => *routes.iter().find(|(_, r)| label(r) == s).ok_or_else(|| {
            PathError::new(
                f.name,
                "spec.routes",
                format!("no route named {s:?} (routes: {})", names()),
            )
        })?,
    })
}

/// A ServiceProfile's retry budget, Linkerd's default when there is none.
fn profile_budget(
    spec: &Value,
    assumes: &mut Vec<String>,
    bad: &dyn Fn(&str, String) -> PathError,
) -> Result<Budget, PathError> {
    Ok(match tree::get(spec, "retryBudget") {
        None => {
            assumes.push(
                "no retryBudget: Linkerd's default, ratio 0.2, 10 retries/s, ttl 10s".to_string(),
            );
            Budget::Ratio {
                ratio: 0.2,
                floor_per_second: 10.0,
            }
        }
        Some(b) => {
            if tree::get(b, "ttl").is_none() {
                return Err(bad(
                    "spec.retryBudget.ttl",
                    "is missing: Linkerd cannot parse the budget and rejects the profile".into(),
                ));
            }
            tree::duration(b, "ttl").map_err(|e| bad("spec.retryBudget.ttl", e))?;
            let ratio =
                tree::number(b, "retryRatio").map_err(|e| bad("spec.retryBudget.retryRatio", e))?;
            let floor = tree::number(b, "minRetriesPerSecond")
                .map_err(|e| bad("spec.retryBudget.minRetriesPerSecond", e))?;
            if ratio.is_none() || floor.is_none() {
                assumes.push(
                    "a partial retryBudget: the missing fields are 0, not Linkerd's defaults"
                        .to_string(),
                );
            }
            Budget::Ratio {
                ratio: ratio.unwrap_or(0.0),
                floor_per_second: floor.unwrap_or(0.0),
            }
        }
    })
}

fn annotated(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    let doc = annotated_doc(f, docs)?;
    let grpc_route = tree::string(doc, "kind") == Some("GRPCRoute");
    let ann = tree::get(doc, "metadata")
        .and_then(|m| tree::get(m, "annotations"))
        .cloned()
        .unwrap_or(Value::Null);
    let get = |k: &str| {
        ann.as_object()
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
    };
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("metadata.annotations.{k}"), e);
    let mut layer = Layer::new(f.name, System::Linkerd, name_of(doc).to_string());
    layer.service = Some(service_of(doc));
    let go = |k: &str| -> Result<Option<Duration>, PathError> {
        match get(k) {
            None => Ok(None),
            Some(s) => tree::go_duration(s)
                .map(Some)
                .ok_or_else(|| bad(k, format!("{s:?} is not a duration such as 150ms"))),
        }
    };
    layer.timeout = go("timeout.linkerd.io/request")?.filter(|d| !d.is_zero());
    let per_try = go("retry.linkerd.io/timeout")?;
    let limit = match get("retry.linkerd.io/limit") {
        None => None,
        Some(s) => Some(s.trim().parse::<u32>().map_err(|_| {
            bad(
                "retry.linkerd.io/limit",
                format!("{s:?} is not a whole number"),
            )
        })?),
    }
    .filter(|n| *n != 0);
    let http = get("retry.linkerd.io/http")
        .map(parse_http)
        .transpose()
        .map_err(|e| bad("retry.linkerd.io/http", e))?;
    let grpc = get("retry.linkerd.io/grpc")
        .map(parse_grpc)
        .transpose()
        .map_err(|e| bad("retry.linkerd.io/grpc", e))?;
    if limit.is_none() && per_try.is_none() && http.is_none() && grpc.is_none() {
        layer.retry_on = "nothing (no retry.linkerd.io annotation)".to_string();
        return Ok(layer);
    }
    let (http, grpc) = match (http, grpc) {
        (None, None) => {
            layer.assumes.push("no retry conditions given: the proxy's defaults (5xx; gRPC cancelled, deadline-exceeded, resource-exhausted, unavailable)".into());
            (vec![(500, 599)], vec![1, 4, 8, 14])
        }
        (h, g) => (h.unwrap_or_default(), g.unwrap_or_default()),
    };
    if get("retry.linkerd.io/limit").is_some_and(|s| s.trim() == "0") {
        layer
            .assumes
            .push("retry.linkerd.io/limit \"0\" is read as unset: 1 retry".into());
    }
    let retries = limit.unwrap_or(1);
    layer.max_tries = Some(retries.saturating_add(1));
    layer.per_try_timeout = per_try.or(layer.timeout);
    layer.retry_on = conditions(&http, &grpc);
    if !grpc_route && http.iter().any(|(_, b)| *b >= 500) {
        layer.non_idempotent = Some(format!(
            "retry.linkerd.io/http {}",
            get("retry.linkerd.io/http").unwrap_or("(default 5xx)")
        ));
    }
    layer.pause = Pause::None;
    layer.rule = Rule::Linkerd { http, grpc };
    Ok(layer)
}

/// The route or Service the selector names, or the only one.
fn annotated_doc<'a>(f: &PathInput<'_>, docs: &'a [Value]) -> Result<&'a Value, PathError> {
    let routes = annotated_docs(docs);
    let names = || {
        routes
            .iter()
            .map(|d| name_of(d))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(match f.selector {
        None if routes.len() == 1 => routes[0],
        None => {
            return Err(PathError::new(
                f.name,
                "metadata.name",
                format!(
                    "holds {} routes ({}): name one as {}:NAME",
                    routes.len(),
                    names(),
                    f.name
                ),
            )
            .with_choices(routes.iter().map(|d| name_of(d).to_string()).collect()))
        }
        Some(s) => *routes.iter().find(|d| name_of(d) == s).ok_or_else(|| {
            PathError::new(
                f.name,
                "metadata.name",
                format!("nothing named {s:?} (here: {})", names()),
            )
        })?,
    })
}

/// The Service a route or Service document stands for (short name).
fn service_of(doc: &Value) -> String {
    match tree::string(doc, "kind") {
        Some("Service") => short(name_of(doc)).to_string(),
        _ => tree::get(doc, "spec")
            .map(|s| tree::list(s, "parentRefs"))
            .unwrap_or(&[])
            .iter()
            .find(|r| tree::string(r, "kind").is_none_or(|k| k == "Service"))
            .and_then(|r| tree::string(r, "name"))
            .map_or_else(|| name_of(doc).to_string(), |n| short(n).to_string()),
    }
}

/// The retry conditions as the table prints them: HTTP status ranges,
/// then gRPC status names.
fn conditions(http: &[(u16, u16)], grpc: &[u32]) -> String {
    let mut on: Vec<String> = http
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    on.extend(grpc.iter().map(|c| super::Failure::Grpc(*c).to_string()));
    on.join(",")
}

fn short(name: &str) -> &str {
    name.split('.').next().unwrap_or(name)
}

/// Linkerd ignores a route's retry annotations for a Service that has a
/// ServiceProfile: such a layer on a path with the profile retries nothing.
pub(crate) fn profiles_win(layers: &mut [Layer]) {
    let profiled: Vec<String> = layers
        .iter()
        .filter(|l| l.system == System::Linkerd && l.profile)
        .filter_map(|l| l.service.clone())
        .collect();
    for l in layers.iter_mut() {
        let ignored = l.system == System::Linkerd
            && !l.profile
            && l.service.as_ref().is_some_and(|s| profiled.contains(s));
        if ignored && l.max_tries != Some(1) {
            l.assumes.push(format!(
                "Service {} has a ServiceProfile on this path: Linkerd ignores these retry annotations",
                l.service.as_deref().unwrap_or("")
            ));
            l.max_tries = Some(1);
            l.rule = Rule::Nothing;
            l.non_idempotent = None;
            l.retry_on = "nothing (the Service's ServiceProfile wins over annotations)".into();
        }
    }
}

/// `retry.linkerd.io/http`: `5xx`, `gateway-error`, `xxx`, `xxx-yyy`.
fn parse_http(s: &str) -> Result<Vec<(u16, u16)>, String> {
    let status = |p: &str| {
        p.trim()
            .parse::<u16>()
            .ok()
            .filter(|c| (100..=599).contains(c))
            .ok_or_else(|| format!("{p:?} is not an HTTP status, a range, 5xx or gateway-error"))
    };
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p {
            "5xx" => Ok((500, 599)),
            "gateway-error" => Ok((502, 504)),
            _ => match p.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (status(a)?, status(b)?);
                    if a > b {
                        return Err(format!("{p:?}: the range runs backwards"));
                    }
                    Ok((a, b))
                }
                None => status(p).map(|c| (c, c)),
            },
        })
        .collect()
}

/// `retry.linkerd.io/grpc`: the five codes Linkerd retries by name.
fn parse_grpc(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p {
            "cancelled" => Ok(1),
            "deadline-exceeded" => Ok(4),
            "resource-exhausted" => Ok(8),
            "internal" => Ok(13),
            "unavailable" => Ok(14),
            other => Err(format!(
                "{other:?} is not one of cancelled, deadline-exceeded, internal, resource-exhausted, unavailable"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_conditions_as_documented() {
        assert_eq!(parse_http("5xx").unwrap(), [(500, 599)]);
        assert_eq!(
            parse_http("gateway-error, 429").unwrap(),
            [(502, 504), (429, 429)]
        );
        assert_eq!(parse_http("500-504").unwrap(), [(500, 504)]);
        assert!(parse_http("504-500").unwrap_err().contains("backwards"));
        assert!(parse_http("4xx").is_err());
        assert!(parse_grpc("unavailable,aborted")
            .unwrap_err()
            .contains("aborted"));
    }
}
