//! The path's findings: retries at several layers (and which to keep),
//! Istio's implicit retries, per-try timeouts no deadline leaves room for,
//! meshes that repeat non-idempotent requests, and no budget anywhere.

use super::compose::{budgeted, count};
use super::{PathFinding, PathReport, System};
use stagger_sim::rounded;

fn name(r: &PathReport, i: usize) -> String {
    let l = &r.layers[i];
    format!("{} ({} {})", l.file_name(), l.system, l.selector)
}

pub(crate) fn all(r: &PathReport) -> Vec<PathFinding> {
    let mut out = Vec::new();
    let retrying: Vec<usize> = (0..r.layers.len())
        .filter(|&i| r.dead.layers[i].tries > 1.0)
        .collect();
    several_layers(r, &retrying, &mut out);
    mesh_defaults(r, &mut out);
    per_try_timeouts(r, &mut out);
    for (i, l) in r.layers.iter().enumerate() {
        if let Some(why) = &l.non_idempotent {
            out.push(PathFinding {
                id: "retries_non_idempotent",
                layers: vec![i],
                message: format!(
                    "{} retries on {why} for every method: a POST the application already handled runs again. Retry only 'never sent' failures ({}) {}, or limit it to idempotent routes",
                    name(r, i),
                    never_sent(l.system).0,
                    never_sent(l.system).1
                ),
            });
        }
    }
    for (i, l) in r.layers.iter().enumerate() {
        for m in &l.invalid {
            out.push(PathFinding {
                id: "invalid",
                layers: vec![i],
                message: format!("{}: {m}", name(r, i)),
            });
        }
    }
    for (i, l) in r.layers.iter().enumerate() {
        for m in &l.spelling {
            out.push(PathFinding {
                id: "nonstandard_spelling",
                layers: vec![i],
                message: format!("{}: {m}", name(r, i)),
            });
        }
    }
    no_budget(r, &retrying, &mut out);
    out.extend(sizing(r));
    out
}

/// The conditions that retry only a request never sent, in the words of
/// `system`, and where they are set.
fn never_sent(system: System) -> (&'static str, &'static str) {
    match system {
        System::Nginx => (
            "error, timeout: nginx passes a POST on only with non_idempotent",
            "at the proxy",
        ),
        System::Haproxy => ("conn-failure, 0rtt-rejected", "at the proxy"),
        System::Traefik => ("Traefik retries only those", "at the proxy"),
        System::GatewayApi | System::EnvoyGateway => {
            ("connect-failure, refused-stream", "at the gateway")
        }
        _ => ("connect-failure, refused-stream", "in the mesh"),
    }
}

/// The client layer closest to the failure among those that retry (a
/// client knows which methods are idempotent; a mesh does not), else the
/// lowest retrying layer.
fn keeper(r: &PathReport, retrying: &[usize]) -> Option<usize> {
    retrying
        .iter()
        .rev()
        .copied()
        .find(|&i| !r.layers[i].system.is_mesh())
        .or(retrying.last().copied())
}

/// Retries at more than one layer, and which one to keep.
fn several_layers(r: &PathReport, retrying: &[usize], out: &mut Vec<PathFinding>) {
    let bottom = r.dead.bottom_attempts;
    if retrying.len() > 1 {
        // Keep the layer closest to the failure that knows which methods
        // are idempotent: a client, not a mesh.
        let keep = keeper(r, retrying).unwrap_or(0);
        let chain: Vec<String> = retrying
            .iter()
            .map(|&i| format!("{} ×{}", name(r, i), count(r.dead.layers[i].tries)))
            .collect();
        out.push(PathFinding {
            id: "retries_at_several_layers",
            layers: retrying.to_vec(),
            message: format!(
                "{} layers retry the same failure: {}; {} attempts reach the dependency for one call when it is down. Keep retries at {} — the layer closest to the failure that knows which calls are idempotent — and let the others pass the failure up",
                retrying.len(),
                chain.join(", "),
                count(bottom),
                name(r, keep)
            ),
        });
    }
}

/// Istio's retries where nobody wrote any.
fn mesh_defaults(r: &PathReport, out: &mut Vec<PathFinding>) {
    for (i, l) in r.layers.iter().enumerate() {
        if l.implicit {
            let n = &r.dead.layers[i];
            let here = if n.tries > 1.0 {
                "and here they multiply what the layers below send".to_string()
            } else {
                format!("here not for the {} the layer below returns, but for every refused connection or reset", n.sees)
            };
            out.push(PathFinding {
                id: "mesh_default_retries",
                layers: vec![i],
                message: match l.selector.strip_prefix("sidecar to ") {
                    // No VirtualService routes the host: the fix is one.
                    Some(host) => format!(
                        "{}: no VirtualService routes {host}, so Istio retries anyway: {} tries on {} ({here}). Add a VirtualService for {host} with `retries: {{attempts: 0}}` to leave retrying to one layer, or with the policy you mean",
                        name(r, i),
                        l.max_tries.unwrap_or(1),
                        l.retry_on
                    ),
                    None => format!(
                        "{} has no `retries`, so Istio retries anyway: {} tries on {} ({here}). Write `retries: {{attempts: 0}}` to leave retrying to one layer, or write the policy you mean",
                        name(r, i),
                        l.max_tries.unwrap_or(1),
                        l.retry_on
                    ),
                },
            });
        }
    }
}

