//! [`StateStore`] over PostgreSQL (operations.md §5; feature `postgres`):
//! one database shared by any number of quickcell processes on any
//! machines. `tokio-postgres` through a `deadpool-postgres` pool; versioned
//! migrations applied at startup; snapshots as `bytea`.
//!
//! A claim is one transaction that locks the run's row (`SELECT … FOR
//! UPDATE`), so concurrent `wait`s on different hosts resolve to exactly
//! one winner. Saving a result takes a transaction-scoped advisory lock on
//! its agent run, so the count and size caps hold across hosts.
//!
//! Connections use TLS (rustls) as the URL's `sslmode` says: `prefer` (the
//! default) and `require` encrypt whenever the server offers it and always
//! verify its certificate and name — against the CA file the URL names in
//! `sslrootcert` (libpq's parameter; at most [`MAX_POSTGRES_CA_FILE_BYTES`])
//! or else the system's roots; `disable` connects in the clear.
//!
//! Hosts ([`HostStore`]): a host that drains parked runs' tool calls
//! records itself in `quickcell_hosts` with a deadline the database's clock
//! sets, renewed every [`HOST_HEARTBEAT_INTERVAL`]; it is alive while that
//! deadline ([`HOST_LIVENESS_TTL`] after the latest renewal) has not
//! passed. Recording a settlement sends `NOTIFY quickcell_settlement` with
//! the run id; each store keeps one connection of its own `LISTEN`ing on
//! that channel (opened at its first watch, reconnected when lost) and
//! wakes the watches of the runs named.

use super::{lock, UsageFilter, UsageRecord, UsageStore, UsageTotals, MAX_USAGE_RECORDS_LISTED};
use super::{
    ClaimRefused, Claimed, HostStore, Owner, ParkedRun, ResultStore, RunCounts, RunStore,
    SessionStore, SettlementWakers, SettlementWatch, StateStore, StoreResult,
};
use anyhow::Context as _;
use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_postgres::types::ToSql;

mod connect;
mod data;
mod hosts;
#[cfg(test)]
mod tests;

use connect::{redacted, split_root_cert, tls_connector};

/// Connections one store's pool keeps open at most, by default (per
/// process; [`PostgresLimits::with_max_connections`]); a store that
/// watches settlements holds one more, its `LISTEN` connection.
pub const DEFAULT_POSTGRES_CONNECTIONS: usize = 16;

/// The most [`PostgresLimits::with_max_connections`] accepts.
pub const MAX_POSTGRES_CONNECTIONS: usize = 256;

/// How often a host that drains parked runs renews its announcement.
pub const HOST_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// How long a host's announcement lasts after its latest renewal: a host
/// that died is taken for dead this long after its last heartbeat, and
/// the tool calls it was running are then subject to the restart rule.
pub const HOST_LIVENESS_TTL: Duration = Duration::from_secs(4);

/// Most bytes of the CA file a URL's `sslrootcert` names.
pub const MAX_POSTGRES_CA_FILE_BYTES: usize = 1 << 20;

/// The channel settlements are announced on; the payload is the run id.
const SETTLEMENT_CHANNEL: &str = "quickcell_settlement";

/// The channel cancels are announced on; the payload is the run id.
const CANCEL_CHANNEL: &str = "quickcell_cancel";

/// How often a host holding runs asks which of them another host
/// cancelled, besides being woken by `NOTIFY` on `quickcell_cancel` (a
/// notification lost while the `LISTEN` connection was down is found
/// this late).
pub const POSTGRES_CANCEL_POLL: Duration = Duration::from_secs(2);

/// How long an answer of [`HostStore::host_alive`] is reused, so that
/// many runs waiting on one host ask the database once.
const LIVENESS_CACHE_TTL: Duration = Duration::from_millis(500);

/// Most hosts whose liveness is cached; past it the cache starts over.
const MAX_CACHED_HOSTS: usize = 1024;

