//! The call-path readers of gateway, mesh, proxy and application retry
//! configs, on the files those projects publish (read by path from the
//! published folder beside the repository), each held to the numbers its
//! system documents.

use crate::support;

use std::time::Duration;

use stagger_audit::path::{
    audit_file, audit_path, what_is, Budget, Dead, GatewayImpl, Options, PathInput, PathReport,
    Reading, System,
};

/// A published wave-4 config's path and text, or `None` (with a note)
/// where the folder is absent; under CI its absence fails.
fn published(rel: &str) -> Option<(String, String)> {
    let path = support::published::folder("w4-configs")?.join(rel);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: cannot read: {e}", path.display()));
    Some((path.display().to_string(), text))
}

const ROUTE: &str = "gateway-api/gateway-api__httproute-retry.yaml";
const CONSTRAINT: &str = "gateway-api/istio__backend-lb-policy.yaml";
const EG_RETRY: &str = "envoy-gateway/envoy-gateway__retry.yaml";
const EG_BREAKER: &str = "envoy-gateway/envoy-gateway__circuitbreaker.yaml";
const DR: &str = "istio/istio__destination-rule-all.yaml";
const DUMP: &str = "istio/istio__k8s-gateway-http-route-path-prefix.configdump.json";
const TRIES: &str = "ingress-nginx/traefik__ingress-with-proxy-next-upstream-tries.yml";
const BUFFERING: &str =
    "ingress-nginx/traefik__ingress-with-http-status-retry-and-buffering-off.yml";
const NGINX: &str = "nginx/sentry-self-hosted-pre3973__nginx.conf";
const HAPROXY: &str = "haproxy/haproxy__content-sw-sample.cfg";
const TRAEFIK: &str = "traefik/traefik__simple.toml";
const DEMO: &str = "resilience4j/resilience4j-spring-boot2-demo__application.yml";
const R4J: &str = "resilience4j/resilience4j__application.yaml";

fn with(dead: Dead) -> Options {
    Options {
        dead,
        ..Options::default()
    }
}

fn path(files: &[(&(String, String), Option<&str>)], o: &Options) -> PathReport {
    let inputs: Vec<PathInput<'_>> = files
        .iter()
        .map(|((n, t), s)| PathInput::new(n, t, *s))
        .collect();
    audit_path(&inputs, o).unwrap_or_else(|e| panic!("{e}"))
}

fn one(f: &(String, String), sel: Option<&str>, o: &Options) -> PathReport {
    path(&[(f, sel)], o)
}

fn ids(r: &PathReport) -> Vec<&'static str> {
    r.findings.iter().map(|f| f.id).collect()
}

/// Every published file of both folders is read as what it is and audited
/// object by object, without an error.
#[test]
fn every_published_file_is_recognised_and_audited() {
    for folder in ["w4-configs", "mesh-configs"] {
        let Some(dir) = support::published::folder(folder) else {
            return;
        };
        let mut seen = 0;
        for sub in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            if !sub.path().is_dir() {
                continue;
            }
            for f in std::fs::read_dir(sub.path())
                .unwrap()
                .filter_map(Result::ok)
            {
                let p = f.path();
                let name = p.display().to_string();
                let text = std::fs::read_to_string(&p).unwrap();
                assert!(
                    matches!(what_is(&name, &text), Reading::Path(_)),
                    "{name}: {:?}",
                    what_is(&name, &text)
                );
                let reports =
                    audit_file(&name, &text, &Options::default()).unwrap_or_else(|e| panic!("{e}"));
                assert!(!reports.is_empty(), "{name}");
                seen += 1;
            }
        }
        assert!(seen >= 8, "{folder}: {seen} files");
    }
}

// GEP-1731: `attempts` counts retries; Istio adds the codes to its own
// conditions, so a 503 is retried only by the rule that lists it.
#[test]
fn gateway_api_route_retries_as_gep_1731_counts_them() {
    let Some(f) = published(ROUTE) else { return };
    let refused = with(Dead::Refused);
    let r0 = one(&f, Some("retries/0"), &refused);
    assert_eq!(r0.layers[0].system, System::GatewayApi);
    assert_eq!(r0.layers[0].max_tries, Some(4));
    assert_eq!(r0.dead.bottom_attempts, 4.0);
    assert_eq!(
        one(&f, Some("retries/1"), &refused).dead.bottom_attempts,
        3.0
    );
    let shed = with(Dead::Unavailable);
    assert_eq!(one(&f, Some("retries/0"), &shed).dead.bottom_attempts, 1.0);
    assert_eq!(one(&f, Some("retries/1"), &shed).dead.bottom_attempts, 3.0);
    let generic = Options {
        gateway: GatewayImpl::Generic,
        ..shed
    };
    assert_eq!(
        one(&f, Some("retries/1"), &generic).dead.bottom_attempts,
        3.0
    );
    // Both rules, each as a path of its own.
    let all = audit_file(&f.0, &f.1, &refused).unwrap();
    let sels: Vec<_> = all.iter().map(|r| r.selector.clone().unwrap()).collect();
    assert_eq!(sels, ["retries/0", "retries/1"]);
}

