//! Regressions of the audit's readers, each named for the defect it
//! reproduces (found on published files: the numbers the readers gave
//! against the ones the systems' own docs give).

use std::time::Duration;

use stagger_audit::path::{
    audit_file, audit_path, what_is, Dead, Options, PathInput, PathReport, Protocol, Reading,
};
use stagger_audit::{audit, Input};

fn run(files: &[(&str, &str, Option<&str>)], o: &Options) -> PathReport {
    let inputs: Vec<PathInput<'_>> = files
        .iter()
        .map(|(n, t, s)| PathInput::new(n, t, *s))
        .collect();
    audit_path(&inputs, o).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(r: &PathReport) -> Vec<&'static str> {
    r.findings.iter().map(|f| f.id).collect()
}

const TWO_NAMESPACES: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: a}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
    retries: {attempts: 5, retryOn: connect-failure}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: reviews, namespace: b}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews}
    retries: {attempts: 0}
";

// Istio reads a short host as the service of the VirtualService's own
// namespace: `reviews.b` is namespace b's, which does not retry.
#[test]
fn short_host_in_two_namespaces_takes_the_namespace_the_selector_names() {
    let o = Options::default();
    let b = run(&[("vs.yaml", TWO_NAMESPACES, Some("reviews.b"))], &o);
    assert_eq!(b.dead.bottom_attempts, 1.0);
    let a = run(
        &[(
            "vs.yaml",
            TWO_NAMESPACES,
            Some("reviews.a.svc.cluster.local"),
        )],
        &o,
    );
    assert_eq!(a.dead.bottom_attempts, 6.0);
    // The short host alone names neither: both are listed.
    let e = audit_path(
        &[PathInput::new("vs.yaml", TWO_NAMESPACES, Some("reviews"))],
        &o,
    )
    .unwrap_err();
    assert_eq!(e.choices, ["reviews.a", "reviews.b"], "{e}");
}

// `gateways` without `mesh` binds the routes to the gateway only: the layer
// is the gateway's, and the advice says so.
#[test]
fn gateway_only_virtual_service_is_the_gateways_layer_not_a_mesh_hop() {
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: cart}\nspec:\n  hosts: [cart.example.com]\n  gateways: [istio-system/public]\n  http:\n  - route:\n    - destination: {host: cart}\n";
    let r = run(&[("vs.yaml", vs, None)], &Options::default());
    assert!(
        r.layers[0]
            .selector
            .contains("at gateway istio-system/public"),
        "{}",
        r.layers[0].selector
    );
    let implicit = r
        .findings
        .iter()
        .find(|f| f.id == "mesh_default_retries")
        .unwrap();
    assert!(
        implicit.message.contains("at gateway istio-system/public"),
        "{}",
        implicit.message
    );
    assert!(r.layers[0].assumes.iter().any(|a| a.contains("sidecars")));
    let both = vs.replace("[istio-system/public]", "[mesh, istio-system/public]");
    let m = run(&[("vs.yaml", &both, None)], &Options::default());
    assert!(!m.layers[0].selector.contains("gateway"));
}

// Linkerd ignores a route's retry annotations when the Service has a
// ServiceProfile: the profile's 1.20 alone, not 1.20 × 2.
#[test]
fn linkerd_route_and_profile_for_one_service_do_not_multiply() {
    let profile = "apiVersion: linkerd.io/v1alpha2\nkind: ServiceProfile\nmetadata: {name: web-svc.emojivoto.svc.cluster.local, namespace: emojivoto}\nspec:\n  routes:\n  - name: GET /api/list\n    condition: {method: GET, pathRegex: /api/list}\n    isRetryable: true\n";
    let route = "apiVersion: policy.linkerd.io/v1beta3\nkind: HTTPRoute\nmetadata:\n  name: web\n  namespace: emojivoto\n  annotations:\n    retry.linkerd.io/http: 5xx\n    retry.linkerd.io/limit: \"1\"\nspec:\n  parentRefs:\n  - {name: web-svc, kind: Service, group: core}\n";
    let o = Options::default();
    let r = run(
        &[("sp.yaml", profile, None), ("route.yaml", route, None)],
        &o,
    );
    assert_eq!(r.dead.bottom_attempts, 1.2);
    assert!(r.layers[1]
        .assumes
        .iter()
        .any(|a| a.contains("ServiceProfile")));
    // Another Service's route still retries.
    let other = route.replace("name: web-svc", "name: api-svc");
    let r = run(
        &[("sp.yaml", profile, None), ("route.yaml", &other, None)],
        &o,
    );
    assert_eq!(r.dead.bottom_attempts, 2.4);
}