/// How long the `LISTEN` connection waits before reconnecting.
const LISTEN_RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// How long a call waits for a free connection, or for a new one to be
/// established, before it fails, by default
/// ([`PostgresLimits::with_connect_timeout`]).
pub const POSTGRES_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a statement may run before the server cancels it
/// (`statement_timeout` of every connection), by default
/// ([`PostgresLimits::with_statement_timeout`]).
pub const POSTGRES_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The bounds of one [`PostgresStateStore`] (per process). Each has a
/// default that suits a host serving many tenants; none can be turned off.
///
/// | limit | unit | default |
/// | --- | --- | --- |
/// | connections in the pool | connections | [`DEFAULT_POSTGRES_CONNECTIONS`] (1 to [`MAX_POSTGRES_CONNECTIONS`]) |
/// | waiting for a pooled connection, or connecting | time | [`POSTGRES_CONNECT_TIMEOUT`] |
/// | one statement (`statement_timeout`) | time | [`POSTGRES_STATEMENT_TIMEOUT`] |
///
/// A call past either timeout fails with a state-store error; what the
/// store held before is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostgresLimits {
    max_connections: usize,
    connect_timeout: Duration,
    statement_timeout: Duration,
}

impl Default for PostgresLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_POSTGRES_CONNECTIONS,
            connect_timeout: POSTGRES_CONNECT_TIMEOUT,
            statement_timeout: POSTGRES_STATEMENT_TIMEOUT,
        }
    }
}

impl PostgresLimits {
    /// At most `n` pooled connections (clamped to 1 to
    /// [`MAX_POSTGRES_CONNECTIONS`]).
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.clamp(1, MAX_POSTGRES_CONNECTIONS);
        self
    }

    /// Waiting for a connection at most `timeout` (at least 1 ms).
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Statements cancelled after `timeout` (at least 1 ms).
    pub fn with_statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The pool's size.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }
}

/// The migrations, in order: version `i + 1` is `MIGRATIONS[i]`. Applied
/// ones are recorded in `quickcell_migrations`; a database with a version
/// this build does not know is refused.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    agent_run TEXT NOT NULL,
    session TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('parked', 'resuming')),
    generation BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    claimed_until_ms BIGINT,
    snapshot BYTEA NOT NULL
);
CREATE INDEX runs_by_session ON runs (session);
CREATE TABLE settlements (
    run_id TEXT NOT NULL,
    generation BIGINT NOT NULL,
    request_id BIGINT NOT NULL,
    seq BIGSERIAL NOT NULL,
    settlement TEXT NOT NULL,
    PRIMARY KEY (run_id, generation, request_id)
);
CREATE TABLE session_store (
    session TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session, key)
);
CREATE TABLE results (
    agent_run TEXT NOT NULL,
    id TEXT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (agent_run, id)
);
CREATE TABLE usage (
    seq BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    agent_run TEXT NOT NULL,
    session TEXT NOT NULL,
    run_id TEXT,
    kind TEXT NOT NULL,
    fuel BIGINT NOT NULL,
    wall_ms BIGINT NOT NULL,
    guest_us BIGINT NOT NULL,
    tool_calls BIGINT NOT NULL,
    output_bytes BIGINT NOT NULL,
    snapshot_bytes BIGINT NOT NULL,
    outcome TEXT NOT NULL
);
CREATE INDEX usage_by_session ON usage (session, at_ms);
CREATE INDEX usage_by_time ON usage (at_ms);
",
    "
ALTER TABLE runs ADD COLUMN lease BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN regrant BOOLEAN NOT NULL DEFAULT false;
",
    "
ALTER TABLE settlements DROP COLUMN generation;
DELETE FROM settlements a USING settlements b
    WHERE a.run_id = b.run_id AND a.request_id = b.request_id AND a.seq > b.seq;
ALTER TABLE settlements ADD PRIMARY KEY (run_id, request_id);
CREATE TABLE quickcell_hosts (
    host_id TEXT PRIMARY KEY,
    alive_until TIMESTAMPTZ NOT NULL
);
",
    "
CREATE TABLE run_cancels (
    run_id TEXT PRIMARY KEY,
    expires_at_ms BIGINT NOT NULL
);
",
    // Runs and usage records name their guest build; earlier rows read as
    // the build unknown (NULL). Hosts of an older quickcell keep working
    // on the table (they name their columns); one started after this
    // migration refuses the newer schema.
    "
