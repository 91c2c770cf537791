//! What the proxy saw: every request's arrival, binned per 100 ms, split
//! into first attempts and retries, and what became of it.
//!
//! A request is a retry when its client says so: `x-retry-attempt` of 2 or
//! more (stagger's middleware and layers), `grpc-previous-rpc-attempts` of
//! 1 or more (gRPC's retry and hedging), or an `Idempotency-Key` the proxy
//! has already seen (any client that keeps its key across attempts). The
//! keys are remembered in two generations of at most [`KEYS`] each, turned
//! every [`KEY_MEMORY`], so memory stays flat however long the proxy runs.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use http::HeaderMap;
use serde::Serialize;
use stagger::http::{parse_attempt, IDEMPOTENCY_KEY, RETRY_ATTEMPT};

use crate::bins::{Bins, Timeline, BIN};
use crate::fault::{Window, WindowJson};

/// Keys remembered per generation.
pub const KEYS: usize = 500_000;
/// How long a generation of keys lasts.
pub const KEY_MEMORY: Duration = Duration::from_secs(60);

/// gRPC's count of earlier attempts of the same call.
const GRPC_PREVIOUS: &str = "grpc-previous-rpc-attempts";

/// Why a request counted as a retry (the first signal found, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `x-retry-attempt` ≥ 2.
    Attempt,
    /// `grpc-previous-rpc-attempts` ≥ 1.
    Grpc,
    /// An `Idempotency-Key` seen before.
    Key,
}

/// Keys seen, in two bounded generations.
#[derive(Debug)]
struct Keys {
    gens: [HashSet<Box<str>>; 2],
    turned: Instant,
}

impl Keys {
    /// Records `key`; true if it was seen before.
    fn seen(&mut self, key: &str, now: Instant) -> bool {
        if now.saturating_duration_since(self.turned) >= KEY_MEMORY || self.gens[0].len() >= KEYS {
            self.gens.swap(0, 1);
            self.gens[0] = HashSet::new();
            self.turned = now;
        }
        if self.gens.iter().any(|g| g.contains(key)) {
            return true;
        }
        self.gens[0].insert(key.into());
        false
    }
}

/// The proxy's counters, shared by every connection.
#[derive(Debug)]
pub struct Recorder {
    line: Timeline,
    first: Bins,
    retries: Bins,
    /// Answered 2xx by the upstream, per bin of the answer.
    ok: Bins,
    /// Answered 5xx, 503 or 429 by a fault, reset, or unreachable upstream,
    /// per bin.
    failed: Bins,
    keys: Mutex<Keys>,
    ok_keys: Mutex<Keys>,
    counts: Counts,
    /// The upstream's answers by status.
    statuses: Mutex<BTreeMap<u16, u64>>,
    /// The upstream's `Server` header, as first seen.
    server: OnceLock<String>,
    /// gRPC answers by `grpc-status`.
    grpc: Mutex<BTreeMap<u32, u64>>,
    /// Why the upstream first gave no answer.
    first_error: OnceLock<String>,
}

#[derive(Debug, Default)]
struct Counts {
    by_attempt: AtomicU64,
    by_grpc: AtomicU64,
    by_key: AtomicU64,
    forwarded: AtomicU64,
    upstream_ok: AtomicU64,
    upstream_errors: AtomicU64,
    upstream_5xx: AtomicU64,
    upstream_grpc_errors: AtomicU64,
    answered_503: AtomicU64,
    answered_429: AtomicU64,
    reset: AtomicU64,
    blackholed: AtomicU64,
    stalled: AtomicU64,
    slowed: AtomicU64,
    failovers: AtomicU64,
    failover_dropped: AtomicU64,
    duplicates: AtomicU64,
    replayed: AtomicU64,
    unclaimed: AtomicU64,
}

/// What happened to one request (or connection), for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Sent to the upstream.
    Forwarded,
    /// The upstream answered with this HTTP status (not a gRPC answer).
    Answered(u16),
    /// The upstream ended a gRPC call with this `grpc-status` (0: OK), in
    /// the headers of a trailers-only answer or in the trailers.
    Grpc(u32),
    /// The upstream could not be reached or broke off (answered 502).
    UpstreamError,
    /// Answered 503 by a fault.
    Answered503,
    /// Answered 429 by a fault.
    Answered429,
    /// Its connection reset by a fault.
    Reset,
    /// Held unanswered by a blackhole.
    Blackholed,
    /// Held by a stall before forwarding.
    Stalled,
    /// Delayed by a slow fault before forwarding.
    Slowed,
    /// Answered by the upstream after its client had hung up (a request
    /// held by a stall, say): the upstream served it, nobody received it.
    Unclaimed,
}

