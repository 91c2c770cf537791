//! Request priorities: which work a server sheds first when it cannot do
//! all of it.
//!
//! A server shedding load treats every request alike unless it knows what
//! each is worth: the checkout call and the nightly report crawler arriving
//! together are shed in the same proportion, and the crawler's retries keep
//! the checkout waiting. A [`Priority`] says what a request is worth. It
//! travels with the request (the [`HEADER`] on HTTP, the same key in gRPC
//! metadata) and, like the deadline, becomes the default of the calls made
//! while serving it, so a crawler's call is still sheddable three hops
//! down.
//!
//! There are four named levels, the criticalities of Google's SRE book,
//! highest first — `critical_plus`, `critical`, `sheddable_plus`,
//! `sheddable` — and four more below them that only have numbers (4 to 7,
//! for services that need finer grades of sheddable work). A request that
//! names none is `critical`. Under overload a server sheds the lowest level
//! first and, within one level, retries before first attempts; each level
//! keeps a guaranteed share of the capacity that lower levels may not take
//! ([`Ceilings`]).
//!
//! This module is sans-IO, like the rest of the engine: it parses values
//! and answers "admit or shed" from facts (the level, whether it is a
//! retry, how much is in flight, a random draw); the server layer
//! (`tower::ShedLayer`) reads the facts and writes the answer.
//!
//! ```
//! use stagger::priority::Priority;
//!
//! // Every common spelling of a level name is understood…
//! for s in ["critical-plus", "CRITICAL_PLUS", "Critical Plus", "0"] {
//!     assert_eq!(s.parse::<Priority>()?, Priority::CRITICAL_PLUS);
//! }
//! assert!(Priority::CRITICAL_PLUS > Priority::SHEDDABLE);
//! assert_eq!(Priority::default(), Priority::CRITICAL);
//! // …and anything else is an error naming the value.
//! let err = "urgent".parse::<Priority>().unwrap_err();
//! assert!(err.to_string().contains("urgent"));
//! # Ok::<(), stagger::priority::PriorityError>(())
//! ```

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

mod ceilings;

#[cfg(feature = "tower")]
pub(crate) use ceilings::retry_after_factor;
pub use ceilings::{Ceilings, Class};

/// The header (and gRPC metadata key) a priority travels in:
/// `x-criticality`, named for the SRE book's word for it. Not `priority`:
/// that is RFC 9218's header, which asks for an order of delivering
/// responses (and whose `u=0..7` a proxy may rewrite), not for what may be
/// dropped.
pub const HEADER: &str = "x-criticality";

/// How important a request is; see the [module](self). Ordered by
/// importance: `CRITICAL_PLUS` is the greatest. Printed, with `{}` or
/// `{:?}`, as its name ([`as_str`](Self::as_str)).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Priority(u8);

/// A value that is not a priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityError {
    /// The value as received (cut to 40 characters, non-text bytes
    /// escaped).
    value: String,
}

impl fmt::Display for PriorityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a priority (expected critical_plus, critical, sheddable_plus, \
             sheddable, or a number from 0 to 7)",
            self.value
        )
    }
}

impl std::error::Error for PriorityError {}

impl PriorityError {
    fn of(raw: &[u8]) -> Self {
        let shown = &raw[..raw.len().min(40)];
        PriorityError {
            value: shown.escape_ascii().to_string(),
        }
    }
}

/// The names of the four named levels, by rank.
const NAMES: [&str; 4] = ["critical_plus", "critical", "sheddable_plus", "sheddable"];
/// The names of every rank (the numbered ones by their number).
const RANK_NAMES: [&str; Priority::LEVELS] = [
    "critical_plus",
    "critical",
    "sheddable_plus",
    "sheddable",
    "4",
    "5",
    "6",
    "7",
];

impl Priority {
    /// Work whose failure users see at once and that has no fallback.
    pub const CRITICAL_PLUS: Priority = Priority(0);
    /// The default: work users wait for.
    pub const CRITICAL: Priority = Priority(1);
    /// Work that may be shed, whose failure costs something (a batch job
    /// that would have to start again).
    pub const SHEDDABLE_PLUS: Priority = Priority(2);
    /// Work that may be shed freely (prefetching, crawlers, reports).
    pub const SHEDDABLE: Priority = Priority(3);
    /// The lowest level (rank 7).
    pub const LOWEST: Priority = Priority(7);
    /// How many levels there are: ranks 0 to 7.
    pub const LEVELS: usize = 8;

    /// The level of `rank`, 0 (`critical_plus`) to 7, the lowest.
    ///
    /// ```
    /// use stagger::priority::Priority;
    /// assert_eq!(Priority::from_rank(3)?, Priority::SHEDDABLE);
    /// assert!(Priority::from_rank(8).is_err());
    /// # Ok::<(), stagger::priority::PriorityError>(())
    /// ```
    pub fn from_rank(rank: u8) -> Result<Self, PriorityError> {
        if usize::from(rank) < Self::LEVELS {
            Ok(Priority(rank))
        } else {
            Err(PriorityError::of(rank.to_string().as_bytes()))
        }
    }

