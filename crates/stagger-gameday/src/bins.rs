//! Counters per 100 ms of a run, shared by the server and the fleet.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The width of one bin.
pub const BIN: Duration = Duration::from_millis(100);

/// Bins of one run, all measured from the same start instant.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    /// When the run started (bin 0 starts here).
    pub start: Instant,
    /// Number of bins kept; events after the last bin are not binned.
    pub len: usize,
}

impl Timeline {
    /// A timeline of `span` from `start`.
    pub fn new(start: Instant, span: Duration) -> Self {
        let len = (span.as_millis() / BIN.as_millis()).max(1) as usize;
        Timeline { start, len }
    }

    /// The bin of `t`, if it is inside the timeline.
    pub fn bin(&self, t: Instant) -> Option<usize> {
        let i = (t.saturating_duration_since(self.start).as_millis() / BIN.as_millis()) as usize;
        (i < self.len).then_some(i)
    }

    /// A new series of zero counts.
    pub fn series(&self) -> Bins {
        Bins {
            line: *self,
            counts: (0..self.len).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

/// One counter per bin.
#[derive(Debug)]
pub struct Bins {
    line: Timeline,
    counts: Box<[AtomicU32]>,
}

impl Bins {
    /// Counts one event at `t`.
    #[inline]
    pub fn add(&self, t: Instant) {
        if let Some(i) = self.line.bin(t) {
            self.counts[i].fetch_add(1, Relaxed);
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> Vec<u32> {
        self.counts.iter().map(|c| c.load(Relaxed)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_land_in_their_bin_and_late_ones_are_dropped() {
        let start = Instant::now();
        let line = Timeline::new(start, Duration::from_secs(1));
        assert_eq!(line.len, 10);
        let b = line.series();
        b.add(start);
        b.add(start + Duration::from_millis(99));
        b.add(start + Duration::from_millis(250));
        b.add(start + Duration::from_secs(5));
        let s = b.snapshot();
        assert_eq!(s[0], 2);
        assert_eq!(s[2], 1);
        assert_eq!(s.iter().sum::<u32>(), 3);
    }
}
