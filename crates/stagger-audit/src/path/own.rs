//! The clients' own files as layers: a gRPC service config's method (read
//! by the library's import, leniently) and a stagger policy file.

use super::library::Library;
use super::rules::Rule;
use super::{Budget, Layer, PathError, PathInput, System};
use crate::Input;
use stagger::config::{BudgetSpec, MethodConfig, PolicyFile, ServiceConfig};

use crate::lenient;

/// The library's ratio budget default (10 % of requests).
const RATIO_DEFAULT: f64 = 0.1;

pub(crate) fn layer(f: &PathInput<'_>) -> Result<Layer, PathError> {
    if crate::is_policy_file(&Input::new(f.name, f.text)) {
        policy(f)
    } else {
        service_config(f)
    }
}

/// The methods of a service config a path names one of
/// (`SERVICE/METHOD`, each entry by its first name) when it names several,
/// else none (or it does not read).
pub(crate) fn selectors(f: &PathInput<'_>) -> Vec<String> {
    if crate::is_policy_file(&Input::new(f.name, f.text)) {
        return Vec::new();
    }
    match read(f) {
        Ok((config, _)) if config.methods.len() > 1 => entries(&config),
        _ => Vec::new(),
    }
}

/// The service config of `f`, read leniently as the library imports it:
/// a DNS TXT choice embedded alone is its `serviceConfig`; a list of
/// choices is refused.
fn read(f: &PathInput<'_>) -> Result<(ServiceConfig, Vec<lenient::Leniency>), PathError> {
    let err = |e: crate::Fault| PathError::new(f.name, &e.field, &e.problem);
    if lenient::choices(f.text).map_err(err)?.is_some() {
        return Err(PathError::new(
            f.name,
            "",
            "a DNS TXT list of service config choices: put the choice a client picks in a file of its own",
        ));
    }
    // One DNS TXT choice as a program embeds it: its `serviceConfig`.
    let inner;
    let text = if crate::grpc::is_one_choice(f.text) {
        let v: serde_json::Value = serde_json::from_str(f.text).unwrap_or_default();
        inner = v
            .get("serviceConfig")
            .cloned()
            .unwrap_or_default()
            .to_string();
        inner.as_str()
    } else {
        f.text
    };
    lenient::read(text).map_err(err)
}

fn service_config(f: &PathInput<'_>) -> Result<Layer, PathError> {
    let (config, seen) = read(f)?;
    let (method, selector) = pick(f, &config)?;
    let p = &method.policy;
    let mut layer = Layer::new(f.name, System::Grpc, selector);
    // A config gRPC rejects is not applied at all: the client runs without
    // it, retrying nothing (the checklist names the field).
    if let Ok(report) = crate::audit(&[Input::new(f.name, f.text)]) {
        let rejected: Vec<String> = report
            .findings
            .iter()
            .filter(|x| x.id == "invalid" || x.id == "duplicate_names")
            .map(|x| format!("{}: {}", x.method, x.message))
            .collect();
        if !rejected.is_empty() {
            layer.retry_on = "nothing: gRPC rejects this service config".to_string();
            layer.invalid = rejected;
            return Ok(layer);
        }
    }
    layer.spelling = crate::spelling_messages(&seen);
    layer.timeout = p.timeout();
    layer.per_try_timeout = p.attempt_timeout();
    if config.throttling.is_some() {
        layer.budget = Some(Budget::Drains {
            what: "retryThrottling",
        });
    }
    let Some(codes) = p.retryable_codes() else {
        layer.retry_on = "nothing (no retryPolicy)".to_string();
        return Ok(layer);
    };
    layer.max_tries = Some(p.max_attempts());
    layer.rule = Rule::Library(Library::grpc(&config, method));
    let names: Vec<String> = codes
        .iter()
        .map(|c| super::Failure::Grpc(*c).to_string())
        .collect();
    layer.retry_on = names.join(",");
    if let Some(delay) = p.hedging_delay() {
        let non_fatal = if codes.is_empty() {
            "none"
        } else {
            &layer.retry_on
        };
        layer.retry_on = format!("hedging every {delay:?}; non-fatal {non_fatal}");
        layer.assumes.push(
            "hedging: a hedge goes out every hedgingDelay, and a non-fatal failure sends the next at once"
                .into(),
        );
    } else if p.max_attempts() > 1 && codes.is_empty() {
        layer.retry_on = "nothing (no retryable codes)".into();
    }
    Ok(layer)
}

