//! Randomness as the engine draws it: the [`RandomSource`] seam and the
//! fast, seedable generator every call gets by default.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// Randomness seam.
///
/// Jitter only works if calls that fail together draw *independent* delays.
/// A policy therefore holds no random state: every call owns its own
/// [`FastRng`], seeded from a per-thread stream when the call first needs a
/// random number ([`FastRng::fresh`]), or from a seed the caller chooses
/// ([`FastRng::seeded`]) so a schedule or a simulation replays exactly.
///
/// Cloning a generator clones its stream — that is the defect that made
/// tower's backoff maker hand identical jitter to every request — so
/// [`FastRng`] is deliberately not `Clone`; use [`FastRng::fork`] to derive an
/// independent child.
///
/// A source of uniformly distributed 64-bit values.
pub trait RandomSource {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform value in `[0, 1)` with 53 bits of precision.
    #[inline]
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

impl<R: RandomSource + ?Sized> RandomSource for &mut R {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        (**self).next_u64()
    }
}

/// A small, fast, non-cryptographic generator (wyrand: one multiply per
/// draw, 64 bits of state, period 2^64). Not `Clone`: see the module docs.
#[derive(Debug)]
pub struct FastRng {
    state: u64,
}

const WY_ADD: u64 = 0xa076_1d64_78bd_642f;
const WY_XOR: u64 = 0xe703_7ed1_a0b4_28db;

impl FastRng {
    /// A generator that replays the same stream for the same seed.
    ///
    /// ```
    /// use stagger::random::{FastRng, RandomSource};
    /// let (mut a, mut b) = (FastRng::seeded(7), FastRng::seeded(7));
    /// assert_eq!(a.next_u64(), b.next_u64());
    /// ```
    #[inline]
    pub const fn seeded(seed: u64) -> Self {
        FastRng { state: seed }
    }

    /// A generator independent of every other `fresh` one in this process:
    /// each thread holds a randomly keyed counter, and every call takes the
    /// next value of it through a bijective mixer, so no two calls share a
    /// stream even when they fail at the same instant.
    #[inline]
    pub fn fresh() -> Self {
        thread_local! {
            // Const-initialised (no lazy-init check on access); zero means
            // "not keyed yet" and is replaced by a random key on first use.
            static NEXT: Cell<u64> = const { Cell::new(0) };
        }
        let seed = NEXT.with(|n| {
            let mut s = n.get();
            if s == 0 {
                s = process_seed() | 1;
            }
            let s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            n.set(s);
            s
        });
        FastRng::seeded(splitmix64(seed))
    }

    /// Derives an independent child generator (for example one per simulated
    /// client) without sharing this one's stream.
    pub fn fork(&mut self) -> Self {
        FastRng::seeded(splitmix64(self.next_u64()))
    }
}

impl RandomSource for FastRng {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(WY_ADD);
        let t = u128::from(self.state) * u128::from(self.state ^ WY_XOR);
        (t as u64) ^ ((t >> 64) as u64)
    }
}

/// A random per-thread starting point, from the standard library's
/// randomly keyed hasher (no extra dependency, different in every thread
/// and every process).
fn process_seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x5354_4147_4745_5221);
    h.finish()
}

/// Bijective 64-bit mixer (SplitMix64's finaliser).
#[inline]
pub(crate) const fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_f64_stays_in_unit_interval() {
        let mut r = FastRng::seeded(1);
        for _ in 0..100_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn fresh_generators_differ() {
        let mut a = FastRng::fresh();
        let mut b = FastRng::fresh();
        assert_ne!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn fresh_generators_differ_across_threads() {
        let draws: Vec<u64> = (0..4)
            .map(|_| std::thread::spawn(|| FastRng::fresh().next_u64()))
            .map(|h| h.join().unwrap())
            .collect();
        for i in 0..draws.len() {
            for j in i + 1..draws.len() {
                assert_ne!(draws[i], draws[j]);
            }
        }
    }

    #[test]
    fn uniform_mean_is_half() {
        let mut r = FastRng::seeded(42);
        let n = 200_000;
        let mean = (0..n).map(|_| r.next_f64()).sum::<f64>() / n as f64;
        // Standard error is 1/sqrt(12 n) ~ 0.00065; allow 5 sigma.
        assert!((mean - 0.5).abs() < 0.0033, "mean {mean}");
    }
}
