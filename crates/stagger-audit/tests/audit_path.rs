//! `stagger audit --path` on mesh and client configs as they are published
//! (the folder of published mesh configs beside the repository, read by
//! path), and each reader's defaults against the rule its system documents.

use crate::support;

use std::time::Duration;

use stagger_audit::path::{
    audit_path, Budget, Dead, Options, PathError, PathInput, PathReport, Protocol, System,
};

/// A published mesh config's text, or `None` (with a note) where the
/// folder is absent; under CI its absence fails.
fn published(rel: &str) -> Option<(String, String)> {
    let path = support::published::folder("mesh-configs")?.join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: cannot read: {e}", path.display()));
    Some((path.display().to_string(), text))
}

const BOOKINFO: &str = "istio/bookinfo__virtual-service-all-v1.yaml";
const TUTORIAL: &str = "istio/istio-tutorial__virtual-service-recommendation-v2_retry.yml";
const INACTION: &str = "istio/istioinaction__simple-backend-enable-retry.yaml";
const ENVOY_ROUTES: &str = "envoy/envoy-gateway__retry.routes.yaml";
const ENVOY_CLUSTERS: &str = "envoy/envoy-gateway__circuit-breaker.clusters.yaml";
const EMOJIVOTO: &str = "linkerd/emojivoto__web-service-profile-with-retry-budget.yml";
const SCHLEP: &str = "linkerd/schlep__route.59c80c8.yaml";
const AWS: &str = "aws/aws-sdk-go-v2__shared_config";

fn example(name: &str) -> (String, String) {
    let path = format!(
        "{}/../../examples/audit/path/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    (name.to_string(), text)
}

/// Audits `(name, text, selector)` layers.
fn run_with(
    files: &[(&(String, String), Option<&str>)],
    o: &Options,
) -> Result<PathReport, PathError> {
    let inputs: Vec<PathInput<'_>> = files
        .iter()
        .map(|((n, t), s)| PathInput::new(n, t, *s))
        .collect();
    audit_path(&inputs, o)
}

fn run(files: &[(&(String, String), Option<&str>)]) -> PathReport {
    run_with(files, &Options::default()).unwrap()
}

fn ids(r: &PathReport) -> Vec<&'static str> {
    r.findings.iter().map(|f| f.id).collect()
}

fn inline(name: &str, text: &str) -> (String, String) {
    (name.to_string(), text.to_string())
}

#[test]
fn every_published_mesh_config_is_read_with_each_of_its_selectors() {
    let cases: &[(&str, &[Option<&str>])] = &[
        (
            BOOKINFO,
            &[
                Some("productpage"),
                Some("reviews"),
                Some("ratings"),
                Some("details"),
            ],
        ),
        (TUTORIAL, &[None]),
        (INACTION, &[None]),
        (
            ENVOY_ROUTES,
            &[
                Some("first-route"),
                Some("second-route-defaults"),
                Some("first-listener/foo"),
            ],
        ),
        (EMOJIVOTO, &[Some("GET /api/list"), Some("GET /api/vote")]),
        (SCHLEP, &[Some("api-default"), Some("api-get")]),
        (
            AWS,
            &[
                None,
                Some("retrywithstandard"),
                Some("retrywithadaptive"),
                Some("retryunset"),
                Some("exampleProfile"),
            ],
        ),
    ];
    for (rel, selectors) in cases {
        let Some(file) = published(rel) else { return };
        for s in *selectors {
            let r = run_with(&[(&file, *s)], &Options::default())
                .unwrap_or_else(|e| panic!("{rel} {s:?}: {e}"));
            assert_eq!(r.layers.len(), 1, "{rel}");
            assert!(r.dead.bottom_attempts >= 1.0, "{rel} {s:?}: {:?}", r.dead);
        }
    }
    // The clusters file is read after a routes file.
    let (Some(routes), Some(clusters)) = (published(ENVOY_ROUTES), published(ENVOY_CLUSTERS))
    else {
        return;
    };
    run(&[
        (&routes, Some("first-route")),
        (&clusters, Some("first-route-dest")),
    ]);
}

