//! A whole repository (or a `kubectl get … -A -o yaml` dump): every
//! retrying object audited on its own, then connected into the call paths
//! the routes imply, each audited as a `--path` would be.
//!
//! The files say this much about who calls whom, and no more:
//! - a Gateway API `HTTPRoute` rule, or an Istio `VirtualService` bound to
//!   gateways only, is where a path starts: the edge;
//! - a route (HTTPRoute rule, VirtualService route) sends to its
//!   destinations' hosts (`backendRefs[].name`, `route[].destination.host`,
//!   short names in the route's namespace);
//! - the application that serves a host is a Spring `application.yml` whose
//!   `spring.application.name` is that host; each of its resilience4j retry
//!   instances is a call to the host the instance is named for;
//! - a call to a host goes through the caller's sidecar, whose policy is
//!   the mesh `VirtualService` routing that host, or — where the paths run
//!   on Istio (any Istio object, or an HTTPRoute with `--gateway istio`) and
//!   no file routes it — Istio's default policy (`@istio-sidecar:HOST`).
//!
//! Paths are walked from the edges only (where traffic enters: an
//! HTTPRoute rule, a VirtualService bound to gateways), at most
//! [`MAX_HOPS`] layers deep and [`MAX_PATHS`] in all, each
//! object once per path (a cycle ends the path).

use std::collections::HashMap;

use serde::Serialize;
use serde_json::Value;

use super::detect::{objects, objects_within, reader, ISTIO_SIDECAR};
use super::{audit_file, audit_path, resilience4j, tree};
use super::{GatewayImpl, Options, PathError, PathInput, PathReport};

/// The most layers of one path.
pub const MAX_HOPS: usize = 8;
/// The most paths walked; past it the report says the walk was cut.
pub const MAX_PATHS: usize = 1000;
/// A file holding more objects than this (a cluster dump) is read object
/// by object (see [`split_dump`]), so each object is parsed once.
pub const SPLIT_ABOVE: usize = 50;

/// One file of the repository, or one object of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// Its name in reports (a path, or `FILE#KIND/NAMESPACE/NAME`).
    pub name: String,
    /// Its text.
    pub text: String,
}

/// One retrying object, audited on its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectAudit {
    /// The file (or dump object) it is in.
    pub file: String,
    /// The selector that names it in its file (`None` when it is alone).
    pub selector: Option<String>,
    /// Its audit as a path of one layer.
    pub report: PathReport,
}

/// One call path the routes imply, edge first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepoPath {
    /// Its layers as `FILE:SELECTOR` (or `@istio-sidecar:HOST`), edge first.
    pub hops: Vec<String>,
    /// Its audit.
    pub report: PathReport,
}

/// The audit of a repository.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct RepoReport {
    /// Every retrying object, in file order.
    pub objects: Vec<ObjectAudit>,
    /// Every call path of two layers or more, the most attempts at the
    /// bottom (dependency dead) first.
    pub paths: Vec<RepoPath>,
    /// Files the readers recognised but could not read, each naming the
    /// file and the field.
    #[serde(skip)]
    pub unreadable: Vec<PathError>,
    /// Paths the routes imply whose layers did not read together (a
    /// selector the reader does not take), reported as notes.
    #[serde(skip)]
    pub unconnected: Vec<PathError>,
    /// Whether the walk stopped at [`MAX_PATHS`].
    pub paths_cut: bool,
}

impl RepoReport {
    /// Whether no object and no path has a finding.
    pub fn is_clean(&self) -> bool {
        self.objects.iter().all(|o| o.report.is_clean())
            && self.paths.iter().all(|p| p.report.is_clean())
    }
}