    /// Its rank: 0 for the most important, up to 7.
    pub const fn rank(self) -> u8 {
        self.0
    }

    /// Its name as written on the wire and in metrics: `critical_plus`,
    /// `critical`, `sheddable_plus`, `sheddable`, or the number of a
    /// numbered level (`"4"` to `"7"`).
    pub const fn as_str(self) -> &'static str {
        RANK_NAMES[self.0 as usize]
    }

    /// Every level, highest first.
    pub fn all() -> impl Iterator<Item = Priority> {
        (0..Self::LEVELS as u8).map(Priority)
    }

    /// Reads a header or metadata value: a level name in any case, with
    /// `_`, `-` or a space between its words (`critical-plus`,
    /// `CRITICAL_PLUS`, `Sheddable Plus`), or a rank from 0 to 7, with
    /// spaces or tabs around it. Anything else is an error; a server
    /// reading a request treats it as no priority at all (`critical`).
    ///
    /// ```
    /// use stagger::priority::Priority;
    /// assert_eq!(Priority::from_bytes(b" sheddable-plus ")?, Priority::SHEDDABLE_PLUS);
    /// assert_eq!(Priority::from_bytes(b"5")?.rank(), 5);
    /// assert!(Priority::from_bytes(b"critical plus plus").is_err());
    /// assert!(Priority::from_bytes(b"\xff").is_err());
    /// # Ok::<(), stagger::priority::PriorityError>(())
    /// ```
    pub fn from_bytes(raw: &[u8]) -> Result<Self, PriorityError> {
        let trimmed = trim(raw);
        // The longest name is 14 bytes; anything longer is not one, and
        // no allocation is needed to normalise what fits.
        let mut buf = [0u8; 16];
        if trimmed.is_empty() || trimmed.len() > buf.len() {
            return Err(PriorityError::of(raw));
        }
        for (b, &c) in buf.iter_mut().zip(trimmed) {
            *b = match c {
                b'-' | b' ' => b'_',
                c => c.to_ascii_lowercase(),
            };
        }
        let norm = &buf[..trimmed.len()];
        if let Some(rank) = NAMES.iter().position(|n| n.as_bytes() == norm) {
            return Ok(Priority(rank as u8));
        }
        match norm {
            [d @ b'0'..=b'7'] => Ok(Priority(d - b'0')),
            _ => Err(PriorityError::of(raw)),
        }
    }
}

/// Spaces and tabs off both ends (what HTTP allows around a field value).
fn trim(raw: &[u8]) -> &[u8] {
    let ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = raw.iter().position(|b| !ws(b)).unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| !ws(b)).map_or(start, |e| e + 1);
    &raw[start..end]
}

impl Default for Priority {
    /// `critical`, the level of a request that names none.
    fn default() -> Self {
        Priority::CRITICAL
    }
}

impl Ord for Priority {
    /// By importance: a lower rank is a greater priority.
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.cmp(&self.0)
    }
}

impl PartialOrd for Priority {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Priority {
    /// Its name, as [`Display`](fmt::Display): a rank alone says nothing
    /// about which end of the scale it is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = PriorityError;

    /// As [`Priority::from_bytes`].
    fn from_str(s: &str) -> Result<Self, PriorityError> {
        Priority::from_bytes(s.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_itself() {
        for p in Priority::all() {
            assert_eq!(p.as_str().parse::<Priority>(), Ok(p));
            assert_eq!(p.rank().to_string().parse::<Priority>(), Ok(p));
        }
        assert_eq!(Priority::all().count(), Priority::LEVELS);
    }

    #[test]
    fn debug_output_names_the_level() {
        assert_eq!(format!("{:?}", Priority::CRITICAL), "critical");
        assert_eq!(format!("{:?}", Priority::LOWEST), "7");
        let c = super::Class::new(Priority::SHEDDABLE, true);
        assert!(format!("{c:?}").contains("priority: sheddable"), "{c:?}");
    }

    #[test]
    fn importance_orders_levels_highest_first() {
        let all: Vec<Priority> = Priority::all().collect();
        assert!(all.windows(2).all(|w| w[0] > w[1]));
        assert_eq!(all.iter().max(), Some(&Priority::CRITICAL_PLUS));
        assert_eq!(all.iter().min(), Some(&Priority::LOWEST));
    }

    #[test]
    fn near_misses_are_errors_that_show_the_value() {
        for bad in [
            "",
            " ",
            "8",
            "07",
            "-1",
            "critical__plus",
            "criticalplus",
            "critical+",
            "sheddable_",
            "high",
            "CRITICAL_PLUS_PLUS",
        ] {
            let e = bad.parse::<Priority>().unwrap_err();
            assert!(e.to_string().contains(bad.trim()), "{bad:?}: {e}");
        }
        let e = Priority::from_bytes(&[b'x'; 100]).unwrap_err();
        assert!(e.to_string().len() < 200, "a long value is cut: {e}");
    }
}
