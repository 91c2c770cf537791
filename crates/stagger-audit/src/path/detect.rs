//! What a file is, by its content: the `apiVersion`/`kind` of its
//! Kubernetes objects (a `kind: List`, as `kubectl get … -o yaml` prints,
//! is read item by item), the keys of a YAML or JSON config, or the syntax
//! of an nginx, HAProxy, Traefik or AWS file; and the layers a path's files
//! make once each is read.

use serde_json::Value;

use super::{
    aws, destination, envoy, envoyfilter, gateway, haproxy, istio, linkerd, nginx, own,
    resilience4j, traefik, tree,
};
use super::{Layer, Options, PathError, PathInput, System};

/// How a JSON document opens: an object or an array.
const JSON_OPENS: [char; 2] = ['{', '['];

/// The name of the built-in layer for a sidecar no file configures: Istio's
/// default policy (write `@istio-sidecar` on the path, or
/// `@istio-sidecar:HOST`).
pub(crate) const ISTIO_SIDECAR: &str = "@istio-sidecar";

/// What a file is.
pub(crate) enum Kind {
    Istio,
    IstioMesh,
    IstioSidecar,
    DestinationRule,
    EnvoyFilter,
    EnvoyRoutes,
    EnvoyClusters,
    Linkerd,
    GatewayRoute,
    GatewayBudget,
    EnvoyGateway,
    IngressNginx,
    /// An `nginx.conf`, read once.
    Nginx(nginx::Conf),
    /// An HAProxy config, read once.
    Haproxy(haproxy::Conf),
    Traefik,
    Resilience4j,
    Aws,
    /// A gRPC service config or a stagger policy file.
    Own,
    /// Something the audit does not read, in words.
    Other(String),
}

/// How `stagger audit FILE` reads a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// One layer of a call path (or several to choose from): a mesh,
    /// gateway, proxy or application retry config, named in words.
    Path(String),
    /// A gRPC service config or a stagger policy file (the checklist).
    Client,
    /// Nothing the audit reads, in words (`a Kubernetes Deployment`).
    Other(String),
}

/// How a file reads, by name and content (see [`Reading`]).
pub fn what_is(name: &str, text: &str) -> Reading {
    let input = PathInput::new(name, text, None);
    match kind(&input) {
        Ok((Kind::Own, _)) => Reading::Client,
        Ok((Kind::Other(what), _)) => Reading::Other(what),
        Ok((k, _)) => Reading::Path(describe(&k).to_string()),
        // Unreadable: JSON goes to the checklist (whose errors name the
        // field), anything else to the path readers' error.
        Err(_) if text.trim_start().starts_with(JSON_OPENS) => Reading::Client,
        Err(_) => Reading::Path("a YAML file".to_string()),
    }
}

fn describe(k: &Kind) -> &'static str {
    match k {
        Kind::Istio => "an Istio VirtualService",
        Kind::IstioMesh => "an Istio mesh config",
        Kind::IstioSidecar => "an Istio sidecar with the default policy",
        Kind::DestinationRule => "an Istio DestinationRule",
        Kind::EnvoyFilter => "an Istio EnvoyFilter",
        Kind::EnvoyRoutes => "an Envoy route configuration",
        Kind::EnvoyClusters => "Envoy clusters",
        Kind::Linkerd => "a Linkerd ServiceProfile or retry annotations",
        Kind::GatewayRoute => "a Gateway API HTTPRoute",
        Kind::GatewayBudget => "a Gateway API BackendTrafficPolicy (retryConstraint)",
        Kind::EnvoyGateway => "an Envoy Gateway BackendTrafficPolicy",
        Kind::IngressNginx => "ingress-nginx annotations",
        Kind::Nginx(_) => "an nginx config",
        Kind::Haproxy(_) => "an HAProxy config",
        Kind::Traefik => "a Traefik config",
        Kind::Resilience4j => "a Spring application config with resilience4j",
        Kind::Aws => "an AWS shared config",
        Kind::Own => "a gRPC service config or a stagger policy file",
        Kind::Other(_) => "something else",
    }
}

/// The objects of `text`: every YAML or JSON document, with the items of a
/// Kubernetes `kind: List` in its place.
pub(crate) fn objects(name: &str, text: &str) -> Result<Vec<Value>, PathError> {
    objects_within(name, text, super::tree::MAX_BYTES)
}

/// [`objects`] of a text up to `limit` bytes (a cluster dump).
pub(crate) fn objects_within(
    name: &str,
    text: &str,
    limit: usize,
) -> Result<Vec<Value>, PathError> {
    let mut out = Vec::new();
    for mut d in tree::documents_within(name, text, limit)? {
        if is_list(&d) {
            // The items are moved out, not copied: a dump's tree is held once.
            if let Some(Value::Array(items)) = tree::take(&mut d, "items") {
                out.extend(items.into_iter().filter(|i| !i.is_null()));
            }
        } else {
            out.push(d);
        }
    }
    Ok(out)
}

