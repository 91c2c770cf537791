//! Composing the layers: the dead-dependency walk in virtual time, the
//! closed form for a failure rate, and what each layer's budget lets
//! through in steady state.

use std::collections::HashMap;
use std::time::Duration;

use super::failure::Failure;
use super::rules;
use super::{Budget, Dead, Layer, LayerNumbers, Options, Protocol, Scenario};

/// A count for reports: whole numbers as they are, others to two decimals.
///
/// ```
/// assert_eq!(stagger_audit::path::count(27.0), "27");
/// assert_eq!(stagger_audit::path::count(1.104), "1.10");
/// ```
pub fn count(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x}")
    } else {
        format!("{x:.2}")
    }
}

use stagger_sim::rounded;

/// A layer's tries once its budget caps them in steady state under a dead
/// dependency.
pub(crate) fn budgeted(l: &Layer, tries: f64, concurrency: u32) -> f64 {
    let n = f64::from(concurrency.max(1));
    let cap = match l.budget {
        None => return tries,
        Some(Budget::Ratio { ratio, .. }) => 1.0 + ratio,
        Some(Budget::Concurrent {
            percent,
            min_concurrency,
        }) => 1.0 + (percent / 100.0).max(f64::from(min_concurrency) / n),
        Some(Budget::MaxConcurrent { max }) => 1.0 + max as f64 / n,
        Some(Budget::Drains { .. }) => 1.0,
    };
    tries.min(cap)
}

/// The closed form for a failure rate: a layer that retries what it sees
/// makes `(1 - q^n) / (1 - q)` tries when each fails with probability `q`,
/// and fails with `q^n`.
pub(crate) fn at_rate(layers: &[Layer], protocol: Protocol, o: &Options) -> Scenario {
    let mut seen = rules::bottom_failure(o.dead, protocol);
    let mut q = o.failure_rate;
    let mut out = vec![];
    for l in layers.iter().rev() {
        if l.overflows_all {
            // It answers every call itself: nothing goes down, and the
            // layer above sees its overflow answer every time.
            out.push((seen, false, 0.0));
            seen = rules::bottom_failure(Dead::Unavailable, protocol);
            q = 1.0;
            continue;
        }
        let max_tries = l.rule.tries_on(seen).or(l.max_tries);
        let retries = l.rule.retries(seen, protocol) && max_tries != Some(1);
        let tries = if !retries {
            1.0
        } else {
            match max_tries {
                Some(n) if q < 1.0 => (1.0 - q.powf(f64::from(n))) / (1.0 - q),
                Some(n) => f64::from(n),
                None => {
                    let unbounded = if q < 1.0 {
                        1.0 / (1.0 - q)
                    } else {
                        f64::INFINITY
                    };
                    unbounded.min(budgeted(l, f64::INFINITY, o.concurrency))
                }
            }
        };
        if retries {
            q = match max_tries {
                Some(n) => q.powf(f64::from(n)),
                None => q.powf(tries),
            };
        }
        out.push((seen, retries, tries));
        seen = l.rule.passes_up(seen, protocol, l.system);
    }
    out.reverse();
    let mut sends = 1.0;
    let layers = out
        .into_iter()
        .map(|(sees, retries, tries)| {
            sends *= tries;
            LayerNumbers {
                sees,
                retries,
                tries: rounded(tries, 3),
                sends: rounded(sends, 3),
            }
        })
        .collect();
    Scenario {
        layers,
        bottom_attempts: rounded(sends, 3),
        edge_waits: None,
    }
}

/// One call through layers `i..` given `allowed` time: the attempts each
/// layer sent, how long it took (`None`: never returns), what it returned.
#[derive(Debug, Clone)]
struct Run {
    sent: Vec<f64>,
    seen: Vec<Option<Failure>>,
    took: Option<Duration>,
    failure: Failure,
}

/// The dead-dependency scenario in virtual time, memoized on (layer,
/// allowed time) so deep paths with large counts stay cheap.
pub(crate) struct Walk<'a> {
    layers: &'a [Layer],
    protocol: Protocol,
    dead: Dead,
    concurrency: u32,
    memo: HashMap<(usize, Option<Duration>), Run>,
}

/// How long a refused connection or a shedding answer takes.
const FAST_FAILURE: Duration = Duration::from_millis(1);
/// Tries one layer makes at most in the walk; a larger count is capped here
/// (and said so): its product is already past any useful number.
pub(crate) const WALK_CAP: u32 = 10_000;
/// The most a budget-only layer multiplies by in the walk.
const MAX_SCALE: f64 = 1e6;