// A gRPC layer waits as the library's gRPC layer waits: A6's schedule with
// the ±20 % jitter grpc-go and grpc-java apply (`stagger::grpc`), whose mean
// is the backoff itself — 0.5 s, 1 s, 2 s and 4 s, 7.5 s in all. The audit
// once timed them at half (the uniform draw below the backoff of A6's first
// text), a rule of its own the library does not apply.
#[test]
fn grpc_layers_are_timed_at_the_mean_of_the_jitter_the_library_applies() {
    let svc = r#"{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.5s","maxBackoff":"10s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
    let o = Options {
        dead: Dead::Unavailable,
        protocol: Some(Protocol::Grpc),
        ..Options::default()
    };
    let r = run(&[("svc.json", svc, None)], &o);
    assert_eq!(r.dead.bottom_attempts, 5.0);
    // The library's own schedule for the method, each wait at the middle of
    // its jitter's range.
    let config = stagger::config::ServiceConfig::from_json(svc).unwrap();
    let backoff = *config.methods[0].policy.backoff();
    let waits: Duration = (1..=4)
        .map(|n| {
            let (lo, hi) = backoff.range(n);
            (lo + hi) / 2
        })
        .sum();
    assert!((waits.as_secs_f64() - 7.5).abs() < 1e-6, "{waits:?}");
    // Five 1 ms failures and four mean waits.
    let took = r.dead.edge_waits.unwrap();
    let want = waits + Duration::from_millis(5);
    assert!(
        took.abs_diff(want) < Duration::from_millis(1),
        "{took:?} vs {want:?}"
    );
}

#[test]
fn one_attempt_is_not_written_as_1_attempts() {
    let vs = "kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - retries: {attempts: 0}\n";
    let r = run(&[("vs.yaml", vs, None)], &Options::default());
    assert_eq!(r.dead.bottom_attempts, 1.0);
}

// Plain `audit` names snake_case keys; `--path` read them silently.
#[test]
fn path_keeps_the_nonstandard_spelling_finding() {
    let svc = r#"{"method_config":[{"name":[{"service":"a.B"}],"retry_policy":{"max_attempts":3,"initial_backoff":"0.1s","max_backoff":"1s","backoff_multiplier":2,"retryable_status_codes":["UNAVAILABLE"]}}]}"#;
    let r = run(&[("svc.json", svc, None)], &Options::default());
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "nonstandard_spelling")
        .unwrap();
    assert!(f.message.contains("snake_case keys"), "{}", f.message);
    let plain = audit(&[Input::new("svc.json", svc)]).unwrap();
    assert!(plain
        .findings
        .iter()
        .any(|f| f.id == "nonstandard_spelling"));
}

// `--path` refuses over 4 MiB; plain `audit` read anything.
#[test]
fn plain_audit_refuses_a_file_over_4_mib() {
    let big = format!("{{\"methodConfig\":[],\"x\":\"{}\"}}", "a".repeat(5 << 20));
    let e = audit(&[Input::new("big.json", &big)]).unwrap_err();
    assert_eq!(e.file, "big.json");
    assert!(e.to_string().contains("4 MiB"), "{e}");
}

// The bomb's error was the parser's Debug output (`Nodes { nodes: … }`).
#[test]
fn yaml_alias_bomb_is_refused_in_words_not_parser_debug_output() {
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
    let mut prev = 'a';
    for c in 'b'..='l' {
        let refs = vec![format!("*{prev}"); 9].join(", ");
        bomb.push_str(&format!("{c}: &{c} [{refs}]\n"));
        prev = c;
    }
    let e = audit_path(
        &[PathInput::new("bomb.yaml", &bomb, None)],
        &Options::default(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with("bomb.yaml: "), "{msg}");
    assert!(msg.contains("alias bomb"), "{msg}");
    assert!(
        !msg.contains('{') && !msg.contains("budget breached"),
        "{msg}"
    );
    assert_eq!(msg.lines().count(), 1);
}

// `kubectl get vs -A -o yaml` prints a `kind: List`: it was refused.
#[test]
fn kubernetes_list_is_read_item_by_item() {
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata: {name: a, namespace: x}\n  spec:\n    hosts: [a]\n    http:\n    - retries: {attempts: 4}\n- apiVersion: networking.istio.io/v1\n  kind: VirtualService\n  metadata: {name: b, namespace: x}\n  spec:\n    hosts: [b]\n    http:\n    - retries: {attempts: 0}\n";
    assert!(matches!(what_is("vs.yaml", list), Reading::Path(_)));
    let all = audit_file("vs.yaml", list, &Options::default()).unwrap();
    let got: Vec<(Option<String>, f64)> = all
        .iter()
        .map(|r| (r.selector.clone(), r.report.dead.bottom_attempts))
        .collect();
    assert_eq!(got, [(Some("a".into()), 5.0), (Some("b".into()), 1.0)]);
}

// A DNS TXT choice as a Go program embeds it was read as a policy file
// ("unknown key `clientLanguage`").
#[test]
fn dns_txt_choice_object_is_read_as_its_service_config() {
    let choice = r#"{"clientLanguage":["go"],"serviceConfig":{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}}"#;
    assert_eq!(what_is("choice.json", choice), Reading::Client);
    let r = audit(&[Input::new("choice.json", choice)]).unwrap();
    assert_eq!(r.methods.len(), 1);
    assert_eq!(r.bottom_attempts, 3);
    assert!(
        r.findings.iter().all(|f| f.id != "invalid"),
        "{:?}",
        r.findings
    );
    let p = run(&[("choice.json", choice, None)], &Options::default());
    assert_eq!(p.layers[0].max_tries, Some(3));
}

// A mesh file given to plain `audit` got an error about service configs.
#[test]
fn a_mesh_file_is_recognised_by_its_kind_and_other_kinds_are_named() {
    let vs = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: a}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {host: a}\n";
    assert!(matches!(what_is("vs.yaml", vs), Reading::Path(w) if w.contains("VirtualService")));
    let dep = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n";
    assert!(matches!(what_is("d.yaml", dep), Reading::Other(w) if w.contains("Deployment")));
    let e = audit_path(&[PathInput::new("d.yaml", dep, None)], &Options::default()).unwrap_err();
    assert!(e.to_string().contains("Deployment"), "{e}");
    assert!(!e.to_string().contains("serviceConfig"), "{e}");
}

