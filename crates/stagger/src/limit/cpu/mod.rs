//! The CPU trigger: shed work when the process runs hot, before it
//! queues (documented on [`CpuTrigger`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::guardrails::event::{Event, Observer};
use crate::outcome::error::ConfigError;
use crate::priority::Class;
use crate::random::RandomSource;

mod controller;
mod source;

pub use controller::CpuController;
use source::Source;

/// Parts per million.
const PPM: u32 = 1_000_000;

/// The shed chance of each class, lowest first: the rate `rate` (0 to 1)
/// of all arrivals is taken from the classes shed first, given the share
/// `mix[k]` of arrivals each class makes up (indexed by
/// [`Class::index`]). A class with no arrivals seen is shed whole once the
/// rate reaches it. In parts per million.
pub(crate) fn shed_chances(rate: f64, mix: &[f64; Class::COUNT]) -> [u32; Class::COUNT] {
    let mut out = [0u32; Class::COUNT];
    let mut left = rate.clamp(0.0, 1.0);
    for k in (0..Class::COUNT).rev() {
        if left <= 0.0 {
            break;
        }
        let share = mix[k].max(0.0);
        let chance = if share > 0.0 {
            (left / share).min(1.0)
        } else {
            1.0
        };
        out[k] = (chance * f64::from(PPM)).round() as u32;
        left -= share;
    }
    out
}

/// Configures a [`CpuTrigger`].
#[derive(Clone)]
pub struct CpuTriggerBuilder {
    controller: CpuController,
    interval: Duration,
    observer: Option<Arc<dyn Observer>>,
}

impl std::fmt::Debug for CpuTriggerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuTriggerBuilder")
            .field("controller", &self.controller)
            .field("interval", &self.interval)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl CpuTriggerBuilder {
    /// The controller (its threshold, smoothing and gain); default
    /// [`CpuController::new`].
    pub fn controller(mut self, controller: CpuController) -> Self {
        self.controller = controller;
        self
    }

    /// How often the sampler reads the CPU (default 100 ms, at least 1 ms).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every.max(Duration::from_millis(1));
        self
    }

    /// Reports every reading as an [`Event::Overload`], so a
    /// [`MetricsObserver`](crate::observe::export::MetricsObserver) sets the
    /// `stagger_cpu_utilisation` and `stagger_shed_rate` gauges.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// A trigger whose readings come from [`CpuTrigger::observe`] only (a
    /// simulator, a test, a process with its own CPU signal).
    pub fn manual(self) -> Result<CpuTrigger, ConfigError> {
        self.controller.validate()?;
        if let Some(o) = &self.observer {
            o.on_attach();
        }
        Ok(CpuTrigger {
            shared: Arc::new(Shared {
                controller: Mutex::new(self.controller),
                observer: self.observer,
                arrivals: Default::default(),
                mix: Mutex::new([0.0; Class::COUNT]),
                chances: Default::default(),
                utilisation_ppm: AtomicU32::new(0),
                rate_ppm: AtomicU32::new(0),
            }),
        })
    }

    /// A trigger fed by a sampler thread reading the process's CPU every
    /// [`interval`](Self::interval); the thread ends when the last handle
    /// to the trigger is dropped. An error when the process has no CPU
    /// reading (not Linux, or `/proc` not mounted).
    pub fn start(self) -> Result<CpuTrigger, ConfigError> {
        let Some(source) = Source::detect() else {
            return Err(ConfigError::new(
                "cpu",
                "no CPU reading: neither a cgroup v2 cpu.stat nor /proc/self/stat could be read",
            ));
        };
        let interval = self.interval;
        let trigger = self.manual()?;
        let weak = Arc::downgrade(&trigger.shared);
        std::thread::Builder::new()
            .name("stagger-cpu".into())
            .spawn(move || sample(&weak, &source, interval))
            .map_err(|e| ConfigError::new("cpu", format!("the sampler thread: {e}")))?;
        Ok(trigger)
    }
}

/// The sampler loop: every `interval`, CPU time used ÷ time passed ÷
/// cores, until the trigger is dropped.
fn sample(weak: &Weak<Shared>, source: &Source, interval: Duration) {
    let cores = source.cores();
    let mut last = (Instant::now(), source.usage());
    loop {
        std::thread::sleep(interval);
        let Some(shared) = weak.upgrade() else { return };
        let now = Instant::now();
        let used = source.usage();
        if let (Some(before), Some(after)) = (last.1, used) {
            let wall = now.saturating_duration_since(last.0).as_secs_f64();
            if wall > 0.0 {
                let busy = after.saturating_sub(before).as_secs_f64();
                shared.observe(now, busy / wall / cores);
            }
        }
        last = (now, used);
    }
}

