//! The fleet store on PostgreSQL.
//!
//! One row per key, in a table the store creates if it is missing:
//!
//! ```sql
//! CREATE TABLE idempotency_keys (
//!   key         text PRIMARY KEY,
//!   token       bytea NOT NULL,       -- the claim's fencing token
//!   fingerprint bytea NOT NULL,       -- SHA-256 of method, path and body
//!   response    bytea,                -- NULL while the claim runs
//!   expires_at  timestamptz NOT NULL  -- the lease's end, then the retention's
//! );
//! ```
//!
//! A claim is one `INSERT … ON CONFLICT (key) DO UPDATE … WHERE expires_at <= now() RETURNING`:
//! the row is created, or a lapsed one taken over, or nothing happens, in one statement under the
//! row's lock. Completion, renewal and release are statements conditional on the token. Times are
//! the server's `now()`, so replicas' clocks do not matter. Lapsed rows are deleted every 1,024
//! claims.

use super::codec;
use super::{millis, Claim, Completion, Fingerprint, Store, StoreError, StoredResponse, Token};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls, Statement};

/// How long one statement may take before the layer answers 503.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(1);

struct Connection {
    client: Client,
    claim: Statement,
    read: Statement,
    renew: Statement,
    complete: Statement,
    release: Statement,
}

/// Records in PostgreSQL, shared by every replica that points at the same database. Clones share
/// one connection (pipelined; reconnected when it closes).
///
/// ```no_run
/// # async fn f() -> Result<(), stagger_idempotency::StoreError> {
/// use stagger_idempotency::PostgresStore;
/// let store = PostgresStore::connect("postgres://app@127.0.0.1:5432/app").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    url: Arc<str>,
    table: Arc<str>,
    connection: Arc<Mutex<Option<Arc<Connection>>>>,
    claims: Arc<AtomicU64>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table)
            .finish()
    }
}

