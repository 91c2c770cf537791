//! The AWS SDK shared config file (`~/.aws/config`): a profile's
//! `retry_mode` and `max_attempts`.
//!
//! The rules (the boto3 retries guide and the AWS SDKs' retry behaviour
//! reference): `max_attempts` in the file counts every attempt, the first
//! included; `legacy` mode makes 5 attempts and retries any 5xx, `standard`
//! and `adaptive` make 3 and retry 500, 502, 503 and 504, throttling and
//! transient errors, drawing each retry from a retry quota that a run of
//! failures empties; the pause is fully jittered, doubling, at most 20 s.
//! Which mode an unset `retry_mode` means depends on the SDK; the audit
//! says which it assumed.

use std::time::Duration;

use stagger::{Backoff, Jitter};

use super::rules::{Pause, Rule};
use super::{Budget, Layer, Options, PathError, PathInput, System};

/// Whether `text` is an INI file of profiles rather than YAML or JSON.
pub(crate) fn looks_like(text: &str) -> bool {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'));
    let Some(first) = first else {
        return false;
    };
    first.starts_with('[') && text.lines().any(|l| section(l.trim()).is_some())
}

/// The profile a section line opens: `[default]`, `[profile NAME]`.
fn section(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner == "default" {
        return Some("default");
    }
    inner.strip_prefix("profile ").map(str::trim)
}

/// The keys of profile `name`, later sections of the same name winning,
/// keys case-insensitive; indented sub-properties (`s3 =` blocks) skipped.
fn profile(text: &str, name: &str) -> Option<Vec<(String, String)>> {
    let mut found = false;
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut inside = false;
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with('[') {
            inside = section(line) == Some(name);
            found |= inside;
            continue;
        }
        if !inside
            || line.is_empty()
            || line.starts_with('#')
            || line.starts_with(';')
            || raw.starts_with([' ', '\t'])
        {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let k = k.trim().to_ascii_lowercase();
            keys.retain(|(x, _)| *x != k);
            keys.push((k, v.trim().to_string()));
        }
    }
    found.then_some(keys)
}

/// The profiles of the file in file order (one written twice in a row,
/// once).
fn profiles(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter_map(|l| section(l.trim()))
        .map(str::to_string)
        .collect();
    names.dedup();
    names
}

/// The profiles a path names one of: every profile of a file without
/// `[default]` (the one read when none is named), none of a file with it.
pub(crate) fn selectors(text: &str) -> Vec<String> {
    if text.lines().any(|l| section(l.trim()) == Some("default")) {
        Vec::new()
    } else {
        profiles(text)
    }
}

/// The error for a profile the file does not hold, listing those it does.
fn no_profile(f: &PathInput<'_>, name: &str) -> PathError {
    let names = profiles(f.text);
    let shown = if names.len() > 12 {
        format!("{}, … ({} in all)", names[..12].join(", "), names.len())
    } else {
        names.join(", ")
    };
    let err = PathError::new(
        f.name,
        "",
        format!(
            "no profile {name:?} (profiles: {shown}); name one as {}:PROFILE",
            f.name
        ),
    );
    if f.selector.is_none() {
        err.with_choices(selectors(f.text))
    } else {
        err
    }
}

pub(crate) fn layer(f: &PathInput<'_>, o: &Options) -> Result<Layer, PathError> {
    let name = f.selector.unwrap_or("default");
    let keys = profile(f.text, name).ok_or_else(|| no_profile(f, name))?;
    let get = |k: &str| keys.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
    let field = |k: &str| format!("[{name}].{k}");
    let mut layer = Layer::new(f.name, System::AwsSdk, name.to_string());
    let standard = match get("retry_mode") {
        None => {
            layer.assumes.push(format!(
                "retry_mode unset: {} (the SDK decides; boto3 uses legacy)",
                if o.aws_default_standard {
                    "standard"
                } else {
                    "legacy"
                }
            ));
            o.aws_default_standard
        }
        Some("legacy") => false,
        Some("standard" | "adaptive") => true,
        Some(other) => {
            return Err(PathError::new(
                f.name,
                &field("retry_mode"),
                format!("{other:?} is not legacy, standard or adaptive"),
            ))
        }
    };
    let tries = match get("max_attempts") {
        None => {
            if standard {
                3
            } else {
                5
            }
        }
        Some(s) => s.parse::<u32>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            PathError::new(
                f.name,
                &field("max_attempts"),
                format!("{s:?} is not a whole number ≥ 1 (it counts the first attempt)"),
            )
        })?,
    };
    layer.max_tries = Some(tries);
    layer.rule = Rule::Aws { legacy: !standard };
    layer.retry_on = if standard {
        "transient errors, throttling, 500,502,503,504".to_string()
    } else {
        "transient errors, throttling, 5xx".to_string()
    };
    if standard {
        layer.budget = Some(Budget::Drains {
            what: "the SDK's retry quota",
        });
    }
    layer.pause = Pause::Library(Backoff {
        base: Duration::from_secs(1),
        multiplier: 2.0,
        cap: Duration::from_secs(20),
        jitter: Jitter::Full,
    });
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_merge_and_keys_ignore_case() {
        let text = "[default]\nregion = x\n\n[profile a]\nMAX_attempts = 2\n[profile a]\nretry_mode = standard\ns3 =\n  max_attempts = 9\n";
        assert!(looks_like(text));
        let keys = profile(text, "a").unwrap();
        assert!(keys.contains(&("max_attempts".to_string(), "2".to_string())));
        assert!(keys.contains(&("retry_mode".to_string(), "standard".to_string())));
        assert!(profile(text, "b").is_none());
        assert!(!looks_like("a: [1]\n"));
    }
}
