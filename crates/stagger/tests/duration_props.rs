//! The one duration grammar on untrusted text: no input panics, a
//! refusal names the text, and every written form reads back as the
//! duration it was written from.

use std::time::Duration;

use proptest::prelude::*;
use stagger::config::{parse_duration as parse, Bare};

/// The longest duration the grammar reads (10⁹ s).
const MAX: Duration = Duration::from_secs(1_000_000_000);

fn bare() -> impl Strategy<Value = Bare> {
    prop::sample::select(vec![Bare::None, Bare::Millis, Bare::Seconds])
}

/// Text near the grammar: digits, dots, unit letters, signs, blanks, and
/// the ISO prefix.
fn near() -> impl Strategy<Value = String> {
    "(PT|pt)?[0-9.µμnusmhdPTSe+ -]{0,24}"
}

const UNITS: [(&str, u64); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_text_is_read_or_refused_without_panic(s in ".{0,40}", b in bare()) {
        match parse(&s, b) {
            Ok(d) => prop_assert!(d <= MAX),
            Err(e) => {
                prop_assert_eq!(&e.input, &s);
                prop_assert!(!e.problem.is_empty());
            }
        }
    }

    #[test]
    fn text_near_the_grammar_never_panics(s in near(), b in bare()) {
        if let Ok(d) = parse(&s, b) {
            prop_assert!(d <= MAX);
        }
    }

    /// Terms in any order, with or without blanks between them, add up.
    #[test]
    fn terms_add_up(
        terms in prop::collection::vec((0u64..100_000, 0usize..UNITS.len()), 1..5),
        blank in any::<bool>(),
        b in bare(),
    ) {
        let sep = if blank { " " } else { "" };
        let text: Vec<String> = terms.iter().map(|(n, u)| format!("{n}{}", UNITS[*u].0)).collect();
        let want: u128 = terms
            .iter()
            .map(|(n, u)| u128::from(*n) * u128::from(UNITS[*u].1))
            .sum();
        let got = parse(&text.join(sep), b);
        if want <= MAX.as_nanos() {
            prop_assert_eq!(got.unwrap().as_nanos(), want);
        } else {
            prop_assert!(got.is_err());
        }
    }

    /// A decimal count of milliseconds written as seconds reads back
    /// exactly (protobuf JSON's `"0.025s"`).
    #[test]
    fn decimal_seconds_are_exact(ms in 0u64..10_000_000) {
        let text = format!("{}.{:03}s", ms / 1000, ms % 1000);
        prop_assert_eq!(parse(&text, Bare::None).unwrap(), Duration::from_millis(ms));
    }

    /// A bare number means what the reader says, and nothing without one.
    #[test]
    fn bare_numbers_follow_the_reader(n in 1u64..1_000_000) {
        let s = n.to_string();
        prop_assert_eq!(parse(&s, Bare::Millis).unwrap(), Duration::from_millis(n));
        prop_assert_eq!(parse(&s, Bare::Seconds).unwrap(), Duration::from_secs(n));
        prop_assert!(parse(&s, Bare::None).is_err());
    }
}
