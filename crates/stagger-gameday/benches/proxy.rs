//! What the fault proxy adds to a request on loopback: the same keep-alive
//! HTTP/1.1 GET (and an h2c one) to Debian's nginx directly and through
//! `stagger_gameday::proxy` with no fault. The difference of the medians is the
//! proxy's overhead (the target is ≤ 100 µs). Needs nginx installed; without
//! it the bench prints why and measures nothing.

#[path = "../tests/support/nginx.rs"]
mod nginx;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use stagger_gameday::proxy::{self, Config, Proxy};

fn client(h2: bool) -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(h2)
        .build_http()
}

async fn get(c: &Client<HttpConnector, Empty<Bytes>>, url: &str) {
    let resp = c.get(url.parse().unwrap()).await.unwrap();
    assert_eq!(resp.status(), 200);
    let _ = resp.into_body().collect().await.unwrap();
}

fn overhead(c: &mut Criterion) {
    let Some(nginx) = nginx::Nginx::start() else {
        eprintln!("nginx is not installed: nothing to compare the proxy with");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let start = |up: String| {
        let cfg = Config::new(
            "127.0.0.1:0".parse().unwrap(),
            proxy::upstream("UPSTREAM", &up).unwrap(),
        );
        rt.block_on(Proxy::start(cfg)).unwrap()
    };
    let p1 = start(nginx.url());
    let p2 = start(format!("http://{}", nginx.h2));
    let mut g = c.benchmark_group("proxy_overhead");
    for (name, h2, url) in [
        ("http1_nginx_direct", false, format!("{}/", nginx.url())),
        ("http1_through_proxy", false, format!("http://{}/", p1.addr)),
        ("h2c_nginx_direct", true, format!("http://{}/", nginx.h2)),
        ("h2c_through_proxy", true, format!("http://{}/", p2.addr)),
    ] {
        let c = client(h2);
        rt.block_on(get(&c, &url));
        g.bench_function(name, |b| b.iter(|| rt.block_on(get(&c, &url))));
    }
    g.finish();
    rt.block_on(async {
        p1.stop();
        p2.stop();
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = overhead
}
criterion_main!(benches);
