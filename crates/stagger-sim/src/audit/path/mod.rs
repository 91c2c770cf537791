//! The call path: every layer that may retry one call, from the edge to the
//! dependency, read from the files that configure it, and what they do
//! together when the dependency fails.
//!
//! In practice the layers are a service mesh and the clients under it: an
//! Istio `VirtualService` (which retries even when it says nothing), an
//! Envoy route's `retry_policy`, a Linkerd `ServiceProfile` or route
//! annotations, an AWS SDK profile, a gRPC service config and a stagger
//! policy file. Each reader turns its file into a [`Layer`] with the
//! system's documented defaults (see `docs/audit.md` for each default and
//! its source); [`audit_path`] composes them.
//!
//! ```
//! use stagger_sim::audit::path::{audit_path, Options, PathInput};
//!
//! let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\n\
//!           metadata: {name: cart}\nspec:\n  hosts: [cart]\n  http:\n  - route:\n    - destination: {host: cart}\n";
//! let svc = r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],
//!   "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s",
//!   "backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
//! let report = audit_path(
//!     &[PathInput::new("cart-vs.yaml", vs, None), PathInput::new("svc.json", svc, None)],
//!     &Options::default(),
//! )
//! .unwrap();
//! // Istio's implicit 3 tries per hop times gRPC's 3 attempts.
//! assert_eq!(report.dead.bottom_attempts, 9.0);
//! let ids: Vec<_> = report.findings.iter().map(|f| f.id).collect();
//! assert!(ids.contains(&"mesh_default_retries"));
//! assert!(ids.contains(&"retries_at_several_layers"));
//! ```
//!
//! # The model
//!
//! The dependency fails every attempt ([`Dead`]). Each layer sees what the
//! layer below returns when it gives up — a proxy answers a refused
//! connection with 503 (UNAVAILABLE for gRPC, by gRPC's HTTP mapping), a
//! service whose client gave up answers 503 / UNAVAILABLE — and retries it
//! only if its own rules cover it. A layer's tries are bounded by its
//! count, its per-try timeout against its own timeout and the caller's
//! deadline, in virtual time with each pause at its jitter's mean. The
//! attempts at the bottom are the product along the path. For a failure
//! rate `p` (each bottom attempt failing independently) the expected
//! attempts compose in closed form. Budgets are reported separately: what
//! each layer's budget allows in steady state under a dead dependency, at
//! [`Options::concurrency`] requests in flight.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

mod aws;
mod compose;
mod envoy;
mod findings;
mod istio;
mod linkerd;
mod own;
mod picture;
mod rules;
mod text;
mod tree;

pub use rules::Failure;
use rules::{Pause, Rule};

/// One file of the path, with the selector that names the host, route,
/// method or profile it contributes (`None` when the file holds one).
#[derive(Debug, Clone)]
pub struct PathInput<'a> {
    name: &'a str,
    text: &'a str,
    selector: Option<&'a str>,
}

impl<'a> PathInput<'a> {
    /// A file named `name` holding `text`; `selector` picks one of several
    /// hosts, routes, methods or profiles in it.
    pub fn new(name: &'a str, text: &'a str, selector: Option<&'a str>) -> Self {
        PathInput {
            name,
            text,
            selector,
        }
    }
}

/// How the call travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP requests: proxies answer 503 and 504.
    Http,
    /// gRPC over HTTP/2: failures are status codes.
    Grpc,
}

/// What the dead dependency does with every attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dead {
    /// Refuses the connection at once (the host is up, nothing listens).
    Refused,
    /// Answers 503 (UNAVAILABLE for gRPC) at once: up but shedding.
    Unavailable,
    /// Never answers: attempts end only at a timeout.
    Blackhole,
}

/// The Istio release whose defaults the audit applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IstioVersion {
    /// The minor version (1.24 is 24).
    pub minor: u32,
}

impl Default for IstioVersion {
    fn default() -> Self {
        IstioVersion { minor: 24 }
    }
}