#[test]
fn every_kind_is_told_apart_by_its_content() {
    let cases: &[(&str, &str, &str)] = &[
        ("a.conf", "http {\n  server {\n    location / { proxy_pass http://up; }\n  }\n}\n", "nginx"),
        ("haproxy.cfg", "defaults\n    retries 2\nbackend app\n    server a 10.0.0.1:80\n", "HAProxy"),
        ("t.toml", "[http.middlewares.r.retry]\n  attempts = 4\n", "Traefik"),
        ("m.yaml", "apiVersion: traefik.io/v1alpha1\nkind: Middleware\nmetadata: {name: r}\nspec:\n  retry: {attempts: 4}\n", "Traefik"),
        ("application.yml", "resilience4j.retry:\n  instances:\n    b: {maxAttempts: 2}\n", "resilience4j"),
        ("ef.yaml", "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: r}\nspec:\n  configPatches: []\n", "EnvoyFilter"),
    ];
    for (name, text, want) in cases {
        match what_is(name, text) {
            Reading::Path(w) => assert!(w.contains(want), "{name}: {w}"),
            other => panic!("{name}: {other:?}"),
        }
    }
    let t = run(&[("t.toml", cases[2].1, None)], &Options::default());
    assert_eq!(t.dead.bottom_attempts, 4.0);
    let m = run(&[("m.yaml", cases[3].1, None)], &Options::default());
    assert_eq!(m.dead.bottom_attempts, 4.0);
    let r = run(
        &[("application.yml", cases[4].1, None)],
        &Options::default(),
    );
    assert_eq!(r.dead.bottom_attempts, 2.0);
    let h = run(&[("haproxy.cfg", cases[1].1, None)], &Options::default());
    assert_eq!(h.dead.bottom_attempts, 3.0);
    // A stagger policy file is still a policy file.
    assert_eq!(what_is("p.toml", "attempts = 3\n"), Reading::Client);
}

// EnvoyFilter MERGE keeps what the patch leaves out: Istio's conditions
// stay, the count and the codes change (codes append).
#[test]
fn envoy_filter_merge_patches_istios_policy_field_by_field() {
    let ef = "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: retry-status}\nspec:\n  configPatches:\n  - applyTo: HTTP_ROUTE\n    match:\n      context: SIDECAR_OUTBOUND\n    patch:\n      operation: MERGE\n      value:\n        route:\n          retry_policy:\n            num_retries: 4\n            retriable_status_codes: [503]\n";
    let o = Options {
        dead: Dead::Unavailable,
        ..Options::default()
    };
    let r = run(&[("ef.yaml", ef, None)], &o);
    assert_eq!(r.layers[0].max_tries, Some(5));
    assert!(
        r.layers[0].retry_on.contains("connect-failure"),
        "{}",
        r.layers[0].retry_on
    );
    assert_eq!(r.dead.bottom_attempts, 5.0);
    let replace = ef.replace("MERGE", "REPLACE");
    let r = run(&[("ef.yaml", &replace, None)], &o);
    // No retry_on written: REPLACE retries nothing.
    assert_eq!(r.dead.bottom_attempts, 1.0);
    assert!(ids(&r).is_empty() || !ids(&r).contains(&"mesh_default_retries"));
}