#[test]
fn a_file_with_several_hosts_asks_for_one_and_names_them() {
    let Some(file) = published(BOOKINFO) else {
        return;
    };
    let e = run_with(&[(&file, None)], &Options::default()).unwrap_err();
    assert!(
        e.problem.contains("productpage, reviews, ratings, details"),
        "{e}"
    );
    let e = run_with(&[(&file, Some("cart"))], &Options::default()).unwrap_err();
    assert_eq!(e.field, "spec.hosts", "{e}");
}

// Istio's MeshConfig docs: "The default number of retry attempts is set at 2
// for these errors: connect-failure,refused-stream,unavailable,cancelled,
// retriable-status-codes"; retry.go uses it when a route has no `retries`.
#[test]
fn istio_retries_a_route_that_says_nothing() {
    let Some(file) = published(BOOKINFO) else {
        return;
    };
    let r = run(&[(&file, Some("reviews"))]);
    let l = &r.layers[0];
    assert_eq!(l.system, System::Istio);
    assert!(l.implicit);
    assert_eq!(l.max_tries, Some(3));
    assert_eq!(
        l.retry_on,
        "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
    );
    assert_eq!(r.dead.bottom_attempts, 3.0);
    assert_eq!(ids(&r), ["mesh_default_retries", "no_budget_on_path"]);
    // Istio's route timeout is none by default, so is the per-try timeout.
    assert_eq!((l.timeout, l.per_try_timeout), (None, None));
}

// virtual_service.proto: "The maximum possible number of requests made will
// be 1 + `attempts`"; a `retryOn` left out keeps the default conditions.
#[test]
fn istio_attempts_count_retries_and_keep_the_default_conditions() {
    let Some(file) = published(TUTORIAL) else {
        return;
    };
    let r = run(&[(&file, None)]);
    let l = &r.layers[0];
    assert_eq!(l.max_tries, Some(4));
    assert!(!l.implicit);
    assert_eq!(l.per_try_timeout, Some(Duration::from_secs(2)));
    assert!(l
        .retry_on
        .starts_with("connect-failure,refused-stream,unavailable,cancelled"));
    assert_eq!(r.dead.bottom_attempts, 4.0);
}

// Since 1.24 the implicit policy does not retry 503: over HTTP, the sidecar
// above a sidecar that gave up (and answered 503) does not retry again; on
// 1.23 it does. Over gRPC the 503 arrives as UNAVAILABLE, which the
// default's `unavailable` retries on any version.
#[test]
fn what_crosses_a_layer_decides_whether_the_next_one_retries() {
    let (Some(edge), Some(lower)) = (published(TUTORIAL), published(INACTION)) else {
        return;
    };
    let path = [(&edge, None), (&lower, None)];
    let now = run(&path);
    assert_eq!(now.protocol, Protocol::Http);
    assert_eq!(now.dead.layers[0].tries, 1.0, "{:?}", now.dead);
    assert_eq!(now.dead.bottom_attempts, 3.0);
    let mut o = Options::default();
    o.istio.minor = 23;
    let before = run_with(&path, &o).unwrap();
    assert_eq!(before.dead.bottom_attempts, 12.0, "{:?}", before.dead);
    o = Options {
        protocol: Some(Protocol::Grpc),
        ..Options::default()
    };
    let grpc = run_with(&path, &o).unwrap();
    assert_eq!(grpc.dead.bottom_attempts, 12.0);
    assert!(ids(&grpc).contains(&"retries_at_several_layers"));
}