/// Assumptions the audit cannot read from the files.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Options {
    /// The call's protocol; `None` takes gRPC when a gRPC service config is
    /// on the path, HTTP otherwise.
    pub protocol: Option<Protocol>,
    /// What the dependency does.
    pub dead: Dead,
    /// The failure rate of the second scenario (each bottom attempt fails
    /// independently with this probability).
    pub failure_rate: f64,
    /// Istio's defaults: since 1.24 its implicit policy no longer retries
    /// 503.
    pub istio: IstioVersion,
    /// The AWS SDK's mode when a profile sets no `retry_mode`: `legacy`
    /// (boto3's default, 5 attempts) unless set to standard (3 attempts).
    pub aws_default_standard: bool,
    /// Requests in flight at each proxy, for budgets that cap concurrent
    /// retries (Envoy's `retry_budget` and `max_retries`).
    pub concurrency: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            protocol: None,
            dead: Dead::Refused,
            failure_rate: 0.5,
            istio: IstioVersion::default(),
            aws_default_standard: false,
            concurrency: 100,
        }
    }
}

/// The system whose file configures a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum System {
    /// An Istio `VirtualService` route (the sidecar's Envoy).
    Istio,
    /// An Envoy route's `retry_policy`.
    Envoy,
    /// A Linkerd `ServiceProfile` route or `retry.linkerd.io` annotations.
    Linkerd,
    /// An AWS SDK profile (`retry_mode`, `max_attempts`).
    AwsSdk,
    /// A gRPC service config's method.
    Grpc,
    /// A stagger policy file.
    Stagger,
}

impl System {
    /// A proxy that retries without knowing which methods are idempotent.
    pub fn is_mesh(self) -> bool {
        matches!(self, System::Istio | System::Envoy | System::Linkerd)
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            System::Istio => "istio",
            System::Envoy => "envoy",
            System::Linkerd => "linkerd",
            System::AwsSdk => "aws-sdk",
            System::Grpc => "grpc",
            System::Stagger => "stagger",
        })
    }
}

/// A retry budget on a layer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Budget {
    /// Retries at most `ratio` of requests over a window, with a floor
    /// (Linkerd, stagger's ratio budget).
    Ratio {
        /// Retries per request allowed.
        ratio: f64,
        /// Retries per second always allowed.
        floor_per_second: f64,
    },
    /// Concurrent retries at most `percent` of active requests, never below
    /// `min_concurrency` (Envoy's `retry_budget`).
    Concurrent {
        /// Percent of active plus pending requests.
        percent: f64,
        /// The floor on concurrent retries.
        min_concurrency: u32,
    },
    /// At most `max` retries in flight at once (Envoy's `max_retries`
    /// circuit breaker).
    MaxConcurrent {
        /// The limit.
        max: u64,
    },
    /// A bucket that stops retrying once failures drain it (gRPC
    /// `retryThrottling`, the AWS SDK's retry quota, a token bucket).
    Drains {
        /// What it is, for the report.
        what: &'static str,
    },
}

/// One layer of the path as its file configures it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layer {
    /// The file (as named on the command line).
    pub file: String,
    /// What the file configures.
    pub system: System,
    /// The host, route, method or profile of the file this layer is.
    pub selector: String,
    /// Most tries of one request, the first included; `None` when only a
    /// budget limits them (a Linkerd `ServiceProfile`).
    pub max_tries: Option<u32>,
    /// What it retries, as the file says or its system's default.
    pub retry_on: String,
    /// The per-try timeout (milliseconds in JSON).
    #[serde(with = "opt_ms")]
    pub per_try_timeout: Option<Duration>,
    /// The layer's own timeout for the whole call, retries included
    /// (milliseconds in JSON).
    #[serde(with = "opt_ms")]
    pub timeout: Option<Duration>,
    /// The budget that caps its retries.
    pub budget: Option<Budget>,
    /// Whether the retries come from a default nobody wrote (Istio's
    /// policy for a route without `retries`).
    pub implicit: bool,
    /// Why its retries may repeat a request the application already
    /// handled (`None` when they cannot, or when it knows the method).
    pub non_idempotent: Option<String>,
    /// Defaults and versions this layer's numbers assume.
    pub assumes: Vec<String>,
    #[serde(skip)]
    pub(crate) rule: Rule,
    #[serde(skip)]
    pub(crate) pause: Pause,
    /// The Envoy cluster a route sends to (for its circuit breakers).
    #[serde(skip)]
    pub(crate) cluster: String,
}

