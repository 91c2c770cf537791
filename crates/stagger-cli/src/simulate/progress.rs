//! A progress bar on stderr, only on a terminal and only once a run has
//! taken more than a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Counts finished work items; draws once the run is slow enough to need it.
pub struct Progress {
    bar: Option<ProgressBar>,
    shown: AtomicBool,
    started: Instant,
}

impl Progress {
    /// A bar over `items` work items, drawn only if `terminal`.
    pub fn new(items: u64, terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let b = ProgressBar::with_draw_target(Some(items), ProgressDrawTarget::hidden());
            if let Ok(style) = ProgressStyle::with_template(
                "simulating {bar:40} {pos}/{len} runs  {elapsed} (eta {eta})",
            ) {
                b.set_style(style);
            }
            b
        });
        Progress {
            bar,
            shown: AtomicBool::new(false),
            started: Instant::now(),
        }
    }

    /// One more work item finished (called from any worker thread).
    pub fn tick(&self) {
        let Some(b) = &self.bar else { return };
        b.inc(1);
        if !self.shown.load(Ordering::Relaxed)
            && self.started.elapsed() > SHOW_AFTER
            && !self.shown.swap(true, Ordering::Relaxed)
        {
            b.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
