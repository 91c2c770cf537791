//! Server hints are untrusted input: property tests of the parsers and of
//! what any header value can do to a call (unit tests: the parsers are the
//! crate's own, read through the transports' fact readers).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{parse_pushback, parse_retry_after, retry_after_hint, RetryAfter};
use crate::{Call, Decision, Failure, Hint, Policy, StopReason};
use proptest::prelude::*;

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const LONG_DAYS: [&str; 7] = [
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Civil date of a day count since 1970-01-01 (proleptic Gregorian).
fn civil(days: i64) -> (i64, usize, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, (m - 1) as usize, d)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_value_parses_or_is_rejected_without_panic(s in ".{0,80}") {
        let _ = parse_retry_after(&s);
        let _ = parse_pushback(&s);
        let _ = retry_after_hint(&s, SystemTime::now());
    }

    #[test]
    fn delay_seconds_are_exact_or_saturate(n in any::<u64>(), pad in "[ \t]{0,2}") {
        let v = format!("{pad}{n}{pad}");
        prop_assert_eq!(parse_retry_after(&v), Ok(RetryAfter::Delay(Duration::from_secs(n))));
    }

    #[test]
    fn signs_fractions_and_units_are_rejected(n in 0u32..100_000, junk in prop_oneof!["-", "\\+", "\\.5", "s", "ms", "e3", "0x"]) {
        let before = format!("{junk}{n}");
        let after = format!("{n}{junk}");
        prop_assert!(parse_retry_after(&before).is_err(), "{}", before);
        prop_assert!(parse_retry_after(&after).is_err(), "{}", after);
    }

    /// The three date forms RFC 9110 makes recipients accept name the same
    /// instant, for any second between 1970 and 2069 (RFC 850's two-digit
    /// years are read in that window).
    #[test]
    fn three_date_forms_agree(secs in 0u64..3_155_760_000) {
        let days = (secs / 86_400) as i64;
        let (y, m, d) = civil(days);
        let (hh, mm, ss) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
        let wd = (days % 7) as usize;
        let want = Ok(RetryAfter::At(UNIX_EPOCH + Duration::from_secs(secs)));
        let imf = format!("{}, {d:02} {} {y} {hh:02}:{mm:02}:{ss:02} GMT", DAYS[wd], MONTHS[m]);
        let rfc850 = format!("{}, {d:02}-{}-{:02} {hh:02}:{mm:02}:{ss:02} GMT", LONG_DAYS[wd], MONTHS[m], y % 100);
        let asctime = format!("{} {} {d:>2} {hh:02}:{mm:02}:{ss:02} {y}", DAYS[wd], MONTHS[m]);
        prop_assert_eq!(parse_retry_after(&imf), want.clone(), "{}", imf);
        prop_assert_eq!(parse_retry_after(&asctime), want.clone(), "{}", asctime);
        if (1970..2070).contains(&y) {
            prop_assert_eq!(parse_retry_after(&rfc850), want, "{}", rfc850);
        }
    }

    /// Whatever a server sends, the call never waits past its deadline (with
    /// room for one typical attempt) nor longer than max_retry_after plus one
    /// backoff step, and a retry is only ever scheduled within max attempts.
    #[test]
    fn no_header_value_breaks_the_deadline_or_the_limits(
        value in prop_oneof![".{0,40}", any::<u64>().prop_map(|n| n.to_string()), (0u64..200).prop_map(|n| n.to_string())],
        pushback in prop_oneof![".{0,20}", any::<u64>().prop_map(|n| n.to_string()), (0u64..200_000).prop_map(|n| n.to_string())],
        use_pushback in any::<bool>(),
        deadline_ms in 1u64..120_000,
        seed in any::<u64>(),
    ) {
        let policy = Policy::builder().max_attempts(4).build().unwrap();
        let now = Instant::now();
        let deadline = now + Duration::from_millis(deadline_ms);
        let mut call = Call::seeded(seed).deadline(deadline);
        let mut attempts = 0;
        loop {
            if policy.start_attempt(&mut call, now).is_err() { break; }
            attempts += 1;
            let hint = if use_pushback { parse_pushback(&pushback) } else { retry_after_hint(&value, SystemTime::now()) };
            match policy.decide(&mut call, Failure::transient().with_hint(hint), now) {
                Decision::Retry { after } => {
                    prop_assert!(now + after < deadline, "waits {:?} past a {}ms deadline", after, deadline_ms);
                    prop_assert!(after <= policy.max_retry_after() + policy.backoff().cap);
                    prop_assert!(attempts < policy.max_attempts());
                    if let Hint::RetryAfter(h) | Hint::Pushback(h) = hint {
                        prop_assert!(h <= policy.max_retry_after());
                        prop_assert!(after >= h);
                    }
                }
                Decision::Stop(r) => {
                    prop_assert!(matches!(r, StopReason::Deadline | StopReason::HintTooLong | StopReason::AttemptsExhausted | StopReason::NotRetryable), "{:?}", r);
                    break;
                }
            }
        }
        prop_assert!(attempts <= policy.max_attempts());
    }
}