/// Whether a document is a Kubernetes list (`kind: List`, `…List`) of
/// items.
pub(crate) fn is_list(d: &Value) -> bool {
    tree::string(d, "kind").is_some_and(|k| k == "List" || k.ends_with("List"))
        && tree::get(d, "items").is_some_and(Value::is_array)
}

/// What one object is read as, in words (every object the audit does not
/// read is "something else").
pub(crate) fn reader(d: &Value) -> &'static str {
    describe(&kind_of(std::slice::from_ref(d), ""))
}

/// Whether `docs` hold an HTTPRoute and `selector` names one (`ROUTE` or
/// `ROUTE/RULE`), or nothing.
fn names_a_route(selector: Option<&str>, docs: &[Value]) -> bool {
    let mut routes = docs
        .iter()
        .filter(|d| tree::string(d, "kind") == Some("HTTPRoute"))
        .map(|d| {
            tree::get(d, "metadata")
                .and_then(|m| tree::string(m, "name"))
                .unwrap_or("")
        })
        .peekable();
    let want = selector.map(|s| s.split('/').next().unwrap_or(s));
    routes.peek().is_some() && want.is_none_or(|w| routes.any(|r| r == w))
}

fn api(d: &Value) -> &str {
    tree::string(d, "apiVersion").unwrap_or("")
}

fn annotated(d: &Value, prefix: &str) -> bool {
    tree::get(d, "metadata")
        .and_then(|m| tree::obj(m, "annotations"))
        .is_some_and(|a| a.keys().any(|k| k.starts_with(prefix)))
}

/// A file read once: the input, what it is and its documents. Every
/// selector of it is read from these (see [`Parsed::at`]), so a file of
/// many objects is parsed once, not once per object.
pub(crate) struct Parsed<'a> {
    input: PathInput<'a>,
    kind: Kind,
    docs: Vec<Value>,
}

/// One file of a path as the readers take it: a [`Parsed`] file and the
/// selector that picks one of its objects.
#[derive(Clone)]
pub(crate) struct Read<'p> {
    f: PathInput<'p>,
    kind: &'p Kind,
    docs: &'p [Value],
}

impl<'a> Parsed<'a> {
    /// Reads `input` once: its kind and documents (see [`kind`]).
    pub(crate) fn read(input: PathInput<'a>) -> Result<Self, PathError> {
        let (kind, docs) = kind(&input)?;
        Ok(Parsed { input, kind, docs })
    }

    /// The file's name.
    pub(crate) fn name(&self) -> &'a str {
        self.input.name
    }

    /// The file's documents (none for a file that is not YAML or JSON).
    pub(crate) fn docs(&self) -> &[Value] {
        &self.docs
    }

    /// The file as read with its own selector.
    pub(crate) fn as_given(&self) -> Read<'_> {
        self.at(self.input.selector)
    }

    /// The file as read with `selector` (`None`: the file's one object).
    pub(crate) fn at<'p>(&'p self, selector: Option<&'p str>) -> Read<'p> {
        Read {
            f: PathInput {
                selector,
                ..self.input.clone()
            },
            kind: &self.kind,
            docs: &self.docs,
        }
    }

    /// The selectors the file offers, as its reader lists them when a path
    /// names none (`under` is `None`) or names a host or route that holds
    /// several routes or rules (`under` is that selector; the list then
    /// names each as `HOST/ROUTE`). Empty when the selector asked about
    /// reads one object, or none (reading it then says why): the reader's
    /// own "name one" error lists the same.
    pub(crate) fn selectors(&self, under: Option<&str>) -> Vec<String> {
        let (f, docs) = (&self.input, self.docs.as_slice());
        match (&self.kind, under) {
            (Kind::Istio, _) => istio::selectors(docs, under),
            (Kind::GatewayRoute, _) => gateway::route_selectors(docs, under),
            (Kind::EnvoyGateway, _) if names_a_route(under, docs) => {
                gateway::route_selectors(docs, under)
            }
            // The other readers hold one level of objects.
            (_, Some(_)) => Vec::new(),
            (Kind::DestinationRule, None) => destination::selectors(docs),
            (Kind::EnvoyFilter, None) => envoyfilter::selectors(docs),
            (Kind::EnvoyRoutes, None) => envoy::selectors(docs),
            (Kind::EnvoyClusters, None) => envoy::cluster_selectors(docs),
            (Kind::Linkerd, None) => linkerd::selectors(docs),
            (Kind::GatewayBudget, None) => gateway::budget_selectors(docs),
            (Kind::EnvoyGateway, None) => gateway::policy_selectors(docs),
            (Kind::IngressNginx, None) => nginx::ingress_selectors(docs),
            (Kind::Nginx(conf), None) => nginx::selectors(conf),
            (Kind::Haproxy(conf), None) => haproxy::selectors(conf),
            (Kind::Traefik, None) => traefik::selectors(docs),
            (Kind::Resilience4j, None) => resilience4j::selectors(docs),
            (Kind::Aws, None) => aws::selectors(f.text),
            (Kind::Own, None) => own::selectors(f),
            (Kind::IstioMesh | Kind::IstioSidecar | Kind::Other(_), None) => Vec::new(),
        }
    }
}

