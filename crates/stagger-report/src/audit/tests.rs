//! The renderers against reports the audit made of small configs: what the
//! text and the picture say, and that they keep to their room.

use std::time::Duration;

use stagger_audit::path::{audit_path, Options, PathInput, PathReport};

use super::{path_svg, path_text};

fn run(files: &[(&str, &str, Option<&str>)], o: &Options) -> PathReport {
    let inputs: Vec<PathInput<'_>> = files
        .iter()
        .map(|(n, t, s)| PathInput::new(n, t, *s))
        .collect();
    audit_path(&inputs, o).unwrap_or_else(|e| panic!("{e}"))
}

fn vs(attempts: u32) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: cart}}\nspec:\n  hosts: [cart]\n  http:\n  - route:\n    - destination: {{host: cart}}\n    retries: {{attempts: {attempts}, retryOn: connect-failure}}\n")
}

#[test]
fn one_attempt_is_not_written_as_1_attempts() {
    let vs = "kind: VirtualService\nspec:\n  hosts: [a]\n  http:\n  - retries: {attempts: 0}\n";
    let r = run(&[("vs.yaml", vs, None)], &Options::default());
    let text = path_text(&r);
    assert!(text.contains("1 attempt per call"), "{text}");
    assert!(!text.contains("1 attempts"), "{text}");
    let svg = path_svg(&r);
    assert!(svg.contains(">1 attempt<"), "{svg}");
    assert!(!svg.contains(">1 attempts<"), "{svg}");
}