/// A wrong type in each new kind names the file and the field, in one line.
#[test]
fn wrong_types_in_each_kind_name_the_file_and_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("r.yaml", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules:\n  - retry: {attempts: many}\n", "spec.rules[0].retry.attempts"),
        ("p.yaml", "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: p}\nspec:\n  retry: {numRetries: lots}\n", "spec.retry.numRetries"),
        ("b.yaml", "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {name: b}\nspec:\n  retryConstraint:\n    budget: {percent: half}\n", "spec.retryConstraint.budget.percent"),
        ("d.yaml", "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d}\nspec:\n  host: d\n  trafficPolicy: {connectionPool: {http: {maxRetries: [1]}}}\n", "spec.trafficPolicy.connectionPool.http.maxRetries"),
        ("e.yaml", "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: e}\nspec:\n  configPatches:\n  - applyTo: HTTP_ROUTE\n    patch:\n      operation: MERGE\n      value: {route: {retry_policy: {num_retries: x}}}\n", "spec.configPatches[0].patch.value.retry_policy.num_retries"),
        ("i.yaml", "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\n  annotations:\n    nginx.ingress.kubernetes.io/proxy-next-upstream-tries: \"x\"\n", "metadata.annotations.nginx.ingress.kubernetes.io/proxy-next-upstream-tries"),
        ("n.conf", "http {\n  proxy_next_upstream_tries two;\n  server { location / { proxy_pass http://a; } }\n}\n", "proxy_next_upstream_tries"),
        ("h.cfg", "backend app\n    retries two\n    server a 10.0.0.1:80\n", "backend app.retries"),
        ("t.toml", "[http.middlewares.r.retry]\n  attempts = \"x\"\n", "http.middlewares.r.retry.attempts"),
        ("a.yml", "resilience4j.retry:\n  instances:\n    b: {maxAttempts: many}\n", "resilience4j.retry.instances.b.maxAttempts"),
        ("w.yml", "resilience4j.retry:\n  instances:\n    b: {waitDuration: soon}\n", "resilience4j.retry.instances.b.waitDuration"),
    ];
    for (name, text, field) in cases {
        let e =
            audit_path(&[PathInput::new(name, text, None)], &Options::default()).expect_err(name);
        assert_eq!(e.file, *name);
        assert_eq!(e.field, *field, "{name}: {e}");
        assert_eq!(e.to_string().lines().count(), 1, "{e}");
    }
}

/// The hand-written fuzz seeds of every kind, emptied, cut short, and
/// filled with binary: a report with at least one attempt, or a one-line
/// error naming the file; never a panic.
#[test]
fn malformed_inputs_of_each_kind_are_a_report_or_a_one_line_error() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/audit_file");
    let mut seeds: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(e.path()).unwrap())
        })
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 8);
    let binary: String = (0u8..=255).map(char::from).cycle().take(2000).collect();
    for (name, text) in &seeds {
        let mut variants = vec![String::new(), "\n\n".to_string(), binary.clone()];
        for cut in (0..text.len()).step_by(7) {
            if text.is_char_boundary(cut) {
                variants.push(text[..cut].to_string());
            }
        }
        variants.push(text.replace(|c: char| c.is_ascii_digit(), "x"));
        variants.push(text.replace(": ", ": [").replace('\n', "]\n"));
        for v in &variants {
            // The objects listed are the objects asking the reader finds.
            crate::audit_objects::agree(name, v);
            match audit_file(name, v, &Options::default()) {
                Ok(all) => assert!(all.iter().all(|r| r.report.dead.bottom_attempts >= 1.0)),
                Err(e) => {
                    assert_eq!(&e.file, name);
                    assert_eq!(e.to_string().lines().count(), 1, "{name}: {e}");
                }
            }
        }
    }
}

/// 50 MB of any kind is refused by size, naming the file, before parsing.
#[test]
fn fifty_megabytes_of_any_kind_is_refused_by_size() {
    let big = format!(
        "apiVersion: v1\nkind: List\nitems: []\n#{}\n",
        "x".repeat(50 << 20)
    );
    for name in ["big.yaml", "big.conf", "big.cfg"] {
        let e = audit_path(&[PathInput::new(name, &big, None)], &Options::default()).unwrap_err();
        assert_eq!(e.file, name);
        assert!(e.to_string().contains("larger than"), "{e}");
    }
}

// The TOML reader's message drew the line and a caret over four lines.
#[test]
fn a_toml_error_is_one_line_in_both_audits() {
    let e = audit(&[Input::new("p.toml", "attempts = \n")]).unwrap_err();
    assert_eq!(e.to_string().lines().count(), 1, "{e}");
    assert!(e.to_string().contains("line 1"), "{e}");
    let e = audit_path(
        &[PathInput::new("p.toml", "attempts = \n", None)],
        &Options::default(),
    )
    .unwrap_err();
    assert_eq!(e.to_string().lines().count(), 1, "{e}");
}

