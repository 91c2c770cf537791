//! stagger's own policy file: one retry policy, written down.
//!
//! A gRPC service config can say how often and how fast to retry, but not
//! what stagger adds around that: which jitter, a budget other than gRPC's
//! token bucket, a breaker, the longest server hint to wait for, the whole
//! call's deadline. A policy file holds all of it in one small document, so a
//! team can review it, `stagger audit` can check it, and a service can build
//! its [`Policy`] from it.
//!
//! The format is documented on [`PolicyFile`].

use std::time::Duration;

use serde_json::{Map, Value};

use crate::backoff::{Backoff, Jitter};
use crate::engine::policy::{Policy, PolicyBuilder};
use crate::guardrails::breaker::Breaker;
use crate::guardrails::budget::{
    QuotaBudget, QuotaBudgetConfig, RatioBudget, RatioBudgetConfig, RefillBudget,
    RefillBudgetConfig, TokenBucket, TokenBucketConfig,
};
use crate::outcome::error::ConfigError;

use super::{parse_duration, Bare};
use crate::classify::GRPC_CODE_NAMES as GRPC_CODES;

/// The most attempts a policy file may ask for.
pub(crate) const MAX_FILE_ATTEMPTS: u32 = 100;

const KEYS: [&str; 12] = [
    "name",
    "attempts",
    "base",
    "cap",
    "multiplier",
    "jitter",
    "max_retry_after",
    "attempt_timeout",
    "deadline",
    "retry_on",
    "breaker",
    "budget",
];

/// stagger's own policy file, parsed and validated: one retry policy with
/// everything around it (jitter, budget, breaker, hints, deadline).
///
/// The format is TOML ([`PolicyFile::from_toml`]) or JSON with the same keys
/// ([`PolicyFile::from_json`]). Every key is optional; a missing key takes
/// the [`Policy::builder`] default; an unknown key is an error (a typo must
/// not silently fall back to a default).
///
/// | key | meaning | default |
/// |---|---|---|
/// | `name` | what the policy guards, e.g. `"shop.Cart/Add"` (shown by `stagger audit`) | none |
/// | `attempts` | max attempts, the first included, 1 to 100 | 3 |
/// | `base` | the first backoff | `"100ms"` |
/// | `cap` | the largest backoff, at least `base` | `"10s"` |
/// | `multiplier` | growth per retry, at least 1 | 2 |
/// | `jitter` | `none`, `full`, `equal`, `decorrelated`, `proportional` or `proportional:F` | `full` |
/// | `max_retry_after` | the longest `Retry-After` or pushback honoured | `"60s"` |
/// | `attempt_timeout` | the timeout of each attempt | none |
/// | `deadline` | the whole call's deadline, every attempt and wait included | none |
/// | `retry_on` | extra failures the front-end retries: gRPC code names (`"UNAVAILABLE"`) and HTTP statuses (`503`) | none |
/// | `breaker` | `true` for a circuit breaker with its defaults | `false` |
/// | `[budget]` | `kind` = `ratio`, `token_bucket`, `refill`, `quota` or `none`, and that kind's settings | no budget |
///
/// Budget settings by kind (each optional, defaulting as the budget's
/// builder does): `ratio` takes `ratio`, `window`, `floor`; `token_bucket`
/// takes `max_tokens`, `token_ratio`; `refill` takes `capacity`, `ratio`;
/// `quota` takes `capacity`, `retry_cost`, `timeout_cost`.
///
/// Durations are strings of a decimal number and a unit: `ns`, `us`, `ms`,
/// `s`, `m` or `h` (`"250ms"`, `"1.5s"`, `"0.1s"`).
///
/// ```
/// use stagger::config::PolicyFile;
/// use std::time::Duration;
///
/// let file = PolicyFile::from_toml(r#"
///     name = "shop.Cart/Add"
///     attempts = 3
///     base = "50ms"
///     cap = "1s"
///     jitter = "full"
///     deadline = "2s"
///     breaker = true
///
///     [budget]
///     kind = "ratio"
///     ratio = 0.1
/// "#)?;
/// assert_eq!(file.attempts, 3);
/// assert_eq!(file.deadline, Some(Duration::from_secs(2)));
/// let policy = file.policy_builder()?.build()?;
/// assert_eq!(policy.max_attempts(), 3);
///
/// let err = PolicyFile::from_toml("attempts = 0").unwrap_err();
/// assert_eq!(err.field(), "attempts");
/// let err = PolicyFile::from_toml("[budget]\nkind = \"ratio\"\nratio = -1").unwrap_err();
/// assert_eq!(err.field(), "budget.ratio");
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PolicyFile {
    /// `name`: what the policy guards.
    pub name: Option<String>,
    /// `attempts`: max attempts, the first included.
    pub attempts: u32,
    /// `base`: the first backoff.
    pub base: Duration,
    /// `cap`: the largest backoff.
    pub cap: Duration,
    /// `multiplier`: growth per retry.
    pub multiplier: f64,
    /// `jitter`.
    pub jitter: Jitter,
    /// `max_retry_after`: the longest server hint honoured.
    pub max_retry_after: Duration,
    /// `attempt_timeout`, if given.
    pub attempt_timeout: Option<Duration>,
    /// `deadline`: the whole call's deadline, if given.
    pub deadline: Option<Duration>,
    /// `retry_on`: extra failures the front-end retries, in file order.
    pub retry_on: Vec<RetryOn>,
    /// `breaker`: whether a circuit breaker guards the calls.
    pub breaker: bool,
    /// `[budget]`: `None` when absent or `kind = "none"`.
    pub budget: Option<BudgetSpec>,
}