// GEP-3388: percent of active requests (30) with a floor of count per
// interval (5 per 1 s), added to the route before it on the path.
#[test]
fn gateway_api_retry_constraint_is_a_budget_on_the_route_before_it() {
    let (Some(route), Some(c)) = (published(ROUTE), published(CONSTRAINT)) else {
        return;
    };
    let r = path(
        &[(&route, Some("retries/1")), (&c, None)],
        &Options::default(),
    );
    assert_eq!(r.layers.len(), 1);
    assert_eq!(
        r.layers[0].budget,
        Some(Budget::Ratio {
            ratio: 0.3,
            floor_per_second: 5.0
        })
    );
    assert!(r.budgeted_bottom_attempts < r.dead.bottom_attempts);
    let alone = one(&c, None, &Options::default());
    assert_eq!(alone.dead.bottom_attempts, 1.0);
    assert!(alone.layers[0].budget.is_some());
}

// Envoy Gateway's retry_types.go: numRetries counts retries; the e2e test
// sees exactly 5 retries per failing request.
#[test]
fn envoy_gateway_retry_policy_makes_numretries_retries() {
    let Some(f) = published(EG_RETRY) else { return };
    let r = one(&f, None, &with(Dead::Refused));
    let l = &r.layers[0];
    assert_eq!(l.system, System::EnvoyGateway);
    assert_eq!(l.max_tries, Some(6));
    assert_eq!(l.per_try_timeout, Some(Duration::from_millis(250)));
    assert_eq!(r.dead.bottom_attempts, 6.0);
    // 503 is not among the codes (500 only): a shedding dependency is not retried.
    assert_eq!(
        one(&f, None, &with(Dead::Unavailable)).dead.bottom_attempts,
        1.0
    );
    // By the target route's name as well as the policy's.
    assert_eq!(
        one(&f, Some("retry-route"), &Options::default())
            .dead
            .bottom_attempts,
        6.0
    );
}

// A retry budget of 0 % with no floor overflows every retry: the e2e test
// expects the 503 and the retry-overflow counter.
#[test]
fn envoy_gateway_zero_retry_budget_lets_no_retry_through() {
    let Some(f) = published(EG_BREAKER) else {
        return;
    };
    let shed = with(Dead::Unavailable);
    let b = one(&f, Some("circuitbreaker-retry-budget"), &shed);
    assert_eq!(b.layers[0].max_tries, Some(1));
    assert_eq!(b.dead.bottom_attempts, 1.0);
    // Thresholds of 0 let nothing through: no attempt reaches the
    // dependency (the e2e test expects a 503 from the gateway itself).
    let e = one(&f, Some("circuitbreaker-example"), &shed);
    assert_eq!(e.dead.bottom_attempts, 0.0);
    assert!(e.layers[0]
        .assumes
        .iter()
        .any(|a| a.contains("threshold of 0")));
}

// destination_rule.proto: maxRetries caps retries in flight, not the
// retries of one request; alone, the rule's host gets Istio's default.
#[test]
fn destination_rule_max_retries_caps_concurrency_not_count() {
    let Some(f) = published(DR) else { return };
    let r = one(&f, None, &Options::default());
    assert_eq!(r.layers[0].max_tries, Some(3));
    assert_eq!(r.layers[0].budget, Some(Budget::MaxConcurrent { max: 4 }));
    assert_eq!(r.dead.bottom_attempts, 3.0);
    // 4 retries in flight over 100 requests: 1.04 tries each in steady state.
    assert_eq!(r.budgeted_bottom_attempts, 1.04);
    // After a VirtualService for the same host it adds to that layer.
    let vs = (
        "vs.yaml".to_string(),
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: d}\nspec:\n  hosts: [destall.default.svc.cluster.local]\n  http:\n  - route:\n    - destination: {host: destall.default.svc.cluster.local}\n    retries: {attempts: 5}\n".to_string(),
    );
    let both = path(&[(&vs, None), (&f, None)], &Options::default());
    assert_eq!(both.layers.len(), 1);
    assert_eq!(both.layers[0].max_tries, Some(6));
    assert_eq!(
        both.layers[0].budget,
        Some(Budget::MaxConcurrent { max: 4 })
    );
}