// An Istio `fault` delay was left out of how long the edge waits.
#[test]
fn istio_fault_delay_is_in_the_wait_once_per_call() {
    let vs = |fault: &str| {
        format!("kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {{host: a}}\n    retries: {{attempts: 2, retryOn: connect-failure}}\n{fault}")
    };
    let o = Options::default();
    let plain = run(&[("vs.yaml", &vs(""), None)], &o);
    let delayed =
        vs("    fault:\n      delay:\n        fixedDelay: 2s\n        percentage: {value: 50}\n");
    let d = run(&[("vs.yaml", &delayed, None)], &o);
    assert_eq!(d.dead.bottom_attempts, plain.dead.bottom_attempts);
    let extra = d.dead.edge_waits.unwrap() - plain.dead.edge_waits.unwrap();
    assert_eq!(extra, Duration::from_secs(1));
}

// A `listen stats` section (`stats enable`, no `server`) connects to
// nothing: HAProxy answers from its stats applet, or 503 at once when no
// server can be picked (haproxy `src/backend.c`, `assign_server`), so it
// has no connection to retry. It was read as a backend with the default
// `retries 3`: 4 tries.
#[test]
fn haproxy_stats_section_without_servers_is_no_retrying_layer() {
    let cfg = "defaults\n    mode http\n    retries 3\n\nlisten stats\n    bind :8404\n    stats enable\n    stats uri /\n\nbackend app\n    retry-on conn-failure\n    server a 10.0.0.1:80\n";
    let o = Options::default();
    let all = audit_file("haproxy.cfg", cfg, &o).unwrap();
    let names: Vec<&str> = all
        .iter()
        .map(|f| f.report.layers[0].selector.as_str())
        .collect();
    assert_eq!(names, ["app"], "the stats page is not a choice");
    assert_eq!(all[0].report.dead.bottom_attempts, 4.0);
    assert!(all[0].report.layers[0]
        .assumes
        .iter()
        .any(|a| a.starts_with("1 server;")));
    let stats = run(&[("haproxy.cfg", cfg, Some("stats"))], &o);
    assert_eq!(stats.dead.bottom_attempts, 1.0);
    assert!(stats.layers[0].retry_on.contains("no server"));
    assert!(stats.findings.is_empty());
}

fn route_with(retry: &str) -> String {
    format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: web, namespace: shop}}\nspec:\n  rules:\n  - backendRefs: [{{name: web, port: 80}}]\n    timeouts: {{request: 10s, backendRequest: 1s}}\n    retry: {retry}\n"
    )
}

fn with_gateway(g: stagger_audit::path::GatewayImpl, dead: Dead) -> Options {
    Options {
        gateway: g,
        dead,
        ..Options::default()
    }
}

// Envoy Gateway writes a rule's `retry` into Envoy's policy starting from
// its defaults: the triggers connect-failure,refused-stream,unavailable,
// cancelled,retriable-status-codes and the retriable status 503, which the
// rule's `codes` replace when it lists any (envoyproxy/gateway
// `internal/xds/translator/route.go`, `buildRetryPolicy`, and
// `internal/gatewayapi/route.go`, `processRouteRetry`). A dependency that
// answers 503 was never retried there.
#[test]
fn envoy_gateway_retries_503_by_default_when_the_rule_lists_no_codes() {
    use stagger_audit::path::GatewayImpl;
    let o = with_gateway(GatewayImpl::EnvoyGateway, Dead::Unavailable);
    let r = run(&[("route.yaml", &route_with("{attempts: 3}"), None)], &o);
    assert_eq!(r.dead.bottom_attempts, 4.0);
    assert!(
        r.layers[0].retry_on.contains("503"),
        "{}",
        r.layers[0].retry_on
    );
    // Codes the rule lists replace the 503.
    let listed = run(
        &[(
            "route.yaml",
            &route_with("{attempts: 3, codes: [502]}"),
            None,
        )],
        &o,
    );
    assert_eq!(listed.dead.bottom_attempts, 1.0);
}

// GEP-1731: "Implementations SHOULD retry on connection errors
// (disconnect, reset, timeout, TCP failure)". A try cut by the rule's
// `timeouts.backendRequest` is retried by a gateway that follows it; Envoy
// Gateway's default triggers hold no timeout (`internal/xds/translator/route.go`).
#[test]
fn gep_1731_gateway_retries_a_try_its_backend_request_timeout_cut() {
    use stagger_audit::path::GatewayImpl;
    let route = route_with("{attempts: 2, codes: [503]}");
    let generic = run(
        &[("route.yaml", &route, None)],
        &with_gateway(GatewayImpl::Generic, Dead::Blackhole),
    );
    assert_eq!(generic.dead.bottom_attempts, 3.0);
    assert_eq!(
        generic.layers[0].per_try_timeout,
        Some(Duration::from_secs(1))
    );
    let eg = run(
        &[("route.yaml", &route, None)],
        &with_gateway(GatewayImpl::EnvoyGateway, Dead::Blackhole),
    );
    assert_eq!(eg.dead.bottom_attempts, 1.0);
}