/// One entry of `retry_on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryOn {
    /// A gRPC status code, by number (written as its name).
    Grpc(u32),
    /// An HTTP status (100 to 599).
    Http(u16),
}

/// A `[budget]` table: the kind and the settings given (`None` takes the
/// budget builder's default).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum BudgetSpec {
    /// [`RatioBudget`].
    Ratio {
        /// `ratio`.
        ratio: Option<f64>,
        /// `window`.
        window: Option<Duration>,
        /// `floor`.
        floor: Option<u32>,
    },
    /// [`TokenBucket`] (gRPC's `retryThrottling`).
    TokenBucket {
        /// `max_tokens`.
        max_tokens: Option<f64>,
        /// `token_ratio`.
        token_ratio: Option<f64>,
    },
    /// [`RefillBudget`].
    Refill {
        /// `capacity`.
        capacity: Option<f64>,
        /// `ratio`.
        ratio: Option<f64>,
    },
    /// [`QuotaBudget`].
    Quota {
        /// `capacity`.
        capacity: Option<u32>,
        /// `retry_cost`.
        retry_cost: Option<u32>,
        /// `timeout_cost`.
        timeout_cost: Option<u32>,
    },
}

impl BudgetSpec {
    /// The kind's name as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            BudgetSpec::Ratio { .. } => "ratio",
            BudgetSpec::TokenBucket { .. } => "token_bucket",
            BudgetSpec::Refill { .. } => "refill",
            BudgetSpec::Quota { .. } => "quota",
        }
    }

    /// Adds a new budget of this kind to `b` (a fresh one each call: build
    /// one policy per dependency and share it).
    fn attach(&self, b: PolicyBuilder) -> Result<PolicyBuilder, ConfigError> {
        let named = |e: ConfigError| {
            let field = match (self, e.field()) {
                (BudgetSpec::Ratio { .. }, "ratio") => "budget.ratio",
                (BudgetSpec::Ratio { .. }, "window") => "budget.window",
                (BudgetSpec::Ratio { .. }, "floor") => "budget.floor",
                (BudgetSpec::TokenBucket { .. }, "max_tokens") => "budget.max_tokens",
                (BudgetSpec::TokenBucket { .. }, _) => "budget.token_ratio",
                (BudgetSpec::Refill { .. }, "capacity") => "budget.capacity",
                (BudgetSpec::Refill { .. }, _) => "budget.ratio",
                (BudgetSpec::Quota { .. }, "capacity") => "budget.capacity",
                (BudgetSpec::Quota { .. }, "retry_cost") => "budget.retry_cost",
                (BudgetSpec::Quota { .. }, "timeout_cost") => "budget.timeout_cost",
                _ => "budget",
            };
            ConfigError::new(field, e.problem().to_string())
        };
        Ok(match *self {
            BudgetSpec::Ratio {
                ratio,
                window,
                floor,
            } => {
                let d = RatioBudgetConfig::default();
                let k = RatioBudget::new(RatioBudgetConfig {
                    ratio: ratio.unwrap_or(d.ratio),
                    window: window.unwrap_or(d.window),
                    floor: floor.unwrap_or(d.floor),
                    ..d
                });
                b.budget(k.map_err(named)?)
            }
            BudgetSpec::TokenBucket {
                max_tokens,
                token_ratio,
            } => {
                let d = TokenBucketConfig::default();
                let k = TokenBucket::new(TokenBucketConfig {
                    max_tokens: max_tokens.unwrap_or(d.max_tokens),
                    token_ratio: token_ratio.unwrap_or(d.token_ratio),
                });
                b.budget(k.map_err(named)?)
            }
            BudgetSpec::Refill { capacity, ratio } => {
                let d = RefillBudgetConfig::default();
                let k = RefillBudget::new(RefillBudgetConfig {
                    capacity: capacity.unwrap_or(d.capacity),
                    ratio: ratio.unwrap_or(d.ratio),
                });
                b.budget(k.map_err(named)?)
            }
            BudgetSpec::Quota {
                capacity,
                retry_cost,
                timeout_cost,
            } => {
                let d = QuotaBudgetConfig::default();
                let k = QuotaBudget::new(QuotaBudgetConfig {
                    capacity: capacity.unwrap_or(d.capacity),
                    retry_cost: retry_cost.unwrap_or(d.retry_cost),
                    timeout_cost: timeout_cost.unwrap_or(d.timeout_cost),
                    ..d
                });
                b.budget(k.map_err(named)?)
            }
        })
    }
}

