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

/// `url` without its `sslrootcert` parameter (which tokio-postgres does not
/// know), and the path that parameter names. Only the URL form carries it.
fn split_root_cert(url: &str) -> anyhow::Result<(String, Option<std::path::PathBuf>)> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), None));
    };
    let mut kept = Vec::new();
    let mut root_cert = None;
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslrootcert", path)) => {
                let path = percent_encoding::percent_decode_str(path)
                    .decode_utf8()
                    .context("the URL's sslrootcert is not UTF-8")?;
                root_cert = Some(std::path::PathBuf::from(path.into_owned()));
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, root_cert))
}

/// The TLS connector: server certificates verified against the CA file
/// `root_cert`, or the system's roots.
fn tls_connector(
    root_cert: Option<&std::path::Path>,
) -> anyhow::Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::{pem::PemObject as _, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            use std::io::Read as _;
            let unreadable = |e: std::io::Error| {
                anyhow::anyhow!(
                    "cannot read the CA file {} (sslrootcert): {e}",
                    path.display()
                )
            };
            let mut pem = Vec::new();
            std::fs::File::open(path)
                .map_err(unreadable)?
                .take(MAX_POSTGRES_CA_FILE_BYTES as u64 + 1)
                .read_to_end(&mut pem)
                .map_err(unreadable)?;
            if pem.len() > MAX_POSTGRES_CA_FILE_BYTES {
                anyhow::bail!(
                    "the CA file {} (sslrootcert) is over {MAX_POSTGRES_CA_FILE_BYTES} bytes",
                    path.display()
                );
            }
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    anyhow::anyhow!("the CA file {} (sslrootcert): {e}", path.display())
                })?;
                roots.add(cert).map_err(|e| {
                    anyhow::anyhow!("the CA file {} (sslrootcert): {e}", path.display())
                })?;
            }
            if roots.is_empty() {
                anyhow::bail!(
                    "the CA file {} (sslrootcert) holds no PEM certificate",
                    path.display()
                );
            }
        }
        None => {
            let (added, _) =
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            tracing::debug!(added, "system CA certificates for the state store");
        }
    }
    let provider = crate::tls::provider();
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS for the state store")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The URL without its password, for messages.
fn redacted(url: &str) -> String {
    match url.parse::<tokio_postgres::Config>() {
        Ok(config) => {
            let host = config
                .get_hosts()
                .first()
                .map(|h| match h {
                    tokio_postgres::config::Host::Tcp(name) => name.clone(),
                    tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
                })
                .unwrap_or_default();
            let port = config.get_ports().first().copied().unwrap_or(5432);
            let db = config.get_dbname().unwrap_or("");
            format!("postgres://{host}:{port}/{db}")
        }
        Err(_) => "the PostgreSQL URL".into(),
    }
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

#[async_trait]
impl HostStore for PostgresStateStore {
    async fn announce_host(&self) -> StoreResult<Option<String>> {
        let hosts = &self.hosts;
        let id = hosts
            .announced
            .get_or_try_init(|| async {
                let id = format!("h_{}", uuid::Uuid::new_v4().simple());
                let client = self.client().await?;
                // Hosts gone for a day are forgotten.
                client
                    .execute(
                        "DELETE FROM quickcell_hosts WHERE alive_until < now() - interval '1 day'",
                        &[],
                    )
                    .await?;
                renew(&client, &id).await?;
                drop(client);
                tokio::spawn(heartbeat(
                    hosts.config.clone(),
                    hosts.tls.clone(),
                    id.clone(),
                    hosts.stop.clone(),
                ));
                anyhow::Ok(id)
            })
            .await?;
        Ok(Some(id.clone()))
    }

    async fn host_alive(&self, host: &str) -> StoreResult<bool> {
        if self.hosts.announced.get().is_some_and(|id| id == host) {
            return Ok(true);
        }
        let cached = |liveness: &HashMap<String, (bool, Instant)>| {
            liveness
                .get(host)
                .filter(|(_, at)| at.elapsed() < LIVENESS_CACHE_TTL)
                .map(|(alive, _)| *alive)
        };
        if let Some(alive) = cached(&lock(&self.hosts.liveness)) {
            return Ok(alive);
        }
        let work = async {
            let row = self
                .client()
                .await?
                .query_opt(
                    "SELECT alive_until > now() FROM quickcell_hosts WHERE host_id = $1",
                    &[&host],
                )
                .await?;
            anyhow::Ok(row.is_some_and(|r| r.get::<_, bool>(0)))
        };
        let alive = work.await?;
        let mut liveness = lock(&self.hosts.liveness);
        if liveness.len() >= MAX_CACHED_HOSTS {
            liveness.clear();
        }
        liveness.insert(host.to_string(), (alive, Instant::now()));
        Ok(alive)
    }

    async fn watch_settlements(&self, run_id: &str) -> StoreResult<SettlementWatch> {
        let watch = self.hosts.wakers.watch(run_id);
        let hosts = &self.hosts;
        let mut listening = hosts
            .listening
            .get_or_init(|| async {
                let (ready, listening) = tokio::sync::watch::channel(false);
                tokio::spawn(listen(
                    hosts.config.clone(),
                    hosts.tls.clone(),
                    Arc::downgrade(&hosts.wakers),
                    ready,
                    hosts.stop.clone(),
                ));
                listening
            })
            .await
            .clone();
        // The watch counts from when the connection listens.
        let listens = tokio::time::timeout(
            hosts.connect_timeout,
            listening.wait_for(|listens| *listens),
        )
        .await;
        if !matches!(listens, Ok(Ok(_))) {
            return Err(anyhow::anyhow!(
                "cannot listen for settlements: the LISTEN connection to the state store is down (its errors are logged)"
            )
            .into());
        }
        Ok(watch)
    }

    async fn recorded_settlements(
        &self,
        run_id: &str,
        request_ids: &[u64],
    ) -> StoreResult<Vec<(u64, String)>> {
        let ids: Vec<i64> = request_ids.iter().map(|&id| to_i64(id)).collect();
        let work = async {
            let rows = self
                .client()
                .await?
                .query(
                    "SELECT request_id, settlement FROM settlements
                     WHERE run_id = $1 AND request_id = ANY($2) ORDER BY seq",
                    &[&run_id, &ids],
                )
                .await?;
            anyhow::Ok(rows.iter().map(|r| (to_u64(r.get(0)), r.get(1))).collect())
        };
        Ok(work.await?)
    }
}

/// Sets `host`'s deadline [`HOST_LIVENESS_TTL`] past the database's now.
async fn renew(client: &tokio_postgres::Client, host: &str) -> anyhow::Result<()> {
    let ttl_ms = HOST_LIVENESS_TTL.as_millis() as f64;
    client
        .execute(
            "INSERT INTO quickcell_hosts (host_id, alive_until)
             VALUES ($1, now() + $2 * interval '1 millisecond')
             ON CONFLICT (host_id) DO UPDATE SET alive_until = EXCLUDED.alive_until",
            &[&host, &ttl_ms],
        )
        .await?;
    Ok(())
}

/// Renews `host`'s announcement every [`HOST_HEARTBEAT_INTERVAL`] until
/// `stop`, on a connection of its own (a pool whose connections are all
/// busy must not make a live host look dead); a store that closes
/// withdraws it, so that other hosts stop waiting on it at once.
async fn heartbeat(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    host: String,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut ticks = tokio::time::interval(HOST_HEARTBEAT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    let mut connection: Option<tokio_postgres::Client> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        if connection.as_ref().is_none_or(|c| c.is_closed()) {
            connection = match config.connect(tls.clone()).await {
                Ok((client, driver)) => {
                    tokio::spawn(driver);
                    Some(client)
                }
                Err(e) => {
                    tracing::warn!(host, error = %format!("{e:#}"), "cannot connect to renew this host's announcement");
                    continue;
                }
            };
        }
        if let Some(client) = &connection {
            if let Err(e) = renew(client, &host).await {
                tracing::warn!(host, error = %format!("{e:#}"), "cannot renew this host's announcement in the state store");
                connection = None;
            }
        }
    }
    if let Some(client) = connection {
        let _ = client
            .execute("DELETE FROM quickcell_hosts WHERE host_id = $1", &[&host])
            .await;
    }
}

/// Keeps one connection listening on [`SETTLEMENT_CHANNEL`] and wakes the
/// watches of the runs it names, until `stop` or the wakers are dropped.
/// `ready` is `true` while it listens; every reconnection wakes all
/// watches, since notifications sent meanwhile were lost.
async fn listen(
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    wakers: std::sync::Weak<SettlementWakers>,
    ready: tokio::sync::watch::Sender<bool>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let listened = async {
            let (client, mut connection) = config.connect(tls.clone()).await?;
            // The connection is driven here, and wakes the watches of the
            // runs its notifications name.
            let notified = wakers.clone();
            let driver = tokio::spawn(async move {
                while let Some(message) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    if let tokio_postgres::AsyncMessage::Notification(n) = message? {
                        match notified.upgrade() {
                            Some(wakers) => wakers.wake(n.payload()),
                            None => break,
                        }
                    }
                }
                Ok::<_, tokio_postgres::Error>(())
            });
            client
                .batch_execute(&format!("LISTEN {SETTLEMENT_CHANNEL}"))
                .await?;
            if let Some(wakers) = wakers.upgrade() {
                wakers.wake_all();
            }
            ready.send_replace(true);
            // The client lives as long as the connection.
            let ended = driver.await;
            drop(client);
            ended??;
            anyhow::Ok(())
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            ended = listened => {
                ready.send_replace(false);
                if wakers.strong_count() == 0 {
                    return;
                }
                if let Err(e) = ended {
                    tracing::warn!(error = %e, "the state store's LISTEN connection ended; reconnecting");
                }
            }
        }
        if let Some(wakers) = wakers.upgrade() {
            wakers.wake_all();
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(LISTEN_RECONNECT_DELAY) => {}
        }
    }
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
                               snapshot = $6, regrant = $7
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
                         (run_id, agent_run, session, state, generation, expires_at_ms, claimed_until_ms, snapshot, regrant)
                         VALUES ($1, $2, $3, 'parked', $4, $5, NULL, $6, $7)
                         ON CONFLICT (run_id) DO UPDATE SET
                           agent_run = EXCLUDED.agent_run, session = EXCLUDED.session,
                           state = 'parked', generation = EXCLUDED.generation,
                           expires_at_ms = EXCLUDED.expires_at_ms, claimed_until_ms = NULL,
                           snapshot = EXCLUDED.snapshot, regrant = EXCLUDED.regrant",
                        &[
                            &run.run_id,
                            &run.owner.agent_run,
                            &run.owner.session,
                            &to_i64(run.generation),
                            &to_i64(run.expires_at_ms),
                            &run.snapshot,
                            &run.regrant,
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
        now_ms: u64,
        claim_until_ms: u64,
    ) -> StoreResult<Result<Claimed, ClaimRefused>> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            let row = tx
                .query_opt(
                    "SELECT agent_run, session, state, generation, expires_at_ms, claimed_until_ms, regrant
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
            let row = super::RunRow {
                agent_run: &agent_run,
                session: &session,
                claimed_until_ms: (state == "resuming").then(|| to_u64(claimed_until.unwrap_or(0))),
                expires_at_ms: to_u64(expires_at),
                regrant: row.get(6),
            };
            match row.claim(owner, now_ms) {
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
             WHERE (state = 'parked' AND expires_at_ms <= $1)
                OR (state = 'resuming' AND claimed_until_ms < $1
                    AND NOT (regrant AND expires_at_ms > $1))
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
    Ok(ids)
}

#[async_trait]
impl SessionStore for PostgresStateStore {
    async fn store_get(&self, session: &str, key: &str) -> StoreResult<Option<String>> {
        self.optional_text(
            "SELECT value FROM session_store WHERE session = $1 AND key = $2",
            &[&session, &key],
        )
        .await
    }

    async fn store_total_bytes(&self, session: &str) -> StoreResult<usize> {
        self.count(
            "SELECT COALESCE(SUM(octet_length(value)), 0)::BIGINT FROM session_store WHERE session = $1",
            &[&session],
        )
        .await
    }

    async fn store_commit(
        &self,
        session: &str,
        writes: Vec<(String, Option<String>)>,
    ) -> StoreResult<()> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            for (key, value) in &writes {
                match value {
                    Some(v) => {
                        tx.execute(
                            "INSERT INTO session_store (session, key, value) VALUES ($1, $2, $3)
                             ON CONFLICT (session, key) DO UPDATE SET value = EXCLUDED.value",
                            &[&session, key, v],
                        )
                        .await?
                    }
                    None => {
                        tx.execute(
                            "DELETE FROM session_store WHERE session = $1 AND key = $2",
                            &[&session, key],
                        )
                        .await?
                    }
                };
            }
            tx.commit().await?;
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn store_clear(&self, session: &str) -> StoreResult<usize> {
        let n = self
            .execute("DELETE FROM session_store WHERE session = $1", &[&session])
            .await?;
        Ok(n as usize)
    }
}

#[async_trait]
impl ResultStore for PostgresStateStore {
    async fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: String,
        max_count: usize,
        max_bytes: usize,
    ) -> StoreResult<bool> {
        let work = async {
            let mut client = self.client().await?;
            let tx = client.transaction().await?;
            // The caps hold across hosts: one save per agent run at a time.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended('quickcell.results:' || $1, 0))",
                &[&agent_run],
            )
            .await?;
            let row = tx
                .query_one(
                    "SELECT COUNT(*), COALESCE(SUM(octet_length(json)), 0)::BIGINT FROM results WHERE agent_run = $1",
                    &[&agent_run],
                )
                .await?;
            let (n, bytes): (i64, i64) = (row.get(0), row.get(1));
            if n as usize >= max_count || bytes as usize + json.len() > max_bytes {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO results (agent_run, id, json) VALUES ($1, $2, $3)",
                &[&agent_run, &id, &json],
            )
            .await?;
            tx.commit().await?;
            anyhow::Ok(true)
        };
        Ok(work.await?)
    }

    async fn result_load(&self, agent_run: &str, id: &str) -> StoreResult<Option<String>> {
        self.optional_text(
            "SELECT json FROM results WHERE agent_run = $1 AND id = $2",
            &[&agent_run, &id],
        )
        .await
    }

    async fn result_delete(&self, agent_run: &str, id: &str) -> StoreResult<bool> {
        let n = self
            .execute(
                "DELETE FROM results WHERE agent_run = $1 AND id = $2",
                &[&agent_run, &id],
            )
            .await?;
        Ok(n > 0)
    }

    async fn result_clear(&self, agent_run: &str) -> StoreResult<usize> {
        let n = self
            .execute("DELETE FROM results WHERE agent_run = $1", &[&agent_run])
            .await?;
        Ok(n as usize)
    }
}