// The HTTPRoute CRD sets `retry.attempts` a minimum of 1
// (kubernetes-sigs/gateway-api `apis/v1/httproute_types.go`,
// `+kubebuilder:validation:Minimum:=1`): the API server refuses a route
// with 0. It was read without a word, as "no retry".
#[test]
fn gateway_api_attempts_0_is_an_invalid_finding_naming_the_field() {
    let r = run(
        &[("route.yaml", &route_with("{attempts: 0}"), None)],
        &Options::default(),
    );
    let invalid = r
        .findings
        .iter()
        .find(|f| f.id == "invalid")
        .expect("invalid");
    assert!(
        invalid
            .message
            .contains("`spec.rules[0].retry.attempts` is 0")
            && invalid.message.contains("refuses the route"),
        "{}",
        invalid.message
    );
    let one = run(
        &[("route.yaml", &route_with("{attempts: 1}"), None)],
        &Options::default(),
    );
    assert!(!ids(&one).contains(&"invalid"));
}

const EG_POLICY: &str = "apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: retry-for-web, namespace: shop}
spec:
  targetRefs:
  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}
  retry:
    numRetries: 5
    retryOn: {triggers: [connect-failure, retriable-status-codes], httpStatusCodes: [503]}
";

// Envoy Gateway builds a route's Envoy policy from `GetRetry()`, which
// returns the HTTPRoute rule's own `retry` before the retry of a
// BackendTrafficPolicy that targets the route (envoyproxy/gateway
// `internal/ir/xds.go`): the route's 3 retries (4 tries) replace the
// policy's 5. The audit reported the policy's 6 tries, or multiplied the
// two as layers (24), and lost the HTTPRoute of a file holding both.
#[test]
fn envoy_gateway_route_retry_goes_before_the_policy_that_targets_it() {
    let route = route_with("{attempts: 3, codes: [503]}");
    let o = Options {
        dead: Dead::Unavailable,
        ..Options::default()
    };
    let path = run(
        &[
            ("route.yaml", &route, None),
            ("policy.yaml", EG_POLICY, None),
        ],
        &o,
    );
    assert_eq!(path.layers.len(), 1, "one route, not two layers");
    assert_eq!(path.dead.bottom_attempts, 4.0);
    assert!(path.layers[0]
        .assumes
        .iter()
        .any(|a| a.contains("replaces BackendTrafficPolicy retry-for-web")));
    // Both in one file: the route is read, with the policy under it.
    let both = format!("{route}---\n{EG_POLICY}");
    let file = audit_file("both.yaml", &both, &o).unwrap();
    assert_eq!(file.len(), 1);
    assert_eq!(file[0].report.dead.bottom_attempts, 4.0);
    // A rule without its own retry takes the policy's: 6 tries.
    let bare = route_with("null").replace("    retry: null\n", "");
    let policy = run(
        &[
            ("route.yaml", &bare, None),
            ("policy.yaml", EG_POLICY, None),
        ],
        &o,
    );
    assert_eq!(policy.dead.bottom_attempts, 6.0);
}

// resilience4j gives every `@Retry(name = …)` without an entry of its own
// the `configs.default` properties (`CommonRetryConfigurationProperties`,
// `getBackendProperties`, in resilience4j-framework-common), and its
// `InstanceProperties` has `maxAttempts` but no `maxRetryAttempts` (removed
// in 2.0.1), so that key binds to nothing and the default 3 applies. A
// file with only `configs.default` was refused ("has no instances"), which
// made `stagger audit DIR` exit 2.
#[test]
fn resilience4j_configs_default_alone_is_a_layer_of_3_naming_the_ignored_key() {
    let app = "spring:\n  application:\n    name: shop\nresilience4j:\n  retry:\n    configs:\n      default:\n        maxRetryAttempts: 5\n        waitDuration: 100ms\n";
    let o = Options::default();
    let all = audit_file("application.yml", app, &o).unwrap();
    assert_eq!(all.len(), 1);
    let r = &all[0].report;
    assert_eq!(r.layers[0].selector, "default");
    assert_eq!(r.dead.bottom_attempts, 3.0);
    let invalid = r
        .findings
        .iter()
        .find(|f| f.id == "invalid")
        .expect("invalid");
    assert!(
        invalid
            .message
            .contains("`resilience4j.retry.configs.default.maxRetryAttempts` binds to nothing")
            && invalid.message.contains("the default 3 applies"),
        "{}",
        invalid.message
    );
    // With maxAttempts beside it, that applies.
    let both = app.replace(
        "maxRetryAttempts: 5",
        "maxRetryAttempts: 5\n        maxAttempts: 2",
    );
    let r = &audit_file("application.yml", &both, &o).unwrap()[0].report;
    assert_eq!(r.dead.bottom_attempts, 2.0);
    assert!(r
        .findings
        .iter()
        .any(|f| f.message.contains("maxAttempts 2 applies")));
}

