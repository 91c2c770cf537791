//! The CPU trigger's controller, sans-IO: CPU readings in, a shed rate out.

use std::time::{Duration, Instant};

use crate::outcome::error::ConfigError;

/// Turns CPU readings into a shed rate that moves smoothly: the share of
/// arriving work to turn away so the process stays near its threshold.
///
/// Each reading (the process's CPU use as a share of its allowance, taken
/// at `now`) is smoothed with an exponentially weighted moving average
/// whose time constant is [`smoothing`](Self::smoothing) (0.5 s by
/// default); the shed rate then moves by `gain × (smoothed − threshold) ×
/// dt` — an integral controller, so it settles where the CPU sits at the
/// threshold instead of jumping between "shed everything" and "shed
/// nothing" as a plain threshold would — but never faster than
/// [`max_step`](Self::max_step) per second, and not at all while the
/// smoothed reading is within [`band`](Self::band) of the threshold. Sans-IO:
/// it never reads a clock or a file; its driver (the
/// [`CpuTrigger`](super::CpuTrigger)'s sampler, a simulator, a test)
/// brings the time and the reading.
///
/// ```
/// use stagger::limit::CpuController;
/// use std::time::{Duration, Instant};
///
/// let mut c = CpuController::new(); // threshold 80 %
/// let mut now = Instant::now();
/// // A server asked for twice what it can do: its CPU use is
/// // 2 × (1 − shed rate), at most 100 %.
/// let mut rate: f64 = 0.0;
/// for _ in 0..600 {
///     now += Duration::from_millis(100);
///     rate = c.update(now, (2.0 * (1.0 - rate)).min(1.0));
/// }
/// assert!((rate - 0.6).abs() < 0.03, "it sheds the excess: {rate}");
/// assert!((c.smoothed() - 0.8).abs() < 0.03);
/// ```
#[derive(Debug, Clone)]
pub struct CpuController {
    threshold: f64,
    smoothing: Duration,
    gain: f64,
    max_step: f64,
    band: f64,
    smoothed: Option<f64>,
    rate: f64,
    last: Option<Instant>,
}

impl Default for CpuController {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuController {
    /// Threshold 0.8, smoothing 0.5 s, gain 1 per second, at most 0.5 per
    /// second, a dead band of ±0.02.
    pub const fn new() -> Self {
        CpuController {
            threshold: 0.8,
            smoothing: Duration::from_millis(500),
            gain: 1.0,
            max_step: 0.5,
            band: 0.02,
            smoothed: None,
            rate: 0.0,
            last: None,
        }
    }

    /// The CPU use to hold, as a share of the allowance (default 0.8).
    pub const fn threshold(mut self, share: f64) -> Self {
        self.threshold = share;
        self
    }

    /// The time constant of the reading's moving average (default 0.5 s).
    pub const fn smoothing(mut self, tau: Duration) -> Self {
        self.smoothing = tau;
        self
    }

    /// How fast the shed rate follows the error: per second, per unit of
    /// smoothed reading above the threshold (default 1).
    pub const fn gain(mut self, gain: f64) -> Self {
        self.gain = gain;
        self
    }

    /// The most the shed rate moves in a second, either way (default 0.5).
    pub const fn max_step(mut self, per_second: f64) -> Self {
        self.max_step = per_second;
        self
    }

    /// How far from the threshold the smoothed reading may be without the
    /// rate moving (default 0.02).
    pub const fn band(mut self, band: f64) -> Self {
        self.band = band;
        self
    }

    /// The first setting out of range, if any.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let share = |v: f64| v > 0.0 && v <= 1.0;
        if !share(self.threshold) {
            return Err(ConfigError::new(
                "threshold",
                format!("{} is not a share in (0, 1]", self.threshold),
            ));
        }
        if !(self.gain.is_finite() && self.gain > 0.0) {
            return Err(ConfigError::new(
                "gain",
                format!("{} is not positive", self.gain),
            ));
        }
        if !(self.max_step.is_finite() && self.max_step > 0.0) {
            return Err(ConfigError::new(
                "max_step",
                format!("{} is not positive", self.max_step),
            ));
        }
        if !(0.0..0.5).contains(&self.band) {
            return Err(ConfigError::new(
                "band",
                format!("{} is not in [0, 0.5)", self.band),
            ));
        }
        Ok(())
    }

    /// Takes the reading `utilisation` (CPU use ÷ allowance; values outside
    /// [0, 2] and NaN are clamped or ignored) made at `now`, and returns the
    /// shed rate, 0 to 1.
    pub fn update(&mut self, now: Instant, utilisation: f64) -> f64 {
        if !utilisation.is_finite() {
            return self.rate;
        }
        let u = utilisation.clamp(0.0, 2.0);
        let dt = self
            .last
            .map_or(Duration::ZERO, |l| now.saturating_duration_since(l));
        self.last = Some(now);
        let smoothed = match self.smoothed {
            None => u,
            Some(s) => {
                let tau = self.smoothing.as_secs_f64();
                let alpha = if tau > 0.0 {
                    1.0 - (-dt.as_secs_f64() / tau).exp()
                } else {
                    1.0
                };
                s + alpha * (u - s)
            }
        };
        self.smoothed = Some(smoothed);
        let error = smoothed - self.threshold;
        if error.abs() > self.band {
            let dt = dt.as_secs_f64();
            let most = self.max_step * dt;
            let step = (self.gain * error * dt).clamp(-most, most);
            self.rate = (self.rate + step).clamp(0.0, 1.0);
        }
        self.rate
    }

    /// The smoothed reading (0 before the first).
    pub fn smoothed(&self) -> f64 {
        self.smoothed.unwrap_or(0.0)
    }

    /// The current shed rate.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// When the last reading was taken.
    pub(crate) fn last_update(&self) -> Option<Instant> {
        self.last
    }

    /// The smoothing time constant.
    pub(crate) fn smoothing_time(&self) -> Duration {
        self.smoothing
    }
}
