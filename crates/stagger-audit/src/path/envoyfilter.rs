//! Istio `EnvoyFilter` patches that write a route's `retry_policy`.
//!
//! The rules (Istio's `networking/v1alpha3/envoy_filter.proto` and
//! protobuf's merge):
//! - `applyTo: HTTP_ROUTE` with `value.route.retry_policy`, or
//!   `applyTo: VIRTUAL_HOST` with `value.retry_policy`, changes the retry
//!   policy Istio already wrote for the route — its VirtualService's, or
//!   Istio's default policy (2 retries on its default conditions);
//! - `operation: MERGE` merges field by field: a field the patch sets
//!   replaces Istio's (`num_retries`, `retry_on`, `per_try_timeout`,
//!   `retry_back_off`), a list (`retriable_status_codes`) is appended to,
//!   and every field it leaves out stays as Istio wrote it;
//! - `REPLACE` (or `ADD`) writes the policy as given, with Envoy's
//!   defaults (`num_retries` 1) for what it leaves out;
//! - either way Envoy rejects a `retry_back_off` without a `base_interval`
//!   above zero;
//! - `applyTo: CLUSTER` with `circuit_breakers` sets the cap on concurrent
//!   retries (`retry_budget`, else `max_retries`).

use serde_json::Value;

use super::envoy::{self, EnvoyRetry};
use super::istio::{DEFAULT_ON, DEFAULT_RETRIES};
use super::tree;
use super::{Budget, Layer, Options, PathError, PathInput, System};

/// One patch with a retry policy: (filter, index, operation, policy).
type Patch<'a> = (&'a Value, usize, String, &'a Value);

fn name_of(d: &Value) -> &str {
    tree::get(d, "metadata")
        .and_then(|m| tree::string(m, "name"))
        .unwrap_or("")
}

fn patches(docs: &[Value]) -> (Vec<Patch<'_>>, Vec<&Value>) {
    let mut retry = Vec::new();
    let mut clusters = Vec::new();
    for d in docs
        .iter()
        .filter(|d| tree::string(d, "kind") == Some("EnvoyFilter"))
    {
        let spec = tree::get(d, "spec").unwrap_or(&Value::Null);
        for (i, p) in tree::list(spec, "configPatches").iter().enumerate() {
            let patch = tree::get(p, "patch").unwrap_or(&Value::Null);
            let op = tree::string(patch, "operation")
                .unwrap_or("MERGE")
                .to_ascii_uppercase();
            let value = tree::get(patch, "value").unwrap_or(&Value::Null);
            let policy = tree::get(value, "route")
                .and_then(|r| tree::get(r, "retryPolicy"))
                .or_else(|| tree::get(value, "retryPolicy"));
            if let Some(policy) = policy {
                retry.push((d, i, op, policy));
            } else if let Some(cb) = tree::get(value, "circuitBreakers") {
                clusters.push(cb);
            }
        }
    }
    (retry, clusters)
}