ALTER TABLE runs ADD COLUMN guest_build TEXT;
ALTER TABLE usage ADD COLUMN guest_build TEXT;
",
];

/// Key of the advisory lock that serializes migrations across hosts
/// starting at once.
const MIGRATION_LOCK: i64 = 0x7175_6963_6b63_656c; // "quickcel"

/// [`StateStore`] over PostgreSQL.
#[derive(Clone)]
pub struct PostgresStateStore {
    pool: Pool,
    hosts: Arc<Hosts>,
}

/// What a store knows of hosts: its own announcement, its `LISTEN`
/// connection and the watches it wakes.
struct Hosts {
    /// The connection settings, for the `LISTEN` connection.
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// How long a watch waits for the `LISTEN` connection.
    connect_timeout: Duration,
    /// This store's host id, once announced.
    announced: tokio::sync::OnceCell<String>,
    /// `true` while the `LISTEN` connection listens; started at the first
    /// watch.
    listening: tokio::sync::OnceCell<tokio::sync::watch::Receiver<bool>>,
    wakers: Arc<SettlementWakers>,
    /// Bumped by every cancel notification (and every reconnection).
    cancel_wake: Arc<tokio::sync::watch::Sender<u64>>,
    /// Recent answers of `host_alive`.
    liveness: Mutex<HashMap<String, (bool, Instant)>>,
    /// Ends the heartbeat and the `LISTEN` connection with the store.
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

impl PostgresStateStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`,
    /// or the key-value form) with the default [`PostgresLimits`] and
    /// applies the migrations it lacks.
    ///
    /// # Errors
    ///
    /// When the URL is malformed, the database cannot be reached, or it
    /// holds a schema newer than this build knows.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        Self::connect_with(url, PostgresLimits::default()).await
    }

    /// [`PostgresStateStore::connect`] with other limits.
    ///
    /// # Errors
    ///
    /// As [`PostgresStateStore::connect`]; also when the CA file the URL
    /// names cannot be read or holds no certificate.
    pub async fn connect_with(url: &str, limits: PostgresLimits) -> anyhow::Result<Self> {
        let (url, root_cert) = split_root_cert(url)?;
        let url = url.as_str();
        let tls = tls_connector(root_cert.as_deref())?;
        let mut config: tokio_postgres::Config = url
            .parse()
            .with_context(|| format!("{} is not a PostgreSQL URL", redacted(url)))?;
        config.connect_timeout(limits.connect_timeout);
        // A peer that vanished (a half-open connection, e.g. the `LISTEN`
        // one) is noticed within about 25 s rather than the system's hours.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.keepalives_interval(Duration::from_secs(5));
        config.keepalives_retries(3);
        config.options(format!(
            "-c statement_timeout={}",
            limits.statement_timeout.as_millis()
        ));
        if config.get_application_name().is_none() {
            config.application_name("quickcell");
        }
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(limits.max_connections)
            .wait_timeout(Some(limits.connect_timeout))
            .create_timeout(Some(limits.connect_timeout))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .context("cannot build the PostgreSQL connection pool")?;
        let store = Self {
            pool,
            hosts: Arc::new(Hosts {
                config,
                tls,
                connect_timeout: limits.connect_timeout,
                announced: Default::default(),
                listening: Default::default(),
                wakers: Default::default(),
                cancel_wake: Default::default(),
                liveness: Default::default(),
                stop: Default::default(),
            }),
        };
        store
            .migrate()
            .await
            .with_context(|| format!("cannot prepare the state store at {}", redacted(url)))?;
        Ok(store)
    }

    /// The first column of the one row `sql` returns, if any, as text.
    async fn optional_text(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> StoreResult<Option<String>> {
        let work = async {
            let row = self.client().await?.query_opt(sql, params).await?;
            anyhow::Ok(row.map(|r| r.get(0)))
        };
        Ok(work.await?)
    }

    /// Runs one statement; the rows it changed.
    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
        let work = async { anyhow::Ok(self.client().await?.execute(sql, params).await?) };
        Ok(work.await?)
    }

    /// The `COUNT(*)` (a `BIGINT`) that `sql` returns.
    async fn count(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<usize> {
        let work = async {
            let n: i64 = self.client().await?.query_one(sql, params).await?.get(0);
            anyhow::Ok(n.max(0) as usize)
        };
        Ok(work.await?)
    }

    async fn client(&self) -> anyhow::Result<deadpool_postgres::Client> {
        self.pool
            .get()
            .await
            // The pool's error keeps its cause (e.g. why the TLS handshake
            // failed) as its source.
            .map_err(|e| anyhow::Error::new(e).context("cannot connect to the state store"))
    }

    /// Applies the migrations the database lacks, one transaction each,
    /// under an advisory lock (hosts starting together apply them once).
    async fn migrate(&self) -> anyhow::Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS quickcell_migrations (
                version INTEGER PRIMARY KEY,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await?;
        let applied: i32 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM quickcell_migrations",
                &[],
            )
            .await?
            .get(0);
        let known = MIGRATIONS.len() as i32;
        if applied > known {
            anyhow::bail!(
                "the database's schema is version {applied}, newer than this quickcell knows ({known}): upgrade quickcell"
            );
        }
        for (index, migration) in MIGRATIONS.iter().enumerate().skip(applied as usize) {
            let version = index as i32 + 1;
            tx.batch_execute(migration)
                .await
                .with_context(|| format!("migration {version} failed"))?;
            tx.execute(
                "INSERT INTO quickcell_migrations (version) VALUES ($1)",
                &[&version],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// A run's guest build as stored: NULL when unknown.
fn build(guest_build: &str) -> Option<&str> {
    (!guest_build.is_empty()).then_some(guest_build)
}

/// Deletes the runs `ids` and their settlements within `tx`.
async fn delete_runs(
    tx: &deadpool_postgres::Transaction<'_>,
    ids: &[String],
) -> anyhow::Result<()> {
    tx.execute("DELETE FROM runs WHERE run_id = ANY($1)", &[&ids])
        .await?;
    tx.execute("DELETE FROM settlements WHERE run_id = ANY($1)", &[&ids])
        .await?;
    Ok(())
}

impl StateStore for PostgresStateStore {
    fn is_shared(&self) -> bool {
        true
    }
}

#[async_trait]
impl RunStore for PostgresStateStore {
    async fn park(&self, run: ParkedRun) -> StoreResult<()> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            match run.lease {
                Some(lease) => {
                    let updated = tx
                        .execute(
                            "UPDATE runs SET agent_run = $2, session = $3, state = 'parked',
                               generation = $4, expires_at_ms = $5, claimed_until_ms = NULL,
                               snapshot = $6, regrant = $7, guest_build = $9
                             WHERE run_id = $1 AND lease = $8",
                            &[
                                &run.run_id,
                                &run.owner.agent_run,
                                &run.owner.session,
                                &to_i64(run.generation),
                                &to_i64(run.expires_at_ms),
                                &run.snapshot,
                                &run.regrant,
                                &to_i64(lease),
                                &build(&run.guest_build),
                            ],
                        )
                        .await?;
                    if updated == 0 {
                        anyhow::bail!(super::fenced(&run.run_id));
                    }
                }
                None => {
                    tx.execute(
                        "INSERT INTO runs
                         (run_id, agent_run, session, state, generation, expires_at_ms, claimed_until_ms, snapshot, regrant, guest_build)
                         VALUES ($1, $2, $3, 'parked', $4, $5, NULL, $6, $7, $8)
                         ON CONFLICT (run_id) DO UPDATE SET
                           agent_run = EXCLUDED.agent_run, session = EXCLUDED.session,
                           state = 'parked', generation = EXCLUDED.generation,
                           expires_at_ms = EXCLUDED.expires_at_ms, claimed_until_ms = NULL,
                           snapshot = EXCLUDED.snapshot, regrant = EXCLUDED.regrant,
                           guest_build = EXCLUDED.guest_build",
                        &[
                            &run.run_id,
                            &run.owner.agent_run,
                            &run.owner.session,
                            &to_i64(run.generation),
                            &to_i64(run.expires_at_ms),
                            &run.snapshot,
                            &run.regrant,
                            &build(&run.guest_build),
                        ],
                    )
                    .await?;
                }
            }
            let awaiting: Vec<i64> = run.awaiting.iter().map(|&id| to_i64(id)).collect();
            tx.execute(
                "DELETE FROM settlements WHERE run_id = $1 AND NOT (request_id = ANY($2))",
                &[&run.run_id, &awaiting],
            )
            .await?;
            tx.commit().await?;
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> StoreResult<Result<Claimed, ClaimRefused>> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let row = tx
                .query_opt(
                    "SELECT agent_run, session, state, generation, expires_at_ms, claimed_until_ms, regrant,
                            EXISTS (SELECT 1 FROM run_cancels c WHERE c.run_id = runs.run_id), guest_build
                     FROM runs WHERE run_id = $1 FOR UPDATE",
                    &[&run_id],
                )
                .await?;
            let Some(row) = row else {
                return Ok(Err(ClaimRefused::Unavailable));
            };
            let (agent_run, session, state): (String, String, String) =
                (row.get(0), row.get(1), row.get(2));
            let (generation, expires_at, claimed_until): (i64, i64, Option<i64>) =
                (row.get(3), row.get(4), row.get(5));
            let parked_by: Option<String> = row.get(8);
            let row = super::RunRow {
                agent_run: &agent_run,
                session: &session,
                claimed_until_ms: (state == "resuming").then(|| to_u64(claimed_until.unwrap_or(0))),
                expires_at_ms: to_u64(expires_at),
                regrant: row.get(6),
                cancelled: row.get(7),
                guest_build: parked_by.as_deref(),
            };
            match row.claim(owner, guest_build, now_ms) {
                super::ClaimDecision::Remove => {
                    delete_runs(&tx, &[run_id.to_string()]).await?;
                    tx.commit().await?;
                    return Ok(Err(ClaimRefused::Unavailable));
                }
                super::ClaimDecision::Refuse(refused) => return Ok(Err(refused)),
                super::ClaimDecision::Grant => {}
            }
            let claimed = tx
                .query_one(
                    "UPDATE runs SET state = 'resuming', claimed_until_ms = $2, lease = lease + 1
                     WHERE run_id = $1 RETURNING snapshot, lease",
                    &[&run_id, &to_i64(claim_until_ms)],
                )
                .await?;
            let (snapshot, lease): (Vec<u8>, i64) = (claimed.get(0), claimed.get(1));
            let settlements = tx
                .query(
                    "SELECT request_id, settlement FROM settlements WHERE run_id = $1 ORDER BY seq",
                    &[&run_id],
                )
                .await?
                .iter()
                .map(|r| (to_u64(r.get(0)), r.get(1)))
                .collect();
            tx.commit().await?;
            anyhow::Ok(Ok(Claimed {
                generation: to_u64(generation),
                snapshot,
                settlements,
                lease: to_u64(lease),
            }))
        };
        Ok(work.await?)
    }

    async fn unclaim(&self, run_id: &str, lease: u64) -> StoreResult<()> {
        self.execute(
            "UPDATE runs SET state = 'parked', claimed_until_ms = NULL
             WHERE run_id = $1 AND lease = $2",
            &[&run_id, &to_i64(lease)],
        )
        .await?;
        Ok(())
    }

    async fn release(&self, run_id: &str, lease: u64) -> StoreResult<bool> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let removed = tx
                .execute(
                    "DELETE FROM runs WHERE run_id = $1 AND lease = $2",
                    &[&run_id, &to_i64(lease)],
                )
                .await?
                > 0;
            if removed {
                tx.execute("DELETE FROM settlements WHERE run_id = $1", &[&run_id])
                    .await?;
            }
            tx.commit().await?;
            anyhow::Ok(removed)
        };
        Ok(work.await?)
    }

    async fn remove(&self, run_id: &str) -> StoreResult<()> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            delete_runs(&tx, &[run_id.to_string()]).await?;
            tx.commit().await?;
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn extend_parked(
        &self,
        run_id: &str,
        owner: &Owner,
        expires_at_ms: u64,
    ) -> StoreResult<bool> {
        let changed = self
            .execute(
                "UPDATE runs SET expires_at_ms = GREATEST(expires_at_ms, $4)
                 WHERE run_id = $1 AND agent_run = $2 AND session = $3 AND state = 'parked'",
                &[
                    &run_id,
                    &owner.agent_run,
                    &owner.session,
                    &to_i64(expires_at_ms),
                ],
            )
            .await?;
        Ok(changed > 0)
    }

    async fn remove_session_runs(&self, session: &str) -> StoreResult<Vec<String>> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let ids: Vec<String> = tx
                .query(
                    "SELECT run_id FROM runs WHERE session = $1 FOR UPDATE",
                    &[&session],
                )
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
            delete_runs(&tx, &ids).await?;
            tx.commit().await?;
            anyhow::Ok(ids)
        };
        Ok(work.await?)
    }

    async fn record_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        settlement: &str,
    ) -> StoreResult<bool> {
        let work = async {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "WITH recorded AS (
                       INSERT INTO settlements (run_id, request_id, settlement)
                       SELECT $1, $2, $3 FROM runs WHERE run_id = $1 FOR SHARE
                       ON CONFLICT (run_id, request_id) DO NOTHING
                       RETURNING 1)
                     SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = $1),
                            EXISTS (SELECT 1 FROM recorded)",
                    &[&run_id, &to_i64(request_id), &settlement],
                )
                .await?;
            let (held, recorded): (bool, bool) = (row.get(0), row.get(1));
            // A statement of its own, so that a notification the server
            // cannot queue (its queue full of a stalled listener's) loses
            // no settlement: a `wait` then reads it at its next claim.
            if recorded {
                if let Err(e) = client
                    .execute("SELECT pg_notify($1, $2)", &[&SETTLEMENT_CHANNEL, &run_id])
                    .await
                {
                    tracing::warn!(run_id, error = %e, "cannot announce a recorded settlement");
                }
            }
            anyhow::Ok(held)
        };
        Ok(work.await?)
    }

    async fn count_runs(&self) -> StoreResult<usize> {
        self.count("SELECT COUNT(*) FROM runs", &[]).await
    }

    async fn count_session_runs(&self, session: &str) -> StoreResult<usize> {
        self.count("SELECT COUNT(*) FROM runs WHERE session = $1", &[&session])
            .await
    }

    async fn purge_expired(&self, now_ms: u64) -> StoreResult<Vec<String>> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let ids = purge(&tx, now_ms).await?;
            tx.commit().await?;
            anyhow::Ok(ids)
        };
        Ok(work.await?)
    }

    async fn purge_and_count(&self, now_ms: u64, session: &str) -> StoreResult<RunCounts> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let purged = purge(&tx, now_ms).await?;
            let row = tx
                .query_one(
                    "SELECT COUNT(*), COUNT(*) FILTER (WHERE session = $1) FROM runs",
                    &[&session],
                )
                .await?;
            tx.commit().await?;
            anyhow::Ok(RunCounts {
                purged,
                runs: row.get::<_, i64>(0) as usize,
                session_runs: row.get::<_, i64>(1) as usize,
            })
        };
        Ok(work.await?)
    }
}

/// Removes, within `tx`, the runs expired at `now_ms` and the claims
/// abandoned before it; returns their ids.
async fn purge(
    tx: &deadpool_postgres::Transaction<'_>,
    now_ms: u64,
) -> anyhow::Result<Vec<String>> {
    let ids: Vec<String> = tx
        .query(
            "DELETE FROM runs
             WHERE (state = 'parked'
                    AND (expires_at_ms <= $1 OR run_id IN (SELECT run_id FROM run_cancels)))
                OR (state = 'resuming' AND claimed_until_ms < $1
                    AND NOT (regrant AND expires_at_ms > $1
                             AND run_id NOT IN (SELECT run_id FROM run_cancels)))
             RETURNING run_id",
            &[&to_i64(now_ms)],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !ids.is_empty() {
        tx.execute("DELETE FROM settlements WHERE run_id = ANY($1)", &[&ids])
            .await?;
    }
    tx.execute(
        "DELETE FROM run_cancels WHERE expires_at_ms <= $1",
        &[&to_i64(now_ms)],
    )
    .await?;
    Ok(ids)
}
