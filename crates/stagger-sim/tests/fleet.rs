//! The guardrails at the fleet's thin shape: the same load from 400 client
//! processes instead of 10, in the failover model and in the drill.
//!
//! Every claim is a mean over seeded runs (200 runs from seed 1, as
//! `stagger simulate` does by default), so each number is exact for those
//! seeds; the bounds leave the stated margin for a change of seeds.

use stagger_sim::{simulate, Model, Options, Params, Row, Strategy, DRILL_STRATEGIES};

fn run(p: &Params, strategies: &str) -> Vec<Row> {
    let s = Strategy::parse_list(strategies).unwrap();
    simulate(p, &s, &Options::default()).unwrap().strategies
}

fn failover(clients: u32) -> Params {
    let mut p = Params::defaults(Model::Failover);
    p.clients = stagger_sim::ClientRange::one(clients);
    p
}

/// 400 processes, about 0.08 requests per second each: the budget engages
/// and holds amplification to ≤ 1.3 with ≥ 84 % success, recovered within
/// 2 s of the outage's end (plain `full`: 4.15×, 34.5 %, never recovers).
#[test]
fn guardrails_hold_with_400_thin_processes() {
    let rows = run(&failover(400), "full,full+budget+breaker");
    let (full, guarded) = (&rows[0], &rows[1]);
    assert!(full.amplification > 4.0);
    assert!(guarded.budget_refusals > 100.0, "the budget engages");
    assert!(guarded.amplification <= 1.3, "{}", guarded.amplification);
    assert!(
        guarded.request_success >= 0.84,
        "{}",
        guarded.request_success
    );
    let rec = guarded.recovery_s.expect("recovers");
    assert!(rec <= 2.0, "{rec}");
}

/// 10 busy processes carrying the same load: no worse than the fixed floor
/// was (0.92×, 81.7 %).
#[test]
fn guardrails_stay_as_good_with_10_busy_processes() {
    let rows = run(&failover(10), "full+budget+breaker");
    assert!(rows[0].amplification <= 0.95, "{}", rows[0].amplification);
    assert!(
        rows[0].request_success >= 0.81,
        "{}",
        rows[0].request_success
    );
    assert!(rows[0].breaker_opens >= 9.0, "the breakers still open");
}

/// The drill at both shapes: the guarded preset keeps amplification ≤ 1.3
/// and recovers within 2 s, and never does worse than no retries.
#[test]
fn the_drill_holds_at_both_shapes() {
    for clients in [400, 10] {
        let mut p = Params::drill();
        p.clients = stagger_sim::ClientRange::one(clients);
        p.runs = 50;
        let rows = run(&p, DRILL_STRATEGIES);
        let none = &rows[0];
        let guarded = rows.last().unwrap();
        assert_eq!(guarded.strategy, "full+budget+breaker");
        assert!(
            guarded.amplification <= 1.3,
            "{clients}: {}",
            guarded.amplification
        );
        assert!(guarded.request_success >= none.request_success, "{clients}");
        assert!(guarded.recovery_s.is_some_and(|r| r <= 2.0), "{clients}");
    }
}

/// A server that sheds retries first never sheds a first attempt: without
/// retries nothing changes, and with them success can only rise here.
#[test]
fn shedding_retries_first_spares_first_attempts() {
    let mut p = Params::drill();
    p.runs = 20;
    let plain = run(&p, "none,full");
    p.server_sheds_retries = true;
    let shed = run(&p, "none,full");
    assert_eq!(plain[0].attempts, shed[0].attempts);
    assert_eq!(plain[0].request_success, shed[0].request_success);
    assert!(shed[1].request_success >= plain[1].request_success);
    assert!(shed[1].amplification <= plain[1].amplification);
}

#[test]
fn the_drill_preset_is_valid_and_has_the_drill_shape() {
    let p = Params::drill();
    p.validate().unwrap();
    assert_eq!(p.model, Model::Failover);
    assert_eq!(p.clients.lo, 400);
    // 200 requests per second against a capacity of 400 per second.
    let per_s = 1.0 / p.tick.as_secs_f64();
    assert_eq!(f64::from(p.arrivals) * per_s, 200.0);
    assert_eq!(p.capacity * per_s, 400.0);
    assert_eq!((p.outage_end - p.outage_start).as_secs(), 2);
}