impl PolicyFile {
    /// Parses and validates a policy file written in TOML.
    pub fn from_toml(text: &str) -> Result<PolicyFile, ConfigError> {
        let table: toml::Table = toml::from_str(text)
            .map_err(|e| ConfigError::new("policy", format!("not valid TOML: {e}")))?;
        let value = serde_json::to_value(table)
            .map_err(|e| ConfigError::new("policy", format!("unreadable value: {e}")))?;
        Self::from_value(&value)
    }

    /// Parses and validates a policy file written in JSON (the same keys as
    /// the TOML form; `null` counts as absent).
    pub fn from_json(text: &str) -> Result<PolicyFile, ConfigError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ConfigError::new("policy", format!("not valid JSON: {e}")))?;
        Self::from_value(&value)
    }

    fn from_value(v: &Value) -> Result<PolicyFile, ConfigError> {
        let root = v
            .as_object()
            .ok_or_else(|| ConfigError::new("policy", "must be a table (a JSON object)"))?;
        unknown_keys("policy", root, &KEYS)?;
        let d = Policy::default();
        let name = name(root)?;
        let attempts = match get(root, "attempts") {
            None => d.max_attempts(),
            Some(v) => match integer(v) {
                Some(n) if (1..=u64::from(MAX_FILE_ATTEMPTS)).contains(&n) => n as u32,
                _ => {
                    return Err(ConfigError::new(
                        "attempts",
                        format!("must be an integer from 1 to {MAX_FILE_ATTEMPTS}, got {v}"),
                    ))
                }
            },
        };
        let (base, cap, multiplier, jitter) = schedule(root, *d.backoff())?;
        let max_retry_after = opt_duration(root, "max_retry_after")?.unwrap_or(d.max_retry_after());
        let attempt_timeout = opt_duration(root, "attempt_timeout")?;
        let deadline = opt_duration(root, "deadline")?;
        if deadline == Some(Duration::ZERO) {
            return Err(ConfigError::new("deadline", "must be greater than zero"));
        }
        let retry_on = match get(root, "retry_on") {
            None => Vec::new(),
            Some(Value::Array(list)) => list.iter().map(retry_on).collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(ConfigError::new(
                    "retry_on",
                    format!("must be a list, got {other}"),
                ))
            }
        };
        let breaker = match get(root, "breaker") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(ConfigError::new(
                    "breaker",
                    format!("must be true or false, got {other}"),
                ))
            }
        };
        let budget = match get(root, "budget") {
            None => None,
            Some(Value::Object(t)) => budget(t)?,
            Some(other) => {
                return Err(ConfigError::new(
                    "budget",
                    format!("must be a table with a `kind`, got {other}"),
                ))
            }
        };
        let file = PolicyFile {
            name,
            attempts,
            base,
            cap,
            multiplier,
            jitter,
            max_retry_after,
            attempt_timeout,
            deadline,
            retry_on,
            breaker,
            budget,
        };
        // Every check the builder makes, with the file's field names.
        file.policy_builder()?.build()?;
        Ok(file)
    }

    /// A policy builder with everything the file says, including a fresh
    /// budget and breaker (build one policy per dependency and share it).
    /// The `deadline` belongs to each call ([`Call::deadline`](crate::Call::deadline))
    /// and `retry_on` to the front-end's classification, so neither is set
    /// here.
    pub fn policy_builder(&self) -> Result<PolicyBuilder, ConfigError> {
        let mut b = Policy::builder()
            .max_attempts(self.attempts)
            .backoff(Backoff {
                base: self.base,
                cap: self.cap,
                multiplier: self.multiplier,
                jitter: self.jitter,
            })
            .max_retry_after(self.max_retry_after);
        if let Some(t) = self.attempt_timeout {
            b = b.attempt_timeout(t);
        }
        if self.breaker {
            b = b.breaker(Breaker::default());
        }
        if let Some(spec) = &self.budget {
            b = spec.attach(b)?;
        }
        Ok(b)
    }
}