impl Layer {
    /// The file's name without its directories, for reports.
    pub(crate) fn file_name(&self) -> &str {
        std::path::Path::new(&self.file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(&self.file)
    }

    /// A layer that retries nothing, for a reader to fill in.
    pub(crate) fn new(file: &str, system: System, selector: String) -> Self {
        Layer {
            file: file.to_string(),
            system,
            selector,
            max_tries: Some(1),
            retry_on: "nothing".to_string(),
            per_try_timeout: None,
            timeout: None,
            budget: None,
            implicit: false,
            non_idempotent: None,
            assumes: Vec::new(),
            rule: Rule::Nothing,
            pause: Pause::None,
            cluster: String::new(),
        }
    }
}

/// One layer's numbers in a scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerNumbers {
    /// What the layer sees from below when an attempt fails.
    pub sees: Failure,
    /// Whether its rules retry that.
    pub retries: bool,
    /// Its tries per request that reaches it.
    pub tries: f64,
    /// Attempts it sends down per call at the edge.
    pub sends: f64,
}

/// A scenario's numbers along the path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    /// Per layer, edge first.
    pub layers: Vec<LayerNumbers>,
    /// Attempts that reach the dependency for one call at the edge.
    pub bottom_attempts: f64,
    /// How long the edge waits for its answer (`None`: forever).
    #[serde(with = "opt_ms")]
    pub edge_waits: Option<Duration>,
}

/// One finding about the path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathFinding {
    /// The stable id.
    pub id: &'static str,
    /// The layers it concerns (indices into [`PathReport::layers`]).
    pub layers: Vec<usize>,
    /// What is wrong and what to change.
    pub message: String,
}

/// The audit of a call path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathReport {
    /// The assumptions it ran with.
    pub options: Options,
    /// The protocol it assumed.
    pub protocol: Protocol,
    /// The layers, edge first.
    pub layers: Vec<Layer>,
    /// Every attempt fails ([`Options::dead`]).
    pub dead: Scenario,
    /// Each bottom attempt fails with [`Options::failure_rate`].
    pub at_rate: Scenario,
    /// Attempts at the bottom per call under a dead dependency once each
    /// layer's budget has drained or capped its retries (steady state).
    pub budgeted_bottom_attempts: f64,
    /// The findings.
    pub findings: Vec<PathFinding>,
}

impl PathReport {
    /// Whether the path passed every check.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// The path as text, at most 120 columns.
    pub fn text(&self) -> String {
        text::render(self)
    }

    /// The path as an SVG picture: one box per layer with its tries, the
    /// attempts at the bottom.
    pub fn svg(&self) -> String {
        picture::render(self)
    }
}

/// A file that cannot be read as a layer, naming the file and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    /// The file.
    pub file: String,
    /// The field at fault (empty for the file as a whole).
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

impl PathError {
    pub(crate) fn new(file: &str, field: &str, problem: impl Into<String>) -> Self {
        PathError {
            file: file.to_string(),
            field: field.to_string(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.problem)
        } else {
            write!(f, "{}: `{}`: {}", self.file, self.field, self.problem)
        }
    }
}

impl std::error::Error for PathError {}

/// What a file is, by its content.
enum Kind {
    Istio,
    IstioMesh,
    EnvoyRoutes,
    EnvoyClusters,
    Linkerd,
    Aws,
    Own,
}

fn kind(input: &PathInput<'_>) -> Result<(Kind, Vec<serde_json::Value>), PathError> {
    if aws::looks_like(input.text) {
        return Ok((Kind::Aws, Vec::new()));
    }
    if input.name.ends_with(".toml") {
        return Ok((Kind::Own, Vec::new()));
    }
    let docs = tree::documents(input.name, input.text)?;
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|d| tree::string(d, "kind"))
        .collect();
    let has = |k: &str| {
        docs.iter().any(|d| {
            let mut found = Vec::new();
            tree::objects_with(d, k, &mut found);
            !found.is_empty()
        })
    };
    let k = if kinds.contains(&"VirtualService") {
        Kind::Istio
    } else if kinds
        .iter()
        .any(|k| matches!(*k, "ServiceProfile" | "HTTPRoute" | "GRPCRoute" | "Service"))
    {
        Kind::Linkerd
    } else if has("defaultHttpRetryPolicy")
        || docs.iter().any(|d| {
            tree::obj(d, "data")
                .and_then(|m| m.get("mesh"))
                .and_then(serde_json::Value::as_str)
                .is_some_and(|m| m.contains("defaultHttpRetryPolicy"))
        })
    {
        Kind::IstioMesh
    } else if has("virtualHosts") {
        Kind::EnvoyRoutes
    } else if has("circuitBreakers") {
        Kind::EnvoyClusters
    } else {
        Kind::Own
    };
    Ok((k, docs))
}

