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

use super::detect::{is_list, objects_within, reader, Parsed, Read, ISTIO_SIDECAR};
use super::{check, file, resilience4j, tree};
use super::{GatewayImpl, Options, PathError, PathInput, PathReport};
use crate::Report;

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
    /// The gRPC service configs and stagger policy files gathered beside
    /// the sources, each by name with its checklist audit, in the order
    /// gathered (filled by [`audit_gathered`](super::audit_gathered)).
    #[serde(skip)]
    pub clients: Vec<(String, Report)>,
    /// Every message about what could not be read, in this order: what the
    /// gathering could not read, the sources the readers could not read
    /// (as in [`unreadable`](Self::unreadable)), the client configs the
    /// checklist could not read (filled by
    /// [`audit_gathered`](super::audit_gathered)).
    #[serde(skip)]
    pub cannot_read: Vec<String>,
}

impl RepoReport {
    /// Whether no object, no path and no client config has a finding (of
    /// the objects, those kept in [`objects`](Self::objects)).
    pub fn is_clean(&self) -> bool {
        self.objects.iter().all(|o| o.report.is_clean())
            && self.paths.iter().all(|p| p.report.is_clean())
            && self.clients.iter().all(|(_, r)| r.is_clean())
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
    // A list as kubectl prints it is read item by item: only one object's
    // tree is held at a time, never the dump's.
    if let Some(items) = list_one_by_one(name, text) {
        return grouped(items);
    }
    let Ok(docs) = objects_within(name, text, tree::MAX_DUMP_BYTES) else {
        return whole();
    };
    if docs.len() <= SPLIT_ABOVE {
        return by_reader(name, text, &docs).unwrap_or_else(whole);
    }
    let items = docs
        .into_iter()
        .enumerate()
        .map(|(i, d)| DumpObject::of(name, i, &d))
        .collect();
    grouped(items)
}

/// One object of a dump as [`split_dump`] keeps it once parsed: what it
/// is grouped by, its source name and its text, not its tree.
struct DumpObject {
    /// The host an Istio object is about (short name, namespace).
    key: Option<(String, String)>,
    /// Its source name (`FILE#KIND/NAMESPACE/NAME`, or `FILE#N`).
    name: String,
    /// It as compact JSON.
    text: String,
}

impl DumpObject {
    /// The `i`-th (from 0) object `d` of file `file`.
    fn of(file: &str, i: usize, d: &Value) -> DumpObject {
        let name = match tree::string(d, "kind") {
            Some(_) => object_name(file, d),
            // Not a Kubernetes object (an application's config): its place.
            None => format!("{file}#{}", i + 1),
        };
        DumpObject {
            key: host_key(d),
            name,
            text: d.to_string(),
        }
    }
}

/// The host an Istio `VirtualService` or `DestinationRule` is about, as
/// its short name and namespace.
fn host_key(d: &Value) -> Option<(String, String)> {
    let ns = namespace(d);
    let spec = tree::get(d, "spec")?;
    let host = match tree::string(d, "kind")? {
        "VirtualService" => tree::list(spec, "hosts").first()?.as_str()?,
        "DestinationRule" => tree::string(spec, "host")?,
        _ => return None,
    };
    let h = Host::parse(host, ns);
    Some((h.short, h.ns.unwrap_or_default()))
}

/// The objects of a list printed as kubectl prints it (see
/// [`tree::list_items`]), each parsed alone; `None` when the text is not
/// of that shape, an item does not read alone (an alias to another item),
/// or it holds no more than [`SPLIT_ABOVE`] objects: it is then read
/// whole.
fn list_one_by_one(name: &str, text: &str) -> Option<Vec<DumpObject>> {
    if text.len() > tree::MAX_DUMP_BYTES {
        return None;
    }
    let (header, items) = tree::list_items(text)?;
    if items.len() <= SPLIT_ABOVE {
        return None;
    }
    let head = tree::documents_within(name, &header, tree::MAX_DUMP_BYTES).ok()?;
    if head.len() != 1 || !is_list(&head[0]) {
        return None;
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut docs = tree::documents_within(name, item, tree::MAX_DUMP_BYTES).ok()?;
        let Some(Value::Array(mut one)) = docs.pop() else {
            return None;
        };
        if !docs.is_empty() || one.len() != 1 {
            return None;
        }
        let d = one.pop()?;
        if !d.is_null() {
            out.push(DumpObject::of(name, out.len(), &d));
        }
    }
    (out.len() > SPLIT_ABOVE).then_some(out)
}

/// The sources of a dump's objects: one per object, the Istio
/// `DestinationRule`s of a `VirtualService`'s host with it as a list.
fn grouped(mut objects: Vec<DumpObject>) -> Vec<Source> {
    let mut groups: HashMap<(String, String), Vec<usize>> = HashMap::new();
    for (i, o) in objects.iter().enumerate() {
        if let Some(k) = &o.key {
            groups.entry(k.clone()).or_default().push(i);
        }
    }
    // A list of several objects, keys in the order serde_json writes them.
    let shell =
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": "\u{0}"}).to_string();
    let mut out = Vec::new();
    for i in 0..objects.len() {
        let members = match objects[i].key.as_ref().and_then(|k| groups.get(k)) {
            Some(g) if g[0] == i => g.clone(),
            Some(_) => continue,
            None => vec![i],
        };
        let text = if members.len() == 1 {
            std::mem::take(&mut objects[i].text)
        } else {
            let items: Vec<String> = members
                .iter()
                .map(|&j| std::mem::take(&mut objects[j].text))
                .collect();
            shell.replacen("\"\\u0000\"", &format!("[{}]", items.join(",")), 1)
        };
        out.push(Source {
            name: std::mem::take(&mut objects[i].name),
            text,
        });
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
    let mut objects = Vec::new();
    let mut report = audit_repo_each(sources, o, |a| objects.push(a));
    report.objects = objects;
    report
}

/// [`audit_repo`] handing each object's audit to `each` as it is made,
/// in file order, instead of keeping it: the report returned has no
/// `objects`, so a caller that writes each one out holds one at a time.
///
/// Each source is parsed once for its objects and its part of the graph,
/// and its tree dropped; a source on a walked path is parsed once more,
/// for every path through it.
pub fn audit_repo_each(
    sources: &[Source],
    o: &Options,
    mut each: impl FnMut(ObjectAudit),
) -> RepoReport {
    let mut report = RepoReport::default();
    let mut nodes = Vec::new();
    let mut istio = false;
    for (i, s) in sources.iter().enumerate() {
        let parsed = Parsed::read(PathInput::new(&s.name, &s.text, None));
        let found = check(o).and_then(|()| match &parsed {
            Ok(p) => file::objects(p, o),
            Err(e) => Err(e.clone()),
        });
        match found {
            Ok(found) => {
                for f in found {
                    each(ObjectAudit {
                        file: s.name.clone(),
                        selector: f.selector,
                        report: f.report,
                    });
                }
            }
            Err(e) => report.unreadable.push(e),
        }
        // Only the nodes are kept, not the tree: memory follows one
        // object, not the dump.
        if let Ok(p) = &parsed {
            istio = istio || on_istio(p.docs(), o);
            for d in p.docs() {
                nodes_of(i, d, &mut nodes);
            }
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
    audit_paths(sources, &graph.nodes, walked, o, &mut report);
    report.paths.sort_by(|a, b| {
        b.report
            .dead
            .bottom_attempts
            .total_cmp(&a.report.dead.bottom_attempts)
    });
    report
}

/// Audits each walked path into `report`, each source on it parsed once
/// for all the paths through it.
fn audit_paths(
    sources: &[Source],
    nodes: &[Node],
    walked: Vec<Vec<usize>>,
    o: &Options,
    report: &mut RepoReport,
) {
    // Each parsed source is dropped after the last path through it, so the
    // trees held at once are those the paths still to come share.
    let mut last: HashMap<usize, usize> = HashMap::new();
    for (n, p) in walked.iter().enumerate() {
        for s in p.iter().filter_map(|&i| nodes[i].source) {
            last.insert(s, n);
        }
    }
    let mut parsed: HashMap<usize, Result<Parsed<'_>, PathError>> = HashMap::new();
    for (n, p) in walked.into_iter().enumerate() {
        let hops: Vec<String> = p
            .iter()
            .map(|&i| match nodes[i].source {
                Some(s) => format!("{}:{}", sources[s].name, nodes[i].selector),
                None => nodes[i].selector.clone(),
            })
            .collect();
        for &i in &p {
            if let Some(s) = nodes[i].source {
                parsed.entry(s).or_insert_with(|| {
                    Parsed::read(PathInput::new(&sources[s].name, &sources[s].text, None))
                });
            }
        }
        // A built-in sidecar is read from its name alone.
        let sidecars: Vec<Result<Parsed<'_>, PathError>> = p
            .iter()
            .filter(|&&i| nodes[i].source.is_none())
            .map(|&i| Parsed::read(PathInput::new(&nodes[i].selector, "", None)))
            .collect();
        let mut sidecar = sidecars.iter();
        let read: Result<Vec<Read<'_>>, PathError> = p
            .iter()
            .map(|&i| {
                let source = match nodes[i].source {
                    Some(s) => &parsed[&s],
                    None => sidecar.next().expect("one per built-in hop"),
                };
                match (source, nodes[i].source) {
                    (Ok(f), Some(_)) => Ok(f.at(Some(nodes[i].selector.as_str()))),
                    (Ok(f), None) => Ok(f.as_given()),
                    (Err(e), _) => Err(e.clone()),
                }
            })
            .collect();
        match check(o).and(read).and_then(|read| super::report(&read, o)) {
            Ok(r) => report.paths.push(RepoPath { hops, report: r }),
            Err(e) => report.unconnected.push(e),
        }
        for s in p.iter().filter_map(|&i| nodes[i].source) {
            if last.get(&s) == Some(&n) {
                parsed.remove(&s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, name: &str, spec: &str) -> String {
        format!("- apiVersion: networking.istio.io/v1\n  kind: {kind}\n  metadata: {{name: {name}, namespace: prod}}\n  spec:\n{spec}")
    }

    /// A list as kubectl prints it: VirtualServices, a DestinationRule of
    /// one of their hosts, a comment, a null item and an application
    /// config, with the list's own keys before and after the items.
    fn list(n: usize) -> String {
        let mut s = String::from("apiVersion: v1\nitems:\n# the objects\n");
        for i in 0..n {
            s += &object(
                "VirtualService",
                &format!("svc-{i}"),
                &format!("    hosts: [svc-{i}]\n    http:\n    - route:\n      - destination: {{host: svc-{i}}}\n      retries: {{attempts: 2}}\n"),
            );
        }
        s += &object(
            "DestinationRule",
            "svc-3",
            "    host: svc-3\n    trafficPolicy: {connectionPool: {http: {maxRetries: 1}}}\n",
        );
        s += "-\n- spring:\n    application: {name: shop}\n";
        s + "kind: List\nmetadata:\n  resourceVersion: \"\"\n"
    }

    /// The sources of a whole read of `text`: every object parsed at once.
    fn read_whole(text: &str) -> Vec<Source> {
        let docs = objects_within("-", text, tree::MAX_DUMP_BYTES).unwrap();
        grouped(
            docs.iter()
                .enumerate()
                .map(|(i, d)| DumpObject::of("-", i, d))
                .collect(),
        )
    }

    #[test]
    fn a_kubectl_list_read_item_by_item_gives_the_sources_of_a_whole_read() {
        let text = list(60);
        let one_by_one = list_one_by_one("-", &text).expect("the list reads item by item");
        assert_eq!(one_by_one.len(), 62, "the null item is no object");
        let sources = grouped(one_by_one);
        assert_eq!(sources, read_whole(&text));
        assert_eq!(sources, split_dump("-", &text));
        assert_eq!(sources.len(), 61, "the DestinationRule goes with svc-3");
        assert_eq!(
            sources[60].name, "-#62",
            "the application is the 62nd object"
        );
        // A host's objects as one list, as serde_json writes it.
        let docs = objects_within("-", &text, tree::MAX_DUMP_BYTES).unwrap();
        let with =
            serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [&docs[3], &docs[60]]});
        assert_eq!(sources[3].text, with.to_string());
    }

    #[test]
    fn each_object_audit_is_handed_over_in_file_order_and_not_kept() {
        let sources = split_dump("-", &list(60));
        let kept = audit_repo(&sources, &Options::default());
        let mut handed = Vec::new();
        let rest = audit_repo_each(&sources, &Options::default(), |a| handed.push(a));
        assert!(rest.objects.is_empty());
        assert_eq!(
            handed.len(),
            60,
            "60 VirtualServices, one with its DestinationRule"
        );
        assert_eq!(handed, kept.objects);
        assert_eq!(rest.paths, kept.paths);
    }

    #[test]
    fn a_source_is_parsed_once_for_its_objects_and_once_for_its_paths() {
        let route = "kind: HTTPRoute\napiVersion: gateway.networking.k8s.io/v1\nmetadata: {name: edge}\nspec:\n  rules:\n  - backendRefs: [{name: shop}]\n  - backendRefs: [{name: shop}]\n";
        let app = "spring.application.name: shop\nresilience4j.retry.instances.inventory.maxAttempts: 3\nresilience4j.retry.instances.payments.maxAttempts: 2\n";
        let sources = [("route.yaml", route), ("application.yml", app)]
            .map(|(name, text)| Source {
                name: name.into(),
                text: text.into(),
            })
            .to_vec();
        let before = tree::PARSED.with(std::cell::Cell::get);
        let r = audit_repo(&sources, &Options::default());
        assert_eq!(r.objects.len(), 4, "two rules, two instances");
        assert_eq!(r.paths.len(), 4, "each rule to each instance's sidecar");
        assert_eq!(tree::PARSED.with(std::cell::Cell::get) - before, 4);
    }

    #[test]
    fn a_list_whose_items_do_not_read_alone_is_read_whole() {
        // The second item uses an anchor the first defines.
        let text = list(60).replacen("retries: {attempts: 2}", "retries: &r {attempts: 2}", 1);
        let text = text.replacen("retries: {attempts: 2}", "retries: *r", 1);
        assert!(list_one_by_one("-", &text).is_none());
        let sources = split_dump("-", &text);
        assert_eq!(sources, read_whole(&text));
        assert!(sources[1].text.contains("\"attempts\":2"));
    }

    #[test]
    fn only_a_list_printed_as_kubectl_prints_it_is_read_item_by_item() {
        let items = list(60);
        // Items indented under `items:`, several documents, no list at all.
        let indented = items.replace("\n- ", "\n  - ").replace("\n  ", "\n    ");
        assert!(tree::list_items(&indented).is_none());
        assert!(tree::list_items(&format!("{items}---\na: 1\n")).is_none());
        assert!(tree::list_items("kind: List\nitems: []\n").is_none());
        // Sixty items of a kind that is not a list are not its items.
        let not_a_list = items.replace("kind: List", "kind: Deployment");
        assert!(list_one_by_one("-", &not_a_list).is_none());
        // Few objects: the file is read as a whole, as before.
        assert!(list_one_by_one("-", &list(10)).is_none());
    }
}
