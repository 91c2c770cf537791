//! The embedded store: one replica's records in a bounded cache.
//!
//! Each record expires on its own: a claim at the end of its lease, a completion at the end of its
//! retention. The cache is bounded by an estimate of the bytes it holds; when full, it evicts the
//! records least likely to be asked for again. Every operation is one atomic compute on the key's
//! entry, so concurrent claims of one key cannot both win.
//!
//! It deduplicates retries that reach **this process** only. Behind a load balancer a retry may
//! reach another replica: share a [`RedisStore`](crate::RedisStore) or
//! [`PostgresStore`](crate::PostgresStore) there.

use super::{Claim, Completion, Fingerprint, Store, StoreError, StoredResponse, Token};
use moka::ops::compute::Op;
use moka::sync::Cache;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Record {
    token: Token,
    fingerprint: Fingerprint,
    response: Option<StoredResponse>,
    expires_at: Instant,
}

impl Record {
    fn live(&self, now: Instant) -> bool {
        self.expires_at > now
    }

    /// What the record costs the bound, in bytes (an estimate: the payloads plus a fixed part for
    /// the key, the entry and the cache's own bookkeeping).
    fn weight(&self, key: &str) -> u32 {
        let payload = self.response.as_ref().map_or(0, |r| {
            r.body.len()
                + r.headers
                    .iter()
                    .map(|(n, v)| n.len() + v.len())
                    .sum::<usize>()
        });
        u32::try_from(key.len() + payload + 160).unwrap_or(u32::MAX)
    }
}

struct ExpireAtRecord;

impl moka::Expiry<String, Arc<Record>> for ExpireAtRecord {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Arc<Record>,
        created_at: Instant,
    ) -> Option<Duration> {
        Some(value.expires_at.saturating_duration_since(created_at))
    }

    fn expire_after_update(
        &self,
        _key: &String,
        value: &Arc<Record>,
        updated_at: Instant,
        _left: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.expires_at.saturating_duration_since(updated_at))
    }
}

/// Records in this process's memory, bounded and expiring. Clones share one cache.
///
/// ```
/// use stagger_idempotency::{Claim, Fingerprint, MemoryStore, Store};
/// use std::time::Duration;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = MemoryStore::new(64 << 20); // at most about 64 MiB of records
/// let fp = Fingerprint::of("POST", "/orders", b"{}");
/// let first = store.claim("k", &fp, Duration::from_secs(30)).await.unwrap();
/// assert!(matches!(first, Claim::Won(_)));
/// let second = store.claim("k", &fp, Duration::from_secs(30)).await.unwrap();
/// assert!(matches!(second, Claim::InFlight { .. }));
/// # });
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    cache: Cache<String, Arc<Record>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("records", &self.cache.entry_count())
            .finish()
    }
}

impl MemoryStore {
    /// A store holding at most about `max_bytes` of records.
    pub fn new(max_bytes: u64) -> Self {
        let cache = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|key: &String, record: &Arc<Record>| record.weight(key))
            .expire_after(ExpireAtRecord)
            .build();
        Self { cache }
    }

    /// Runs one atomic step on `key`'s live record (an expired one counts as
    /// absent), at the time it runs.
    fn step<T>(
        &self,
        key: &str,
        f: impl FnOnce(Option<&Record>, Instant) -> (Op<Arc<Record>>, T),
    ) -> T {
        let mut out = None;
        self.cache.entry_by_ref(key).and_compute_with(|entry| {
            // Read under the key's lock: a step that waited for another reads
            // a time no earlier than the one that step wrote with (a claim
            // read first and serialized second saw a lease longer than its
            // own, by the wait).
            let now = Instant::now();
            let current = entry.as_ref().map(|e| e.value()).filter(|r| r.live(now));
            let (op, result) = f(current.map(|r| &**r), now);
            out = Some(result);
            op
        });
        out.expect("the compute closure runs once")
    }
}

impl Default for MemoryStore {
    /// At most about 64 MiB of records.
    fn default() -> Self {
        Self::new(64 << 20)
    }
}

impl Store for MemoryStore {
    async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        Ok(self.step(key, |current, now| match current {
            None => {
                let token = Token::new();
                let record = Record {
                    token,
                    fingerprint: *fingerprint,
                    response: None,
                    expires_at: now + lease,
                };
                (Op::Put(Arc::new(record)), Claim::Won(token))
            }
            Some(record) => {
                let claim = match &record.response {
                    Some(response) => Claim::Completed {
                        fingerprint: record.fingerprint,
                        response: response.clone(),
                    },
                    None => Claim::InFlight {
                        fingerprint: record.fingerprint,
                        expires_in: record.expires_at.saturating_duration_since(now),
                    },
                };
                (Op::Nop, claim)
            }
        }))
    }

    async fn renew(&self, key: &str, token: Token, lease: Duration) -> Result<bool, StoreError> {
        Ok(self.step(key, |current, now| match current {
            Some(r) if r.token == token && r.response.is_none() => {
                let record = Record {
                    token,
                    fingerprint: r.fingerprint,
                    response: None,
                    expires_at: now + lease,
                };
                (Op::Put(Arc::new(record)), true)
            }
            _ => (Op::Nop, false),
        }))
    }

    async fn complete(
        &self,
        key: &str,
        token: Token,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        Ok(self.step(key, |current, now| {
            let ours = current.is_none_or(|r| r.token == token && r.response.is_none());
            if !ours {
                return (Op::Nop, Completion::Fenced);
            }
            let record = Record {
                token,
                fingerprint: *fingerprint,
                response: Some(response.clone()),
                expires_at: now + retention,
            };
            (Op::Put(Arc::new(record)), Completion::Stored)
        }))
    }

    async fn release(&self, key: &str, token: Token) -> Result<bool, StoreError> {
        Ok(self.step(key, |current, _| match current {
            Some(r) if r.token == token && r.response.is_none() => (Op::Remove, true),
            _ => (Op::Nop, false),
        }))
    }
}