/// The file's `name`, if it has one.
fn name(root: &Map<String, Value>) -> Result<Option<String>, ConfigError> {
    match get(root, "name") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ConfigError::new(
            "name",
            format!("must be a string, got {other}"),
        )),
    }
}

/// The backoff schedule the file states (`base`, `cap`, `multiplier`,
/// `jitter`), each absent one from `defaults`.
fn schedule(
    root: &Map<String, Value>,
    defaults: Backoff,
) -> Result<(Duration, Duration, f64, Jitter), ConfigError> {
    let base = opt_duration(root, "base")?.unwrap_or(defaults.base);
    let cap = opt_duration(root, "cap")?.unwrap_or(defaults.cap);
    let multiplier = match get(root, "multiplier") {
        None => defaults.multiplier,
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| ConfigError::new("multiplier", format!("must be a number, got {v}")))?,
    };
    let jitter = match get(root, "jitter") {
        None => defaults.jitter,
        Some(Value::String(s)) => s.parse::<Jitter>()?,
        Some(other) => {
            return Err(ConfigError::new(
                "jitter",
                format!("must be a string such as \"full\", got {other}"),
            ))
        }
    };
    Ok((base, cap, multiplier, jitter))
}

fn get<'a>(t: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    t.get(key).filter(|v| !v.is_null())
}

fn unknown_keys(
    field: &'static str,
    t: &Map<String, Value>,
    known: &[&str],
) -> Result<(), ConfigError> {
    match t.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(ConfigError::new(
            field,
            format!("unknown key `{k}` (expected one of: {})", known.join(", ")),
        )),
    }
}