impl<'a> Walk<'a> {
    pub(crate) fn new(layers: &'a [Layer], protocol: Protocol, o: &Options) -> Self {
        Walk {
            layers,
            protocol,
            dead: o.dead,
            concurrency: o.concurrency,
            memo: HashMap::new(),
        }
    }

    pub(crate) fn scenario(mut self) -> Scenario {
        let run = self.call(0, None);
        let mut layers = Vec::new();
        let mut above = 1.0;
        for (i, l) in self.layers.iter().enumerate() {
            let sends = run.sent[i];
            let tries = if above > 0.0 { sends / above } else { 0.0 };
            let sees =
                run.seen[i].unwrap_or_else(|| rules::bottom_failure(self.dead, self.protocol));
            layers.push(LayerNumbers {
                sees,
                retries: l.rule.retries(sees, self.protocol),
                tries: rounded(tries, 3),
                sends: rounded(sends, 3),
            });
            above = sends;
        }
        Scenario {
            bottom_attempts: rounded(run.sent.last().copied().unwrap_or(1.0), 3),
            layers,
            edge_waits: run.took,
        }
    }

    fn call(&mut self, i: usize, allowed: Option<Duration>) -> Run {
        if i == self.layers.len() {
            let took = match self.dead {
                Dead::Blackhole => None,
                _ => Some(FAST_FAILURE),
            };
            return Run {
                sent: Vec::new(),
                seen: Vec::new(),
                took,
                failure: rules::bottom_failure(self.dead, self.protocol),
            };
        }
        if let Some(r) = self.memo.get(&(i, allowed)) {
            return r.clone();
        }
        let r = self.layer(i, allowed);
        self.memo.insert((i, allowed), r.clone());
        r
    }

    fn layer(&mut self, i: usize, allowed: Option<Duration>) -> Run {
        let l = &self.layers[i];
        if l.overflows_all {
            let width = self.layers.len() - i;
            return Run {
                sent: vec![0.0; width],
                seen: vec![None; width],
                took: Some(FAST_FAILURE),
                failure: rules::bottom_failure(Dead::Unavailable, self.protocol),
            };
        }
        let allowed = min_opt(allowed, l.timeout);
        let width = self.layers.len() - i;
        let mut sent = vec![0.0; width];
        let mut seen_below: Vec<Option<Failure>> = vec![None; width];
        // An injected delay comes once, before the first try.
        let mut t = l.delay;
        let mut tries = 0u32;
        // A layer limited only by its budget: one walked try, scaled by what
        // the budget lets through in steady state.
        let (max_tries, scale) = match l.max_tries {
            Some(n) => (n.min(WALK_CAP), 1.0),
            None => (
                1,
                budgeted(l, f64::INFINITY, self.concurrency).min(MAX_SCALE),
            ),
        };
        let protocol = self.protocol;
        let done = |sent: Vec<f64>, seen: Vec<Option<Failure>>, took, failure| Run {
            sent,
            seen,
            took,
            failure,
        };
        loop {
            tries += 1;
            let remaining = allowed.map(|a| a.saturating_sub(t));
            let per_try = min_opt(l.per_try_timeout, remaining);
            let below = self.call(i + 1, per_try);
            sent[0] += scale;
            for (k, s) in below.sent.iter().enumerate() {
                sent[k + 1] += s * scale;
            }
            for (k, s) in below.seen.iter().enumerate() {
                if seen_below[k + 1].is_none() {
                    seen_below[k + 1] = *s;
                }
            }
            let (seen, took) = match (below.took, per_try) {
                (Some(b), Some(p)) if b < p => (below.failure, b),
                (Some(b), None) => (below.failure, b),
                (_, Some(p)) => (Failure::Timeout, p),
                (None, None) => {
                    seen_below[0].get_or_insert(below.failure);
                    return done(sent, seen_below, None, below.failure);
                }
            };
            seen_below[0].get_or_insert(seen);
            t += took.mul_f64(scale);
            let out_of_time = |t: Duration| allowed.is_some_and(|a| t >= a);
            if out_of_time(t) {
                let up = l.rule.passes_up(Failure::Timeout, protocol, l.system);
                return done(sent, seen_below, allowed, up);
            }
            let Some(wait) = l.rule.next(seen, protocol, tries, max_tries, &l.pause) else {
                let up = l.rule.passes_up(seen, protocol, l.system);
                return done(sent, seen_below, Some(t), up);
            };
            t += wait;
            if out_of_time(t) {
                let up = l.rule.passes_up(Failure::Timeout, protocol, l.system);
                return done(sent, seen_below, allowed, up);
            }
        }
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