/// What `input` is, with its objects when it is YAML or JSON.
pub(crate) fn kind(input: &PathInput<'_>) -> Result<(Kind, Vec<Value>), PathError> {
    if input.name.starts_with(ISTIO_SIDECAR) {
        return Ok((Kind::IstioSidecar, Vec::new()));
    }
    if input.name.ends_with(".toml") {
        if traefik::looks_like_toml(input.text) {
            // Parsed here, once; a file that does not parse is left to the
            // reader, whose error names it.
            let docs = toml::from_str::<Value>(input.text).map_or_else(|_| Vec::new(), |v| vec![v]);
            return Ok((Kind::Traefik, docs));
        }
        return Ok((Kind::Own, Vec::new()));
    }
    if aws::looks_like(input.text) {
        return Ok((Kind::Aws, Vec::new()));
    }
    if haproxy::looks_like(input.text) {
        return Ok((Kind::Haproxy(haproxy::read_conf(input)), Vec::new()));
    }
    if nginx::looks_like(input.text) {
        return Ok((Kind::Nginx(nginx::read_conf(input)), Vec::new()));
    }
    let docs = match objects(input.name, input.text) {
        Ok(d) => d,
        // A `.json` file that is not even YAML: the service config
        // reader names the JSON error.
        Err(_) if input.name.ends_with(".json") => return Ok((Kind::Own, Vec::new())),
        Err(e) => return Err(e),
    };
    let k = match kind_of(&docs, input.text) {
        Kind::Other(_) if input.name.ends_with(".json") && docs.iter().all(|d| !d.is_object()) => {
            Kind::Own
        }
        k => k,
    };
    Ok((k, docs))
}

fn kind_of(docs: &[Value], text: &str) -> Kind {
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .filter_map(|d| tree::string(d, "kind").map(|k| (k, api(d))))
        .collect();
    let is = |k: &str| kinds.iter().any(|(x, _)| *x == k);
    let has = |k: &str| {
        docs.iter().any(|d| {
            let mut found = Vec::new();
            tree::objects_with(d, k, &mut found);
            !found.is_empty()
        })
    };
    let linkerd = is("ServiceProfile")
        || kinds
            .iter()
            .any(|(_, a)| a.starts_with("policy.linkerd.io"))
        || docs
            .iter()
            .any(|d| annotated(d, "retry.linkerd.io/") || annotated(d, "timeout.linkerd.io/"));
    if is("VirtualService") {
        Kind::Istio
    } else if linkerd {
        Kind::Linkerd
    } else if is("EnvoyFilter") {
        Kind::EnvoyFilter
    } else if is("DestinationRule") {
        Kind::DestinationRule
    } else if kinds
        .iter()
        .any(|(k, a)| *k == "BackendTrafficPolicy" && a.starts_with("gateway.envoyproxy.io"))
    {
        Kind::EnvoyGateway
    } else if is("XBackendTrafficPolicy") || is("BackendTrafficPolicy") {
        Kind::GatewayBudget
    } else if kinds.iter().any(|(k, a)| {
        matches!(*k, "HTTPRoute" | "GRPCRoute") && a.starts_with("gateway.networking")
    }) {
        Kind::GatewayRoute
    } else if docs
        .iter()
        .any(|d| annotated(d, "nginx.ingress.kubernetes.io/"))
        || docs.iter().any(nginx::is_ingress_config_map)
    {
        Kind::IngressNginx
    } else if docs.iter().any(traefik::is_middleware) {
        Kind::Traefik
    } else if docs.iter().any(resilience4j::has_retry) {
        Kind::Resilience4j
    } else if has("defaultHttpRetryPolicy")
        || docs.iter().any(|d| {
            tree::obj(d, "data")
                .and_then(|m| m.get("mesh"))
                .and_then(Value::as_str)
                .is_some_and(|m| m.contains("defaultHttpRetryPolicy"))
        })
    {
        Kind::IstioMesh
    } else if has("virtualHosts") {
        Kind::EnvoyRoutes
    } else if has("circuitBreakers") {
        Kind::EnvoyClusters
    } else if let Some((k, a)) = kinds.first() {
        let group = a.split('/').next().unwrap_or("");
        let on = if group.is_empty() || !group.contains('.') {
            String::new()
        } else {
            format!(" ({group})")
        };
        Kind::Other(format!(
            "a Kubernetes {k}{on}, which holds no retry settings stagger reads"
        ))
    } else if text.trim_start().starts_with(JSON_OPENS) {
        Kind::Own
    } else {
        Kind::Other("YAML without a retry object stagger reads".to_string())
    }
}