#[test]
fn the_table_multiplies_what_each_layer_sends() {
    let r = run(&[("vs.yaml", &vs(2), None)], &Options::default());
    let text = path_text(&r);
    assert!(
        text.starts_with("Call path, edge first (HTTP); the dependency refuses every connection:"),
        "{text}"
    );
    let row = text.lines().find(|l| l.starts_with(" 1 ")).expect("a row");
    assert!(row.contains("vs.yaml istio cart"), "{row}");
    assert!(row.contains("connect-failure"), "{row}");
    assert!(text.contains("3 attempts per call"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
    assert!(path_svg(&r).contains(">3 attempts<"));
}

#[test]
fn a_proxy_that_does_not_retry_sends_one_attempt() {
    let one = "http {\n  upstream app { server 10.0.0.1:80; }\n  server { location / { proxy_pass http://app; } }\n}\n";
    let text = path_text(&run(&[("nginx.conf", one, None)], &Options::default()));
    assert!(
        text.contains("the dependency gets 1 attempt per call."),
        "{text}"
    );
}

// A `mode tcp` section relays a stream: the path is headed TCP.
#[test]
fn a_tcp_path_is_headed_tcp() {
    let cfg = "defaults\n    mode tcp\n    retries 2\n\nbackend db\n    server a 10.0.0.1:5432\n";
    let text = path_text(&run(&[("haproxy.cfg", cfg, None)], &Options::default()));
    assert!(text.starts_with("Call path, edge first (TCP)"), "{text}");
}

#[test]
fn sizing_is_shown_only_at_a_stated_rate_and_latency() {
    let dr = format!("{}---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {{name: cart}}\nspec:\n  host: cart\n  trafficPolicy: {{connectionPool: {{http: {{maxRetries: 10}}}}}}\n", vs(2));
    let plain = path_text(&run(&[("dr.yaml", &dr, None)], &Options::default()));
    assert!(!plain.contains("Budget sizing"), "{plain}");
    let sized = Options {
        rate: Some(100.0),
        latency: Some(Duration::from_millis(500)),
        bound: 1.1,
        ..Options::default()
    };
    let text = path_text(&run(&[("dr.yaml", &dr, None)], &sized));
    assert!(
        text.contains("Budget sizing at 100 requests/s and 500ms per attempt"),
        "{text}"
    );
    assert!(text.contains("budget_concurrency_floor: "), "{text}");
}

#[test]
fn what_cuts_a_layers_retries_is_said() {
    let app = "resilience4j:\n  retry:\n    instances:\n      backendA:\n        maxAttempts: 3\n        waitDuration: 100\n  circuitbreaker:\n    instances:\n      backendA:\n        minimumNumberOfCalls: 5\n";
    let r = run(
        &[("application.yml", app, Some("backendA"))],
        &Options::default(),
    );
    let cut = r.layers[0].cut_by.clone().expect("the breaker cuts it");
    let text = path_text(&r);
    assert!(
        text.contains(&format!(
            "What cuts it at layer 1: {}",
            cut.split(' ').next().unwrap()
        )),
        "{text}"
    );
    assert!(text.contains("backendA"), "{text}");
}

fn three_long_hosts() -> String {
    ["reviews-frontend", "reviews-backend", "reviews-ratings"]
        .iter()
        .map(|h| {
            format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {h}}}\nspec:\n  hosts: [{h}.bookinfo-production.svc.cluster.local]\n  http:\n  - route:\n    - destination: {{host: {h}.bookinfo-production.svc.cluster.local}}\n    retries: {{attempts: 1, retryOn: connect-failure}}\n")
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

// The table cut `FILE SYSTEM SELECTOR` at 46 columns from the left, so
// three hops of one long-named file all read `…mesh-routes.yaml istio rev…`.
#[test]
fn layer_names_cut_at_46_columns_no_longer_make_three_hops_of_one_file_read_alike() {
    let text = three_long_hosts();
    let file = "production-bookinfo-mesh-routes.yaml";
    let r = run(
        &[
            (file, &text, Some("reviews-frontend")),
            (file, &text, Some("reviews-backend")),
            (file, &text, Some("reviews-ratings")),
        ],
        &Options::default(),
    );
    let out = path_text(&r);
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with(" 1 ") || l.starts_with(" 2 ") || l.starts_with(" 3 "))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    // Columns 3..47 hold the layer's name.
    let names: Vec<String> = rows
        .iter()
        .map(|r| r.chars().skip(3).take(44).collect())
        .collect();
    assert_ne!(names[0], names[1], "{out}");
    assert_ne!(names[1], names[2], "{out}");
    assert_ne!(names[0], names[2], "{out}");
    for (name, want) in names.iter().zip(["frontend", "backend", "ratings"]) {
        assert!(name.contains(want), "{name:?} lost {want}: {out}");
    }
    assert!(out.lines().all(|l| l.chars().count() <= 120), "{out}");
}

// The SVG wrote each box's title and file line at full length, over the
// `×N` and `sends N` figures right-aligned in the same box.
#[test]
fn the_svg_does_not_overprint_long_paths() {
    let text = three_long_hosts();
    let file = "a-very-long-directory-name/production-bookinfo-mesh-routes.yaml";
    let r = run(
        &[
            (file, &text, Some("reviews-frontend")),
            (file, &text, Some("reviews-backend")),
            (file, &text, Some("reviews-ratings")),
        ],
        &Options::default(),
    );
    let svg = path_svg(&r);
    let width: f64 = 560.0;
    // The figures take the right 100 px of each box, which ends 24 px from
    // the edge; 13 px sans-serif is at most 0.6 em a character.
    let room = width - 24.0 - 100.0;
    let mut checked = 0;
    for line in svg.lines().filter(|l| l.starts_with(r#"<text x="24""#)) {
        let body = line.split_once('>').unwrap().1;
        let visible = match body.split_once("</title>") {
            Some((_, rest)) => rest,
            None => body,
        };
        let visible = visible.trim_end_matches("</text>");
        let chars = visible
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .chars()
            .count() as f64;
        assert!(
            24.0 + chars * 7.8 <= room,
            "{visible:?} runs into the figures"
        );
        checked += 1;
    }
    assert_eq!(checked, 3 * 2 + 1, "{svg}");
    // The whole text stays as the element's tooltip.
    assert!(svg.contains(
        "<title>a-very-long-directory-name/production-bookinfo-mesh-routes.yaml — retries on"
    ));
}