fn integer(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|x| x.is_finite() && x.fract() == 0.0 && *x >= 0.0 && *x < 1e15)
            .map(|x| x as u64)
    })
}

fn opt_duration(
    t: &Map<String, Value>,
    key: &'static str,
) -> Result<Option<Duration>, ConfigError> {
    match get(t, key) {
        None => Ok(None),
        Some(v) => v.as_str().and_then(file_duration).map(Some).ok_or_else(|| {
            ConfigError::new(
                key,
                format!("must be a duration such as \"250ms\" or \"1.5s\", got {v}"),
            )
        }),
    }
}

/// A policy file's duration: the one grammar with a unit required, at
/// most a day.
fn file_duration(s: &str) -> Option<Duration> {
    parse_duration(s, Bare::None)
        .ok()
        .filter(|d| *d <= Duration::from_secs(86_400))
}

fn retry_on(v: &Value) -> Result<RetryOn, ConfigError> {
    let bad = || {
        ConfigError::new(
            "retry_on",
            format!("`{v}` is neither a gRPC status code name nor an HTTP status (100-599)"),
        )
    };
    match v {
        Value::String(s) => GRPC_CODES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s.trim()))
            .map(|i| RetryOn::Grpc(i as u32))
            .ok_or_else(bad),
        Value::Number(_) => integer(v)
            .filter(|n| (100..=599).contains(n))
            .map(|n| RetryOn::Http(n as u16))
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

fn budget(t: &Map<String, Value>) -> Result<Option<BudgetSpec>, ConfigError> {
    let kind = match get(t, "kind") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(ConfigError::new(
                "budget.kind",
                format!("must be a string, got {other}"),
            ))
        }
        None => return Err(ConfigError::new("budget.kind", "is required")),
    };
    let spec = match kind {
        "none" => {
            unknown_keys("budget", t, &["kind"])?;
            return Ok(None);
        }
        "ratio" => {
            unknown_keys("budget", t, &["kind", "ratio", "window", "floor"])?;
            BudgetSpec::Ratio {
                ratio: number(t, "budget.ratio", "ratio")?,
                window: match get(t, "window") {
                    None => None,
                    Some(v) => Some(v.as_str().and_then(file_duration).ok_or_else(|| {
                        ConfigError::new(
                            "budget.window",
                            format!("must be a duration such as \"10s\", got {v}"),
                        )
                    })?),
                },
                floor: count(t, "budget.floor", "floor")?,
            }
        }
        "token_bucket" => {
            unknown_keys("budget", t, &["kind", "max_tokens", "token_ratio"])?;
            BudgetSpec::TokenBucket {
                max_tokens: number(t, "budget.max_tokens", "max_tokens")?,
                token_ratio: number(t, "budget.token_ratio", "token_ratio")?,
            }
        }
        "refill" => {
            unknown_keys("budget", t, &["kind", "capacity", "ratio"])?;
            BudgetSpec::Refill {
                capacity: number(t, "budget.capacity", "capacity")?,
                ratio: number(t, "budget.ratio", "ratio")?,
            }
        }
        "quota" => {
            unknown_keys(
                "budget",
                t,
                &["kind", "capacity", "retry_cost", "timeout_cost"],
            )?;
            BudgetSpec::Quota {
                capacity: count(t, "budget.capacity", "capacity")?,
                retry_cost: count(t, "budget.retry_cost", "retry_cost")?,
                timeout_cost: count(t, "budget.timeout_cost", "timeout_cost")?,
            }
        }
        other => {
            return Err(ConfigError::new(
                "budget.kind",
                format!(
                    "unknown kind `{other}` (expected ratio, token_bucket, refill, quota or none)"
                ),
            ))
        }
    };
    Ok(Some(spec))
}