impl PostgresStore {
    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`, without TLS) and keeps records in the
    /// table `idempotency_keys`, created if missing.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_to_table(url, "idempotency_keys").await
    }

    /// Connects and keeps records in `table` (lower-case letters, digits and `_`).
    pub async fn connect_to_table(url: &str, table: &str) -> Result<Self, StoreError> {
        let valid = table.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && table
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            && table.len() <= 63;
        if !valid {
            return Err(StoreError::new(format!(
                "PostgreSQL: the table name {table:?} is not lower-case letters, digits and _"
            )));
        }
        let store = Self {
            url: url.into(),
            table: table.into(),
            connection: Arc::new(Mutex::new(None)),
            claims: Arc::new(AtomicU64::new(0)),
        };
        store.connection().await?;
        Ok(store)
    }

    /// The live connection, opened again if it closed.
    async fn connection(&self) -> Result<Arc<Connection>, StoreError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref().filter(|c| !c.client.is_closed()) {
            return Ok(connection.clone());
        }
        *slot = None;
        let connection = Arc::new(timed("connecting", open(&self.url, &self.table)).await??);
        *slot = Some(connection.clone());
        Ok(connection)
    }

    /// Deletes every lapsed record (claims past their lease, answers past their retention).
    pub async fn purge_expired(&self) -> Result<u64, StoreError> {
        let connection = self.connection().await?;
        let sql = format!("DELETE FROM {} WHERE expires_at <= now()", self.table);
        timed("purging", connection.client.execute(&sql, &[]))
            .await?
            .map_err(|e| error("purging", &e))
    }
}

async fn open(url: &str, table: &str) -> Result<Connection, StoreError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::new(format!("PostgreSQL: the URL {url:?}: {e}")))?;
    config.connect_timeout(STATEMENT_TIMEOUT);
    let (client, driver) = config
        .connect(NoTls)
        .await
        .map_err(|e| error("connecting", &e))?;
    tokio::spawn(async move {
        // The driver ends when the connection closes; the next call reconnects.
        let _ = driver.await;
    });
    let create = format!(
        "CREATE TABLE IF NOT EXISTS {table} (
           key text PRIMARY KEY,
           token bytea NOT NULL,
           fingerprint bytea NOT NULL,
           response bytea,
           expires_at timestamptz NOT NULL);
         CREATE INDEX IF NOT EXISTS {table}_expires_at ON {table} (expires_at);"
    );
    // Replicas starting together race on the catalog: the loser of a CREATE ... IF NOT EXISTS
    // gets a duplicate error although the object is there. Run the statements again: the second
    // time they find it.
    let mut tries = 0;
    while let Err(e) = client.batch_execute(&create).await {
        tries += 1;
        if tries == 3 || !is_creation_race(&e) {
            return Err(error("creating the table", &e));
        }
    }
    let ms = "$4::float8 * interval '1 millisecond'";
    let prepare = |sql: String| {
        let client = &client;
        async move {
            client
                .prepare(&sql)
                .await
                .map_err(|e| error("preparing a statement", &e))
        }
    };
    Ok(Connection {
        claim: prepare(format!(
            "INSERT INTO {table} AS t (key, token, fingerprint, response, expires_at)
             VALUES ($1, $2, $3, NULL, now() + {ms})
             ON CONFLICT (key) DO UPDATE
               SET token = EXCLUDED.token, fingerprint = EXCLUDED.fingerprint,
                   response = NULL, expires_at = EXCLUDED.expires_at
               WHERE t.expires_at <= now()
             RETURNING t.token"
        ))
        .await?,
        read: prepare(format!(
            "SELECT fingerprint, response,
                    GREATEST(0, EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::float8
             FROM {table} WHERE key = $1 AND expires_at > now()"
        ))
        .await?,
        renew: prepare(format!(
            "UPDATE {table} SET expires_at = now() + $3::float8 * interval '1 millisecond'
             WHERE key = $1 AND token = $2 AND response IS NULL AND expires_at > now()"
        ))
        .await?,
        complete: prepare(format!(
            "INSERT INTO {table} AS t (key, token, fingerprint, response, expires_at)
             VALUES ($1, $2, $3, $5, now() + {ms})
             ON CONFLICT (key) DO UPDATE
               SET token = EXCLUDED.token, fingerprint = EXCLUDED.fingerprint,
                   response = EXCLUDED.response, expires_at = EXCLUDED.expires_at
               WHERE (t.token = EXCLUDED.token AND t.response IS NULL) OR t.expires_at <= now()"
        ))
        .await?,
        release: prepare(format!(
            "DELETE FROM {table} WHERE key = $1 AND token = $2 AND response IS NULL"
        ))
        .await?,
        client,
    })
}

fn is_creation_race(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    [
        SqlState::UNIQUE_VIOLATION,
        SqlState::DUPLICATE_TABLE,
        SqlState::DUPLICATE_OBJECT,
    ]
    .iter()
    .any(|code| e.code() == Some(code))
}

fn error(doing: &str, e: &tokio_postgres::Error) -> StoreError {
    // The server's own message says what went wrong; the client's Display says only "db error".
    match e.as_db_error() {
        Some(db) => StoreError::new(format!(
            "PostgreSQL, {doing}: {} ({})",
            db.message(),
            db.code().code()
        )),
        None => StoreError::new(format!("PostgreSQL, {doing}: {e}")),
    }
}

async fn timed<T>(doing: &str, f: impl std::future::Future<Output = T>) -> Result<T, StoreError> {
    tokio::time::timeout(STATEMENT_TIMEOUT, f)
        .await
        .map_err(|_| StoreError::new(format!("PostgreSQL, {doing}: no answer within 1 s")))
}

fn ms(d: Duration) -> f64 {
    millis(d) as f64
}

impl Store for PostgresStore {
    async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease: Duration,
    ) -> Result<Claim, StoreError> {
        let c = self.connection().await?;
        if self.claims.fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            self.purge_expired().await?;
        }
        for _ in 0..3 {
            let token = Token::new();
            let token_bytes = codec::token_bytes(token);
            let won = timed(
                "claiming",
                c.client.query_opt(
                    &c.claim,
                    &[&key, &&token_bytes[..], &&fingerprint.0[..], &ms(lease)],
                ),
            )
            .await?
            .map_err(|e| error("claiming", &e))?;
            if won.is_some() {
                return Ok(Claim::Won(token));
            }
            let row = timed("reading a claim", c.client.query_opt(&c.read, &[&key]))
                .await?
                .map_err(|e| error("reading a claim", &e))?;
            // The row lapsed between the two statements: claim again.
            let Some(row) = row else { continue };
            let stored: Vec<u8> = row.get(0);
            let fingerprint = Fingerprint(
                stored
                    .try_into()
                    .map_err(|_| StoreError::new("PostgreSQL: a fingerprint is not 32 bytes"))?,
            );
            let response: Option<Vec<u8>> = row.get(1);
            let left: f64 = row.get(2);
            return Ok(match response {
                Some(bytes) => Claim::Completed {
                    fingerprint,
                    response: codec::decode_response(&bytes)?,
                },
                None => Claim::InFlight {
                    fingerprint,
                    expires_in: Duration::from_secs_f64(left.max(0.0) / 1000.0),
                },
            });
        }
        Err(StoreError::new(format!(
            "PostgreSQL: the record {key} kept lapsing while it was claimed"
        )))
    }

    async fn renew(&self, key: &str, token: Token, lease: Duration) -> Result<bool, StoreError> {
        let c = self.connection().await?;
        let token = codec::token_bytes(token);
        let n = timed(
            "renewing a claim",
            c.client.execute(&c.renew, &[&key, &&token[..], &ms(lease)]),
        )
        .await?
        .map_err(|e| error("renewing a claim", &e))?;
        Ok(n == 1)
    }

    async fn complete(
        &self,
        key: &str,
        token: Token,
        fingerprint: &Fingerprint,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<Completion, StoreError> {
        let c = self.connection().await?;
        let token = codec::token_bytes(token);
        let bytes = codec::response_bytes(response);
        let n = timed(
            "storing an answer",
            c.client.execute(
                &c.complete,
                &[
                    &key,
                    &&token[..],
                    &&fingerprint.0[..],
                    &ms(retention),
                    &bytes,
                ],
            ),
        )
        .await?
        .map_err(|e| error("storing an answer", &e))?;
        Ok(if n == 1 {
            Completion::Stored
        } else {
            Completion::Fenced
        })
    }

    async fn release(&self, key: &str, token: Token) -> Result<bool, StoreError> {
        let c = self.connection().await?;
        let token = codec::token_bytes(token);
        let n = timed(
            "releasing a claim",
            c.client.execute(&c.release, &[&key, &&token[..]]),
        )
        .await?
        .map_err(|e| error("releasing a claim", &e))?;
        Ok(n == 1)
    }
}
