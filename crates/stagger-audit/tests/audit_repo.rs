//! `audit_repo` and `split_dump`: a repository's objects connected into the
//! call paths its routes imply, and a cluster dump read object by object.

use stagger_audit::path::{audit_repo, split_dump, Options, Source};

fn example(rel: &str) -> Source {
    let path = format!(
        "{}/../../examples/audit/path/{rel}",
        env!("CARGO_MANIFEST_DIR")
    );
    Source {
        name: rel.to_string(),
        text: std::fs::read_to_string(path).unwrap(),
    }
}

fn vs(name: &str, ns: &str, attempts: u32) -> String {
    format!(
        "- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata: {{name: {name}, namespace: {ns}}}\n  spec:\n    hosts: [{name}]\n    http:\n    - route:\n      - destination: {{host: {name}}}\n      retries: {{attempts: {attempts}, retryOn: 5xx}}\n"
    )
}

fn dr(host: &str, ns: &str, max: u32) -> String {
    format!(
        "- apiVersion: networking.istio.io/v1\n  kind: DestinationRule\n  metadata: {{name: {host}, namespace: {ns}}}\n  spec:\n    host: {host}\n    trafficPolicy: {{connectionPool: {{http: {{maxRetries: {max}}}}}}}\n"
    )
}

fn dump(n: usize) -> String {
    let mut s = "apiVersion: v1\nkind: List\nitems:\n".to_string();
    for i in 0..n {
        s.push_str(&vs(&format!("svc-{i}"), "prod", 2));
    }
    s.push_str(&dr("svc-7", "prod", 5));
    s
}

#[test]
fn the_route_the_app_and_the_sidecar_connect_into_27_attempts() {
    // GEP-1731: `attempts: 2` is 3 tries on Istio; resilience4j's
    // maxAttempts 3 is 3 calls; Istio's default policy is 2 retries.
    let sources = [
        example("storefront-route.yaml"),
        example("storefront-application.yml"),
    ];
    let r = audit_repo(&sources, &Options::default());
    assert_eq!(r.objects.len(), 2);
    assert_eq!(
        r.paths.len(),
        1,
        "{:?}",
        r.paths.iter().map(|p| &p.hops).collect::<Vec<_>>()
    );
    let p = &r.paths[0];
    assert_eq!(
        p.hops,
        [
            "storefront-route.yaml:storefront/0",
            "storefront-application.yml:inventory",
            "@istio-sidecar:inventory"
        ]
    );
    assert_eq!(p.report.dead.bottom_attempts, 27.0);
    assert!(p.report.layers[1]
        .cut_by
        .as_deref()
        .is_some_and(|c| c.contains("circuit breaker inventory")));
}

#[test]
fn without_istio_the_app_call_has_no_implied_sidecar() {
    // Envoy Gateway runs the route and no Istio object is in the files:
    // nothing says a sidecar sits under the application.
    let sources = [
        example("storefront-route.yaml"),
        example("storefront-application.yml"),
    ];
    let o = Options {
        gateway: stagger_audit::path::GatewayImpl::EnvoyGateway,
        ..Options::default()
    };
    let r = audit_repo(&sources, &o);
    assert_eq!(r.paths.len(), 1);
    assert_eq!(r.paths[0].hops.len(), 2);
}

#[test]
fn paths_are_sorted_worst_first() {
    let app = |name: &str, attempts: u32| {
        Source {
        name: format!("{name}.yml"),
        text: format!("spring.application.name: {name}\nresilience4j.retry.instances.db.maxAttempts: {attempts}\n"),
    }
    };
    let route = |name: &str, attempts: u32| {
        Source {
        name: format!("{name}-route.yaml"),
        text: format!("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}}}\nspec:\n  rules:\n  - backendRefs: [{{name: {name}}}]\n    retry: {{attempts: {attempts}}}\n"),
    }
    };
    let sources = [route("a", 1), app("a", 2), route("b", 3), app("b", 3)];
    let r = audit_repo(&sources, &Options::default());
    let bottoms: Vec<f64> = r
        .paths
        .iter()
        .map(|p| p.report.dead.bottom_attempts)
        .collect();
    assert_eq!(bottoms.len(), 2, "{bottoms:?}");
    assert!(bottoms[0] > bottoms[1], "{bottoms:?}");
    assert!(r.paths[0].hops[0].starts_with("b-route.yaml"));
}

#[test]
fn a_small_file_stays_whole() {
    let text = format!("apiVersion: v1\nkind: List\nitems:\n{}", vs("a", "x", 2));
    let s = split_dump("vs.yaml", &text);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].name, "vs.yaml");
}

#[test]
fn a_dump_is_split_with_each_destination_rule_beside_its_virtual_service() {
    let s = split_dump("-", &dump(60));
    // 60 VirtualServices; the DestinationRule joins svc-7's.
    assert_eq!(s.len(), 60);
    assert_eq!(s[7].name, "-#VirtualService/prod/svc-7");
    assert!(s[7].text.contains("DestinationRule"));
    assert!(!s[8].text.contains("DestinationRule"));
    let r = audit_repo(&s, &Options::default());
    assert!(r.unreadable.is_empty(), "{:?}", r.unreadable);
    assert_eq!(r.objects.len(), 60);
    assert!(r.objects[7].report.layers[0].budget.is_some());
    assert!(r.objects[8].report.layers[0].budget.is_none());
}

// A path starts where traffic enters (an HTTPRoute rule, a VirtualService
// bound to gateways). An application no route leads to, calling through
// Istio's default sidecar, was walked as a path of its own.
#[test]
fn call_paths_start_where_traffic_enters_not_at_an_app_no_route_reaches() {
    let sources = [
        example("storefront-application.yml"),
        example("edge-vs.yaml"),
    ];
    let r = audit_repo(&sources, &Options::default());
    assert!(
        r.paths.is_empty(),
        "{:?}",
        r.paths.iter().map(|p| &p.hops).collect::<Vec<_>>()
    );
    assert_eq!(r.objects.len(), 2, "each is still audited alone");
    // With the route that enters, the path is there.
    let mut with_route = sources.to_vec();
    with_route.push(example("storefront-route.yaml"));
    let r = audit_repo(&with_route, &Options::default());
    assert!(r
        .paths
        .iter()
        .all(|p| p.hops[0].starts_with("storefront-route.yaml")));
    assert!(!r.paths.is_empty());
}

// A file of a VirtualService and Istio's mesh config stays one source (the
// mesh config is no layer of its own); a file of a VirtualService and an
// HTTPRoute is one source per reader, and a Deployment beside them its own.
#[test]
fn a_small_file_of_several_kinds_is_split_by_reader_only_when_readers_differ() {
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {host: a}\n";
    let mesh = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: istio, namespace: istio-system}\ndata:\n  mesh: |\n    defaultHttpRetryPolicy:\n      attempts: 1\n";
    let both = format!("{vs}---\n{mesh}");
    let s = split_dump("mesh.yaml", &both);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].name, "mesh.yaml");
    let r = audit_repo(&s, &Options::default());
    assert!(r.unreadable.is_empty(), "{:?}", r.unreadable);
    let route = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules:\n  - backendRefs: [{name: a}]\n";
    let deploy =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: x}\nspec: {}\n";
    let mixed = format!("{vs}---\n{route}---\n{deploy}");
    let names: Vec<String> = split_dump("m.yaml", &mixed)
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(
        names,
        [
            "m.yaml#VirtualService",
            "m.yaml#HTTPRoute",
            "m.yaml#Deployment/x/d"
        ]
    );
}