#[test]
fn istio_retries_block_without_attempts_retries_nothing() {
    let vs = |retries: &str| {
        inline(
            "vs.yaml",
            &format!("kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - route: [{{destination: {{host: a}}}}]\n{retries}"),
        )
    };
    for block in [
        "    retries: {perTryTimeout: 1s}\n",
        "    retries: {attempts: 0}\n",
    ] {
        let r = run(&[(&vs(block), None)]);
        assert_eq!(r.dead.bottom_attempts, 1.0, "{block}");
        assert!(!r.layers[0].implicit);
    }
    // Numbers in retryOn are retriable status codes; 5xx repeats a POST.
    let r = run(&[(
        &vs("    retries: {attempts: 1, retryOn: \"5xx,409\"}\n"),
        None,
    )]);
    assert_eq!(r.layers[0].max_tries, Some(2));
    assert_eq!(ids(&r), ["retries_non_idempotent", "no_budget_on_path"]);
}

#[test]
fn a_mesh_default_policy_replaces_istios_own() {
    let mesh = inline(
        "mesh.yaml",
        "kind: ConfigMap\nmetadata: {name: istio}\ndata:\n  mesh: |\n    defaultHttpRetryPolicy:\n      attempts: 5\n      retryOn: connect-failure\n",
    );
    let Some(file) = published(BOOKINFO) else {
        return;
    };
    let r = run(&[(&mesh, None), (&file, Some("ratings"))]);
    assert_eq!(r.layers.len(), 1);
    assert_eq!(r.layers[0].max_tries, Some(6));
    assert_eq!(r.layers[0].retry_on, "connect-failure");
    assert!(r.layers[0].implicit);
}

// route_components.proto: num_retries "defaults to 1"; retry_back_off's
// max_interval defaults to 10 times the base; the route timeout defaults
// to 15 s; the cluster's retry_budget "will override any configured retry
// circuit breaker".
#[test]
fn envoy_routes_and_circuit_breakers_as_published() {
    let (Some(routes), Some(clusters)) = (published(ENVOY_ROUTES), published(ENVOY_CLUSTERS))
    else {
        return;
    };
    let r = run(&[(&routes, Some("first-route"))]);
    let l = &r.layers[0];
    assert_eq!(l.max_tries, Some(4));
    assert!(l.retry_on.ends_with("[500]"), "{}", l.retry_on);
    assert_eq!(l.timeout, Some(Duration::from_secs(15)));
    assert_eq!(l.budget, Some(Budget::MaxConcurrent { max: 3 }));
    let r = run(&[(&routes, Some("second-route-defaults"))]);
    assert_eq!(r.layers[0].max_tries, Some(3));
    let r = run(&[
        (&routes, Some("first-route")),
        (&clusters, Some("first-route-dest")),
    ]);
    assert_eq!(r.layers.len(), 1);
    assert_eq!(
        r.layers[0].budget,
        Some(Budget::Concurrent {
            percent: 10.0,
            min_concurrency: 1
        })
    );
    // 10 % of 100 in flight: 1.1 tries in steady state.
    assert!(
        (r.budgeted_bottom_attempts - 1.1).abs() < 1e-9,
        "{}",
        r.budgeted_bottom_attempts
    );
    // Without a selector the route's cluster must be in the file.
    let e = run_with(
        &[(&routes, Some("first-route")), (&clusters, None)],
        &Options::default(),
    )
    .unwrap_err();
    assert!(e.problem.contains("first-route-dest/backend/0"), "{e}");
}

#[test]
fn envoy_defaults_when_the_policy_says_little() {
    let cfg = |policy: &str| {
        inline(
            "rc.yaml",
            &format!(
                "virtual_hosts:\n- name: v\n  domains: ['*']\n  retry_policy: {{num_retries: 4, retry_on: connect-failure}}\n  routes:\n  - name: r\n    match: {{prefix: /}}\n    route:\n      cluster: c\n      timeout: 0s\n{policy}"
            ),
        )
    };
    // The route's policy replaces the virtual host's entirely.
    let r = run(&[(&cfg("      retry_policy: {retry_on: 5xx}\n"), None)]);
    assert_eq!(r.layers[0].max_tries, Some(2));
    assert_eq!(r.layers[0].timeout, None);
    // Without one, the virtual host's applies.
    let r = run(&[(&cfg(""), None)]);
    assert_eq!(r.layers[0].max_tries, Some(5));
    let no_policy = inline(
        "rc.json",
        r#"{"virtualHosts":[{"name":"v","routes":[{"name":"r","route":{"cluster":"c"}}]}]}"#,
    );
    assert_eq!(run(&[(&no_policy, None)]).dead.bottom_attempts, 1.0);
}

