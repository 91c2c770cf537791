//! The Grafana dashboard (`deploy/grafana/stagger.json`) and the Prometheus
//! rules (`deploy/prometheus/`) query only names that exist: the metrics
//! documented in `docs/metrics.md` and the recording rules' own names, with
//! documented labels.

use std::collections::BTreeSet;

use serde_json::Value;

fn repo_file(path: &str) -> String {
    let full = format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// Documented metric names (rows of docs/metrics.md that start with
/// "| `stagger_"), as they can appear in a query: a histogram also as its
/// `_sum`, `_count` and `_bucket` series.
fn documented_names() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in repo_file("docs/metrics.md")
        .lines()
        .filter(|l| l.starts_with("| `stagger_"))
    {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        if cells[2] == "histogram" {
            for suffix in ["_sum", "_count", "_bucket"] {
                out.insert(format!("{name}{suffix}"));
            }
        }
        out.insert(name.to_string());
    }
    assert!(out.len() >= 10, "docs/metrics.md lists too few names");
    out
}

/// Label keys a query may use: the documented ones, Prometheus's target
/// labels, and the label helpers of histograms and summaries.
fn documented_labels() -> BTreeSet<String> {
    let doc = repo_file("docs/metrics.md");
    let mut out: BTreeSet<String> = ["dependency", "job", "instance", "le", "quantile"]
        .into_iter()
        .map(String::from)
        .collect();
    for line in doc.lines().filter(|l| l.starts_with("| `stagger_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        out.extend(cells[4].split('`').skip(1).step_by(2).map(String::from));
    }
    out
}

/// The names the recording rules define (`- record: NAME`).
fn recorded_names() -> BTreeSet<String> {
    let names: BTreeSet<String> = repo_file("deploy/prometheus/stagger.rules.yml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- record:"))
        .map(|n| n.trim().to_string())
        .collect();
    assert!(names.contains("stagger:retry_ratio:rate1m"), "{names:?}");
    names
}

/// PromQL functions and aggregations a dashboard query may call.
const FUNCTIONS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "irate",
    "increase",
    "histogram_quantile",
    "clamp_min",
    "max_over_time",
    "min_over_time",
    "avg_over_time",
    "topk",
];
const KEYWORDS: &[&str] = &[
    "by", "without", "bool", "and", "or", "unless", "on", "ignoring", "offset",
];

/// What one PromQL expression refers to.
#[derive(Debug, Default)]
struct Refs {
    metrics: BTreeSet<String>,
    labels: BTreeSet<String>,
    functions: BTreeSet<String>,
}

fn ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// A small PromQL scanner: enough to tell metric names from functions,
/// keywords and label names in the queries we ship.
fn refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut r = Refs::default();
    let mut i = 0;
    // After `by` / `without` / `on` / `ignoring`, the parenthesised list is labels.
    let mut label_list = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '[' {
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '$' {
            // A dashboard variable ($job, $__rate_interval).
            i += 1;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
        } else if c == '{' {
            // Label matchers: `key op "value", ...`.
            i += 1;
            while i < chars.len() && chars[i] != '}' {
                if ident_start(chars[i]) {
                    let s = i;
                    while i < chars.len() && ident_char(chars[i]) {
                        i += 1;
                    }
                    r.labels.insert(chars[s..i].iter().collect());
                } else if chars[i] == '"' {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                    i += 1;
                } else {
                    i += 1;
                }
            }
            i += 1;
        } else if c == '(' && label_list {
            i += 1;
            while i < chars.len() && chars[i] != ')' {
                if ident_start(chars[i]) {
                    let s = i;
                    while i < chars.len() && ident_char(chars[i]) {
                        i += 1;
                    }
                    r.labels.insert(chars[s..i].iter().collect());
                } else {
                    i += 1;
                }
            }
            i += 1;
            label_list = false;
        } else if ident_start(c) {
            let s = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[s..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            // `f(…)`, or an aggregation written `sum by (…) (…)`.
            let rest: String = chars[j..].iter().take(8).collect();
            let called = (j < chars.len() && chars[j] == '(')
                || rest.starts_with("by ")
                || rest.starts_with("by(")
                || rest.starts_with("without");
            if KEYWORDS.contains(&word.as_str()) {
                label_list = matches!(word.as_str(), "by" | "without" | "on" | "ignoring");
            } else if called {
                r.functions.insert(word);
            } else {
                r.metrics.insert(word);
            }
        } else {
            i += 1;
        }
    }
    r
}

/// Checks one query; returns its problems.
fn check(expr: &str, allowed: &BTreeSet<String>, labels: &BTreeSet<String>) -> Vec<String> {
    // A variable's `label_values(selector, label)`.
    if let Some((selector, label)) = expr
        .strip_prefix("label_values(")
        .and_then(|s| s.strip_suffix(')'))
        .and_then(|s| s.rsplit_once(','))
    {
        let mut problems = check(selector, allowed, labels);
        if !labels.contains(label.trim()) {
            problems.push(format!("undocumented label `{}`", label.trim()));
        }
        return problems;
    }
    let r = refs(expr);
    let mut problems = Vec::new();
    if r.metrics.is_empty() {
        problems.push("queries no metric".to_string());
    }
    for m in &r.metrics {
        if !allowed.contains(m) {
            problems.push(format!("unknown metric `{m}`"));
        }
    }
    for l in &r.labels {
        if !labels.contains(l) {
            problems.push(format!("undocumented label `{l}`"));
        }
    }
    for f in &r.functions {
        if !FUNCTIONS.contains(&f.as_str()) {
            problems.push(format!("unknown function `{f}`"));
        }
    }
    problems
}