impl Recorder {
    /// Counters binned on `line`.
    pub fn new(line: Timeline) -> Recorder {
        let keys = || {
            Mutex::new(Keys {
                gens: Default::default(),
                turned: line.start,
            })
        };
        Recorder {
            line,
            first: line.series(),
            retries: line.series(),
            ok: line.series(),
            failed: line.series(),
            keys: keys(),
            ok_keys: keys(),
            counts: Counts::default(),
            statuses: Mutex::default(),
            server: OnceLock::new(),
            grpc: Mutex::default(),
            first_error: OnceLock::new(),
        }
    }

    /// Counts one request's arrival at `now`; returns whether it is a retry
    /// and what said so.
    pub fn arrival(&self, headers: &HeaderMap, now: Instant) -> Option<Signal> {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let attempt = headers.get(RETRY_ATTEMPT).and_then(parse_attempt);
        // A key is recorded even when a header already said "retry", so a
        // later attempt without that header is still recognised.
        let key_seen = key(headers).is_some_and(|k| {
            self.keys
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .seen(k, now)
        });
        let signal = if attempt.is_some_and(|a| a >= 2) {
            Some(Signal::Attempt)
        } else if number(GRPC_PREVIOUS).is_some_and(|n| n >= 1) {
            Some(Signal::Grpc)
        } else if key_seen {
            Some(Signal::Key)
        } else {
            None
        };
        let c = &self.counts;
        match signal {
            Some(Signal::Attempt) => c.by_attempt.fetch_add(1, Relaxed),
            Some(Signal::Grpc) => c.by_grpc.fetch_add(1, Relaxed),
            Some(Signal::Key) => c.by_key.fetch_add(1, Relaxed),
            None => 0,
        };
        if signal.is_some() {
            self.retries.add(now);
        } else {
            self.first.add(now);
        }
        signal
    }

    /// Counts what became of a request.
    pub fn event(&self, e: Event) {
        let c = &self.counts;
        if let Event::Answered(s) = e {
            *self
                .statuses
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(s)
                .or_insert(0) += 1;
        }
        if let Event::Grpc(code) = e {
            *self
                .grpc
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(code)
                .or_insert(0) += 1;
        }
        if matches!(
            e,
            Event::Answered503 | Event::Answered429 | Event::Reset | Event::UpstreamError
        ) || matches!(e, Event::Answered(s) if s >= 500)
            || matches!(e, Event::Grpc(code) if code != 0)
        {
            self.failed.add(Instant::now());
        }
        let n = match e {
            Event::Forwarded => &c.forwarded,
            Event::Grpc(0) => {
                self.ok.add(Instant::now());
                &c.upstream_ok
            }
            Event::Grpc(_) => &c.upstream_grpc_errors,
            Event::Answered(s) if (200..300).contains(&s) => {
                self.ok.add(Instant::now());
                &c.upstream_ok
            }
            Event::Answered(s) if s >= 500 => &c.upstream_5xx,
            Event::Answered(_) => return,
            Event::UpstreamError => &c.upstream_errors,
            Event::Answered503 => &c.answered_503,
            Event::Answered429 => &c.answered_429,
            Event::Reset => &c.reset,
            Event::Blackholed => &c.blackholed,
            Event::Stalled => &c.stalled,
            Event::Slowed => &c.slowed,
            Event::Unclaimed => &c.unclaimed,
        };
        n.fetch_add(1, Relaxed);
    }

    /// A keyed request the upstream answered 2xx, `replayed` when the answer
    /// carries `Idempotent-Replayed: true`. A replay is the upstream sending
    /// back the answer it stored for the key, without running the request
    /// again: counted as replayed, whether or not the first answer came by
    /// here. A second unmarked success for the same key is a write the
    /// upstream executed twice (unless it deduplicates by key without
    /// saying so).
    pub fn keyed_success(&self, key: &str, replayed: bool) {
        if replayed {
            self.counts.replayed.fetch_add(1, Relaxed);
            return;
        }
        let again = self
            .ok_keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seen(key, Instant::now());
        if again {
            self.counts.duplicates.fetch_add(1, Relaxed);
        }
    }