// Linkerd's configuring-retries docs: only `isRetryable` routes, within the
// budget; the profile translator copies a given retryBudget as written.
#[test]
fn linkerd_profile_routes_and_their_budget() {
    let Some(file) = published(EMOJIVOTO) else {
        return;
    };
    let list = run(&[(&file, Some("GET /api/list"))]);
    assert_eq!(list.dead.bottom_attempts, 1.0);
    let vote = run(&[(&file, Some("GET /api/vote"))]);
    let l = &vote.layers[0];
    assert_eq!(l.max_tries, None);
    assert_eq!(
        l.budget,
        Some(Budget::Ratio {
            ratio: 0.001,
            floor_per_second: 10.0
        })
    );
    assert!((vote.dead.bottom_attempts - 1.001).abs() < 1e-9);
    assert_eq!(l.timeout, Some(Duration::from_secs(10)));
    let partial = inline(
        "sp.yaml",
        "kind: ServiceProfile\nmetadata: {name: s}\nspec:\n  routes:\n  - {name: r, isRetryable: true, condition: {method: POST}}\n  retryBudget: {retryRatio: 0.5, ttl: 10s}\n",
    );
    let r = run(&[(&partial, None)]);
    assert_eq!(
        r.layers[0].budget,
        Some(Budget::Ratio {
            ratio: 0.5,
            floor_per_second: 0.0
        })
    );
    assert!(ids(&r).contains(&"retries_non_idempotent"));
    let no_ttl = inline("sp.yaml", &partial.1.replace(", ttl: 10s", ""));
    let e = run_with(&[(&no_ttl, None)], &Options::default()).unwrap_err();
    assert_eq!(e.field, "spec.retryBudget.ttl");
}

// Linkerd's retries reference: `limit` defaults to 1; the policy controller
// reads "0" as unset.
#[test]
fn linkerd_annotations_as_published_and_their_defaults() {
    let Some(file) = published(SCHLEP) else {
        return;
    };
    let r = run(&[(&file, Some("api-default"))]);
    let l = &r.layers[0];
    assert_eq!(l.max_tries, Some(3));
    assert_eq!(l.per_try_timeout, Some(Duration::from_millis(150)));
    assert_eq!(l.timeout, Some(Duration::from_secs(1)));
    assert!(ids(&r).contains(&"retries_non_idempotent"));
    // The GRPCRoute retries INTERNAL only: a refused connection (UNAVAILABLE)
    // is not retried.
    let o = Options {
        protocol: Some(Protocol::Grpc),
        ..Options::default()
    };
    let g = run_with(&[(&file, Some("api-get"))], &o).unwrap();
    assert_eq!(g.layers[0].max_tries, Some(3));
    assert_eq!(g.dead.bottom_attempts, 1.0);
    let route = |ann: &str| {
        inline(
            "r.yaml",
            &format!("apiVersion: policy.linkerd.io/v1beta3\nkind: HTTPRoute\nmetadata:\n  name: r\n  annotations:\n{ann}"),
        )
    };
    let r = run(&[(&route("    retry.linkerd.io/http: gateway-error\n"), None)]);
    assert_eq!(r.layers[0].max_tries, Some(2));
    let r = run(&[(
        &route("    retry.linkerd.io/http: 5xx\n    retry.linkerd.io/limit: \"0\"\n"),
        None,
    )]);
    assert_eq!(r.layers[0].max_tries, Some(2));
    let r = run(&[(&route("    other: x\n"), None)]);
    assert_eq!(r.dead.bottom_attempts, 1.0);
}

