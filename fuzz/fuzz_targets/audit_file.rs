//! `stagger audit FILE` on any text: kind detection and every reader it
//! leads to (Gateway API, Envoy Gateway, Istio DestinationRule and
//! EnvoyFilter, nginx, ingress-nginx, HAProxy, Traefik, resilience4j, and
//! the earlier mesh and client readers), each object of the file audited
//! in turn, the file on a path beside a built-in sidecar, and the file as a
//! cluster dump and as a repository of one file beside the worked path's
//! application (`stagger audit -`, `stagger audit DIR`). Each input is a
//! report or an error naming the file; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stagger_audit::path::{
    audit_file, audit_path, audit_repo, split_dump, what_is, Options, PathInput, Source,
};

/// Names whose endings steer the detection (`.toml` and `.json` do).
const NAMES: [&str; 4] = ["f.yaml", "f.conf", "f.toml", "f.json"];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for name in NAMES {
        let _ = what_is(name, text);
        match audit_file(name, text, &Options::default()) {
            Ok(reports) => {
                for r in reports {
                    assert!(r.report.dead.bottom_attempts >= 1.0);
                    let _ = stagger_report::audit::path_text(&r.report);
                }
            }
            Err(e) => {
                assert_eq!(e.file, name);
                assert!(!e.to_string().contains('\n'), "{e}");
            }
        }
    }
    let path = [
        PathInput::new("f.yaml", text, None),
        PathInput::new("@istio-sidecar", "", None),
    ];
    if let Ok(r) = audit_path(&path, &Options::default()) {
        assert!(r.dead.bottom_attempts >= 1.0);
    }
    let mut sources = split_dump("-", text);
    sources.push(Source {
        name: "app.yml".to_string(),
        text: "spring.application.name: storefront\nresilience4j.retry.instances.inventory.maxAttempts: 3\n".to_string(),
    });
    let repo = audit_repo(&sources, &Options::default());
    assert!(repo.paths.len() <= stagger_audit::path::MAX_PATHS);
    for p in &repo.paths {
        assert!(p.hops.len() >= 2 && p.hops.len() <= stagger_audit::path::MAX_HOPS);
    }
});