/// Sheds work when the process's CPU runs above a threshold, before it
/// queues.
///
/// A concurrency limit learns overload from latency: a CPU-bound server
/// that answers in time until it suddenly does not sheds nothing until its
/// queue has grown. The CPU trigger reads the process's CPU use instead —
/// its cgroup's (v2 `cpu.stat`, against the quota in `cpu.max`) where it
/// has one, `/proc/self/stat` against the cores it may use otherwise — on
/// a background thread, never on the request path, and a
/// [`CpuController`] turns the smoothed reading into a shed rate that
/// rises smoothly above the threshold (80 % by default) and falls back
/// below it. The rate is spread over the kinds of request arriving lowest
/// first: with a shed rate of 30 % and 40 % of arrivals `sheddable`, three
/// in four `sheddable` requests are shed and nothing else.
///
/// Give the trigger to a [`ShedLayer`](crate::tower::ShedLayer) with
/// [`cpu`](crate::tower::ShedBuilder::cpu), beside its limit: a request is
/// shed when either says the server is overloaded.
///
/// A cheap [`Clone`] handle; on the request path it costs two atomic
/// operations, and a random draw only while it sheds.
///
/// ```
/// use stagger::limit::{CpuController, CpuTrigger};
/// use std::time::{Duration, Instant};
///
/// let trigger = CpuTrigger::builder()
///     .controller(CpuController::new().threshold(0.7))
///     .manual()?;
/// let mut now = Instant::now();
/// for _ in 0..50 {
///     now += Duration::from_millis(100);
///     trigger.observe(now, 1.0); // flat out
/// }
/// assert!(trigger.shed_rate() > 0.5);
/// assert!(trigger.utilisation() > 0.95);
/// // The real thing: a sampler thread reading this process's CPU.
/// # #[cfg(target_os = "linux")]
/// let sampled = CpuTrigger::builder().start()?;
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct CpuTrigger {
    shared: Arc<Shared>,
}

struct Shared {
    controller: Mutex<CpuController>,
    observer: Option<Arc<dyn Observer>>,
    /// Arrivals of each class since the last reading.
    arrivals: [AtomicU64; Class::COUNT],
    /// The smoothed share of arrivals of each class.
    mix: Mutex<[f64; Class::COUNT]>,
    /// Each class's shed chance, in parts per million.
    chances: [AtomicU32; Class::COUNT],
    utilisation_ppm: AtomicU32,
    rate_ppm: AtomicU32,
}

impl std::fmt::Debug for CpuTrigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuTrigger")
            .field("utilisation", &self.utilisation())
            .field("shed_rate", &self.shed_rate())
            .finish()
    }
}

impl CpuTrigger {
    /// Starts configuring a trigger (threshold 80 %, a reading every
    /// 100 ms).
    pub fn builder() -> CpuTriggerBuilder {
        CpuTriggerBuilder {
            controller: CpuController::new(),
            interval: Duration::from_millis(100),
            observer: None,
        }
    }

    /// Takes one reading: the process's CPU use at `now` as a share of its
    /// allowance. The controller moves the shed rate, and the rate is
    /// spread over the classes seen arriving since the last reading.
    pub fn observe(&self, now: Instant, utilisation: f64) {
        self.shared.observe(now, utilisation);
    }

    /// The smoothed CPU use, as a share of the allowance.
    pub fn utilisation(&self) -> f64 {
        f64::from(self.shared.utilisation_ppm.load(Ordering::Relaxed)) / f64::from(PPM)
    }

    /// The share of arriving work being shed (0 to 1).
    pub fn shed_rate(&self) -> f64 {
        f64::from(self.shared.rate_ppm.load(Ordering::Relaxed)) / f64::from(PPM)
    }

    /// Whether to shed a request of `class` arriving now, drawing from
    /// `rng` only while its class has a shed chance (counted as an
    /// arrival either way). The server layer passes a fresh generator; a
    /// simulator passes its seeded one.
    ///
    /// ```
    /// use stagger::limit::CpuTrigger;
    /// use stagger::priority::{Class, Priority};
    /// use stagger::random::FastRng;
    ///
    /// let trigger = CpuTrigger::builder().manual()?;
    /// let crawler = Class::new(Priority::SHEDDABLE, false);
    /// assert!(!trigger.sheds(crawler, &mut FastRng::seeded(1)), "cool: nothing shed");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    #[inline]
    pub fn sheds(&self, class: Class, rng: &mut impl RandomSource) -> bool {
        let k = class.index();
        self.shared.arrivals[k].fetch_add(1, Ordering::Relaxed);
        let chance = self.shared.chances[k].load(Ordering::Relaxed);
        chance > 0 && (rng.next_u64() % u64::from(PPM)) < u64::from(chance)
    }
}