/// A file of Kubernetes objects as the sources the readers take, so that
/// no object is lost to another of its file:
/// - a file of many objects (a `kind: List` as `kubectl get … -A -o yaml`
///   prints it, or many YAML documents) is one source per object, named
///   `NAME#KIND/NAMESPACE/NAME` (`NAME#N` for the N-th document when it is
///   not a Kubernetes object), with the Istio `DestinationRule`s of a
///   `VirtualService`'s host in its source, as a file holding both is read;
/// - a file of at most [`SPLIT_ABOVE`] objects that different readers
///   read (a `VirtualService` beside an `HTTPRoute`) is one source per
///   reader, named `NAME#KIND` after its first object's kind, holding every
///   object that reader takes (a `DestinationRule` goes with the
///   `VirtualService`s, a plain `Ingress` with ingress-nginx's ConfigMap);
/// - an object no reader takes, beside objects one does, is a source of
///   its own, named as in a dump, for the caller to list as skipped;
/// - any other file, or one that is not YAML, stays whole.
pub fn split_dump(name: &str, text: &str) -> Vec<Source> {
    let whole = || {
        vec![Source {
            name: name.to_string(),
            text: text.to_string(),
        }]
    };
    let Ok(docs) = objects_within(name, text, tree::MAX_DUMP_BYTES) else {
        return whole();
    };
    if docs.len() <= SPLIT_ABOVE {
        return by_reader(name, text, &docs).unwrap_or_else(whole);
    }
    // The host an Istio object is about, short name and namespace.
    let key = |d: &Value| -> Option<(String, String)> {
        let ns = namespace(d);
        let spec = tree::get(d, "spec")?;
        let host = match tree::string(d, "kind")? {
            "VirtualService" => tree::list(spec, "hosts").first()?.as_str()?,
            "DestinationRule" => tree::string(spec, "host")?,
            _ => return None,
        };
        let h = Host::parse(host, ns);
        Some((h.short, h.ns.unwrap_or_default()))
    };
    let mut groups: HashMap<(String, String), Vec<usize>> = HashMap::new();
    let keys: Vec<Option<(String, String)>> = docs.iter().map(key).collect();
    for (i, k) in keys.iter().enumerate() {
        if let Some(k) = k {
            groups.entry(k.clone()).or_default().push(i);
        }
    }
    let mut out = Vec::new();
    for (i, d) in docs.iter().enumerate() {
        let members = match &keys[i] {
            Some(k) => match groups.get(k) {
                Some(g) if g[0] == i => g.clone(),
                Some(_) => continue,
                None => vec![i],
            },
            None => vec![i],
        };
        let meta = tree::get(d, "metadata");
        let field = |k: &str| meta.and_then(|m| tree::string(m, k)).unwrap_or("-");
        let text = if members.len() == 1 {
            d.to_string()
        } else {
            let items: Vec<&Value> = members.iter().map(|&j| &docs[j]).collect();
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
        };
        let name = match tree::string(d, "kind") {
            Some(kind) => format!("{name}#{kind}/{}/{}", field("namespace"), field("name")),
            // Not a Kubernetes object (an application's config): its place.
            None => format!("{name}#{}", i + 1),
        };
        out.push(Source { name, text });
    }
    out
}

/// `NAME#KIND/NAMESPACE/NAME` for one Kubernetes object of file `name`.
fn object_name(name: &str, d: &Value) -> String {
    let meta = tree::get(d, "metadata");
    let field = |k: &str| meta.and_then(|m| tree::string(m, k)).unwrap_or("-");
    let kind = tree::string(d, "kind").unwrap_or("-");
    format!("{name}#{kind}/{}/{}", field("namespace"), field("name"))
}