// The 2023 dump: Istio rendered num_retries 2 with 503 retriable for a
// route whose HTTPRoute has no retry.
#[test]
fn istio_config_dump_of_a_gateway_route_holds_its_implicit_retries() {
    let Some(f) = published(DUMP) else { return };
    let r = one(
        &f,
        Some("httpbin.example.com:80/default.http.0"),
        &with(Dead::Unavailable),
    );
    assert_eq!(r.layers[0].max_tries, Some(3));
    assert_eq!(r.dead.bottom_attempts, 3.0);
}

// nginx: tries count the first attempt, "0" means only the endpoints
// bound them; ingress-nginx retries `error timeout` by default.
#[test]
fn ingress_nginx_tries_count_the_first_attempt() {
    let Some(f) = published(TRIES) else { return };
    let five = one(
        &f,
        Some("ingress-with-proxy-next-upstream-tries"),
        &Options::default(),
    );
    assert_eq!(five.layers[0].system, System::Nginx);
    assert_eq!(five.dead.bottom_attempts, 5.0);
    let seven = Options {
        endpoints: 7,
        ..Options::default()
    };
    let unlimited = one(
        &f,
        Some("ingress-with-proxy-next-upstream-tries-unlimited"),
        &seven,
    );
    assert_eq!(unlimited.dead.bottom_attempts, 7.0);
    // Status codes are not in `error timeout`.
    let shed = with(Dead::Unavailable);
    assert_eq!(
        one(&f, Some("ingress-with-proxy-next-upstream-tries"), &shed)
            .dead
            .bottom_attempts,
        1.0
    );
}

#[test]
fn ingress_nginx_without_request_buffering_retries_only_bodiless_requests() {
    let Some(f) = published(BUFFERING) else {
        return;
    };
    let r = one(&f, None, &Options::default());
    assert_eq!(r.dead.bottom_attempts, 3.0);
    assert!(r.layers[0]
        .assumes
        .iter()
        .any(|a| a.contains("proxy-request-buffering")));
    assert_eq!(
        one(&f, None, &with(Dead::Unavailable)).dead.bottom_attempts,
        1.0
    );
}

// ngx_http_upstream_round_robin: one server, one try, whatever the tries.
#[test]
fn nginx_upstream_of_one_server_is_tried_once() {
    let Some(f) = published(NGINX) else { return };
    let all = audit_file(&f.0, &f.1, &Options::default()).unwrap();
    assert_eq!(all.len(), 6);
    assert!(all.iter().all(|r| r.report.dead.bottom_attempts == 1.0));
    // The same file with a second server in `relay`: tries 2 now apply.
    let two = (
        f.0.clone(),
        f.1.replace(
            "server relay:3000;",
            "server relay:3000;\n\t\tserver relay2:3000;",
        ),
    );
    let r = one(&two, Some("/api/store/"), &Options::default());
    assert_eq!(r.dead.bottom_attempts, 2.0);
    assert!(ids(&r).contains(&"retries_non_idempotent"));
}

// HAProxy: retries counts retries; retry-on defaults to conn-failure, so a
// 503 or a response timeout is not retried.
#[test]
fn haproxy_retries_only_failed_connections_by_default() {
    let Some(f) = published(HAPROXY) else { return };
    for b in ["static", "dynamic"] {
        assert_eq!(
            one(&f, Some(b), &Options::default()).dead.bottom_attempts,
            3.0,
            "{b}"
        );
        assert_eq!(
            one(&f, Some(b), &with(Dead::Unavailable))
                .dead
                .bottom_attempts,
            1.0
        );
        assert_eq!(
            one(&f, Some(b), &with(Dead::Blackhole))
                .dead
                .bottom_attempts,
            1.0
        );
    }
    // The 1 s turn-around before each retry: two of them.
    let r = one(&f, Some("static"), &Options::default());
    assert!(r.dead.edge_waits.unwrap() >= Duration::from_secs(2));
}