/// The patch of an EnvoyFilter file that writes a retry policy: by the
/// filter's name, `NAME/INDEX`, or the only one.
pub(crate) fn layer(f: &PathInput<'_>, docs: &[Value], o: &Options) -> Result<Layer, PathError> {
    let (found, clusters) = patches(docs);
    let (filter, index, op, policy) = pick(f, &found)?.clone();
    let at = format!("spec.configPatches[{index}].patch.value");
    let bad = |k: &str, e: String| PathError::new(f.name, &format!("{at}.{k}"), e);
    let merge = op == "MERGE";
    let mut layer = Layer::new(
        f.name,
        System::Istio,
        format!("{} patch {index}", name_of(filter)),
    );
    let mut retry = EnvoyRetry::read(policy, &bad)?;
    // The patch's codes, each once, after Istio's (503 before 1.24) under
    // MERGE.
    let mut codes = if merge && o.istio.minor < 24 {
        vec![503]
    } else {
        Vec::new()
    };
    for code in std::mem::take(&mut retry.status_codes) {
        if !codes.contains(&code) {
            codes.push(code);
        }
    }
    retry.status_codes = codes;
    if merge {
        retry.num_retries = retry.num_retries.or(Some(DEFAULT_RETRIES));
        if tree::string(policy, "retryOn").is_none() {
            retry.retry_on = DEFAULT_ON.split(',').map(str::to_string).collect();
        }
    }
    layer.assumes.push(if merge {
        format!(
            "MERGE over Istio 1.{}'s policy for the route (none from a VirtualService on the path): fields left out stay Istio's",
            o.istio.minor
        )
    } else {
        format!("{op}: the policy as written, Envoy's defaults for the rest")
    });
    if let Some(cb) = clusters.first() {
        layer.budget = Some(cluster_budget(f, cb)?);
    } else {
        layer.assumes.push(
            "Istio lifts Envoy's max_retries to 2^32-1: nothing caps concurrent retries".into(),
        );
    }
    if !envoy::apply_retry(&mut layer, retry) {
        layer.retry_on = "nothing (num_retries 0 or no retry_on)".into();
    }
    Ok(layer)
}

/// A retry patch as a path names it: `NAME/INDEX`.
fn label(p: &Patch<'_>) -> String {
    format!("{}/{}", name_of(p.0), p.1)
}

/// The retry patches of an EnvoyFilter file as a path names them when it
/// holds several, else none.
pub(crate) fn selectors(docs: &[Value]) -> Vec<String> {
    let (found, _) = patches(docs);
    if found.len() > 1 {
        found.iter().map(label).collect()
    } else {
        Vec::new()
    }
}

/// The retry patch the selector names (the filter's name or
/// `NAME/INDEX`), or the only one.
fn pick<'a, 'b>(f: &PathInput<'_>, found: &'b [Patch<'a>]) -> Result<&'b Patch<'a>, PathError> {
    let labels: Vec<String> = found.iter().map(label).collect();
    let picked: Vec<&Patch<'_>> = match f.selector {
        None => found.iter().collect(),
        Some(s) => found
            .iter()
            .filter(|p| label(p) == s || name_of(p.0) == s)
            .collect(),
    };
    match picked.as_slice() {
        [one] => Ok(*one),
        [] if found.is_empty() => {
            Err(PathError::new(
                f.name,
                "spec.configPatches",
                "no patch writes a retry_policy (HTTP_ROUTE value.route.retry_policy or VIRTUAL_HOST value.retry_policy)",
            ))
        }
        [] => {
            Err(PathError::new(
                f.name,
                "spec.configPatches",
                format!("no patch {:?} (patches: {})", f.selector.unwrap_or(""), labels.join(", ")),
            ))
        }
        _ => {
            Err(PathError::new(
                f.name,
                "spec.configPatches",
                format!("holds {} retry patches ({}): name one as {}:NAME/INDEX", picked.len(), labels.join(", "), f.name),
            )
            .with_choices(labels.clone()))
        }
    }
}

/// A `CLUSTER` patch's cap: `retry_budget` (20 %, at least 3) over
/// `max_retries` (Istio's 2^32 − 1).
fn cluster_budget(f: &PathInput<'_>, cb: &Value) -> Result<Budget, PathError> {
    let bad =
        |e: String| PathError::new(f.name, "spec.configPatches.patch.value.circuit_breakers", e);
    let t = tree::list(cb, "thresholds")
        .first()
        .cloned()
        .unwrap_or(Value::Null);
    Ok(match tree::get(&t, "retryBudget") {
        Some(b) => Budget::Concurrent {
            percent: tree::number(b, "budgetPercent")
                .map_err(&bad)?
                .unwrap_or(20.0),
            min_concurrency: tree::uint(b, "minRetryConcurrency")
                .map_err(&bad)?
                .map_or(3, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        },
        None => Budget::MaxConcurrent {
            max: tree::uint(&t, "maxRetries")
                .map_err(&bad)?
                .unwrap_or(u64::from(u32::MAX)),
        },
    })
}
