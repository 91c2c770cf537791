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
//! use stagger_audit::path::{audit_path, Options, PathInput};
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
//! only if its own rules cover it. A gRPC service config's method and a
//! stagger policy file are the library itself: their rules are its engine,
//! asked with the facts the library reads from that failure (see
//! `docs/audit.md`, "How the layers compose"). A layer's tries are bounded
//! by its count, its per-try timeout against its own timeout and the
//! caller's deadline, in virtual time with each pause at its jitter's mean. The
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
mod destination;
mod detect;
mod envoy;
mod envoyfilter;
mod failure;
mod file;
mod findings;
mod gateway;
mod gather;
mod haproxy;
mod istio;
mod library;
mod linkerd;
mod nginx;
mod own;
mod repo;
mod resilience4j;
mod rules;
mod sizing;
mod traefik;
mod tree;

pub use compose::count;
pub use detect::{what_is, Reading};
pub use file::{audit_file, FileReport};
pub use repo::{
    audit_repo, audit_repo_each, split_dump, ObjectAudit, RepoPath, RepoReport, Source, MAX_HOPS,
    MAX_PATHS, SPLIT_ABOVE,
};

pub use failure::Failure;
pub use gather::{audit_gathered, Audited, Gathered, Skipped, MAX_BYTES};
use rules::{Pause, Rule};
pub use sizing::Sizing;

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

/// The Gateway API implementation that runs an `HTTPRoute`: GEP-1731
/// leaves the conditions beyond the listed codes, the count when
/// `attempts` is unset, and any retry without a `retry` stanza to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GatewayImpl {
    /// Istio: its default conditions plus the codes, and its implicit
    /// policy for a rule without `retry`.
    Istio,
    /// Envoy Gateway: connection failures plus the codes; no retry without
    /// `retry`.
    EnvoyGateway,
    /// Any other: the codes and connection errors only.
    Generic,
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
    /// The implementation that runs Gateway API routes.
    pub gateway: GatewayImpl,
    /// Endpoints behind a proxy whose tries are bounded only by its servers
    /// (ingress-nginx with `proxy-next-upstream-tries: "0"`).
    pub endpoints: u32,
    /// Requests a second at the edge, for sizing concurrency caps by
    /// Little's law (with [`Options::latency`]; see [`Sizing`]).
    pub rate: Option<f64>,
    /// How long one attempt takes while the dependency is down, for sizing
    /// concurrency caps (milliseconds in JSON).
    #[serde(with = "opt_ms")]
    pub latency: Option<Duration>,
    /// The attempts at the bottom per call at the edge a sized cap must
    /// keep the path under.
    pub bound: f64,
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
            gateway: GatewayImpl::Istio,
            endpoints: 3,
            rate: None,
            latency: None,
            bound: 2.0,
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
    /// A Gateway API `HTTPRoute` rule's `retry` (GEP-1731), as the
    /// implementation named by [`Options::gateway`] runs it.
    GatewayApi,
    /// An Envoy Gateway `BackendTrafficPolicy`'s `retry`.
    EnvoyGateway,
    /// nginx's `proxy_next_upstream`, in an `nginx.conf` or ingress-nginx
    /// annotations.
    Nginx,
    /// An HAProxy backend's `retries` and `retry-on`.
    Haproxy,
    /// A Traefik `retry` middleware.
    Traefik,
    /// A resilience4j retry instance in a Spring `application.yml`.
    Resilience4j,
}

