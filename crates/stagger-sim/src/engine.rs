//! Shared machinery: virtual time, seeded randomness, and spreading runs
//! over threads deterministically.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use stagger::random::{FastRng, RandomSource};

/// Virtual time: nanoseconds since one origin `Instant`. The library reads
/// time only as `Instant`s it is handed (an `Instant` is a frozen clock), so
/// the policies run on simulated time and never on the wall clock; only
/// differences between instants ever matter, which keeps runs replayable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VirtualTime {
    origin: Instant,
}

impl VirtualTime {
    pub(crate) fn new() -> Self {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        VirtualTime {
            origin: *ORIGIN.get_or_init(Instant::now),
        }
    }

    /// The instant `ns` nanoseconds after the origin.
    #[inline]
    pub(crate) fn at(&self, ns: u64) -> Instant {
        self.origin
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or(self.origin)
    }
}

/// A lazy reading of virtual time: the library reads a clock only when a
/// rule needs the time (a deadline, a guardrail), so the plain retry path
/// never builds an `Instant`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At(pub(crate) VirtualTime, pub(crate) u64);

impl stagger::time::Clock for At {
    #[inline]
    fn now(&self) -> Instant {
        self.0.at(self.1)
    }
}

/// What a shedding server answers: a transient failure with a
/// `Retry-After` of 1 to 5 whole seconds, drawn uniformly (what the
/// library's `ShedLayer` sends by default).
pub(crate) fn shed_answer(rng: &mut FastRng) -> stagger::Outcome {
    let secs = 1 + rng.next_u64() % 5;
    stagger::Outcome::Failure(
        stagger::Failure::transient()
            .with_hint(stagger::Hint::RetryAfter(Duration::from_secs(secs))),
    )
}

/// Nanoseconds of a duration, saturating.
#[inline]
pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Derives an independent stream seed from a run seed and a purpose.
#[inline]
pub(crate) fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Standard normal draws by the ziggurat method (Marsaglia and Tsang, 256
/// layers): one 64-bit draw and a comparison almost every time, a wedge or
/// tail test rarely. The tables are computed once.
#[derive(Debug)]
pub(crate) struct Normal {
    table: &'static Zig,
}

impl Default for Normal {
    fn default() -> Self {
        static TABLE: OnceLock<Zig> = OnceLock::new();
        Normal {
            table: TABLE.get_or_init(Zig::new),
        }
    }
}

/// Layer edges `x[i]` and densities `f[i] = exp(-x[i]²/2)`.
#[derive(Debug)]
pub(crate) struct Zig {
    x: [f64; 257],
    f: [f64; 257],
}

/// Where the tail starts, for 256 layers of equal area `V`.
const ZIG_R: f64 = 3.654_152_885_361_009;
const ZIG_V: f64 = 0.004_928_673_233_99;

#[inline]
fn density(x: f64) -> f64 {
    (-0.5 * x * x).exp()
}

impl Zig {
    fn new() -> Self {
        let mut x = [0.0; 257];
        x[0] = ZIG_V / density(ZIG_R);
        x[1] = ZIG_R;
        for i in 1..256 {
            let next = -2.0 * (ZIG_V / x[i] + density(x[i])).ln();
            x[i + 1] = if next > 0.0 { next.sqrt() } else { 0.0 };
        }
        x[256] = 0.0;
        let mut f = [0.0; 257];
        for i in 0..257 {
            f[i] = density(x[i]);
        }
        Zig { x, f }
    }
}

impl Normal {
    #[inline]
    pub(crate) fn sample(&mut self, rng: &mut FastRng) -> f64 {
        let z = self.table;
        loop {
            let bits = rng.next_u64();
            let i = (bits & 0xff) as usize;
            // A uniform in (-1, 1) from the 52 bits above the index.
            let u = f64::from_bits((bits >> 12) | 0x3ff0_0000_0000_0000) * 2.0 - 3.0;
            let x = u * z.x[i];
            if x.abs() < z.x[i + 1] {
                return x;
            }
            if i == 0 {
                // The tail beyond R (Marsaglia's method).
                loop {
                    let a = (1.0 - rng.next_f64()).ln() / ZIG_R;
                    let b = (1.0 - rng.next_f64()).ln();
                    if -2.0 * b >= a * a {
                        return if u < 0.0 { a - ZIG_R } else { ZIG_R - a };
                    }
                }
            }
            if z.f[i + 1] + (z.f[i] - z.f[i + 1]) * rng.next_f64() < density(x) {
                return x;
            }
        }
    }
}

/// An exponential draw with mean `mean_ns` (Poisson inter-arrival times).
#[inline]
pub(crate) fn exponential_ns(rng: &mut FastRng, mean_ns: f64) -> u64 {
    let u = 1.0 - rng.next_f64(); // (0, 1]
    (-u.ln() * mean_ns) as u64
}

/// Runs `f(scratch, i)` for every `i < n` over `threads` threads and returns
/// the results in index order, whatever the scheduling. Each thread keeps
/// one scratch value (reused allocations). `progress` is told after every
/// item.
pub(crate) fn par_map<S, T, I, F>(
    n: usize,
    threads: usize,
    init: I,
    f: F,
    progress: &(dyn Fn() + Sync),
) -> Vec<T>
where
    T: Send,
    I: Fn() -> S + Sync,
    F: Fn(&mut S, usize) -> T + Sync,
{
    let threads = threads.clamp(1, n.max(1));
    if threads == 1 {
        let mut s = init();
        return (0..n)
            .map(|i| {
                let r = f(&mut s, i);
                progress();
                r
            })
            .collect();
    }
    let next = AtomicUsize::new(0);
    let mut parts: Vec<Vec<(usize, T)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = init();
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        out.push((i, f(&mut s, i)));
                        progress();
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut all: Vec<(usize, T)> = parts.iter_mut().flat_map(std::mem::take).collect();
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_map_keeps_index_order() {
        for threads in [1, 2, 3, 8] {
            let got = par_map(100, threads, || (), |_, i| i * i, &|| {});
            assert_eq!(got, (0..100).map(|i| i * i).collect::<Vec<_>>());
        }
    }

    #[test]
    fn normal_has_the_right_moments() {
        let mut rng = FastRng::seeded(3);
        let mut n = Normal::default();
        let k = 200_000;
        let xs: Vec<f64> = (0..k).map(|_| n.sample(&mut rng)).collect();
        let mean = xs.iter().sum::<f64>() / k as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / k as f64;
        assert!(mean.abs() < 0.012, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
        // Tails: P(|z| > 2) = 0.0455, P(|z| > 3) = 0.0027, P(|z| > 3.7) = 0.000216.
        for (t, p) in [(1.0, 0.3173), (2.0, 0.0455), (3.0, 0.0027), (3.7, 0.000216)] {
            let got = xs.iter().filter(|x| x.abs() > t).count() as f64 / k as f64;
            let se = (p * (1.0 - p) / k as f64).sqrt();
            assert!((got - p).abs() < 5.0 * se, "P(|z|>{t}) = {got}, want {p}");
        }
        let below = xs.iter().filter(|x| **x < -1.0).count() as f64 / k as f64;
        assert!((below - 0.1587).abs() < 0.005, "{below}");
    }
}
