//! How long `stagger lab` takes to answer the page's default requests, over
//! loopback HTTP against the release binary: the Failover scene as it opens
//! (exponential, 40 runs) and in compare mode (two strategies), and one
//! decision of scene 6. The target for the Failover scene is < 100 ms.

#[path = "../tests/lab_util/mod.rs"]
mod lab_util;

use criterion::{criterion_group, criterion_main, Criterion};

/// The query the page sends when the Failover scene opens.
const FAILOVER: &str = "/api/simulate?model=failover&strategy=exponential&burst=200&capacity=10\
&base=100ms&attempts=5&outage_end=5s&runs=40&seed=1";
const COMPARE: &str = "/api/simulate?model=failover&strategy=exponential%2Cfull%2Bbudget%2Bbreaker\
&burst=200&capacity=10&base=100ms&attempts=5&outage_end=5s&runs=40&seed=1";
/// Scene 8 as it opens: 11 loads × 4 ways of shedding × 5 seeds, 10 s each.
const PRIORITY: &str = "/api/simulate?model=priority\
&load=0.5%2C0.75%2C1%2C1.25%2C1.5%2C1.75%2C2%2C2.25%2C2.5%2C2.75%2C3\
&critical_share=0.2&duration=10s&runs=5&seed=1";
const DECIDE: &str =
    "/api/decide?status=503&method=POST&idempotency_key=1&retry_after=2&remaining=1.5s&attempt=2";

fn lab(c: &mut Criterion) {
    let lab = lab_util::Lab::start();
    let mut g = c.benchmark_group("lab_api");
    for (name, path) in [
        ("failover_default", FAILOVER),
        ("failover_compare", COMPARE),
        ("decide", DECIDE),
        ("priority_scene", PRIORITY),
    ] {
        let (status, body) = lab.get(path);
        assert_eq!(status, 200, "{name}: {body}");
        g.bench_function(name, |b| b.iter(|| lab.get(path)));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = lab
}
criterion_main!(benches);