/// A few Kubernetes objects split by the reader that takes them (see
/// [`split_dump`]); `None` when the file is read whole as it is: not
/// Kubernetes objects, or all of them read by one reader.
fn by_reader(name: &str, text: &str, docs: &[Value]) -> Option<Vec<Source>> {
    const OTHER: &str = "something else";
    if docs.len() < 2 || !docs.iter().all(|d| tree::string(d, "kind").is_some()) {
        return None;
    }
    let mut readers: Vec<&str> = docs.iter().map(reader).collect();
    // Objects another object of their file reads with it.
    let joins = |kind: &str, with: &str, readers: &mut Vec<&str>| {
        if let Some(&to) = readers.iter().find(|r| r.contains(with)) {
            for (r, d) in readers.iter_mut().zip(docs) {
                if tree::string(d, "kind") == Some(kind) && *r != to {
                    *r = to;
                }
            }
        }
    };
    joins("DestinationRule", "VirtualService", &mut readers);
    // A mesh config sets the default of the VirtualServices beside it.
    if let Some(&to) = readers.iter().find(|r| r.contains("VirtualService")) {
        for r in readers.iter_mut() {
            if r.contains("mesh config") {
                *r = to;
            }
        }
    }
    joins("Ingress", "ingress-nginx", &mut readers);
    // An Envoy Gateway policy that targets an HTTPRoute of the file is read
    // with it: the route's own retry goes before the policy's.
    let routes: Vec<&str> = docs
        .iter()
        .filter(|d| tree::string(d, "kind") == Some("HTTPRoute"))
        .filter_map(|d| tree::get(d, "metadata").and_then(|m| tree::string(m, "name")))
        .collect();
    let route_reader = docs
        .iter()
        .zip(&readers)
        .find(|(d, _)| tree::string(d, "kind") == Some("HTTPRoute"))
        .map(|(_, r)| *r);
    if let Some(to) = route_reader {
        for (r, d) in readers.iter_mut().zip(docs) {
            let targets_a_route = tree::string(d, "kind") == Some("BackendTrafficPolicy")
                && tree::get(d, "spec").is_some_and(|s| {
                    tree::list(s, "targetRefs").iter().any(|t| {
                        tree::string(t, "kind") == Some("HTTPRoute")
                            && tree::string(t, "name").is_some_and(|n| routes.contains(&n))
                    })
                });
            if targets_a_route {
                *r = to;
            }
        }
    }
    let mut groups: Vec<&str> = Vec::new();
    for r in &readers {
        if *r != OTHER && !groups.contains(r) {
            groups.push(r);
        }
    }
    let others = readers.contains(&OTHER);
    if groups.len() == 1 && !others || groups.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for g in &groups {
        let members: Vec<&Value> = docs
            .iter()
            .zip(&readers)
            .filter(|(_, r)| *r == g)
            .map(|(d, _)| d)
            .collect();
        if groups.len() == 1 {
            // The one reader reads the file as it is; its name stays.
            out.push(Source {
                name: name.to_string(),
                text: text.to_string(),
            });
            continue;
        }
        let kind = tree::string(members[0], "kind").unwrap_or("-");
        out.push(Source {
            name: format!("{name}#{kind}"),
            text: serde_json::json!({"apiVersion": "v1", "kind": "List", "items": members})
                .to_string(),
        });
    }
    for (d, r) in docs.iter().zip(&readers) {
        if *r == OTHER {
            out.push(Source {
                name: object_name(name, d),
                text: d.to_string(),
            });
        }
    }
    Some(out)
}

/// A host as the routes name it: its short name and, when known, its
/// namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Host {
    short: String,
    ns: Option<String>,
}

impl Host {
    /// `reviews`, `reviews.prod`, `reviews.prod.svc.cluster.local`, with
    /// `ns` the namespace a short name is in.
    fn parse(h: &str, ns: Option<&str>) -> Host {
        let mut parts = h.split('.');
        let short = parts.next().unwrap_or(h).to_string();
        let ns = parts.next().or(ns).map(str::to_string);
        Host { short, ns }
    }