/// A budget table's number at `key`, if present (`field` names it in the
/// error).
fn number(
    t: &Map<String, Value>,
    field: &'static str,
    key: &str,
) -> Result<Option<f64>, ConfigError> {
    match get(t, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| ConfigError::new(field, format!("must be a number, got {v}"))),
    }
}

/// A budget table's whole number at `key`, if present.
fn count(
    t: &Map<String, Value>,
    field: &'static str,
    key: &str,
) -> Result<Option<u32>, ConfigError> {
    match get(t, key) {
        None => Ok(None),
        Some(v) => integer(v)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| ConfigError::new(field, format!("must be a whole number, got {v}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_default_policy() {
        let f = PolicyFile::from_toml("").unwrap();
        assert_eq!(f.attempts, 3);
        assert_eq!(f.base, Duration::from_millis(100));
        assert_eq!(f.cap, Duration::from_secs(10));
        assert_eq!(f.jitter, Jitter::Full);
        assert!(!f.breaker && f.budget.is_none() && f.deadline.is_none());
    }

    #[test]
    fn json_and_toml_read_the_same_keys() {
        let t = PolicyFile::from_toml(
            "attempts = 4\nbase = \"50ms\"\ncap = \"1s\"\njitter = \"equal\"\nretry_on = [\"UNAVAILABLE\", 503]\n[budget]\nkind = \"token_bucket\"\nmax_tokens = 20\n",
        )
        .unwrap();
        let j = PolicyFile::from_json(
            r#"{"attempts":4,"base":"50ms","cap":"1s","jitter":"equal","retry_on":["UNAVAILABLE",503],"budget":{"kind":"token_bucket","max_tokens":20}}"#,
        )
        .unwrap();
        assert_eq!(t, j);
        assert_eq!(t.retry_on, vec![RetryOn::Grpc(14), RetryOn::Http(503)]);
    }

    #[test]
    fn every_error_names_its_field() {
        let cases = [
            ("attempts = 101", "attempts"),
            ("attempts = \"3\"", "attempts"),
            ("base = \"100\"", "base"),
            ("base = \"2s\"\ncap = \"1s\"", "cap"),
            ("multiplier = 0.5", "multiplier"),
            ("jitter = \"wobbly\"", "jitter"),
            ("attempt_timeout = \"0s\"", "attempt_timeout"),
            ("deadline = \"0s\"", "deadline"),
            ("retry_on = [42]", "retry_on"),
            ("breaker = \"yes\"", "breaker"),
            ("atempts = 3", "policy"),
            ("[budget]\nratio = 0.1", "budget.kind"),
            (
                "[budget]\nkind = \"ratio\"\nwindow = \"1ms\"",
                "budget.window",
            ),
            (
                "[budget]\nkind = \"token_bucket\"\nmax_tokens = 5000",
                "budget.max_tokens",
            ),
            (
                "[budget]\nkind = \"quota\"\ncapacity = 0",
                "budget.capacity",
            ),
            ("[budget]\nkind = \"ratio\"\nmax_tokens = 1", "budget"),
            ("not toml at all [", "policy"),
        ];
        for (text, field) in cases {
            let err = PolicyFile::from_toml(text).unwrap_err();
            assert_eq!(err.field(), field, "{text}: {err}");
        }
    }

    #[test]
    fn durations_take_a_unit_and_stay_within_a_day() {
        let d = file_duration;
        assert_eq!(d("0.1s"), Some(Duration::from_millis(100)));
        assert_eq!(d("2m"), Some(Duration::from_secs(120)));
        assert_eq!(d("5us"), Some(Duration::from_micros(5)));
        assert_eq!(d("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(d("1h0m0.5s"), Some(Duration::from_millis(3_600_500)));
        assert_eq!(d("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(d("0"), Some(Duration::ZERO));
        for bad in [
            "", "s", "1", "1x", "-1s", "2d", "1e3s", "25h", "1m30", "ms2", "24h1s",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }
}