    /// Notes the upstream's `Server` header (the first one seen is kept).
    pub fn upstream_server(&self, value: &str) {
        if self.server.get().is_none() {
            let _ = self.server.set(value.to_string());
        }
    }

    /// The upstream's name from its `Server` header (`nginx` for
    /// `nginx/1.22.1`), if it sent one.
    pub fn upstream_name(&self) -> Option<&str> {
        let s = self.server.get()?;
        s.split(['/', ' ']).next().filter(|n| !n.is_empty())
    }

    /// A failover began, dropping `open` connections. The connections
    /// refused while it lasts are the kernel's answer (nothing listens) and
    /// never reach the proxy: only the clients can count them.
    pub fn failover(&self, open: u64) {
        self.counts.failovers.fetch_add(1, Relaxed);
        self.counts.failover_dropped.fetch_add(open, Relaxed);
    }

    /// Notes why the upstream gave no answer (the first reason is kept).
    pub fn upstream_error(&self, why: String) {
        if self.first_error.get().is_none() {
            let _ = self.first_error.set(why);
        }
    }

    /// The upstream's answers so far, by status.
    pub fn statuses(&self) -> BTreeMap<u16, u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// First attempts per bin so far.
    pub fn first(&self) -> Vec<u32> {
        self.first.snapshot()
    }

    /// Retries per bin so far.
    pub fn retries(&self) -> Vec<u32> {
        self.retries.snapshot()
    }

    /// Upstream 2xx answers per bin so far.
    pub fn successes(&self) -> Vec<u32> {
        self.ok.snapshot()
    }

    /// Failed answers per bin so far (5xx, a fault's 503 or 429, a reset,
    /// an unreachable upstream).
    pub fn rejected(&self) -> Vec<u32> {
        self.failed.snapshot()
    }

    /// Everything so far, `until` the bins worth showing.
    pub fn report(&self, faults: &[Window], until: Instant) -> Report {
        let n = self
            .line
            .bin(until)
            .map_or(self.line.len, |b| b + 1)
            .min(self.line.len);
        let cut = |v: Vec<u32>| v[..n.min(v.len())].to_vec();
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Relaxed);
        let first = cut(self.first());
        let retries = cut(self.retries());
        Report {
            bin_ms: BIN.as_millis() as u64,
            first_attempts: first.iter().map(|&x| u64::from(x)).sum(),
            retries: retries.iter().map(|&x| u64::from(x)).sum(),
            retries_by: RetriesBy {
                x_retry_attempt: get(&c.by_attempt),
                grpc_previous_rpc_attempts: get(&c.by_grpc),
                idempotency_key: get(&c.by_key),
            },
            forwarded: get(&c.forwarded),
            upstream_ok: get(&c.upstream_ok),
            upstream_5xx: get(&c.upstream_5xx),
            upstream_grpc_errors: get(&c.upstream_grpc_errors),
            grpc_status: self
                .grpc
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(&code, &n)| (super::grpc::name(code), n))
                .collect(),
            upstream_errors: get(&c.upstream_errors),
            first_upstream_error: self.first_error.get().cloned(),
            answered_503: get(&c.answered_503),
            answered_429: get(&c.answered_429),
            reset: get(&c.reset),
            blackholed: get(&c.blackholed),
            stalled: get(&c.stalled),
            slowed: get(&c.slowed),
            failovers: get(&c.failovers),
            failover_dropped: get(&c.failover_dropped),
            duplicates: get(&c.duplicates),
            replayed: get(&c.replayed),
            unclaimed: get(&c.unclaimed),
            faults: faults.iter().map(WindowJson::from).collect(),
            series: ProxySeries {
                // From whole milliseconds: 3 × 0.1 s would print 0.30000000000000004.
                t_s: (0..n)
                    .map(|i| (i as u64 * BIN.as_millis() as u64) as f64 / 1000.0)
                    .collect(),
                first_attempts: first,
                retries,
                upstream_ok: cut(self.successes()),
            },
        }
    }
}