    fn matches(&self, other: &Host) -> bool {
        self.short == other.short
            && (self.ns.is_none() || other.ns.is_none() || self.ns == other.ns)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Where a path starts (an HTTPRoute rule, a gateway VirtualService).
    Edge,
    /// A sidecar's route for calls to the hosts it serves.
    Mesh,
    /// An application's call (a resilience4j instance).
    App,
    /// Istio's default policy at a sidecar no file configures.
    Sidecar,
}

/// One object that can be a layer of a path.
#[derive(Debug, Clone)]
struct Node {
    /// The source it is in (`None` for a built-in sidecar).
    source: Option<usize>,
    selector: String,
    role: Role,
    /// The hosts it is the layer for (a mesh route), or the application
    /// (an app's call).
    serves: Vec<Host>,
    /// The hosts it sends to.
    calls: Vec<Host>,
}

fn namespace(d: &Value) -> Option<&str> {
    tree::get(d, "metadata").and_then(|m| tree::string(m, "namespace"))
}

fn label(i: usize, r: &Value) -> String {
    tree::string(r, "name").map_or_else(|| i.to_string(), str::to_string)
}

/// The layers one document holds.
fn nodes_of(source: usize, d: &Value, out: &mut Vec<Node>) {
    let ns = namespace(d);
    let spec = tree::get(d, "spec").unwrap_or(&Value::Null);
    match tree::string(d, "kind") {
        Some("VirtualService") => {
            let hosts: Vec<&str> = tree::list(spec, "hosts")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let Some(first) = hosts.first() else { return };
            let gateways: Vec<&str> = tree::list(spec, "gateways")
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let edge = !gateways.is_empty() && !gateways.contains(&"mesh");
            let host_sel = match ns {
                Some(ns) if !first.contains('.') => format!("{first}.{ns}"),
                _ => (*first).to_string(),
            };
            for (i, r) in tree::list(spec, "http").iter().enumerate() {
                let calls = tree::list(r, "route")
                    .iter()
                    .filter_map(|x| tree::get(x, "destination"))
                    .filter_map(|x| tree::string(x, "host"))
                    .map(|h| Host::parse(h, ns))
                    .collect();
                out.push(Node {
                    source: Some(source),
                    selector: format!("{host_sel}/{}", label(i, r)),
                    role: if edge { Role::Edge } else { Role::Mesh },
                    serves: if edge {
                        Vec::new()
                    } else {
                        hosts.iter().map(|h| Host::parse(h, ns)).collect()
                    },
                    calls,
                });
            }
        }
        Some("HTTPRoute" | "GRPCRoute") => {
            let name = tree::get(d, "metadata")
                .and_then(|m| tree::string(m, "name"))
                .unwrap_or("");
            for (i, r) in tree::list(spec, "rules").iter().enumerate() {
                let calls = tree::list(r, "backendRefs")
                    .iter()
                    .filter_map(|b| {
                        let n = tree::string(b, "name")?;
                        Some(Host::parse(n, tree::string(b, "namespace").or(ns)))
                    })
                    .collect();
                out.push(Node {
                    source: Some(source),
                    selector: format!("{name}/{}", label(i, r)),
                    role: Role::Edge,
                    serves: Vec::new(),
                    calls,
                });
            }
        }
        _ if resilience4j::has_retry(d) => {
            let (app, instances) = resilience4j::app_and_instances(d);
            for inst in instances {
                out.push(Node {
                    source: Some(source),
                    selector: inst.clone(),
                    role: Role::App,
                    serves: app.iter().map(|a| Host::parse(a, None)).collect(),
                    calls: vec![Host::parse(&inst, None)],
                });
            }
        }
        _ => {}
    }
}

/// Whether the paths run on Istio: an Istio object, or a Gateway API
/// route with Istio as the gateway.
fn on_istio(docs: &[Value], o: &Options) -> bool {
    docs.iter().any(|d| {
        let api = tree::string(d, "apiVersion").unwrap_or("");
        api.contains("istio.io")
            || (o.gateway == GatewayImpl::Istio
                && api.starts_with("gateway.networking.k8s.io")
                && tree::string(d, "kind") == Some("HTTPRoute"))
    })
}

/// The objects and who calls whom, with the objects serving each short
/// host name indexed, so a call is matched without a scan of them all.
struct Graph {
    nodes: Vec<Node>,
    serving: HashMap<String, Vec<usize>>,
    sidecars: HashMap<String, usize>,
    /// Each node's next layers, once worked out.
    next: HashMap<usize, Vec<usize>>,
    istio: bool,
}

impl Graph {
    fn new(nodes: Vec<Node>, istio: bool) -> Graph {
        let mut serving: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for h in &n.serves {
                let list = serving.entry(h.short.clone()).or_default();
                if !list.contains(&i) {
                    list.push(i);
                }
            }
        }
        Graph {
            nodes,
            serving,
            sidecars: HashMap::new(),
            next: HashMap::new(),
            istio,
        }
    }

    /// The layers a call from node `from` goes through next.
    fn next(&mut self, from: usize) -> Vec<usize> {
        if let Some(n) = self.next.get(&from) {
            return n.clone();
        }
        let role = self.nodes[from].role;
        let wants: &[Role] = match role {
            Role::Edge | Role::Mesh | Role::Sidecar => &[Role::App],
            Role::App => &[Role::Mesh],
        };
        let mut out = Vec::new();
        for h in self.nodes[from].calls.clone() {
            let mut found: Vec<usize> = self
                .serving
                .get(&h.short)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .copied()
                .filter(|&j| j != from && wants.contains(&self.nodes[j].role))
                .filter(|&j| self.nodes[j].serves.iter().any(|s| s.matches(&h)))
                .collect();
            if found.is_empty() && role == Role::App && self.istio {
                found.push(self.sidecar(&h));
            }
            for j in found {
                if !out.contains(&j) {
                    out.push(j);
                }
            }
        }
        self.next.insert(from, out.clone());
        out
    }