/// Audits a call path: `files` from the edge to the dependency.
///
/// An Envoy clusters file adds its circuit breakers to the Envoy layer
/// before it; an Istio mesh config (`defaultHttpRetryPolicy`) sets the
/// default of every Istio layer; every other file is one layer.
pub fn audit_path(files: &[PathInput<'_>], options: &Options) -> Result<PathReport, PathError> {
    if !(0.0..=1.0).contains(&options.failure_rate) {
        return Err(PathError::new(
            "--failure-rate",
            "",
            format!("must be between 0 and 1, not {}", options.failure_rate),
        ));
    }
    // Each file is read once; a mesh config anywhere on the path sets the
    // default of every Istio layer.
    let read = files
        .iter()
        .map(|f| kind(f).map(|(k, docs)| (f, k, docs)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut mesh_default = None;
    for (f, k, docs) in &read {
        if matches!(k, Kind::IstioMesh) {
            mesh_default = Some(istio::mesh_default(f.name, docs)?);
        }
    }
    let mut layers: Vec<Layer> = Vec::new();
    for (f, k, docs) in read {
        let docs = &docs;
        match k {
            Kind::IstioMesh => {}
            Kind::Istio => layers.push(istio::layer(f, docs, mesh_default.as_ref(), options)?),
            Kind::EnvoyRoutes => layers.push(envoy::layer(f, docs)?),
            Kind::EnvoyClusters => {
                let last = layers
                    .iter_mut()
                    .rev()
                    .find(|l| l.system == System::Envoy)
                    .ok_or_else(|| {
                        PathError::new(
                            f.name,
                            "",
                            "an Envoy clusters file adds its circuit breakers to the Envoy route layer before it on the path; put the routes file first",
                        )
                    })?;
                envoy::add_clusters(last, f, docs)?;
            }
            Kind::Linkerd => layers.push(linkerd::layer(f, docs)?),
            Kind::Aws => layers.push(aws::layer(f, options)?),
            Kind::Own => layers.push(own::layer(f)?),
        }
    }
    if layers.is_empty() {
        return Err(PathError::new("--path", "", "no layer on the path"));
    }
    let protocol = options
        .protocol
        .unwrap_or(if layers.iter().any(|l| l.system == System::Grpc) {
            Protocol::Grpc
        } else {
            Protocol::Http
        });
    for l in &mut layers {
        if l.max_tries.is_some_and(|n| n > compose::WALK_CAP) {
            l.assumes.push(format!(
                "the dead-dependency walk stops this layer at {} tries",
                compose::WALK_CAP
            ));
        }
    }
    let dead = compose::Walk::new(&layers, protocol, options).scenario();
    let at_rate = compose::at_rate(&layers, protocol, options);
    let budgeted_bottom_attempts = dead
        .layers
        .iter()
        .zip(&layers)
        .map(|(n, l)| compose::budgeted(l, n.tries, options.concurrency))
        .product();
    let mut report = PathReport {
        options: *options,
        protocol,
        layers,
        dead,
        at_rate,
        budgeted_bottom_attempts: compose::round3(budgeted_bottom_attempts),
        findings: Vec::new(),
    };
    report.findings = findings::all(&report);
    Ok(report)
}

/// Durations as milliseconds in JSON (`null` for none).
mod opt_ms {
    use serde::Serializer;
    use std::time::Duration;

    #[allow(clippy::ref_option)]
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64() * 1000.0),
            None => s.serialize_none(),
        }
    }
}