/// Whether an answer is marked as a replay of a stored one
/// (`Idempotent-Replayed: true`, the value read without regard to case).
pub fn is_replay(headers: &HeaderMap) -> bool {
    headers
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"true"))
}

/// The `Idempotency-Key` of a request, if any.
pub fn key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(IDEMPOTENCY_KEY)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
}

/// Retries by the signal that marked them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetriesBy {
    /// `x-retry-attempt` ≥ 2.
    pub x_retry_attempt: u64,
    /// `grpc-previous-rpc-attempts` ≥ 1.
    pub grpc_previous_rpc_attempts: u64,
    /// A repeated `Idempotency-Key`.
    pub idempotency_key: u64,
}

/// The arrival histogram per 100 ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProxySeries {
    /// Bin start, seconds since the proxy started.
    pub t_s: Vec<f64>,
    /// First attempts arriving.
    pub first_attempts: Vec<u32>,
    /// Retries arriving.
    pub retries: Vec<u32>,
    /// Upstream 2xx answers.
    pub upstream_ok: Vec<u32>,
}

/// What the proxy saw, the JSON of `/stats?format=json` and `stats.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Width of a bin, ms.
    pub bin_ms: u64,
    /// First attempts arriving.
    pub first_attempts: u64,
    /// Retries arriving.
    pub retries: u64,
    /// Retries by what marked them.
    pub retries_by: RetriesBy,
    /// Requests sent to the upstream.
    pub forwarded: u64,
    /// Upstream answers 2xx (a gRPC answer only with `grpc-status` 0, OK).
    pub upstream_ok: u64,
    /// Upstream answers 5xx.
    pub upstream_5xx: u64,
    /// gRPC calls the upstream ended with a `grpc-status` other than OK
    /// (HTTP 200 all the same: not in `upstream_ok`).
    pub upstream_grpc_errors: u64,
    /// gRPC answers by `grpc-status` name (`OK`, `UNAVAILABLE`…).
    pub grpc_status: BTreeMap<String, u64>,
    /// Requests the upstream could not take (connect error, broken off).
    pub upstream_errors: u64,
    /// Why the upstream first gave no answer (`null`: it always answered).
    pub first_upstream_error: Option<String>,
    /// Answered 503 by a fault.
    pub answered_503: u64,
    /// Answered 429 by a fault.
    pub answered_429: u64,
    /// Connections reset by a fault.
    pub reset: u64,
    /// Requests held unanswered by a blackhole.
    pub blackholed: u64,
    /// Requests held by a stall.
    pub stalled: u64,
    /// Requests delayed by a slow fault.
    pub slowed: u64,
    /// Failovers that began (the listener closed).
    pub failovers: u64,
    /// Open connections the failovers dropped. Connections refused while
    /// a failover lasts are refused by the kernel and never reach the
    /// proxy: count them at the client.
    pub failover_dropped: u64,
    /// Executed twice: second 2xx answers for one `Idempotency-Key`
    /// without `Idempotent-Replayed: true` (writes the upstream applied
    /// twice unless it deduplicates by key without saying so). Counted
    /// whether or not the client was still there to receive the answer.
    pub duplicates: u64,
    /// Replayed: keyed 2xx answers marked `Idempotent-Replayed: true`, the
    /// upstream's stored answer sent again instead of a second execution.
    pub replayed: u64,
    /// Upstream answers that reached no client: it had hung up while its
    /// request was held (by a stall) or on its way. The upstream logged and
    /// applied these; the client saw a timeout.
    pub unclaimed: u64,
    /// The faults.
    pub faults: Vec<WindowJson>,
    /// Per 100 ms.
    pub series: ProxySeries,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn retries_are_told_by_attempt_header_grpc_count_or_a_repeated_key() {
        let start = Instant::now();
        let r = Recorder::new(Timeline::new(start, Duration::from_secs(10)));
        let now = start + Duration::from_millis(150);
        assert_eq!(r.arrival(&headers(&[]), now), None);
        assert_eq!(r.arrival(&headers(&[("x-retry-attempt", "1")]), now), None);
        assert_eq!(
            r.arrival(&headers(&[("x-retry-attempt", "3")]), now),
            Some(Signal::Attempt)
        );
        assert_eq!(
            r.arrival(&headers(&[("grpc-previous-rpc-attempts", "0")]), now),
            None
        );
        assert_eq!(
            r.arrival(&headers(&[("grpc-previous-rpc-attempts", "2")]), now),
            Some(Signal::Grpc)
        );
        let k = [("idempotency-key", "k-1")];
        assert_eq!(r.arrival(&headers(&k), now), None);
        assert_eq!(r.arrival(&headers(&k), now), Some(Signal::Key));
        let rep = r.report(&[], start + Duration::from_secs(1));
        assert_eq!((rep.first_attempts, rep.retries), (4, 3));
        assert_eq!(rep.series.first_attempts[1], 4);
        assert_eq!(rep.series.retries[1], 3);
        assert_eq!(rep.series.t_s.len(), 11);
        // Bin starts are whole tenths: `t_s` printed 0.30000000000000004.
        let json = serde_json::to_string(&rep.series.t_s).unwrap();
        assert_eq!(json, "[0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0]");
        assert_eq!(rep.retries_by.idempotency_key, 1);
    }

    #[test]
    fn the_key_memory_is_bounded_and_forgets_after_two_generations() {
        let t0 = Instant::now();
        let mut k = Keys {
            gens: Default::default(),
            turned: t0,
        };
        assert!(!k.seen("a", t0));
        assert!(k.seen("a", t0 + KEY_MEMORY));
        assert!(!k.seen("a", t0 + KEY_MEMORY * 3));
        for i in 0..KEYS + 10 {
            k.seen(&i.to_string(), t0 + KEY_MEMORY * 3);
        }
        assert!(k.gens.iter().all(|g| g.len() <= KEYS));
    }

    #[test]
    fn a_second_unmarked_success_for_one_key_is_executed_twice() {
        let r = Recorder::new(Timeline::new(Instant::now(), Duration::from_secs(1)));
        r.keyed_success("k", false);
        r.keyed_success("other", false);
        assert_eq!(r.report(&[], Instant::now()).duplicates, 0);
        r.keyed_success("k", false);
        let rep = r.report(&[], Instant::now());
        assert_eq!((rep.duplicates, rep.replayed), (1, 0));
    }

    #[test]
    fn a_second_success_marked_as_a_replay_is_replayed_not_executed_twice() {
        let r = Recorder::new(Timeline::new(Instant::now(), Duration::from_secs(1)));
        r.keyed_success("k", false);
        r.keyed_success("k", true);
        r.keyed_success("k", true);
        let rep = r.report(&[], Instant::now());
        assert_eq!((rep.duplicates, rep.replayed), (0, 2));
        // A replay that overtakes the first answer does not make that
        // answer a second execution.
        r.keyed_success("late", true);
        r.keyed_success("late", false);
        let rep = r.report(&[], Instant::now());
        assert_eq!((rep.duplicates, rep.replayed), (0, 3));
    }

    #[test]
    fn the_replay_mark_is_true_in_any_case_and_nothing_else() {
        assert!(is_replay(&headers(&[("idempotent-replayed", "true")])));
        assert!(is_replay(&headers(&[("idempotent-replayed", " True ")])));
        assert!(!is_replay(&headers(&[("idempotent-replayed", "false")])));
        assert!(!is_replay(&headers(&[("idempotent-replayed", "1")])));
        assert!(!is_replay(&headers(&[])));
    }

    #[test]
    fn the_report_bins_arrivals_and_the_metrics_count_them() {
        let start = Instant::now();
        let r = Recorder::new(Timeline::new(start, Duration::from_secs(3)));
        for i in 0..25u64 {
            r.arrival(&headers(&[]), start + Duration::from_millis(i * 100));
        }
        r.arrival(
            &headers(&[("x-retry-attempt", "2")]),
            start + Duration::from_millis(1200),
        );
        let faults = [crate::fault::parse("503@1+1").unwrap()];
        let rep = r.report(&faults, start + Duration::from_millis(2900));
        let first: u32 = rep.series.first_attempts[..10].iter().sum();
        assert_eq!(first, 10, "{:?}", rep.series);
        assert_eq!(rep.series.retries[12], 1, "{:?}", rep.series);
        assert_eq!(rep.faults[0].kind, "503");
        assert!(rep
            .prometheus()
            .contains("stagger_proxy_arrivals_total{attempt=\"retry\"} 1"));
    }
}
