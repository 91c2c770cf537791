//! Istio `DestinationRule`s: what they add to the sidecars that send to
//! their host.
//!
//! The rules (Istio's `networking/v1alpha3/destination_rule.proto`):
//! - `trafficPolicy.connectionPool.http.maxRetries` is the most retries
//!   outstanding to all of the host's endpoints at once, per client proxy
//!   (2^32 − 1 when unset): a cap on concurrent retries, not on the retries
//!   of one request;
//! - `trafficPolicy.retryBudget` (`percent` of active requests, 20 by
//!   default, never below `minRetryConcurrency`, 3 by default) caps them
//!   the way Envoy's `retry_budget` does, and takes precedence over
//!   `maxRetries`;
//! - a DestinationRule sets no retry count: the count is the
//!   VirtualService's, or Istio's default policy when no VirtualService
//!   routes the host.

use serde_json::Value;

use super::istio::{self, MeshDefault};
use super::tree;
use super::{Budget, Layer, Options, PathError, PathInput, System};

fn rules(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| tree::string(d, "kind") == Some("DestinationRule"))
        .collect()
}

fn host_of(dr: &Value) -> &str {
    tree::get(dr, "spec")
        .and_then(|s| tree::string(s, "host"))
        .unwrap_or("")
}

fn name_of(dr: &Value) -> &str {
    tree::get(dr, "metadata")
        .and_then(|m| tree::string(m, "name"))
        .unwrap_or("")
}

fn short(h: &str) -> &str {
    h.split('.').next().unwrap_or(h)
}

/// The hosts of `drs`, in file order.
fn hosts(drs: &[&Value]) -> Vec<String> {
    drs.iter().map(|d| host_of(d).to_string()).collect()
}

/// The hosts of a file's DestinationRules when it holds several (a path
/// names one), else none.
pub(crate) fn selectors(docs: &[Value]) -> Vec<String> {
    let drs = rules(docs);
    if drs.len() > 1 {
        hosts(&drs)
    } else {
        Vec::new()
    }
}

/// The rule `selector` names (its host, short host or name), or the only
/// one.
fn pick<'a>(
    f: &PathInput<'_>,
    drs: &[&'a Value],
    selector: Option<&str>,
) -> Result<&'a Value, PathError> {
    let names = || hosts(drs);
    match selector {
        None if drs.len() == 1 => Ok(drs[0]),
        None => Err(PathError::new(
            f.name,
            "spec.host",
            format!(
                "holds {} DestinationRules ({}): name one as {}:HOST",
                drs.len(),
                names().join(", "),
                f.name
            ),
        )
        .with_choices(names())),
        Some(s) => drs
            .iter()
            .copied()
            .find(|d| host_of(d) == s || name_of(d) == s)
            .or_else(|| drs.iter().copied().find(|d| short(host_of(d)) == short(s)))
            .ok_or_else(|| {
                PathError::new(
                    f.name,
                    "spec.host",
                    format!(
                        "no DestinationRule for {s:?} (hosts: {})",
                        names().join(", ")
                    ),
                )
            }),
    }
}

/// The cap a rule puts on concurrent retries, with what it assumes.
fn budget(f: &PathInput<'_>, dr: &Value) -> Result<(Option<Budget>, String), PathError> {
    let policy = tree::get(dr, "spec")
        .and_then(|s| tree::get(s, "trafficPolicy"))
        .cloned()
        .unwrap_or(Value::Null);
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("spec.trafficPolicy.{k}"), e);
    if let Some(b) = tree::get(&policy, "retryBudget") {
        let percent = tree::number(b, "percent")
            .map_err(|e| bad("retryBudget.percent", e))?
            .unwrap_or(20.0);
        let min = tree::uint(b, "minRetryConcurrency")
            .map_err(|e| bad("retryBudget.minRetryConcurrency", e))?
            .unwrap_or(3);
        return Ok((
            Some(Budget::Concurrent {
                percent,
                min_concurrency: u32::try_from(min).unwrap_or(u32::MAX),
            }),
            format!(
                "DestinationRule {}: retryBudget {percent} % of active requests, at least {min} (over maxRetries)",
                name_of(dr)
            ),
        ));
    }
    let max = tree::get(&policy, "connectionPool")
        .and_then(|c| tree::get(c, "http"))
        .map(|h| tree::uint(h, "maxRetries"))
        .transpose()
        .map_err(|e| bad("connectionPool.http.maxRetries", e))?
        .flatten();
    Ok(match max {
        Some(max) => (
            Some(Budget::MaxConcurrent { max }),
            format!(
                "DestinationRule {}: maxRetries {max} caps retries in flight per client proxy, not the retries of one request",
                name_of(dr)
            ),
        ),
        None => (
            None,
            format!(
                "DestinationRule {}: no maxRetries or retryBudget, nothing caps concurrent retries",
                name_of(dr)
            ),
        ),
    })
}

fn add_rule(layer: &mut Layer, f: &PathInput<'_>, dr: &Value) -> Result<(), PathError> {
    let (b, note) = budget(f, dr)?;
    if b.is_some() {
        layer
            .assumes
            .retain(|a| !a.contains("nothing caps concurrent"));
        layer.budget = b;
    }
    layer.assumes.push(format!("{note} (from {})", f.name));
    Ok(())
}

/// Adds the rule for `layer`'s host (or the one the selector names) to the
/// Istio layer before it on the path.
pub(crate) fn add(layer: &mut Layer, f: &PathInput<'_>, docs: &[Value]) -> Result<(), PathError> {
    let drs = rules(docs);
    let host = layer
        .selector
        .split(['/', ' '])
        .next()
        .unwrap_or("")
        .to_string();
    let dr = match f.selector {
        Some(_) => pick(f, &drs, f.selector)?,
        None => match drs
            .iter()
            .copied()
            .find(|d| short(host_of(d)) == short(&host))
        {
            Some(d) => d,
            None => pick(f, &drs, None)?,
        },
    };
    add_rule(layer, f, dr)
}

/// A DestinationRule beside the VirtualService in one file adds to its
/// layer when it is for the same host.
pub(crate) fn add_from_same_file(
    layer: &mut Layer,
    f: &PathInput<'_>,
    docs: &[Value],
) -> Result<(), PathError> {
    let host = layer
        .selector
        .split(['/', ' '])
        .next()
        .unwrap_or("")
        .to_string();
    let short_host = short(&host).to_string();
    match rules(docs)
        .into_iter()
        .find(|d| short(host_of(d)) == short_host)
    {
        Some(dr) => add_rule(layer, f, dr),
        None => Ok(()),
    }
}

/// A DestinationRule alone: the sidecar that sends to its host, with the
/// mesh's default policy (no VirtualService routes it) and the rule's cap.
pub(crate) fn layer(
    f: &PathInput<'_>,
    docs: &[Value],
    mesh: Option<&MeshDefault>,
    o: &Options,
) -> Result<Layer, PathError> {
    let drs = rules(docs);
    let dr = pick(f, &drs, f.selector)?;
    let host = host_of(dr).to_string();
    let mut layer = istio::sidecar(&PathInput::new(f.name, "", Some(&host)), mesh, o);
    layer.system = System::Istio;
    layer.selector = format!("sidecar to {host}");
    layer
        .assumes
        .push("no VirtualService on the path routes this host: Istio's default policy".into());
    add_rule(&mut layer, f, dr)?;
    Ok(layer)
}