// Envoy's cluster circuit breaker with `max_connections` or
// `max_requests` at 0 (Envoy Gateway's `circuitBreaker.maxConnections`,
// `maxParallelRequests`, set in `internal/xds/translator/cluster.go`)
// never lets a request through: each overflows with 503 at the gateway.
// It was reported as 1 attempt reaching the dependency.
#[test]
fn envoy_gateway_zero_circuit_breaker_thresholds_let_no_attempt_through() {
    let policy = "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: closed}\nspec:\n  targetRefs:\n  - {group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}\n  circuitBreaker: {maxConnections: 0, maxParallelRequests: 0, maxPendingRequests: 0}\n  retry: {numRetries: 3}\n";
    let o = Options::default();
    let r = run(&[("policy.yaml", policy, None)], &o);
    assert_eq!(r.dead.bottom_attempts, 0.0);
    assert_eq!(r.at_rate.bottom_attempts, 0.0);
    assert!(r
        .findings
        .iter()
        .all(|f| f.id != "retries_at_several_layers"));
    // Under the route it targets, and above a client that would retry.
    let svc = r#"{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
    let path = run(
        &[
            ("route.yaml", &route_with("{attempts: 2}"), None),
            ("policy.yaml", policy, None),
            ("svc.json", svc, None),
        ],
        &o,
    );
    assert_eq!(path.dead.bottom_attempts, 0.0);
    // Pending requests at 0 alone still let requests through.
    let pending = policy.replace("maxConnections: 0, maxParallelRequests: 0, ", "");
    assert_eq!(
        run(&[("policy.yaml", &pending, None)], &o)
            .dead
            .bottom_attempts,
        4.0
    );
}