/// A method name as a path names it: `SERVICE/METHOD`, `SERVICE/*`, `*`.
fn label((s, m): &(String, String)) -> String {
    match (s.as_str(), m.as_str()) {
        ("", _) => "*".to_string(),
        (s, "") => format!("{s}/*"),
        (s, m) => format!("{s}/{m}"),
    }
}

/// Each entry of `config` by its first name.
fn entries(config: &ServiceConfig) -> Vec<String> {
    config
        .methods
        .iter()
        .filter_map(|m| m.names.first().map(label))
        .collect()
}

/// The method of `config` the path names (`f`'s selector), or the only
/// one, with its label; an error lists the entries when none or several
/// could be meant.
fn pick<'c>(
    f: &PathInput<'_>,
    config: &'c ServiceConfig,
) -> Result<(&'c MethodConfig, String), PathError> {
    let all = || {
        config
            .methods
            .iter()
            .flat_map(|m| m.names.iter().map(label))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match f.selector {
        None if config.methods.len() == 1 => {
            let m = &config.methods[0];
            Ok((m, m.names.first().map(label).unwrap_or_else(|| "*".into())))
        }
        None if config.methods.is_empty() => Err(PathError::new(
            f.name,
            "methodConfig",
            "is empty: no method of this config retries",
        )),
        None => Err(PathError::new(
            f.name,
            "methodConfig",
            format!(
                "names several methods ({}): name one as {}:SERVICE/METHOD",
                all(),
                f.name
            ),
        )
        .with_choices(entries(config))),
        Some(s) => {
            let (service, name) = s.split_once('/').unwrap_or((s, ""));
            let m = config
                .method(service, name.trim_end_matches('*'))
                .ok_or_else(|| {
                    PathError::new(
                        f.name,
                        "methodConfig",
                        format!("no entry applies to {s:?} (entries: {})", all()),
                    )
                })?;
            Ok((m, s.to_string()))
        }
    }
}

fn policy(f: &PathInput<'_>) -> Result<Layer, PathError> {
    let parsed = if f.name.ends_with(".toml") {
        PolicyFile::from_toml(f.text)
    } else {
        PolicyFile::from_json(f.text)
    };
    let file = parsed.map_err(|e| PathError::new(f.name, e.field(), e.problem()))?;
    let mut layer = Layer::new(
        f.name,
        System::Stagger,
        file.name.clone().unwrap_or_else(|| "*".into()),
    );
    layer.max_tries = Some(file.attempts.max(1));
    layer.timeout = file.deadline;
    layer.per_try_timeout = file.attempt_timeout;
    layer.budget = file.budget.map(|b| match b {
        BudgetSpec::Ratio { ratio, .. } => Budget::Ratio {
            ratio: ratio.unwrap_or(RATIO_DEFAULT),
            floor_per_second: 0.0,
        },
        _ => Budget::Drains {
            what: "a token budget",
        },
    });
    layer.rule = Rule::Library(Library::stagger(&file));
    layer.retry_on = if file.retry_on.is_empty() {
        "transient (the library's classification)".to_string()
    } else {
        let on: Vec<String> = file
            .retry_on
            .iter()
            .map(|r| match r {
                stagger::config::RetryOn::Grpc(c) => super::Failure::Grpc(*c).to_string(),
                stagger::config::RetryOn::Http(s) => s.to_string(),
                _ => "?".to_string(),
            })
            .collect();
        format!(
            "transient (the library's classification) and {}",
            on.join(",")
        )
    };
    if file.attempts <= 1 {
        layer.rule = Rule::Nothing;
        layer.retry_on = "nothing (attempts = 1)".into();
    }
    Ok(layer)
}
