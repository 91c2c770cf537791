//! `audit_file` lists a file's objects itself: the set it audits is the
//! set a caller finds by trying every selector a reader's "name one"
//! error lists (and, for a host or route, the selectors under it), in the
//! same order, with the same reports; where that search fails, the file
//! fails with the same error.

use crate::support;

use stagger_audit::path::{audit_file, audit_path, Options, PathError, PathInput, PathReport};

/// The objects of a file found by asking: audit it with no selector, and
/// wherever the reader answers with the selectors it offers, audit each of
/// those in turn (a host's routes as `HOST/ROUTE`), in file order.
fn by_asking(
    name: &str,
    text: &str,
    o: &Options,
) -> Result<Vec<(Option<String>, PathReport)>, PathError> {
    let mut out = Vec::new();
    let mut todo: Vec<Option<String>> = vec![None];
    while let Some(sel) = todo.pop() {
        match audit_path(&[PathInput::new(name, text, sel.as_deref())], o) {
            Ok(report) => out.push((sel, report)),
            Err(e) if !e.choices.is_empty() && out.len() + todo.len() < 500 => {
                // An offer that names the selector asked about again is
                // the reader's answer for it: the file fails.
                if sel.is_some() && e.choices.iter().any(|c| Some(c) == sel.as_ref()) {
                    return Err(e);
                }
                let deeper: Vec<Option<String>> = e
                    .choices
                    .iter()
                    .map(|c| match &sel {
                        Some(s) if !c.starts_with(&format!("{s}/")) => Some(format!("{s}/{c}")),
                        _ => Some(c.clone()),
                    })
                    .collect();
                todo.extend(deeper.into_iter().rev());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// `audit_file` and the search agree on `text`: the same selectors, in
/// order, with equal reports, or the same error. The count of objects.
pub(crate) fn agree(name: &str, text: &str) -> usize {
    let o = Options::default();
    match (audit_file(name, text, &o), by_asking(name, text, &o)) {
        (Ok(listed), Ok(asked)) => {
            let l: Vec<_> = listed.iter().map(|r| r.selector.clone()).collect();
            let a: Vec<_> = asked.iter().map(|(s, _)| s.clone()).collect();
            assert_eq!(
                l, a,
                "{name}: the objects listed and the objects found by asking"
            );
            for (r, (_, report)) in listed.iter().zip(&asked) {
                assert_eq!(&r.report, report, "{name}:{:?}", r.selector);
            }
            l.len()
        }
        (Err(l), Err(a)) => {
            assert_eq!(l.to_string(), a.to_string(), "{name}");
            0
        }
        (l, a) => panic!(
            "{name}: audit_file gives {:?}, asking gives {:?}",
            l.map(|v| v.len()),
            a.map(|v| v.len())
        ),
    }
}

/// Every file under `dir`, recursively, sorted.
fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn agree_under(dir: &std::path::Path) -> (usize, usize) {
    let mut all = Vec::new();
    files(dir, &mut all);
    let mut objects = 0;
    for p in &all {
        let Ok(text) = std::fs::read_to_string(p) else {
            continue;
        };
        objects += agree(&p.display().to_string(), &text);
    }
    (all.len(), objects)
}

#[test]
fn every_example_file_lists_the_objects_asking_finds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/audit");
    let (files, objects) = agree_under(&dir);
    assert!(files >= 15, "{files} files");
    assert!(objects >= 8, "{objects} objects");
}

#[test]
fn every_published_file_lists_the_objects_asking_finds() {
    for folder in ["w4-configs", "mesh-configs"] {
        let Some(dir) = support::published::folder(folder) else {
            return;
        };
        let (files, objects) = agree_under(&dir);
        assert!(files >= 8, "{folder}: {files} files");
        assert!(objects >= files / 2, "{folder}: {objects} objects");
    }
}

/// Files of every reader that holds several objects, one or two levels
/// deep, with objects that cannot be told apart and objects that do not
/// read.
const MANY: &[(&str, &str)] = &[
    (
        "vs.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a, namespace: x}\nspec:\n  hosts: [reviews]\n  http:\n  - name: read\n    route: [{destination: {host: reviews}}]\n  - route: [{destination: {host: reviews}}]\n    retries: {attempts: 4}\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: b, namespace: y}\nspec:\n  hosts: [reviews]\n  http:\n  - route: [{destination: {host: reviews}}]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: c}\nspec:\n  hosts: [ratings.prod.svc.cluster.local]\n  http:\n  - route: [{destination: {host: ratings}}]\n",
    ),
    (
        "one-vs.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n  hosts: [cart]\n  http:\n  - name: one\n    route: [{destination: {host: cart}}]\n  - name: two\n    route: [{destination: {host: cart}}]\n  - route: [{destination: {host: cart}}]\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: cart}\nspec:\n  host: cart\n  trafficPolicy: {connectionPool: {http: {maxRetries: 2}}}\n",
    ),
    (
        "same-host.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n  hosts: [a, b]\n  http:\n  - route: [{destination: {host: a}}]\n---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: b}\nspec:\n  hosts: [b]\n  http:\n  - route: [{destination: {host: b}}]\n",
    ),
    (
        "bad-route.yaml",
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n  hosts: [a]\n  http:\n  - route: [{destination: {host: a}}]\n  - route: [{destination: {host: a}}]\n    retries: {attempts: many}\n",
    ),
    (
        "dr.yaml",
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: a}\nspec: {host: a}\n---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: b}\nspec:\n  host: b.prod.svc.cluster.local\n  trafficPolicy: {connectionPool: {http: {maxRetries: 5}}}\n",
    ),
    (
        "filter.yaml",
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: f}\nspec:\n  configPatches:\n  - applyTo: HTTP_ROUTE\n    patch:\n      operation: MERGE\n      value: {route: {retry_policy: {num_retries: 5}}}\n  - applyTo: VIRTUAL_HOST\n    patch:\n      operation: REPLACE\n      value: {retry_policy: {num_retries: 2, retry_on: 5xx}}\n",
    ),
    (
        "routes.yaml",
        "virtual_hosts:\n- name: cart\n  domains: [cart]\n  routes:\n  - name: all\n    route: {cluster: cart, retry_policy: {num_retries: 3, retry_on: 5xx}}\n  - route: {cluster: cart}\n- name: pay\n  domains: [pay]\n  routes:\n  - name: all\n    route: {cluster: pay}\n",
    ),
    (
        "clusters.yaml",
        "clusters:\n- name: cart\n  circuit_breakers: {thresholds: [{max_retries: 5}]}\n- name: pay\n  circuit_breakers: {thresholds: [{retry_budget: {budget_percent: {value: 20}}}]}\n",
    ),
    (
        "profile.yaml",
        "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata: {name: web.prod.svc.cluster.local}\nspec:\n  routes:\n  - name: GET /\n    condition: {method: GET, pathRegex: /}\n    isRetryable: true\n  - name: POST /cart\n    condition: {method: POST, pathRegex: /cart}\n",
    ),
    (
        "linkerd-routes.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: a\n  annotations: {retry.linkerd.io/http: 5xx, retry.linkerd.io/limit: \"2\"}\nspec:\n  parentRefs: [{name: web, kind: Service, group: core}]\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: b\n  annotations: {retry.linkerd.io/grpc: unavailable}\n",
    ),
    (
        "httproute.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: one}\nspec:\n  rules:\n  - name: read\n    backendRefs: [{name: a}]\n    retry: {attempts: 3, codes: [503]}\n  - backendRefs: [{name: a}]\n---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: two}\nspec:\n  rules:\n  - backendRefs: [{name: b}]\n",
    ),
    (
        "one-route.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: one}\nspec:\n  rules:\n  - backendRefs: [{name: a}]\n  - backendRefs: [{name: a}]\n    retry: {attempts: 2}\n",
    ),
    (
        "constraint.yaml",
        "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {name: p}\nspec:\n  targetRefs: [{kind: Service, name: a}]\n  retryConstraint: {budget: {percent: 30}}\n---\napiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {name: q}\nspec:\n  retryConstraint: {budget: {percent: 10}}\n",
    ),
    (
        "eg.yaml",
        "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: p}\nspec:\n  targetRefs: [{kind: HTTPRoute, name: r}]\n  retry: {numRetries: 3}\n---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: q}\nspec:\n  targetRefs: [{kind: Gateway, name: g}]\n",
    ),
    (
        "eg-route.yaml",
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules:\n  - backendRefs: [{name: a}]\n  - backendRefs: [{name: b}]\n---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: p}\nspec:\n  targetRefs: [{kind: HTTPRoute, name: r}]\n  retry: {numRetries: 3}\n",
    ),
    (
        "ingress.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: a\n  annotations: {nginx.ingress.kubernetes.io/proxy-next-upstream-tries: \"2\"}\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: b\n  annotations: {nginx.ingress.kubernetes.io/proxy-next-upstream: error timeout http_503}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: ingress-nginx-controller}\ndata: {proxy-next-upstream-tries: \"4\"}\n",
    ),
    (
        "nginx.conf",
        "http {\n  upstream app { server a:80; server b:80; }\n  server {\n    proxy_next_upstream error timeout http_502;\n    location / { proxy_pass http://app; }\n    location /api { proxy_pass http://app/api; proxy_next_upstream_tries 2; }\n  }\n}\n",
    ),
    (
        "haproxy.cfg",
        "defaults\n  mode http\n  retries 3\n  timeout server 5s\nbackend web\n  retry-on conn-failure 503\n  server a 10.0.0.1:80\nbackend api\n  server b 10.0.0.2:80\nbackend stats\n  stats enable\n",
    ),
    (
        "traefik.yaml",
        "http:\n  middlewares:\n    a:\n      retry: {attempts: 4, initialInterval: 100ms}\n    b:\n      retry: {attempts: 2}\n",
    ),
    (
        "traefik.toml",
        "[http.middlewares]\n  [http.middlewares.a.retry]\n    attempts = 4\n  [http.middlewares.b.retry]\n    attempts = 2\n",
    ),
    (
        "application.yml",
        "spring:\n  application: {name: shop}\nresilience4j:\n  retry:\n    instances:\n      inventory: {maxAttempts: 3, waitDuration: 100ms}\n      payments: {maxAttempts: 2}\n",
    ),
    (
        "config",
        "[profile a]\nretry_mode = standard\n[profile b]\nmax_attempts = 7\n",
    ),
    (
        "aws-default",
        "[default]\nretry_mode = standard\n[profile b]\nmax_attempts = 7\n",
    ),
    (
        "service.json",
        r#"{"methodConfig":[{"name":[{"service":"shop.Cart"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}},{"name":[{"service":"shop.Pay","method":"Charge"}],"timeout":"1s"}]}"#,
    ),
];

