//! The breakers' admin endpoint over real HTTP: an axum router on
//! 127.0.0.1 mounts it, and plain HTTP/1.1 requests list and change the
//! breakers a control drives.

#![cfg(feature = "tower")]

use std::net::SocketAddr;
use std::time::Instant;

use stagger::guardrails::{BreakerControl, BreakerState};
use stagger::tower::BreakerAdmin;
use stagger::Breaker;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn serve(control: BreakerControl) -> SocketAddr {
    let app = axum::Router::new().nest_service("/admin/breakers", BreakerAdmin::new(control));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// Sends one request and returns the status and the body.
async fn send(addr: SocketAddr, method: &str, target: &str) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {target} HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

#[tokio::test]
async fn the_admin_endpoint_lists_and_moves_breakers_over_http() {
    let control = BreakerControl::new();
    let (payments, ledger) = (Breaker::default(), Breaker::default());
    control.attach("payments", &payments);
    control.attach("ledger", &ledger);
    let addr = serve(control).await;

    let (status, _, body) = send(addr, "GET", "/admin/breakers").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        r#"{"breakers":[{"name":"payments","state":"closed"},{"name":"ledger","state":"closed"}]}"#
    );

    // Isolate one dependency during an incident.
    let (status, _, body) = send(
        addr,
        "POST",
        "/admin/breakers?to=force_open&name=payments&reason=INC-42+on-call",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(r#"{"name":"payments","state":"forced_open"}"#),
        "{body}"
    );
    assert_eq!(payments.state(), BreakerState::ForcedOpen);
    assert!(payments.acquire(Instant::now()).is_err());
    assert_eq!(ledger.state(), BreakerState::Closed);

    // Watch every breaker without letting it refuse, then release all.
    let (status, _, _) = send(addr, "POST", "/admin/breakers?to=metrics_only").await;
    assert_eq!(status, 200);
    assert_eq!(ledger.state(), BreakerState::MetricsOnly);
    let (status, _, _) = send(addr, "POST", "/admin/breakers?to=open_for&ms=60000").await;
    assert_eq!(status, 200);
    assert_eq!(payments.state(), BreakerState::Open);
    let (status, _, body) = send(addr, "POST", "/admin/breakers?to=close_and_reset").await;
    assert_eq!(status, 200);
    assert!(!body.contains("open"), "{body}");
    assert_eq!(payments.state(), BreakerState::Closed);
}

#[tokio::test]
async fn the_admin_endpoint_answers_bad_requests_with_the_problem_named() {
    let control = BreakerControl::new();
    control.attach("payments", &Breaker::default());
    let addr = serve(control).await;
    for (target, status, says) in [
        ("/admin/breakers", 400, "`to` is missing"),
        (
            "/admin/breakers?to=explode",
            400,
            "unknown transition `explode`",
        ),
        ("/admin/breakers?to=open_for", 400, "`open_for` needs `ms`"),
        (
            "/admin/breakers?to=open_for&ms=soon",
            400,
            "whole milliseconds",
        ),
        (
            "/admin/breakers?to=force_open&ms=5",
            400,
            "`ms` goes with `open_for` only",
        ),
        (
            "/admin/breakers?to=force_open&colour=red",
            400,
            "unknown parameter `colour`",
        ),
        (
            "/admin/breakers?to=force_open&name=nobody",
            404,
            "no breaker named `nobody`",
        ),
    ] {
        let (got, _, body) = send(addr, "POST", target).await;
        assert_eq!(got, status, "{target}: {body}");
        assert!(body.contains(says), "{target}: {body}");
    }
    let (got, head, _) = send(addr, "DELETE", "/admin/breakers").await;
    assert_eq!(got, 405);
    assert!(
        head.to_ascii_lowercase().contains("allow: get, post"),
        "{head}"
    );
    // Nothing was changed by the bad requests.
    let (_, _, body) = send(addr, "GET", "/admin/breakers").await;
    assert!(body.contains(r#""state":"closed""#), "{body}");
}