// gRPC takes a service config whole or not at all (A6: a config that
// fails validation is rejected, and the channel keeps running without
// it): one bad entry and no method of it retries. The checklist said so
// in its `invalid` finding, yet multiplied the good entry's 5 attempts.
#[test]
fn a_service_config_grpc_rejects_multiplies_nothing() {
    let svc = r#"{"methodConfig":[
      {"name":[{"service":"shop.Cart"}],"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}},
      {"name":[{"service":"shop.Pay"}],"retryPolicy":{"maxAttempts":1,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
    let r = audit(&[Input::new("svc.json", svc)]).unwrap();
    assert!(r.findings.iter().any(|f| f.id == "invalid"));
    assert_eq!(r.bottom_attempts, 1);
    assert!(
        r.methods.is_empty(),
        "no method of a rejected config retries"
    );
    // On a path: the field is named, never 5 attempts.
    let e = audit_path(
        &[PathInput::new("svc.json", svc, Some("shop.Cart/*"))],
        &Options::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("maxAttempts"), "{e}");
    // A config naming a method twice is rejected too: on a path, its
    // layer retries nothing and says why.
    let twice = svc
        .replace("shop.Pay", "shop.Cart")
        .replace(r#""maxAttempts":1,"#, r#""maxAttempts":2,"#);
    let r = audit(&[Input::new("svc.json", &twice)]).unwrap();
    assert_eq!(r.bottom_attempts, 1);
    let path = run(
        &[("svc.json", &twice, Some("shop.Cart/*"))],
        &Options::default(),
    );
    assert_eq!(path.dead.bottom_attempts, 1.0);
    assert!(path.findings.iter().any(|f| f.id == "invalid"));
}

// A proxy sees what the hop below answers, not the dependency's failure.
// nginx's `proxy_next_upstream error timeout` fires on "an error occurred
// while establishing a connection with the server, passing a request to
// it, or reading the response header" (nginx's ngx_http_upstream module);
// a gRPC application that gave up answers with a gRPC status, a response,
// so ingress-nginx does not try it again. 5 attempts reach the dead
// dependency, not 5 × 5 = 25.
#[test]
fn ingress_nginx_over_a_grpc_app_does_not_retry_the_apps_answer() {
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: shop\n  annotations:\n    nginx.ingress.kubernetes.io/proxy-next-upstream: error timeout\n    nginx.ingress.kubernetes.io/proxy-next-upstream-tries: \"5\"\nspec:\n  rules:\n  - http:\n      paths:\n      - path: /\n        pathType: Prefix\n        backend: {service: {name: shop, port: {number: 80}}}\n";
    let svc = r#"{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":5,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}"#;
    let r = run(
        &[("ingress.yaml", ingress, None), ("svc.json", svc, None)],
        &Options::default(),
    );
    assert_eq!(r.protocol, Protocol::Grpc);
    assert_eq!(r.dead.bottom_attempts, 5.0);
    assert!(!ids(&r).contains(&"retries_at_several_layers"));
    // Straight above a dependency that refuses connections, it tries 5 times.
    let alone = run(&[("ingress.yaml", ingress, None)], &Options::default());
    assert_eq!(alone.dead.bottom_attempts, 5.0);
}

// `proxy_next_upstream` takes error, timeout, invalid_header, http_500,
// http_502, http_503, http_504, http_403, http_404, http_429,
// non_idempotent and off (nginx `src/http/modules/ngx_http_proxy_module.c`,
// `ngx_http_proxy_next_upstream_masks`): `http_400` is none of them,
// and was read without a word.
#[test]
fn nginx_http_400_is_an_invalid_finding_naming_the_values_nginx_takes() {
    let conf = "http {\n  upstream app { server 10.0.0.1:80; server 10.0.0.2:80; }\n  server {\n    location / {\n      proxy_pass http://app;\n      proxy_next_upstream error http_400;\n    }\n  }\n}\n";
    let r = run(&[("nginx.conf", conf, None)], &Options::default());
    let invalid = r
        .findings
        .iter()
        .find(|f| f.id == "invalid")
        .expect("invalid");
    assert!(
        invalid
            .message
            .contains("http_400 is not a value nginx takes"),
        "{}",
        invalid.message
    );
    assert!(r.layers[0].retry_on.contains("error"));
    assert!(!r.layers[0].retry_on.contains("http_400"));
}

// The advice names the layer's own place and words: nginx is a proxy, not
// a mesh, and its never-sent conditions are error and timeout. The text
// says "the dependency gets 1 attempt", not "1 attempt … reach".
#[test]
fn nginx_advice_speaks_of_the_proxy_and_one_attempt_is_singular() {
    let conf = "http {\n  upstream app { server 10.0.0.1:80; server 10.0.0.2:80; }\n  server {\n    location / {\n      proxy_pass http://app;\n      proxy_next_upstream error timeout http_503 non_idempotent;\n    }\n  }\n}\n";
    let r = run(&[("nginx.conf", conf, None)], &Options::default());
    let advice = r
        .findings
        .iter()
        .find(|f| f.id == "retries_non_idempotent")
        .expect("non-idempotent");
    assert!(
        advice.message.contains("at the proxy"),
        "{}",
        advice.message
    );
    assert!(!advice.message.contains("mesh"), "{}", advice.message);
    let one = "http {\n  upstream app { server 10.0.0.1:80; }\n  server { location / { proxy_pass http://app; } }\n}\n";
    let r = run(&[("nginx.conf", one, None)], &Options::default());
    assert_eq!(r.at_rate.bottom_attempts, 1.0, "{:?}", r.at_rate);
}

// Traefik's retry middleware waits on an exponential back-off from
// `initialInterval` with the multiplier 2^(1/(attempts−1))
// (traefik `pkg/middlewares/retry/retry.go`, `newBackOff`): 4 attempts
// from 500ms wait about 500, 630 and 794 ms, not three flat 500 ms.
#[test]
fn traefik_waits_grow_by_its_own_multiplier() {
    let toml = "[http.middlewares.retry.retry]\n  attempts = 4\n  initialInterval = \"500ms\"\n";
    let r = run(&[("traefik.toml", toml, None)], &Options::default());
    assert_eq!(r.dead.bottom_attempts, 4.0);
    let waited = r.dead.edge_waits.unwrap();
    // 500 + 630 + 794 ms of waits, plus four refused connections of 1 ms.
    let want = 500.0 * (1.0 + 2f64.powf(1.0 / 3.0) + 2f64.powf(2.0 / 3.0)) + 4.0;
    assert!(
        (waited.as_secs_f64() * 1000.0 - want).abs() < 1.0,
        "{waited:?}, want {want} ms"
    );
}

// A route with several rules named on a path without one: the error names
// each choice as it is written on the path, not `FILE:ROUTE/RULE`.
#[test]
fn a_route_with_several_rules_names_each_choice_in_full() {
    let route = "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: web}\nspec:\n  rules:\n  - name: read\n    backendRefs: [{name: web}]\n  - backendRefs: [{name: web}]\n";
    let e = audit_path(
        &[PathInput::new("route.yaml", route, None)],
        &Options::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("name one as route.yaml:web/read or route.yaml:web/1"),
        "{e}"
    );
    assert_eq!(e.choices, ["web/read", "web/1"]);
}

// A `mode tcp` section relays a stream: the path is headed TCP, not HTTP,
// and only a connection HAProxy could not make is retried (retry-on's
// HTTP keywords do not apply).
#[test]
fn haproxy_mode_tcp_is_a_tcp_path_that_retries_only_connections() {
    let cfg = "defaults\n    mode tcp\n    retries 2\n    retry-on conn-failure 503\n\nbackend db\n    server a 10.0.0.1:5432\n";
    let refused = run(&[("haproxy.cfg", cfg, None)], &Options::default());
    assert!(refused.layers.iter().all(|l| l.relays_tcp()));
    assert_eq!(refused.dead.bottom_attempts, 3.0);
    let shed = Options {
        dead: Dead::Unavailable,
        ..Options::default()
    };
    assert_eq!(
        run(&[("haproxy.cfg", cfg, None)], &shed)
            .dead
            .bottom_attempts,
        1.0
    );
}