impl Shared {
    fn observe(&self, now: Instant, utilisation: f64) {
        let (rate, smoothed, tau, dt) = {
            let mut c = self.controller.lock().unwrap_or_else(|p| p.into_inner());
            let before = c.last_update();
            let rate = c.update(now, utilisation);
            let dt = before.map_or(Duration::ZERO, |b| now.saturating_duration_since(b));
            (rate, c.smoothed(), c.smoothing_time(), dt)
        };
        // The arrival mix, smoothed like the reading.
        let counts: [u64; Class::COUNT] =
            std::array::from_fn(|k| self.arrivals[k].swap(0, Ordering::Relaxed));
        let total: u64 = counts.iter().sum();
        let chances = {
            let mut mix = self.mix.lock().unwrap_or_else(|p| p.into_inner());
            if total > 0 {
                let first = mix.iter().all(|m| *m == 0.0);
                let alpha = if first || tau.is_zero() {
                    1.0
                } else {
                    1.0 - (-dt.as_secs_f64() / tau.as_secs_f64()).exp()
                };
                for (m, c) in mix.iter_mut().zip(counts) {
                    *m += alpha * (c as f64 / total as f64 - *m);
                }
            }
            shed_chances(rate, &mix)
        };
        for (slot, c) in self.chances.iter().zip(chances) {
            slot.store(c, Ordering::Relaxed);
        }
        let ppm = |v: f64| (v.clamp(0.0, 4.0) * f64::from(PPM)) as u32;
        self.utilisation_ppm.store(ppm(smoothed), Ordering::Relaxed);
        self.rate_ppm.store(ppm(rate), Ordering::Relaxed);
        if let Some(o) = &self.observer {
            o.on_event(&Event::Overload {
                utilisation: smoothed,
                shed_rate: rate,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::Priority;

    fn mix(pairs: &[(Class, f64)]) -> [f64; Class::COUNT] {
        let mut m = [0.0; Class::COUNT];
        for (c, share) in pairs {
            m[c.index()] = *share;
        }
        m
    }

    #[test]
    fn the_rate_is_taken_from_the_lowest_classes_first() {
        let crawler = Class::new(Priority::SHEDDABLE, false);
        let checkout = Class::new(Priority::CRITICAL, false);
        let m = mix(&[(crawler, 0.4), (checkout, 0.6)]);
        let c = shed_chances(0.3, &m);
        assert_eq!(
            c[crawler.index()],
            750_000,
            "three in four crawler requests"
        );
        assert_eq!(c[checkout.index()], 0);
        let c = shed_chances(0.7, &m);
        assert_eq!(c[crawler.index()], PPM);
        assert_eq!(c[checkout.index()], 500_000);
        // Classes below the crawler that were not seen are shed whole.
        assert!(c[crawler.index() + 1..].iter().all(|&x| x == PPM));
        assert_eq!(shed_chances(0.0, &m), [0; Class::COUNT]);
    }

    #[test]
    fn a_reading_spreads_the_rate_over_the_classes_that_arrived() {
        let t = CpuTrigger::builder().manual().unwrap();
        let crawler = Class::new(Priority::SHEDDABLE, false);
        let checkout = Class::new(Priority::CRITICAL, false);
        let mut now = Instant::now();
        for _ in 0..100 {
            // 1 crawler in 4 arrivals.
            for i in 0..40 {
                t.sheds(
                    if i % 4 == 0 { crawler } else { checkout },
                    &mut crate::random::FastRng::seeded(i),
                );
            }
            now += Duration::from_millis(100);
            t.observe(now, 1.0);
        }
        let rate = t.shed_rate();
        assert!(rate > 0.9, "flat out for 10 s: {rate}");
        let chance = |c: Class| t.shared.chances[c.index()].load(Ordering::Relaxed);
        assert_eq!(chance(crawler), PPM);
        let expected = (rate - 0.25) / 0.75;
        let got = f64::from(chance(checkout)) / f64::from(PPM);
        assert!((got - expected).abs() < 0.01, "{got} vs {expected}");
    }

    #[test]
    fn the_sampler_reads_this_process_off_the_request_path_and_stops_with_the_trigger() {
        let Ok(t) = CpuTrigger::builder()
            .interval(Duration::from_millis(10))
            .start()
        else {
            return; // no CPU reading here (not Linux): `start` said so
        };
        // Burn one core for 300 ms (bounded), while the sampler reads.
        let begin = Instant::now();
        let mut x = 1u64;
        while begin.elapsed() < Duration::from_millis(300) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        std::hint::black_box(x);
        // One busy core of the allowance, on a shared machine: some of it.
        assert!(t.utilisation() > 0.05, "read {}", t.utilisation());
        let weak = Arc::downgrade(&t.shared);
        drop(t);
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            weak.upgrade().is_none()
        });
        assert!(gone, "the sampler let go of the trigger");
    }
}