    /// The built-in sidecar with Istio's default policy for calls to `h`.
    fn sidecar(&mut self, h: &Host) -> usize {
        if let Some(&j) = self.sidecars.get(&h.short) {
            return j;
        }
        self.nodes.push(Node {
            source: None,
            selector: format!("{ISTIO_SIDECAR}:{}", h.short),
            role: Role::Sidecar,
            serves: vec![h.clone()],
            calls: vec![h.clone()],
        });
        let j = self.nodes.len() - 1;
        self.sidecars.insert(h.short.clone(), j);
        j
    }

    /// Every path from the last node of `path`, depth first, into `paths`;
    /// `false` once [`MAX_PATHS`] are found.
    fn walk(&mut self, path: &mut Vec<usize>, paths: &mut Vec<Vec<usize>>) -> bool {
        let at = *path.last().unwrap_or(&0);
        let after: Vec<usize> = self
            .next(at)
            .into_iter()
            .filter(|j| !path.contains(j))
            .collect();
        if after.is_empty() || path.len() >= MAX_HOPS {
            if path.len() > 1 {
                if paths.len() >= MAX_PATHS {
                    return false;
                }
                paths.push(path.clone());
            }
            return true;
        }
        for j in after {
            path.push(j);
            let go_on = self.walk(path, paths);
            path.pop();
            if !go_on {
                return false;
            }
        }
        true
    }
}

/// Audits every source: each retrying object alone, then every call path
/// the routes imply (see the module doc), worst first.
pub fn audit_repo(sources: &[Source], o: &Options) -> RepoReport {
    let mut report = RepoReport::default();
    for s in sources {
        match audit_file(&s.name, &s.text, o) {
            Ok(found) => report
                .objects
                .extend(found.into_iter().map(|f| ObjectAudit {
                    file: s.name.clone(),
                    selector: f.selector,
                    report: f.report,
                })),
            Err(e) => report.unreadable.push(e),
        }
    }
    // Each source's objects are read for the graph and dropped: only the
    // nodes are kept, so memory follows one object, not the dump.
    let mut nodes = Vec::new();
    let mut istio = false;
    for (i, s) in sources.iter().enumerate() {
        let ds = objects(&s.name, &s.text).unwrap_or_default();
        istio = istio || on_istio(&ds, o);
        for d in &ds {
            nodes_of(i, d, &mut nodes);
        }
    }
    let mut graph = Graph::new(nodes, istio);
    let count = graph.nodes.len();
    // Paths start where traffic enters: an application or a mesh route
    // that no route leads to is a layer of no path the files imply.
    let starts: Vec<usize> = (0..count)
        .filter(|&i| graph.nodes[i].role == Role::Edge)
        .collect();
    let mut walked = Vec::new();
    for s in starts {
        if !graph.walk(&mut vec![s], &mut walked) {
            report.paths_cut = true;
            break;
        }
    }
    let nodes = graph.nodes;
    for p in walked {
        let hops: Vec<String> = p
            .iter()
            .map(|&i| match nodes[i].source {
                Some(s) => format!("{}:{}", sources[s].name, nodes[i].selector),
                None => nodes[i].selector.clone(),
            })
            .collect();
        let inputs: Vec<PathInput<'_>> = p
            .iter()
            .map(|&i| match nodes[i].source {
                Some(s) => PathInput::new(
                    &sources[s].name,
                    &sources[s].text,
                    Some(nodes[i].selector.as_str()),
                ),
                None => PathInput::new(&nodes[i].selector, "", None),
            })
            .collect();
        match audit_path(&inputs, o) {
            Ok(r) => report.paths.push(RepoPath { hops, report: r }),
            Err(e) => report.unconnected.push(e),
        }
    }
    report.paths.sort_by(|a, b| {
        b.report
            .dead
            .bottom_attempts
            .total_cmp(&a.report.dead.bottom_attempts)
    });
    report
}