#[test]
fn every_reader_of_several_objects_lists_what_asking_finds() {
    let mut objects = 0;
    for (name, text) in MANY {
        objects += agree(name, text);
    }
    assert!(objects >= 40, "{objects} objects");
}

/// The same files cut short at every line: whatever reads, reads alike.
#[test]
fn files_cut_short_list_what_asking_finds() {
    for (name, text) in MANY {
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            at += line.len();
            agree(name, &text[..at]);
        }
    }
}

/// A file of more objects than are audited one by one says so, naming the
/// file, instead of dropping what is past the limit.
#[test]
fn a_file_past_the_limit_says_so() {
    let mut text = String::new();
    for i in 0..300 {
        text += &format!("---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: v{i}}}\nspec:\n  hosts: [h{i}]\n  http:\n  - route: [{{destination: {{host: h{i}}}}}]\n  - route: [{{destination: {{host: h{i}}}}}]\n");
    }
    let e = audit_file("big.yaml", &text, &Options::default()).unwrap_err();
    assert_eq!(e.file, "big.yaml");
    assert!(e.to_string().contains("500"), "{e}");
    // Within the limit, every route of every host.
    let cut: String = text
        .split("---\n")
        .take(101)
        .collect::<Vec<_>>()
        .join("---\n");
    let all = audit_file("big.yaml", &cut, &Options::default()).unwrap();
    assert_eq!(all.len(), 200);
    assert_eq!(all[1].selector.as_deref(), Some("h0/1"));
}
