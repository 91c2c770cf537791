//! Where claims and answers live: the [`Store`] contract and its three stores.
//!
//! A store holds one record per scoped key. A record is either a **claim** (a request with this
//! key is running somewhere; it holds a fencing [`Token`] and a lease) or a **completion** (the
//! stored answer, kept for the retention). Every operation is one atomic step in the store, so two
//! replicas that race for one key cannot both win:
//!
//! | operation | wins when | memory | Redis | PostgreSQL |
//! |---|---|---|---|---|
//! | [`claim`](Store::claim) | no record, or a claim whose lease has ended | compute on the entry | `SET NX PX` | `INSERT … ON CONFLICT DO UPDATE … WHERE expired` |
//! | [`renew`](Store::renew) | the claim still holds this token | compute | script | conditional `UPDATE` |
//! | [`complete`](Store::complete) | the claim holds this token, or there is no record | compute | script | `INSERT … ON CONFLICT DO UPDATE … WHERE token` |
//! | [`release`](Store::release) | the claim holds this token | compute | script | conditional `DELETE` |
//!
//! A finisher whose claim was taken over (its lease ended and another request claimed the key)
//! gets [`Completion::Fenced`]: it never overwrites the newer claim.

mod codec;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::RedisStore;

use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::time::Duration;

/// What identifies a request's payload: SHA-256 over its method, path and body.
///
/// The same key with another fingerprint is a client reusing a key for a different request, which
/// the layer answers with 422.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a request.
    ///
    /// ```
    /// use stagger_idempotency::Fingerprint;
    /// let a = Fingerprint::of("POST", "/orders", b"{\"sku\":1}");
    /// assert_eq!(a, Fingerprint::of("POST", "/orders", b"{\"sku\":1}"));
    /// assert_ne!(a, Fingerprint::of("PATCH", "/orders", b"{\"sku\":1}"));
    /// ```
    pub fn of(method: &str, path: &str, body: &[u8]) -> Self {
        let mut hash = Sha256::new();
        // Lengths first, so no two (method, path) splits of one string collide.
        hash.update((method.len() as u64).to_be_bytes());
        hash.update(method.as_bytes());
        hash.update((path.len() as u64).to_be_bytes());
        hash.update(path.as_bytes());
        hash.update(body);
        Self(hash.finalize().into())
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…")
    }
}

/// A claim's fencing token: 128 random bits, so a late finisher from an earlier claim cannot
/// match it. Drawn from a fast generator keyed per process from the OS (no system call per
/// token): replicas draw from different keys.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Token(pub u128);

impl Token {
    /// A fresh random token.
    pub fn new() -> Self {
        use stagger::random::{FastRng, RandomSource};
        let mut rng = FastRng::fresh();
        Self(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()))
    }
}

impl Default for Token {
    fn default() -> Self {
        Self::new()
    }
}

/// A stored answer: what a replay sends back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code.
    pub status: u16,
    /// The allow-listed headers, in order (names in lower case).
    pub headers: Vec<(String, Bytes)>,
    /// The body, whole.
    pub body: Bytes,
}

/// What a claim found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// This request holds the key now: run the handler, then complete or release with the token.
    Won(Token),
    /// Another request with this key is running; its lease ends in `expires_in`.
    InFlight {
        /// The running request's fingerprint.
        fingerprint: Fingerprint,
        /// How long until its lease ends (and the key can be taken over).
        expires_in: Duration,
    },
    /// The key has a stored answer.
    Completed {
        /// The fingerprint of the request that produced it.
        fingerprint: Fingerprint,
        /// The answer to replay.
        response: StoredResponse,
    },
}

/// What a completion did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The answer is stored and will be replayed.
    Stored,
    /// The key is held by a newer claim; nothing was written.
    Fenced,
}

/// The store could not be reached or answered something it should not have.
#[derive(Debug, Clone)]
pub struct StoreError {
    message: String,
}

impl StoreError {
    /// An error that says what failed.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "idempotency store: {}", self.message)
    }
}

impl std::error::Error for StoreError {}

/// The contract every store keeps; see the [module docs](self) for how each one keeps it.
///
/// `key` is already scoped (principal and route) by the layer. Durations are relative: each store
/// measures them on its own clock (the process's, Redis's, PostgreSQL's), so replicas need no
/// synchronised clocks.
pub trait Store: Clone + Send + Sync + 'static {
    /// Claims `key` for a request with `fingerprint`, for `lease`, in one atomic step.
    fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Extends a claim this token still holds to `lease` from now; `false` when it no longer does.
    fn renew(
        &self,
        key: &str,
        token: Token,
        lease: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Stores the answer of the claim held by `token`, kept for `retention`.
    fn complete(
        &self,
        key: &str,
        token: Token,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        retention: Duration,
    ) -> impl Future<Output = Result<Completion, StoreError>> + Send;

    /// Removes the claim held by `token`, so a retry runs the handler again; `false` when the
    /// token no longer holds it.
    fn release(
        &self,
        key: &str,
        token: Token,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A duration as whole milliseconds for a store's TTL, at least 1.
#[cfg(any(feature = "redis", feature = "postgres"))]
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