/// The `WHERE` clause and parameters of a usage filter (parameters are
/// numbered from `$1`).
fn usage_where(filter: &UsageFilter) -> (String, Vec<Box<dyn ToSql + Sync + Send>>) {
    let mut clauses = Vec::new();
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    if let Some(session) = &filter.session {
        values.push(Box::new(session.clone()));
        clauses.push(format!("session = ${}", values.len()));
    }
    if let Some(since) = filter.since_ms {
        values.push(Box::new(to_i64(since)));
        clauses.push(format!("at_ms >= ${}", values.len()));
    }
    if let Some(kind) = &filter.kind {
        values.push(Box::new(kind.clone()));
        clauses.push(format!("kind = ${}", values.len()));
    }
    let clause = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    (clause, values)
}

fn params(values: &[Box<dyn ToSql + Sync + Send>]) -> Vec<&(dyn ToSql + Sync)> {
    values
        .iter()
        .map(|v| v.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

#[async_trait]
impl UsageStore for PostgresStateStore {
    async fn usage_record(&self, r: UsageRecord) -> StoreResult<()> {
        let work = async {
            self.client().await?.execute(
                "INSERT INTO usage (at_ms, agent_run, session, run_id, kind, fuel, wall_ms, guest_us, tool_calls, output_bytes, snapshot_bytes, outcome)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                &[
                    &to_i64(r.at_ms), &r.agent_run, &r.session, &r.run_id, &r.kind, &to_i64(r.fuel),
                    &to_i64(r.wall_ms), &to_i64(r.guest_us), &to_i64(r.tool_calls),
                    &to_i64(r.output_bytes), &to_i64(r.snapshot_bytes), &r.outcome,
                ],
            )
            .await?;
            anyhow::Ok(())
        };
        Ok(work.await?)
    }

    async fn usage_totals(&self, filter: &UsageFilter) -> StoreResult<UsageTotals> {
        let work = async {
            let (clause, values) = usage_where(filter);
            // Sums are numeric (they cannot overflow), capped into BIGINT.
            let sum =
                |c: &str| format!("LEAST(COALESCE(SUM({c}), 0), 9223372036854775807)::BIGINT");
            let sql = format!(
                "SELECT COUNT(*), {}, {}, {}, {}, {}, {}, MIN(at_ms) FROM usage {clause}",
                sum("fuel"),
                sum("wall_ms"),
                sum("guest_us"),
                sum("tool_calls"),
                sum("output_bytes"),
                sum("snapshot_bytes"),
            );
            let row = self
                .client()
                .await?
                .query_one(&sql, &params(&values))
                .await?;
            let n = |i| to_u64(row.get::<_, i64>(i));
            anyhow::Ok(UsageTotals {
                calls: n(0),
                fuel: n(1),
                wall_ms: n(2),
                guest_us: n(3),
                tool_calls: n(4),
                output_bytes: n(5),
                snapshot_bytes: n(6),
                first_at_ms: row.get::<_, Option<i64>>(7).map(to_u64),
            })
        };
        Ok(work.await?)
    }

    async fn usage_list(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let work = async {
            let (clause, mut values) = usage_where(filter);
            values.push(Box::new(limit.min(MAX_USAGE_RECORDS_LISTED) as i64));
            let sql = format!(
                "SELECT at_ms, agent_run, session, run_id, kind, fuel, wall_ms, guest_us, tool_calls, output_bytes, snapshot_bytes, outcome
                 FROM (SELECT * FROM usage {clause} ORDER BY seq DESC LIMIT ${}) latest ORDER BY seq",
                values.len()
            );
            let rows = self.client().await?.query(&sql, &params(&values)).await?;
            anyhow::Ok(
                rows.iter()
                    .map(|row| {
                        let n = |i| to_u64(row.get::<_, i64>(i));
                        UsageRecord {
                            at_ms: n(0),
                            agent_run: row.get(1),
                            session: row.get(2),
                            run_id: row.get(3),
                            kind: row.get(4),
                            fuel: n(5),
                            wall_ms: n(6),
                            guest_us: n(7),
                            tool_calls: n(8),
                            output_bytes: n(9),
                            snapshot_bytes: n(10),
                            outcome: row.get(11),
                        }
                    })
                    .collect(),
            )
        };
        Ok(work.await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client of its own on `url` (TLS as the store's).
    async fn raw_client(url: &str) -> tokio_postgres::Client {
        let (url, root_cert) = split_root_cert(url).unwrap();
        let tls = tls_connector(root_cert.as_deref()).unwrap();
        let (client, connection) = tokio_postgres::connect(&url, tls).await.unwrap();
        tokio::spawn(connection);
        client
    }

    fn parked(id: &str) -> ParkedRun {
        ParkedRun {
            run_id: id.into(),
            owner: owner(),
            generation: 1,
            expires_at_ms: u64::MAX / 4,
            snapshot: vec![1],
            lease: None,
            regrant: false,
            awaiting: Vec::new(),
        }
    }

    fn owner() -> Owner {
        Owner {
            agent_run: "a".into(),
            session: "s".into(),
        }
    }

    /// The pool's size is kept within 1 and its maximum; timeouts are at
    /// least a millisecond.
    #[test]
    fn limits_are_clamped_to_their_range() {
        let limits = PostgresLimits::default();
        assert_eq!(limits.max_connections(), DEFAULT_POSTGRES_CONNECTIONS);
        assert_eq!(limits.with_max_connections(64).max_connections(), 64);
        assert_eq!(limits.with_max_connections(0).max_connections(), 1);
        assert_eq!(
            limits.with_max_connections(100_000).max_connections(),
            MAX_POSTGRES_CONNECTIONS
        );
        let instant = limits
            .with_connect_timeout(Duration::ZERO)
            .with_statement_timeout(Duration::ZERO);
        assert_eq!(instant.connect_timeout, Duration::from_millis(1));
        assert_eq!(instant.statement_timeout, Duration::from_millis(1));
    }

    /// A statement past the statement timeout (a claim of a row another
    /// session holds) fails with the cause named; once the row is free
    /// the same claim succeeds, the run unchanged.
    #[tokio::test]
    async fn a_statement_past_the_timeout_fails_and_loses_nothing() {
        let url = crate::testing::postgres_database();
        let limits = PostgresLimits::default().with_statement_timeout(Duration::from_millis(300));
        let store = PostgresStateStore::connect_with(&url, limits)
            .await
            .unwrap();
        store.park(parked("r1")).await.unwrap();
        let mut holder = raw_client(&url).await;
        let held = holder.transaction().await.unwrap();
        held.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE", &[])
            .await
            .unwrap();
        let error = store.claim("r1", &owner(), 1, 100).await.unwrap_err();
        assert!(
            format!("{error:#}").contains("statement timeout"),
            "{error:#}"
        );
        held.rollback().await.unwrap();
        let claimed = store.claim("r1", &owner(), 1, 100).await.unwrap().unwrap();
        assert_eq!(claimed.snapshot, vec![1]);
    }

    /// The pool opens at most its connections however many calls run at
    /// once; with every connection busy, a call waits the connect timeout
    /// and fails, and the busy calls still finish.
    #[tokio::test]
    async fn the_pool_holds_its_connections_and_a_call_waits_at_most_the_timeout() {
        let name = format!("qc_pool_{}", uuid::Uuid::new_v4().simple());
        let url = crate::testing::postgres_database();
        let url_named = format!(
            "{url}{}application_name={name}",
            if url.contains('?') { '&' } else { '?' }
        );
        let limits = PostgresLimits::default()
            .with_max_connections(2)
            .with_connect_timeout(Duration::from_millis(500));
        let store = Arc::new(
            PostgresStateStore::connect_with(&url_named, limits)
                .await
                .unwrap(),
        );
        store.park(parked("r1")).await.unwrap();
        let monitor = raw_client(&url).await;
        let connections = async |waiting_on_lock: bool| -> i64 {
            monitor
                .query_one(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = $1
                       AND (NOT $2 OR wait_event_type = 'Lock')",
                    &[&name, &waiting_on_lock],
                )
                .await
                .unwrap()
                .get(0)
        };
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let store = store.clone();
            calls.spawn(async move { store.count_runs().await.unwrap() });
        }
        while let Some(count) = calls.join_next().await {
            assert_eq!(count.unwrap(), 1);
        }
        let open = connections(false).await;
        assert!((1..=2).contains(&open), "{open} connections");
        // Both connections blocked on a row another session holds.
        let mut holder = raw_client(&url).await;
        let held = holder.transaction().await.unwrap();
        held.execute("SELECT 1 FROM runs WHERE run_id = 'r1' FOR UPDATE", &[])
            .await
            .unwrap();
        let mut claims = tokio::task::JoinSet::new();
        for _ in 0..2 {
            let store = store.clone();
            claims.spawn(async move { store.claim("r1", &owner(), 1, u64::MAX / 8).await });
        }
        while connections(true).await < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let error = store.count_runs().await.unwrap_err();
        assert!(
            format!("{error:#}").contains("cannot connect to the state store"),
            "{error:#}"
        );
        held.rollback().await.unwrap();
        let mut outcomes = Vec::new();
        while let Some(claim) = claims.join_next().await {
            outcomes.push(claim.unwrap().unwrap().map(|c| c.lease));
        }
        outcomes.sort_by_key(|o| o.is_err());
        assert_eq!(outcomes, vec![Ok(1), Err(ClaimRefused::Busy)]);
    }

    /// Whether the store's connection is encrypted.
    async fn encrypted(store: &PostgresStateStore) -> bool {
        store
            .client()
            .await
            .unwrap()
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// The store's connections are encrypted and verify the server against
    /// the CA file the URL names; the system's roots do not know the
    /// throwaway CA, so without it the connection is refused; `sslmode=disable`
    /// connects in the clear.
    #[tokio::test]
    async fn connections_use_tls_and_verify_the_server() {
        let url = crate::testing::postgres_database();
        assert!(
            url.contains("sslrootcert="),
            "the throwaway cluster serves TLS: {url}"
        );
        let store = PostgresStateStore::connect(&url).await.unwrap();
        assert!(encrypted(&store).await);
        let (bare, _) = split_root_cert(&url).unwrap();
        let error = PostgresStateStore::connect(&bare).await.err().unwrap();
        assert!(format!("{error:#}").contains("certificate"), "{error:#}");
        let plain = bare.replace("sslmode=require", "sslmode=disable");
        assert!(!encrypted(&PostgresStateStore::connect(&plain).await.unwrap()).await);
    }

    /// The CA file is read up to its cap and must hold a certificate.
    #[tokio::test]
    async fn a_ca_file_over_the_cap_or_without_a_certificate_is_refused() {
        let url = crate::testing::postgres_database();
        let (bare, ca) = split_root_cert(&url).unwrap();
        let dir = std::env::temp_dir().join(format!("quickcell-ca-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let with_ca = |path: &std::path::Path| format!("{bare}&sslrootcert={}", path.display());
        // Obeyed: the real CA padded to the cap still works.
        let mut padded = std::fs::read(ca.unwrap()).unwrap();
        padded.resize(MAX_POSTGRES_CA_FILE_BYTES, b'\n');
        std::fs::write(dir.join("padded.pem"), &padded).unwrap();
        assert!(
            PostgresStateStore::connect(&with_ca(&dir.join("padded.pem")))
                .await
                .is_ok()
        );
        // Violated: one byte more.
        padded.push(b'\n');
        std::fs::write(dir.join("big.pem"), &padded).unwrap();
        std::fs::write(dir.join("empty.pem"), "not a certificate\n").unwrap();
        for (file, says) in [
            ("big.pem", "is over 1048576 bytes"),
            ("empty.pem", "holds no PEM certificate"),
            ("missing.pem", "cannot read the CA file"),
        ] {
            let error = PostgresStateStore::connect(&with_ca(&dir.join(file)))
                .await
                .err()
                .unwrap();
            assert!(format!("{error:#}").contains(says), "{file}: {error:#}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A database at version 2 keyed settlements by generation: version 3
    /// keeps the first recorded for each request, and the store goes on.
    #[tokio::test]
    async fn version_2_settlements_are_kept_by_request() {
        let url = crate::testing::postgres_database();
        let client = raw_client(&url).await;
        client
            .batch_execute(
                "CREATE TABLE quickcell_migrations (
                    version INTEGER PRIMARY KEY,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
            )
            .await
            .unwrap();
        for (index, migration) in MIGRATIONS[..2].iter().enumerate() {
            client.batch_execute(migration).await.unwrap();
            client
                .execute(
                    "INSERT INTO quickcell_migrations (version) VALUES ($1)",
                    &[&(index as i32 + 1)],
                )
                .await
                .unwrap();
        }
        client
            .batch_execute(
                "INSERT INTO runs (run_id, agent_run, session, state, generation, expires_at_ms, snapshot)
                   VALUES ('r1', 'a', 's', 'parked', 2, 9000000000000, '\\x01');
                 INSERT INTO settlements (run_id, generation, request_id, settlement) VALUES
                   ('r1', 1, 7, 'first'), ('r1', 2, 7, 'second'), ('r1', 2, 8, 'other');",
            )
            .await
            .unwrap();
        let store = PostgresStateStore::connect(&url).await.unwrap();
        let version: i32 = client
            .query_one("SELECT MAX(version) FROM quickcell_migrations", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version, MIGRATIONS.len() as i32);
        let recorded = async |ids: &[u64]| store.recorded_settlements("r1", ids).await.unwrap();
        let kept = vec![(7, "first".to_string()), (8, "other".to_string())];
        assert_eq!(recorded(&[7, 8]).await, kept);
        assert!(store.record_settlement("r1", 7, "third").await.unwrap());
        assert_eq!(recorded(&[7, 8, 9]).await, kept);
    }
}
