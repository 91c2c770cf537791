use std::time::Duration;
use stagger_sim::*;
#[test]
fn dump() {
    let mut p = Params::defaults(Model::Metastable);
    p.runs = 1;
    p.duration = Duration::from_secs(120);
    for skip in [false, true] {
        p.server_skips_expired = skip;
        for r in simulate(&p, &Strategy::parse_list("none,full,exponential").unwrap(), &Options::default()).unwrap().strategies {
            eprintln!("skip={skip} {} amp={:.2} succ={:.3} before={:?} after={:?} rec={:?} {:?}", r.strategy, r.amplification, r.request_success, r.goodput_before, r.goodput_after, r.recovered, r.recovery_s);
            eprintln!("  good {:?}", r.series.successes.iter().map(|x| *x as u32).collect::<Vec<_>>());
        }
    }
    let mut p = Params::defaults(Model::Failover);
    p.runs = 20;
    for r in simulate(&p, &Strategy::parse_list("none,immediate,exponential,full,equal,decorrelated").unwrap(), &Options::default()).unwrap().strategies {
        eprintln!("{} att={:.0} amp={:.2} succ={:.3} peak={:?} post={:?} rec={:?}", r.strategy, r.attempts, r.amplification, r.request_success, r.peak_load_over_capacity, r.post_outage_peak_over_capacity, r.recovery_s);
        eprintln!("  load {:?}", r.series.load.iter().take(80).map(|x| *x as u32).collect::<Vec<_>>());
    }
}
