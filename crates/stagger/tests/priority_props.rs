//! Properties of the priority parser (a header value from any peer) and of
//! the shedding order built on it.

use proptest::prelude::*;
use stagger::priority::{Ceilings, Class, Priority};

/// The values that must parse, written independently of the parser: the
/// four names in lower case with `_`, and the ranks 0 to 7.
fn oracle(raw: &[u8]) -> Option<u8> {
    let s = std::str::from_utf8(raw).ok()?;
    let s = s.trim_matches(|c| c == ' ' || c == '\t');
    let norm: String = s
        .chars()
        .map(|c| {
            if c == '-' || c == ' ' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    match norm.as_str() {
        "critical_plus" | "0" => Some(0),
        "critical" | "1" => Some(1),
        "sheddable_plus" | "2" => Some(2),
        "sheddable" | "3" => Some(3),
        "4" => Some(4),
        "5" => Some(5),
        "6" => Some(6),
        "7" => Some(7),
        _ => None,
    }
}

/// A level name spelled as a peer might: any case, any separator, padding.
fn spelling() -> impl Strategy<Value = (u8, String)> {
    let names = ["critical plus", "critical", "sheddable plus", "sheddable"];
    (
        0u8..4,
        prop::collection::vec(any::<bool>(), 16),
        0usize..3,
        0usize..3,
        0usize..3,
    )
        .prop_map(move |(rank, upper, sep, left, right)| {
            let sep = ["_", "-", " "][sep];
            let word: String = names[rank as usize]
                .replace(' ', sep)
                .chars()
                .zip(upper.iter().cycle())
                .map(|(c, &u)| if u { c.to_ascii_uppercase() } else { c })
                .collect();
            let pad = |n| " \t".repeat(n);
            (rank, format!("{}{word}{}", pad(left), pad(right)))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_bytes_parse_as_the_oracle_says(raw in prop::collection::vec(any::<u8>(), 0..40)) {
        let got = Priority::from_bytes(&raw).ok().map(Priority::rank);
        prop_assert_eq!(got, oracle(&raw), "{:?}", raw);
    }

    #[test]
    fn near_names_parse_as_the_oracle_says(
        raw in "[ \t]{0,2}(critical|sheddable|CRITICAL|Sheddable)([-_ +]{0,2}(plus|PLUS|Plus|p))?[ \t0-9]{0,2}",
    ) {
        let got = raw.parse::<Priority>().ok().map(Priority::rank);
        prop_assert_eq!(got, oracle(raw.as_bytes()), "{:?}", raw);
    }

    #[test]
    fn every_common_spelling_is_understood((rank, raw) in spelling()) {
        let p = raw.parse::<Priority>();
        prop_assert_eq!(p.map(Priority::rank), Ok(rank), "{:?}", raw);
    }

    #[test]
    fn names_and_ranks_read_back(rank in 0u8..8) {
        let p = Priority::from_rank(rank).unwrap();
        prop_assert_eq!(p.to_string().parse::<Priority>(), Ok(p));
        prop_assert_eq!(rank.to_string().parse::<Priority>(), Ok(p));
    }

    #[test]
    fn errors_name_the_value(raw in "[a-z0-9_]{1,30}") {
        if let Err(e) = raw.parse::<Priority>() {
            prop_assert!(e.to_string().contains(&raw), "{}", e);
        }
    }

    /// Whatever the ceilings, capacity and reserve: a class is refused no
    /// later than any class before it in the shedding order (lower level
    /// first, retries before first attempts; levels whose ceilings round to
    /// the same number at this capacity are one level, their retries
    /// refused together), within the capacity, and an idle server admits
    /// any first attempt.
    #[test]
    fn caps_follow_the_shedding_order(
        mut shares in prop::collection::vec(0.01f64..=1.0, 1..=8),
        total in 0u64..100_000,
        reserve in 0.0f64..1.0,
    ) {
        shares.sort_by(|a, b| b.total_cmp(a));
        let c = Ceilings::new(&shares).unwrap();
        let classes: Vec<Class> = Priority::all()
            .flat_map(|p| [false, true].map(|r| Class::new(p, r)))
            .collect();
        let cap = |k: &Class| c.cap(total, *k, reserve);
        let first = |p: Priority| cap(&Class::new(p, false));
        for (i, a) in classes.iter().enumerate() {
            prop_assert!(cap(a) <= total, "{:?}", a);
            prop_assert!(a.retry || cap(a) >= total.min(1), "{:?}", a);
            for b in &classes[i + 1..] {
                let merged = first(a.priority) == first(b.priority) && a.retry && !b.retry;
                prop_assert!(merged || cap(a) >= cap(b), "{:?} {} < {:?} {}", a, cap(a), b, cap(b));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Whatever the ceilings and however small the capacity (from 2), a
    /// reserve above zero keeps every level's retries strictly below its
    /// first attempts. Rounding once let retries fill a sheddable level
    /// under a limit of about 40.
    #[test]
    fn retries_stay_below_first_attempts_at_every_limit_from_two(
        mut shares in prop::collection::vec(0.01f64..=1.0, 1..=8),
        total in 2u64..2_000,
        reserve in 0.001f64..=1.0,
    ) {
        shares.sort_by(|a, b| b.total_cmp(a));
        let c = Ceilings::new(&shares).unwrap();
        for p in Priority::all() {
            let first = c.cap(total, Class::new(p, false), reserve);
            let retry = c.cap(total, Class::new(p, true), reserve);
            prop_assert!(retry < first, "{} at {}: retries {} first {}", p, total, retry, first);
        }
    }
}