// boto3's retries guide: max_attempts in the config file counts the first
// attempt; legacy makes 5, standard 3.
#[test]
fn aws_profiles_as_published() {
    let Some(file) = published(AWS) else { return };
    let tries =
        |sel: &str, o: &Options| run_with(&[(&file, Some(sel))], o).unwrap().layers[0].clone();
    let d = Options::default();
    let s = tries("retrywithstandard", &d);
    assert_eq!(s.max_tries, Some(5));
    assert!(matches!(s.budget, Some(Budget::Drains { .. })));
    assert_eq!(tries("retrywithadaptive", &d).max_tries, Some(4));
    assert_eq!(tries("retryunset", &d).max_tries, Some(5));
    let standard = Options {
        aws_default_standard: true,
        ..d
    };
    assert_eq!(tries("retryunset", &standard).max_tries, Some(3));
    for (sel, field) in [
        ("retrywithinvalidmode", "retry_mode"),
        ("retrywithinvalidattempts", "max_attempts"),
    ] {
        let e = run_with(&[(&file, Some(sel))], &d).unwrap_err();
        assert_eq!(e.field, format!("[{sel}].{field}"), "{e}");
    }
    let e = run_with(&[(&file, Some("nope"))], &d).unwrap_err();
    assert!(e.problem.contains("no profile \"nope\""), "{e}");
}

// The issue's path: an Istio route without `retries`, an Envoy route with
// three retries, a service config with maxAttempts 3 and a stagger policy.
#[test]
fn four_layers_multiply_at_the_bottom_and_each_is_named() {
    let (Some(vs), Some(routes)) = (published(BOOKINFO), published(ENVOY_ROUTES)) else {
        return;
    };
    let svc = example("cart-service-config.json");
    let db = example("inventory-db.toml");
    let r = run(&[
        (&vs, Some("reviews")),
        (&routes, Some("first-route")),
        (&svc, None),
        (&db, None),
    ]);
    assert_eq!(r.protocol, Protocol::Grpc);
    let tries: Vec<f64> = r.dead.layers.iter().map(|l| l.tries).collect();
    assert_eq!(tries, [3.0, 4.0, 3.0, 3.0]);
    assert_eq!(r.dead.bottom_attempts, 108.0);
    let several = r
        .findings
        .iter()
        .find(|f| f.id == "retries_at_several_layers")
        .unwrap();
    assert_eq!(several.layers, [0, 1, 2, 3]);
    assert!(
        several
            .message
            .contains("keep retries at inventory-db.toml")
            || several
                .message
                .contains("Keep retries at inventory-db.toml")
    );
    assert!(ids(&r).contains(&"mesh_default_retries"));
    assert!(ids(&r).contains(&"no_budget_on_path"));
    assert_eq!(r.dead.bottom_attempts, 108.0, "{:?}", r.dead);
}

#[test]
fn the_examples_multiply_to_27_and_the_fixed_path_to_3() {
    let bad = [
        example("edge-vs.yaml"),
        example("cart-service-config.json"),
        example("inventory-db.toml"),
    ];
    let r = run(&[(&bad[0], None), (&bad[1], None), (&bad[2], None)]);
    assert_eq!(r.dead.bottom_attempts, 27.0);
    // p = 0.5: 1.75 at the bottom layer, 1 + q + q² with q = 1/8, then
    // with q = 1/512 — exact.
    let q1 = 0.125f64;
    let q2 = q1.powi(3);
    let want = 1.75 * (1.0 + q1 + q1 * q1) * (1.0 + q2 + q2 * q2);
    assert!(
        (r.at_rate.bottom_attempts - want).abs() < 1e-3,
        "{} vs {want}",
        r.at_rate.bottom_attempts
    );
    let fixed = [
        example("edge-vs-fixed.yaml"),
        example("cart-service-config-fixed.json"),
        example("inventory-db-fixed.toml"),
    ];
    let r = run(&[(&fixed[0], None), (&fixed[1], None), (&fixed[2], None)]);
    assert_eq!(r.dead.bottom_attempts, 3.0);
    assert!(r.is_clean(), "{:?}", r.dead);
    assert!((r.budgeted_bottom_attempts - 1.1).abs() < 1e-9);
}

