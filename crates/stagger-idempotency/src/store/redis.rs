//! The fleet store on Redis.
//!
//! A record is one Redis string under `{prefix}{key}` whose TTL is the lease or the retention, so
//! Redis itself forgets lapsed claims and old answers. A claim is `SET key claim NX PX lease`: one
//! command, so of N replicas racing for one key exactly one gets `OK`. Renewal, completion and
//! release are short Lua scripts that compare the record's fencing token first; Redis runs a script
//! atomically, so a finisher whose claim was taken over never writes.

use super::codec::{self, Record};
use super::{millis, Claim, Completion, Fingerprint, Store, StoreError, StoredResponse, Token};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use std::sync::Arc;
use std::time::Duration;

// KEYS[1] the record; ARGV[1] the token. The token sits at bytes 2..17 of a record (Lua counts
// from 1), after the state byte; a claim starts with 'C'.
const RENEW: &str = r"
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 1) == 'C' and string.sub(v, 2, 17) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0";

const COMPLETE: &str = r"
local v = redis.call('GET', KEYS[1])
if (not v) or (string.sub(v, 1, 1) == 'C' and string.sub(v, 2, 17) == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0";

const RELEASE: &str = r"
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 1) == 'C' and string.sub(v, 2, 17) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0";

/// Records in Redis, shared by every replica that points at the same server. Clones share one
/// connection (multiplexed, reconnecting).
///
/// ```no_run
/// # async fn f() -> Result<(), stagger_idempotency::StoreError> {
/// use stagger_idempotency::RedisStore;
/// let store = RedisStore::connect("redis://127.0.0.1:6379/").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
    scripts: Arc<[Script; 3]>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisStore {
    /// Connects to the server at `url` (`redis://HOST:PORT/DB`), with records under the prefix
    /// `idempotency:`. A command that takes over a second fails, and the layer answers 503.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with_prefix(url, "idempotency:").await
    }

    /// Connects with records under `prefix` (one per service, if services share a server).
    pub async fn connect_with_prefix(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(|e| error("the URL", &e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(1);
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| error("connecting", &e))?;
        Ok(Self {
            connection,
            prefix: prefix.into(),
            scripts: Arc::new([
                Script::new(RENEW),
                Script::new(COMPLETE),
                Script::new(RELEASE),
            ]),
        })
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

fn error(doing: &str, e: &redis::RedisError) -> StoreError {
    StoreError::new(format!("Redis, {doing}: {e}"))
}

impl Store for RedisStore {
    async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let key = self.key(key);
        let mut connection = self.connection.clone();
        // A record that lapses between the SET and the GET is claimed on the next round.
        for _ in 0..3 {
            let token = Token::new();
            let set: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(codec::claimed(token, fingerprint))
                .arg("NX")
                .arg("PX")
                .arg(millis(lease))
                .query_async(&mut connection)
                .await
                .map_err(|e| error("claiming", &e))?;
            if set.is_some() {
                return Ok(Claim::Won(token));
            }
            let (value, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
                .get(&key)
                .pttl(&key)
                .query_async(&mut connection)
                .await
                .map_err(|e| error("reading a claim", &e))?;
            let Some(value) = value else { continue };
            return Ok(match codec::decode(&value)? {
                Record::Claimed(fingerprint) => Claim::InFlight {
                    fingerprint,
                    expires_in: Duration::from_millis(u64::try_from(ttl).unwrap_or(0)),
                },
                Record::Done(fingerprint, response) => Claim::Completed {
                    fingerprint,
                    response,
                },
            });
        }
        Err(StoreError::new(format!(
            "Redis: the record {key} kept lapsing while it was claimed"
        )))
    }

    async fn renew(&self, key: &str, token: Token, lease: Duration) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let renewed: i64 = self.scripts[0]
            .key(self.key(key))
            .arg(&codec::token_bytes(token)[..])
            .arg(millis(lease))
            .invoke_async(&mut connection)
            .await
            .map_err(|e| error("renewing a claim", &e))?;
        Ok(renewed == 1)
    }

    async fn complete(
        &self,
        key: &str,
        token: Token,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let mut connection = self.connection.clone();
        let stored: i64 = self.scripts[1]
            .key(self.key(key))
            .arg(&codec::token_bytes(token)[..])
            .arg(codec::done(token, fingerprint, response))
            .arg(millis(retention))
            .invoke_async(&mut connection)
            .await
            .map_err(|e| error("storing an answer", &e))?;
        Ok(if stored == 1 {
            Completion::Stored
        } else {
            Completion::Fenced
        })
    }

    async fn release(&self, key: &str, token: Token) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let released: i64 = self.scripts[2]
            .key(self.key(key))
            .arg(&codec::token_bytes(token)[..])
            .invoke_async(&mut connection)
            .await
            .map_err(|e| error("releasing a claim", &e))?;
        Ok(released == 1)
    }
}