fn dashboard() -> Value {
    serde_json::from_str(&repo_file("deploy/grafana/stagger.json")).expect("dashboard JSON")
}

/// Every query of the dashboard: (where, expr).
fn queries(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        let title = p["title"].as_str().unwrap_or("?").to_string();
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        assert!(!targets.is_empty(), "panel `{title}` has no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(!expr.trim().is_empty(), "panel `{title}`: empty query");
            out.push((format!("panel `{title}`"), expr.to_string()));
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        if v["type"] == "query" {
            let q = v["query"]["query"]
                .as_str()
                .or(v["query"].as_str())
                .expect("variable query");
            out.push((format!("variable `{}`", v["name"]), q.to_string()));
        }
    }
    out
}

#[test]
fn every_dashboard_query_uses_documented_names_or_recording_rules() {
    let mut allowed = documented_names();
    let recorded = recorded_names();
    allowed.extend(recorded.iter().cloned());
    let labels = documented_labels();
    let d = dashboard();
    let qs = queries(&d);
    assert!(qs.len() >= 10, "only {} queries", qs.len());
    let mut problems = Vec::new();
    for (at, expr) in &qs {
        for p in check(expr, &allowed, &labels) {
            problems.push(format!("{at}: {p} in `{expr}`"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The recording rules are what the dashboard is built on.
    let used: BTreeSet<String> = qs.iter().flat_map(|(_, e)| refs(e).metrics).collect();
    for name in [
        "stagger:retry_ratio:rate1m",
        "stagger:budget_refusals:rate1m",
        "stagger:breakers_open:count",
        // Every load mechanism has a panel: hedges sent and won,
        // transparent retries, breaker-refused calls, requests shed.
        "stagger:hedge_ratio:rate1m",
        "stagger:hedge_win_ratio:rate1m",
        "stagger_transparent_retries_total",
        "stagger:breaker_refused_calls:rate1m",
        "stagger:shed:rate1m",
    ] {
        assert!(used.contains(name), "no panel shows {name}");
    }
}

#[test]
fn the_retry_ratio_panel_draws_the_ten_and_twenty_percent_lines() {
    let d = dashboard();
    let panel = d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["targets"][0]["expr"]
                .as_str()
                .is_some_and(|e| e.starts_with("stagger:retry_ratio:rate1m"))
        })
        .expect("a retry ratio panel");
    let defaults = &panel["fieldConfig"]["defaults"];
    let steps: Vec<f64> = defaults["thresholds"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["value"].as_f64())
        .collect();
    assert_eq!(steps, [0.1, 0.2]);
    assert_ne!(
        defaults["custom"]["thresholdsStyle"]["mode"], "off",
        "the thresholds are drawn"
    );
    assert_eq!(defaults["unit"], "percentunit");
}

#[test]
fn the_rules_use_only_documented_metric_names() {
    let allowed = documented_names();
    let recorded = recorded_names();
    for file in [
        "deploy/prometheus/stagger.rules.yml",
        "deploy/prometheus/stagger.alerts.yml",
    ] {
        let text = repo_file(file);
        let words: BTreeSet<&str> = text
            .split(|c: char| !ident_char(c))
            .filter(|w| w.starts_with("stagger_") || w.starts_with("stagger:"))
            .collect();
        assert!(!words.is_empty(), "{file} names no metric");
        for w in words {
            assert!(
                allowed.contains(w) || recorded.contains(w),
                "{file}: `{w}` is neither documented nor recorded"
            );
        }
    }
    // The alert docs/fleet.md describes, at the documented threshold.
    let alerts = repo_file("deploy/prometheus/stagger.alerts.yml");
    assert!(alerts.contains("- alert: RetryAmplificationHigh"));
    assert!(alerts.contains("expr: stagger:retry_ratio:rate1m > 0.2\n        for: 1m"));
}

#[test]
fn the_scanner_catches_a_misspelled_name_and_label() {
    let allowed: BTreeSet<String> = ["stagger_retries_total".to_string()].into();
    let labels: BTreeSet<String> = ["job".to_string(), "cause".to_string()].into();
    assert!(check(
        "sum by (job, cause) (rate(stagger_retries_total{job=~\"$job\"}[$__rate_interval]))",
        &allowed,
        &labels
    )
    .is_empty());
    let p = check(
        "sum by (pod) (rate(stagger_retry_total{zone=\"a\"}[5m]))",
        &allowed,
        &labels,
    );
    assert_eq!(
        p,
        [
            "unknown metric `stagger_retry_total`",
            "undocumented label `pod`",
            "undocumented label `zone`",
        ]
    );
    assert_eq!(check("up", &allowed, &labels), ["unknown metric `up`"]);
}