// Traefik's code and tests: attempts = 3 is two retries, on no reply only.
#[test]
fn traefik_attempts_count_every_try() {
    let Some(f) = published(TRAEFIK) else { return };
    let r = one(&f, None, &Options::default());
    assert_eq!(r.layers[0].system, System::Traefik);
    assert_eq!(r.dead.bottom_attempts, 3.0);
    assert_eq!(
        one(&f, None, &with(Dead::Unavailable)).dead.bottom_attempts,
        1.0
    );
}

// resilience4j: maxAttempts counts the first call; a bare waitDuration is
// milliseconds; the breaker of the same name cuts the retries.
#[test]
fn resilience4j_demo_retries_three_calls_and_names_its_breaker() {
    let Some(f) = published(DEMO) else { return };
    let r = one(&f, Some("backendA"), &with(Dead::Unavailable));
    let l = &r.layers[0];
    assert_eq!(l.system, System::Resilience4j);
    assert_eq!(r.dead.bottom_attempts, 3.0);
    // Two waits of 100 ms.
    let waits = r.dead.edge_waits.unwrap();
    assert!(
        waits >= Duration::from_millis(200) && waits < Duration::from_millis(250),
        "{waits:?}"
    );
    let cut = l.cut_by.as_deref().unwrap();
    assert!(cut.contains("backendA") && cut.contains("5 calls"), "{cut}");
    assert_eq!(r.budgeted_bottom_attempts, 1.0);
    let b = one(&f, Some("backendB"), &Options::default());
    assert!(b.layers[0].cut_by.as_deref().unwrap().contains("10 calls"));
}

#[test]
fn resilience4j_backends_alias_base_configs_and_exponential_waits() {
    let Some(f) = published(R4J) else { return };
    let a = one(&f, Some("retryBackendA"), &Options::default());
    assert_eq!(a.dead.bottom_attempts, 4.0);
    // IOException and FeignException only: a 5xx answer is not retried.
    assert_eq!(
        one(&f, Some("retryBackendA"), &with(Dead::Unavailable))
            .dead
            .bottom_attempts,
        1.0
    );
    // Three waits of 100 ms, plus four 1 ms refusals.
    assert_eq!(a.dead.edge_waits, Some(Duration::from_millis(304)));
    // retryBackendC retries IllegalArgumentException only: not a refusal.
    let c = one(&f, Some("retryBackendC"), &with(Dead::Refused));
    assert_eq!(c.dead.bottom_attempts, 1.0);
    // Made to retry I/O errors: 100 ms then 200 ms (multiplier 2, capped at
    // 222 ms), plus three 1 ms refusals.
    let io = (
        f.0.clone(),
        f.1.replace("java.lang.IllegalArgumentException", "java.io.IOException"),
    );
    let c = one(&io, Some("retryBackendC"), &with(Dead::Refused));
    assert_eq!(c.dead.bottom_attempts, 3.0);
    assert_eq!(c.dead.edge_waits, Some(Duration::from_millis(303)));
}

/// The worked path: a Gateway API route (attempts 2) on Istio, a Spring
/// application whose resilience4j retry makes 3 calls, each through a
/// sidecar with Istio's default policy: 3 × 3 × 3 connects.
#[test]
fn the_gateway_app_sidecar_path_makes_27_connects_and_names_the_breaker() {
    let (Some(route), Some(app)) = (published(ROUTE), published(DEMO)) else {
        return;
    };
    let sidecar = ("@istio-sidecar".to_string(), String::new());
    let r = path(
        &[
            (&route, Some("retries/1")),
            (&app, Some("backendA")),
            (&sidecar, None),
        ],
        &with(Dead::Refused),
    );
    let tries: Vec<f64> = r.dead.layers.iter().map(|n| n.tries).collect();
    assert_eq!(tries, [3.0, 3.0, 3.0]);
    assert_eq!(r.dead.bottom_attempts, 27.0);
    assert!(r.layers[1]
        .cut_by
        .as_deref()
        .unwrap()
        .contains("circuit breaker backendA"));
    let found = ids(&r);
    assert!(found.contains(&"retries_at_several_layers"));
    assert!(found.contains(&"mesh_default_retries"));
    // No VirtualService routes the dependency: the advice is to add one.
    let implicit = r
        .findings
        .iter()
        .find(|f| f.id == "mesh_default_retries")
        .unwrap();
    assert!(
        implicit
            .message
            .contains("Add a VirtualService for the dependency"),
        "{}",
        implicit.message
    );
}