/// The one-line list of what the path readers read.
pub(crate) const READS: &str = "Istio VirtualService, DestinationRule and EnvoyFilter, Envoy routes and clusters, Linkerd, Gateway API HTTPRoute and BackendTrafficPolicy, Envoy Gateway, nginx, ingress-nginx, HAProxy, Traefik, resilience4j, AWS SDK profiles, gRPC service configs and stagger policy files";

/// The files of a path, each read once ([`Parsed`]), in path order, into
/// layers: an Envoy clusters file, a DestinationRule after an Istio layer
/// and a Gateway API budget after a gateway layer add to the layer before
/// them; an Istio mesh config sets the default of every Istio layer; every
/// other file is one layer.
pub(crate) fn layers(read: &[Read<'_>], o: &Options) -> Result<Vec<Layer>, PathError> {
    let mut mesh_default = None;
    for r in read {
        if matches!(r.kind, Kind::IstioMesh) {
            mesh_default = Some(istio::mesh_default(r.f.name, r.docs)?);
        }
    }
    let mesh = mesh_default.as_ref();
    // An Envoy Gateway policy on the path says who runs its routes.
    let eg = Options {
        gateway: super::GatewayImpl::EnvoyGateway,
        ..*o
    };
    let routes_by = if read.iter().any(|r| matches!(r.kind, Kind::EnvoyGateway)) {
        &eg
    } else {
        o
    };
    let mut layers: Vec<Layer> = Vec::new();
    for r in read {
        let (f, k, docs) = (&r.f, r.kind, r.docs);
        let last = layers.last_mut();
        match k {
            Kind::IstioMesh => {}
            Kind::Istio => {
                let mut l = istio::layer(f, docs, mesh, o)?;
                destination::add_from_same_file(&mut l, f, docs)?;
                layers.push(l);
            }
            Kind::IstioSidecar => layers.push(istio::sidecar(f, mesh, o)),
            Kind::DestinationRule => match last {
                Some(l) if matches!(l.system, System::Istio | System::GatewayApi) => {
                    destination::add(l, f, docs)?;
                }
                _ => layers.push(destination::layer(f, docs, mesh, o)?),
            },
            Kind::EnvoyFilter => layers.push(envoyfilter::layer(f, docs, o)?),
            Kind::EnvoyRoutes => layers.push(envoy::layer(f, docs)?),
            Kind::EnvoyClusters => {
                match layers.iter_mut().rev().find(|l| l.system == System::Envoy) {
                    Some(last) => envoy::add_clusters(last, f, docs)?,
                    None => layers.push(envoy::clusters_alone(f, docs)?),
                }
            }
            Kind::Linkerd => layers.push(linkerd::layer(f, docs)?),
            Kind::GatewayRoute => layers.push(gateway::route(f, docs, mesh, routes_by)?),
            Kind::GatewayBudget => match last {
                Some(l) if l.system.is_mesh() => gateway::add_budget(l, f, docs)?,
                _ => layers.push(gateway::budget_layer(f, docs)?),
            },
            Kind::EnvoyGateway if names_a_route(f.selector, docs) => {
                // A route and the policy that targets it, in one file.
                let mut l = gateway::route(f, docs, mesh, &eg)?;
                gateway::policy_under_route(&mut l, f, docs)?;
                layers.push(l);
            }
            Kind::EnvoyGateway => match last {
                Some(l) if l.system == System::GatewayApi => {
                    if !gateway::policy_under_route(l, f, docs)? {
                        layers.push(gateway::envoy_gateway(f, docs)?);
                    }
                }
                _ => layers.push(gateway::envoy_gateway(f, docs)?),
            },
            Kind::IngressNginx => layers.push(nginx::ingress(f, docs, o)?),
            Kind::Nginx(conf) => layers.push(nginx::layer(f, conf)?),
            Kind::Haproxy(conf) => layers.push(haproxy::layer(f, conf)?),
            Kind::Traefik => layers.push(traefik::layer(f, docs)?),
            Kind::Resilience4j => layers.push(resilience4j::layer(f, docs)?),
            Kind::Aws => layers.push(aws::layer(f, o)?),
            Kind::Own => layers.push(own::layer(f)?),
            Kind::Other(what) => {
                return Err(PathError::new(
                    f.name,
                    "",
                    format!("{what} (the audit reads {READS})"),
                ))
            }
        }
    }
    Ok(layers)
}
