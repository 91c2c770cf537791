//! Traefik's `retry` middleware: in a TOML or YAML dynamic configuration
//! (`http.middlewares.NAME.retry`) or a Kubernetes `Middleware`
//! (`spec.retry`).
//!
//! The rules (Traefik's retry middleware reference and its
//! `pkg/middlewares/retry`):
//! - `attempts` is the number of tries, the first included: the middleware
//!   serves the last try when its count reaches `attempts`, and its tests
//!   expect `attempts = 3` to make two retries (the reference table's
//!   "times the request should be retried" reads otherwise; the code
//!   decides);
//! - it retries only when the server does not reply (a refused or reset
//!   connection) and stops at the first answer, whatever its status;
//! - `initialInterval` starts an exponential back-off (none when unset)
//!   whose multiplier is 2^(1/(attempts−1)): the last wait is about twice
//!   the first;
//! - Traefik answers a failed connection with 502.

use serde_json::Value;

use super::rules::{Pause, Rule};
use super::tree;
use super::{Layer, PathError, PathInput, System};

/// Whether a TOML file is a Traefik configuration.
pub(crate) fn looks_like_toml(text: &str) -> bool {
    [
        "[http.middlewares",
        "[http.routers",
        "[http.services",
        "[entryPoints",
    ]
    .iter()
    .any(|k| text.contains(k))
}

/// A Traefik `Middleware` object or a dynamic configuration with
/// middlewares.
pub(crate) fn is_middleware(d: &Value) -> bool {
    let api = tree::string(d, "apiVersion").unwrap_or("");
    (tree::string(d, "kind") == Some("Middleware") && api.starts_with("traefik."))
        || tree::get(d, "http")
            .and_then(|h| tree::get(h, "middlewares"))
            .is_some()
}

/// The retry middlewares a path names one of when the file holds
/// several, else none.
pub(crate) fn selectors(docs: &[Value]) -> Vec<String> {
    let found = middlewares(docs);
    if found.len() > 1 {
        found.into_iter().map(|(name, _)| name).collect()
    } else {
        Vec::new()
    }
}

/// Every retry middleware: (name, its `retry` settings).
fn middlewares(docs: &[Value]) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for d in docs {
        if tree::string(d, "kind") == Some("Middleware") {
            if let Some(r) = tree::get(d, "spec").and_then(|s| tree::get(s, "retry")) {
                let name = tree::get(d, "metadata")
                    .and_then(|m| tree::string(m, "name"))
                    .unwrap_or("");
                out.push((name.to_string(), r));
            }
        }
        if let Some(m) = tree::get(d, "http").and_then(|h| tree::obj(h, "middlewares")) {
            for (name, mw) in m {
                if let Some(r) = tree::get(mw, "retry") {
                    out.push((name.clone(), r));
                }
            }
        }
    }
    out
}

/// One retry middleware, by name.
pub(crate) fn layer(f: &PathInput<'_>, docs: &[Value]) -> Result<Layer, PathError> {
    // A TOML file is parsed with its kind; one that does not parse is
    // parsed again here for its error.
    let parsed;
    let docs = if docs.is_empty() {
        let v: Value = toml::from_str(f.text)
            .map_err(|e| PathError::new(f.name, "", format!("not valid TOML: {}", e.message())))?;
        parsed = [v];
        &parsed[..]
    } else {
        docs
    };
    let found = middlewares(docs);
    let names: Vec<String> = found.iter().map(|m| m.0.clone()).collect();
    let (name, retry) = match f.selector {
        None if found.len() == 1 => &found[0],
        None if found.is_empty() => {
            return Err(PathError::new(
                f.name,
                "http.middlewares",
                "no retry middleware",
            ))
        }
        None => {
            return Err(PathError::new(
                f.name,
                "http.middlewares",
                format!(
                    "holds {} retry middlewares ({}): name one as {}:NAME",
                    found.len(),
                    names.join(", "),
                    f.name
                ),
            )
            .with_choices(names))
        }
        Some(s) => found.iter().find(|m| m.0 == s).ok_or_else(|| {
            PathError::new(
                f.name,
                "http.middlewares",
                format!("no retry middleware {s:?} (here: {})", names.join(", ")),
            )
        })?,
    };
    let at = format!("http.middlewares.{name}.retry");
    let attempts = tree::uint(retry, "attempts")
        .map_err(|e| PathError::new(f.name, &format!("{at}.attempts"), e))?
        .unwrap_or(0);
    let interval = tree::duration(retry, "initialInterval")
        .map_err(|e| PathError::new(f.name, &format!("{at}.initialInterval"), e))?;
    let mut layer = Layer::new(f.name, System::Traefik, name.clone());
    layer
        .assumes
        .push("attempts counts tries, the first included (Traefik's code and tests)".into());
    if attempts <= 1 {
        layer.retry_on = "nothing (attempts ≤ 1)".into();
        return Ok(layer);
    }
    layer.max_tries = Some(u32::try_from(attempts).unwrap_or(u32::MAX));
    layer.retry_on = "no reply (refused or reset connections); never an answer".into();
    layer.rule = Rule::Traefik;
    if let Some(i) = interval.filter(|d| !d.is_zero()) {
        // Traefik's `newBackOff` (pkg/middlewares/retry/retry.go): an
        // exponential back-off from initialInterval whose multiplier is
        // 2^(1/(attempts-1)), so the last wait is about twice the first;
        // its ±50 % randomization keeps the mean, and the back-off
        // library caps a wait at 60 s.
        let factor = 2f64.powf(1.0 / (attempts - 1) as f64);
        layer.pause = Pause::Steps {
            base: i,
            factor,
            max: std::time::Duration::from_secs(60),
        };
        layer.assumes.push(format!(
            "initialInterval {i:?}: each wait grows by 2^(1/{}) = {factor:.3} (Traefik's back-off), jittered ±50 % around it",
            attempts - 1
        ));
    }
    Ok(layer)
}