/// A per-try timeout at or past a deadline at or above the layer leaves no
/// room for a retry.
fn per_try_timeouts(r: &PathReport, out: &mut Vec<PathFinding>) {
    for (i, l) in r.layers.iter().enumerate() {
        let Some(per_try) = l.per_try_timeout else {
            continue;
        };
        if l.max_tries.is_some_and(|n| n <= 1)
            || r.dead.layers[i].tries <= 1.0 && !r.dead.layers[i].retries
        {
            continue;
        }
        let mut limits: Vec<(usize, std::time::Duration, &str)> = Vec::new();
        if let Some(t) = l.timeout.filter(|t| *t != per_try) {
            limits.push((i, t, "its own timeout"));
        }
        for (j, up) in r.layers[..i].iter().enumerate() {
            if let Some(t) = up.timeout {
                limits.push((j, t, "the timeout"));
            }
            if let Some(t) = up.per_try_timeout {
                limits.push((j, t, "the per-try timeout"));
            }
        }
        if let Some((j, t, what)) = limits
            .into_iter()
            .filter(|(_, t, _)| per_try >= *t)
            .min_by_key(|x| x.1)
        {
            let whose = if j == i {
                String::new()
            } else {
                format!(" of {}", name(r, j))
            };
            out.push(PathFinding {
                id: "per_try_timeout_exceeds_deadline",
                layers: vec![i, j],
                message: format!(
                    "{}: a try may take {per_try:?}, but {what}{whose} is {t:?}: its retries never happen when tries are slow. Make the per-try timeout a fraction of the deadline (deadline / tries)",
                    name(r, i)
                ),
            });
        }
    }
}

/// No budget anywhere on a path that multiplies attempts.
fn no_budget(r: &PathReport, retrying: &[usize], out: &mut Vec<PathFinding>) {
    let bottom = r.dead.bottom_attempts;
    let capped = r.layers.iter().any(|l| {
        matches!(
            l.budget,
            Some(
                super::Budget::Drains { .. }
                    | super::Budget::Ratio { .. }
                    | super::Budget::Concurrent { .. }
            )
        )
    });
    if bottom > 1.0 && !capped {
        if let Some(k) = keeper(r, retrying) {
            let mut probe = r.layers[k].clone();
            probe.budget = Some(super::Budget::Ratio {
                ratio: 0.1,
                floor_per_second: 0.0,
            });
            let with = bottom / r.dead.layers[k].tries.max(1.0)
                * budgeted(&probe, r.dead.layers[k].tries, r.options.concurrency);
            out.push(PathFinding {
                id: "no_budget_on_path",
                layers: vec![k],
                message: format!(
                    "nothing on the path caps retries while the dependency is down: a 10 % retry budget at {} ([budget] in a stagger policy, retryThrottling in a service config, retry_budget on an Envoy cluster) would bring {} attempts per call down to about {}",
                    name(r, k),
                    count(bottom),
                    count(rounded(with, 3))
                ),
            });
        }
    }
}

/// A concurrency cap that, by Little's law at the stated rate and latency,
/// lets the path's attempts pass the stated bound.
fn sizing(r: &PathReport) -> Vec<PathFinding> {
    let (Some(rate), Some(latency)) = (r.options.rate, r.options.latency) else {
        return Vec::new();
    };
    r.sizing
        .iter()
        .filter(|z| z.bottom_attempts > z.bound)
        .map(|z| {
            let fix = match z.floor {
                Some(f) => format!(
                    "at most {f} retries in flight (maxRetries, max_retries, or min_retry_concurrency with the budget's percent at most {} %) keeps it at or under {}",
                    count(rounded(z.bound / (z.bottom_attempts / z.tries) * 100.0 - 100.0, 3)),
                    count(z.bound)
                ),
                None => format!(
                    "no cap here can: the other layers alone make more than {}",
                    count(z.bound)
                ),
            };
            PathFinding {
                id: "budget_concurrency_floor",
                layers: vec![z.layer],
                message: format!(
                    "{} caps {} retries in flight; at {} requests/s at the edge ({} here) and {:?} per attempt, Little's law lets {} retries/s through of the {} its rules want, so {} attempts per call reach the bottom, over the bound of {}; {fix}",
                    name(r, z.layer),
                    count(rounded(z.cap, 3)),
                    count(rate),
                    count(rounded(z.rate, 3)),
                    latency,
                    count(rounded(z.allowed_per_second, 3)),
                    count(rounded(z.wanted_per_second, 3)),
                    count(rounded(z.bottom_attempts, 3)),
                    count(z.bound),
                ),
            }
        })
        .collect()
}