impl System {
    /// A proxy that retries without knowing which methods are idempotent.
    pub fn is_mesh(self) -> bool {
        !matches!(
            self,
            System::AwsSdk | System::Grpc | System::Stagger | System::Resilience4j
        )
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
            System::GatewayApi => "gateway-api",
            System::EnvoyGateway => "envoy-gateway",
            System::Nginx => "nginx",
            System::Haproxy => "haproxy",
            System::Traefik => "traefik",
            System::Resilience4j => "resilience4j",
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
    /// What stops its calls once the dependency stays down (an
    /// application's circuit breaker), in words.
    pub cut_by: Option<String>,
    /// Spellings the file's own system may not read (keys in another case,
    /// snake_case), for the `nonstandard_spelling` finding.
    #[serde(skip)]
    pub(crate) spelling: Vec<String>,
    /// Values the system rejects or ignores, each naming the field and
    /// what the system does instead, for the `invalid` finding.
    #[serde(skip)]
    pub(crate) invalid: Vec<String>,
    /// Whether a Gateway API rule states its own `retry` (which Envoy
    /// Gateway takes before a policy's).
    #[serde(skip)]
    pub(crate) own_retry: bool,
    /// Whether the layer lets no request through at all (a circuit breaker
    /// whose connection or request threshold is 0): it answers every call
    /// itself (503, UNAVAILABLE for gRPC) and sends nothing down.
    #[serde(skip)]
    pub(crate) overflows_all: bool,
    /// Whether the layer relays a TCP stream (HAProxy `mode tcp`), not
    /// HTTP requests.
    #[serde(skip)]
    pub(crate) tcp: bool,
    /// The Kubernetes Service a Linkerd layer serves (a profile wins over
    /// route annotations for the same Service).
    #[serde(skip)]
    pub(crate) service: Option<String>,
    /// Whether the layer came from a ServiceProfile.
    #[serde(skip)]
    pub(crate) profile: bool,
    /// A delay the layer injects once per call before it sends (an Istio
    /// `fault.delay`), at its mean over the requests it delays.
    #[serde(skip)]
    pub(crate) delay: Duration,
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
    pub fn file_name(&self) -> &str {
        std::path::Path::new(&self.file)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(&self.file)
    }

    /// Whether the layer relays a TCP stream (HAProxy `mode tcp`), not
    /// HTTP requests: a path of such layers is a TCP path.
    pub fn relays_tcp(&self) -> bool {
        self.tcp
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
            cut_by: None,
            spelling: Vec::new(),
            invalid: Vec::new(),
            own_retry: false,
            overflows_all: false,
            tcp: false,
            service: None,
            profile: false,
            delay: Duration::ZERO,
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
    /// Each concurrency cap on the path sized at [`Options::rate`] and
    /// [`Options::latency`] (empty unless both are given).
    pub sizing: Vec<Sizing>,
    /// The findings.
    pub findings: Vec<PathFinding>,
}

impl PathReport {
    /// Whether the path passed every check.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
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
    /// When the file holds several hosts, routes or objects and none was
    /// named: the selectors it holds (the list by which
    /// [`audit_file`] audits them one by one).
    pub choices: Vec<String>,
}

impl PathError {
    pub(crate) fn new(file: &str, field: &str, problem: impl Into<String>) -> Self {
        PathError {
            file: file.to_string(),
            field: field.to_string(),
            problem: crate::one_line(&problem.into()),
            choices: Vec::new(),
        }
    }

    /// The same error, listing the selectors the file holds.
    pub(crate) fn with_choices(mut self, choices: Vec<String>) -> Self {
        self.choices = choices;
        self
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

/// Audits a call path: `files` from the edge to the dependency.
///
/// An Envoy clusters file adds its circuit breakers to the Envoy layer
/// before it; an Istio mesh config (`defaultHttpRetryPolicy`) sets the
/// default of every Istio layer; every other file is one layer.
pub fn audit_path(files: &[PathInput<'_>], options: &Options) -> Result<PathReport, PathError> {
    check(options)?;
    let parsed = files
        .iter()
        .map(|f| detect::Parsed::read(f.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let read: Vec<detect::Read<'_>> = parsed.iter().map(detect::Parsed::as_given).collect();
    report(&read, options)
}

/// What is wrong with the options themselves, before any file is read.
pub(crate) fn check(options: &Options) -> Result<(), PathError> {
    sizing::check(options)?;
    if !(0.0..=1.0).contains(&options.failure_rate) {
        return Err(PathError::new(
            "--failure-rate",
            "",
            format!("must be between 0 and 1, not {}", options.failure_rate),
        ));
    }
    Ok(())
}

/// [`audit_path`] of files already read (and options already
/// [`check`]ed): a file read once is audited for each of its selectors
/// without being parsed again.
pub(crate) fn report(
    read: &[detect::Read<'_>],
    options: &Options,
) -> Result<PathReport, PathError> {
    let mut layers = detect::layers(read, options)?;
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
    linkerd::profiles_win(&mut layers);
    for l in &mut layers {
        if l.max_tries.is_some_and(|n| n > compose::WALK_CAP) {
            l.assumes.push(format!(
                "the dead-dependency walk stops this layer at {} tries",
                compose::WALK_CAP
            ));
        }
    }
    let dead = compose::Walk::new(&layers, protocol, options).scenario();
    for (l, n) in layers.iter_mut().zip(&dead.layers) {
        if let Some(why) = l.rule.assumes_on(n.sees) {
            l.assumes.push(why.to_string());
        }
    }
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
        budgeted_bottom_attempts: stagger_sim::rounded(budgeted_bottom_attempts, 3),
        sizing: Vec::new(),
        findings: Vec::new(),
    };
    if let (Some(rate), Some(latency)) = (options.rate, options.latency) {
        report.sizing = sizing::size(&report.layers, &report.dead, rate, latency, options.bound);
    }
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