// Envoy's docs: the route timeout "includes all retries", and a per-try
// timeout is retried under `5xx` (not under Istio's default conditions). A
// blackholed dependency: each try runs to its per-try timeout, and a
// caller's shorter deadline cuts the layer below short.
#[test]
fn per_try_timeouts_against_the_callers_deadline_in_virtual_time() {
    let Some(published_tutorial) = published(TUTORIAL) else {
        return;
    };
    let o = Options {
        dead: Dead::Blackhole,
        ..Options::default()
    };
    // The published route keeps Istio's default conditions: a timed-out
    // try is not retried.
    let r = run_with(&[(&published_tutorial, None)], &o).unwrap();
    assert_eq!(r.dead.bottom_attempts, 1.0, "{:?}", r.dead);
    let tutorial = inline("vs.yaml", "kind: VirtualService\nspec:\n  hosts: [h]\n  http:\n  - retries: {attempts: 3, perTryTimeout: 2s, retryOn: 5xx}\n");
    let caller = inline("caller.toml", "attempts = 1\ndeadline = \"3s\"\n");
    let r = run_with(&[(&caller, None), (&tutorial, None)], &o).unwrap();
    // Two 2 s tries fit in 3 s (the second is cut at 1 s plus the pause).
    assert_eq!(r.dead.bottom_attempts, 2.0, "{:?}", r.dead);
    assert_eq!(r.dead.edge_waits, Some(Duration::from_secs(3)));
    assert!(!ids(&r).contains(&"per_try_timeout_exceeds_deadline"));
    let tight = inline("caller.toml", "attempts = 1\ndeadline = \"1s\"\n");
    let r = run_with(&[(&tight, None), (&tutorial, None)], &o).unwrap();
    assert_eq!(r.dead.bottom_attempts, 1.0);
    assert!(
        ids(&r).contains(&"per_try_timeout_exceeds_deadline"),
        "{:?}",
        ids(&r)
    );
    // No timeout anywhere: the edge waits forever.
    let Some(vs) = published(BOOKINFO) else {
        return;
    };
    let r = run_with(&[(&vs, Some("reviews"))], &o).unwrap();
    assert_eq!(r.dead.edge_waits, None);
    assert_eq!(r.dead.bottom_attempts, 1.0);
}

