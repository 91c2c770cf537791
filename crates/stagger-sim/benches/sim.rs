//! Simulated events per second, on one core.
//!
//! `contention` is the hot loop the sweep spends its time in (events: the
//! four message deliveries of each read/write cycle plus one backoff timer
//! per retry); `failover` and `metastable` are measured in their own units.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use stagger_sim::{simulate_counted, ClientRange, Model, Options, Params, RetryKind, Strategy};

fn bench_model(c: &mut Criterion, name: &str, p: Params, strategies: &[Strategy]) {
    let opts = Options::default();
    let events = simulate_counted(&p, strategies, &opts)
        .expect("valid parameters")
        .events;
    let mut g = c.benchmark_group("sim");
    g.throughput(Throughput::Elements(events));
    g.sample_size(10);
    g.bench_function(BenchmarkId::new(name, events), |b| {
        b.iter(|| simulate_counted(&p, strategies, &opts).expect("valid parameters"))
    });
    g.finish();
}

fn contention(c: &mut Criterion) {
    let mut p = Params::defaults(Model::Contention);
    p.clients = ClientRange { lo: 50, hi: 50 };
    p.runs = 20;
    let all = [
        RetryKind::Immediate,
        RetryKind::Exponential,
        RetryKind::Full,
        RetryKind::Equal,
        RetryKind::Decorrelated,
    ]
    .map(Strategy::plain);
    bench_model(c, "contention_50_clients_5_strategies", p, &all);
}

fn metastable(c: &mut Criterion) {
    let mut p = Params::defaults(Model::Metastable);
    p.runs = 2;
    bench_model(
        c,
        "metastable_2_runs",
        p,
        &[Strategy::plain(RetryKind::Full)],
    );
}

fn failover(c: &mut Criterion) {
    let mut p = Params::defaults(Model::Failover);
    p.runs = 20;
    bench_model(
        c,
        "failover_20_runs",
        p,
        &[
            Strategy::plain(RetryKind::Exponential),
            Strategy::plain(RetryKind::Full),
        ],
    );
}

criterion_group!(benches, contention, metastable, failover);
criterion_main!(benches);
