//! A retried write takes effect once: the server side of `Idempotency-Key`.
//!
//! A client that times out does not know whether its request ran. Retrying a read is harmless;
//! retrying "charge this card" charges it twice, unless the server remembers the request by a key
//! the client chose and answers the retry with the first answer. This crate is that memory, as a
//! tower layer (so axum and hyper take it with `.layer(..)`), following the IETF HTTPAPI draft
//! *The Idempotency-Key HTTP Header Field*:
//!
//! | the request | the answer |
//! |---|---|
//! | POST/PATCH with a new key | runs the handler once; its answer is stored |
//! | the same key again, same method, path and body | the stored answer, with `Idempotent-Replayed: true` |
//! | the same key while the first is still running | **409** with `Retry-After` |
//! | the same key with a different method, path or body | **422** |
//! | a key that is empty, over 255 characters, several keys, or not visible ASCII | **400** |
//! | no key, where [`Config::require_key`] is set | **400** |
//! | a body over [`Config::max_body`] | **413**, nothing runs |
//! | the store cannot be reached | **503** with `Retry-After`, nothing runs (unless [`Config::fail_open`]) |
//!
//! Every refusal is `application/problem+json` (RFC 9457) whose `type` names the rule
//! ([`PROBLEM_TYPE_PREFIX`] + `key-in-use`, `key-reused`, `key-invalid`, …).
//!
//! **Which answers are final.** 2xx, 3xx and 4xx answers are stored and replayed: the handler
//! decided, and deciding again could decide differently (a 201 then a 409 "already exists"). A 5xx
//! and a handler error release the key, so the retry runs the handler again: a 5xx usually means
//! the work did not happen, and a stored 5xx would turn a passing fault into a permanent one for
//! that key. A handler that can fail *after* its effect should make the effect and its answer one
//! transaction, or set [`Config::store_server_errors`].
//!
//! **A hang-up does not orphan the work.** hyper drops a service's future when the client's
//! connection closes. Once a key is claimed, this layer runs the handler in a task of its own, so
//! a client that gave up still has its order made, and its retry gets the stored answer.
//!
//! **A claim that cannot race.** The claim is one atomic store operation with a lease and a
//! fencing token; the lease is renewed while the handler runs, and completion is conditional on the
//! token. The [`store`] module says how each store keeps this contract: [`MemoryStore`] for one
//! replica, [`RedisStore`] (feature `redis`) and [`PostgresStore`] (feature `postgres`) for a fleet,
//! where a retry may reach any replica.
//!
//! ```
//! use axum::{routing::post, Router};
//! use stagger_idempotency::{Config, IdempotencyLayer, MemoryStore};
//!
//! let app: Router = Router::new()
//!     .route("/charges", post(|| async { "charged once" }))
//!     .layer(IdempotencyLayer::new(MemoryStore::default(), Config::default()));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod key;
mod layer;
mod problem;
pub mod store;

pub use key::{key, KeyError, IDEMPOTENCY_KEY, MAX_KEY_LEN};
pub use layer::{
    Config, Idempotency, IdempotencyLayer, InnerBody, OuterBody, PrincipalFn, IDEMPOTENT_REPLAYED,
};
pub use problem::PROBLEM_TYPE_PREFIX;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::RedisStore;
pub use store::{
    Claim, Completion, Fingerprint, MemoryStore, Store, StoreError, StoredResponse, Token,
};