#[test]
fn bad_input_names_the_file_and_field() {
    let e = run_with(
        &[(
            &inline("x.yaml", "kind: VirtualService\nspec: [unclosed"),
            None,
        )],
        &Options::default(),
    )
    .unwrap_err();
    assert_eq!(e.file, "x.yaml");
    let e = run_with(
        &[(&inline("x.yaml", "kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - retries: {attempts: many}\n"), None)],
        &Options::default(),
    )
    .unwrap_err();
    assert_eq!(e.field, "spec.http[0].retries.attempts", "{e}");
    // A clusters file alone is read: its caps, on a layer that retries
    // nothing itself, and the advice to put the routes before it.
    let r = run(&[(
        &inline("c.yaml", "- circuitBreakers: {}\n  name: c\n"),
        None,
    )]);
    assert_eq!(r.dead.bottom_attempts, 1.0);
    assert!(r.layers[0].retry_on.contains("routes file before it"));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        // Any text, as any kind of file: a report with at least one attempt
        // at the bottom, or an error naming the file.
        #[test]
        fn any_text_is_a_report_or_an_error(text in "(kind: (VirtualService|ServiceProfile|HTTPRoute)\n)?[ -~\n]{0,300}", sel in proptest::option::of("[a-z/]{1,8}")) {
            for name in ["f.yaml", "f.toml"] {
                let input = PathInput::new(name, &text, sel.as_deref());
                match audit_path(&[input], &Options::default()) {
                    Ok(r) => prop_assert!(r.dead.bottom_attempts >= 1.0),
                    Err(e) => prop_assert_eq!(e.file.as_str(), name),
                }
            }
        }

        // Istio attempts a, under a gRPC client with n attempts: the dead
        // product is (a + 1) · n, and never below either layer alone.
        #[test]
        fn istio_over_grpc_multiplies(a in 0u32..20, n in 2u32..6) {
            let vs = inline("vs.yaml", &format!("kind: VirtualService\nspec:\n  hosts: [h]\n  http:\n  - retries: {{attempts: {a}}}\n"));
            let svc = inline("s.json", &format!(r#"{{"methodConfig":[{{"name":[{{}}],"retryPolicy":{{"maxAttempts":{n},"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}}}]}}"#));
            let r = run(&[(&vs, None), (&svc, None)]);
            prop_assert_eq!(r.dead.bottom_attempts, f64::from((a + 1) * n));
        }
    }
}

// Istio's largest `attempts` (Istio lifts the cap to 2^32 - 1), an AWS
// count past i32, a ratio past any sense: numbers, not a panic.
#[test]
fn extreme_counts_are_numbers_not_panics() {
    let vs = inline(
        "vs.yaml",
        "kind: VirtualService\nspec:\n  hosts: [h]\n  http:\n  - retries: {attempts: 4294967294}\n",
    );
    let r = run(&[(&vs, None)]);
    assert_eq!(r.layers[0].max_tries, Some(u32::MAX));
    assert!(
        r.dead.bottom_attempts >= 10_000.0,
        "{}",
        r.dead.bottom_attempts
    );
    assert!(
        (r.at_rate.bottom_attempts - 2.0).abs() < 1e-9,
        "{}",
        r.at_rate.bottom_attempts
    );
    let aws = inline("config", "[default]\nmax_attempts = 4000000000\n");
    let r = run(&[(&aws, None)]);
    assert!(r.at_rate.bottom_attempts >= 1.0);
    let sp = inline(
        "sp.yaml",
        "kind: ServiceProfile\nspec:\n  routes: [{name: r, isRetryable: true}]\n  retryBudget: {retryRatio: 1e300, minRetriesPerSecond: 1, ttl: 10s}\n",
    );
    let r = run(&[(&sp, None)]);
    assert!(r.dead.bottom_attempts.is_finite());
    let far = inline(
        "rc.yaml",
        "virtual_hosts:\n- name: v\n  routes:\n  - route: {cluster: c, timeout: {seconds: 99999999999}}\n",
    );
    let e = run_with(&[(&far, None)], &Options::default()).unwrap_err();
    assert!(e.field.ends_with("timeout"), "{e}");
}

// Istio's implicit policy is in the path even where it does not multiply:
// over HTTP it does not retry the 503 a proxy below answers (1.24), but it
// still retries refused connections and resets, so it is flagged.
#[test]
fn implicit_istio_retries_are_flagged_even_when_they_do_not_multiply() {
    let (Some(vs), Some(routes)) = (published(BOOKINFO), published(ENVOY_ROUTES)) else {
        return;
    };
    let r = run_with(
        &[(&vs, Some("reviews")), (&routes, Some("first-route"))],
        &Options {
            protocol: Some(Protocol::Http),
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(r.dead.layers[0].tries, 1.0, "{:?}", r.dead);
    let f = r
        .findings
        .iter()
        .find(|f| f.id == "mesh_default_retries")
        .unwrap();
    assert!(f.message.contains("not for the 503"), "{}", f.message);
}
