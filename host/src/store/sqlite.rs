use super::{
    ClaimRefused, Claimed, Owner, ParkedRun, ResultStore, RunCounts, RunStore, SessionStore,
    StateStore, StoreError, StoreResult,
};
use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;
use std::sync::{Arc, Mutex};

mod usage;

/// Name of the database file inside the state directory.
pub const STATE_FILE: &str = "state.sqlite3";

/// [`StateStore`] over SQLite: one connection, used by one blocking task
/// at a time (`spawn_blocking`), never on an async worker.
#[derive(Clone)]
pub struct SqliteStateStore {
    db: Arc<Db>,
    /// Backed by a file (not an in-memory database).
    shared: bool,
    /// This store's host id ([`super::HostStore::announce_host`]).
    host_id: String,
    /// Watches of runs' settlements, woken by this process's records.
    wakers: Arc<super::SettlementWakers>,
    /// Bumped by this process's cancel records.
    cancel_wake: Arc<tokio::sync::watch::Sender<u64>>,
}

/// The connection and the blocking operations over it.
struct Db {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    agent_run TEXT NOT NULL,
    session TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('parked', 'resuming')),
    generation INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    claimed_until_ms INTEGER,
    snapshot BLOB NOT NULL,
    lease INTEGER NOT NULL DEFAULT 0,
    regrant INTEGER NOT NULL DEFAULT 0,
    guest_build TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session);
CREATE TABLE IF NOT EXISTS session_store (
    session TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (session, key)
);
CREATE TABLE IF NOT EXISTS results (
    agent_run TEXT NOT NULL,
    id TEXT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (agent_run, id)
);
CREATE TABLE IF NOT EXISTS usage (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    agent_run TEXT NOT NULL,
    session TEXT NOT NULL,
    run_id TEXT,
    kind TEXT NOT NULL,
    fuel INTEGER NOT NULL,
    wall_ms INTEGER NOT NULL,
    guest_us INTEGER NOT NULL,
    tool_calls INTEGER NOT NULL,
    output_bytes INTEGER NOT NULL,
    snapshot_bytes INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    guest_build TEXT
);
CREATE INDEX IF NOT EXISTS usage_by_session ON usage (session, at_ms);
CREATE INDEX IF NOT EXISTS usage_by_time ON usage (at_ms);
CREATE TABLE IF NOT EXISTS settlements (
    run_id TEXT NOT NULL,
    request_id INTEGER NOT NULL,
    settlement TEXT NOT NULL,
    PRIMARY KEY (run_id, request_id)
);
CREATE TABLE IF NOT EXISTS run_cancels (
    run_id TEXT PRIMARY KEY,
    expires_at_ms INTEGER NOT NULL
);
";

/// How often a process holding runs of a SQLite store asks which of them
/// another process cancelled (SQLite cannot wake other processes).
pub const SQLITE_CANCEL_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Stores made before settlements outlived their generation keyed them by
/// it: keep the first settlement recorded for each request.
const SETTLEMENTS_BY_REQUEST: &str = "
ALTER TABLE settlements RENAME TO settlements_by_generation;
CREATE TABLE settlements (
    run_id TEXT NOT NULL,
    request_id INTEGER NOT NULL,
    settlement TEXT NOT NULL,
    PRIMARY KEY (run_id, request_id)
);
INSERT OR IGNORE INTO settlements (run_id, request_id, settlement)
    SELECT run_id, request_id, settlement FROM settlements_by_generation ORDER BY rowid;
DROP TABLE settlements_by_generation;
";

impl SqliteStateStore {
    /// Opens (creating if needed) the store in `dir`, or a private
    /// in-memory database when `dir` is `None` (used by tests).
    ///
    /// # Errors
    ///
    /// When the directory or the database cannot be created or opened.
    pub fn open(dir: Option<&Path>) -> anyhow::Result<Self> {
        let conn = match dir {
            Some(dir) => {
                use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
                // Parked heaps and session values are tenants' data: what
                // quickcell creates is readable by its user alone.
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| {
                        anyhow::anyhow!("cannot create the state directory {}: {e}", dir.display())
                    })?;
                let path = dir.join(STATE_FILE);
                // Created 0600 before SQLite opens it; SQLite gives its
                // `-wal` and `-shm` files the database file's mode.
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(&path)
                    .map_err(|e| {
                        anyhow::anyhow!("cannot create the state store {}: {e}", path.display())
                    })?;
                let conn = Connection::open(&path).map_err(|e| {
                    anyhow::anyhow!("cannot open the state store {}: {e}", path.display())
                })?;
                conn.busy_timeout(std::time::Duration::from_secs(5))?;
                conn.pragma_update(None, "journal_mode", "WAL")?;
                conn.pragma_update(None, "synchronous", "NORMAL")?;
                conn
            }
            None => Connection::open_in_memory()?,
        };
        let mut conn = conn;
        // One writer upgrades a store several processes open at once.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(SCHEMA)?;
        let has_column = |table: &str, column: &str| -> rusqlite::Result<bool> {
            tx.query_row(
                "SELECT COUNT(*) > 0 FROM pragma_table_info(?1) WHERE name = ?2",
                params![table, column],
                |r| r.get(0),
            )
        };
        // Stores made before leases: add their columns.
        if !has_column("runs", "lease")? {
            tx.execute_batch(
                "ALTER TABLE runs ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE runs ADD COLUMN regrant INTEGER NOT NULL DEFAULT 0;",
            )?;
        }
        // Stores made before runs and usage records named their guest
        // build: their rows read as the build unknown (NULL).
        if !has_column("runs", "guest_build")? {
            tx.execute_batch("ALTER TABLE runs ADD COLUMN guest_build TEXT;")?;
        }
        if !has_column("usage", "guest_build")? {
            tx.execute_batch("ALTER TABLE usage ADD COLUMN guest_build TEXT;")?;
        }
        if has_column("settlements", "generation")? {
            tx.execute_batch(SETTLEMENTS_BY_REQUEST)?;
        }
        tx.commit()?;
        Ok(Self {
            db: Arc::new(Db {
                conn: Mutex::new(conn),
            }),
            shared: dir.is_some(),
            host_id: format!("h_{}", uuid::Uuid::new_v4().simple()),
            wakers: Arc::default(),
            cancel_wake: Arc::default(),
        })
    }

    /// Runs `work` on the connection in a blocking task.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Db) -> anyhow::Result<T> + Send + 'static,
    ) -> StoreResult<T> {
        let db = self.db.clone();
        match tokio::task::spawn_blocking(move || work(&db)).await {
            Ok(result) => result.map_err(StoreError::from),
            Err(e) => Err(anyhow::anyhow!("a state store task failed: {e}").into()),
        }
    }
}

impl Db {
    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (transactions roll back), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A run's guest build as stored: NULL when unknown.
fn build(guest_build: &str) -> Option<&str> {
    (!guest_build.is_empty()).then_some(guest_build)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Db {
    fn park(&self, run: &ParkedRun) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        match run.lease {
            Some(lease) => {
                let updated = tx.execute(
                    "UPDATE runs SET agent_run = ?2, session = ?3, state = 'parked',
                       generation = ?4, expires_at_ms = ?5, claimed_until_ms = NULL,
                       snapshot = ?6, regrant = ?7, guest_build = ?9
                     WHERE run_id = ?1 AND lease = ?8",
                    params![
                        run.run_id,
                        run.owner.agent_run,
                        run.owner.session,
                        to_i64(run.generation),
                        to_i64(run.expires_at_ms),
                        run.snapshot,
                        run.regrant,
                        to_i64(lease),
                        build(&run.guest_build)
                    ],
                )?;
                if updated == 0 {
                    anyhow::bail!(super::fenced(&run.run_id));
                }
            }
            None => {
                tx.execute(
                    "INSERT OR REPLACE INTO runs
                     (run_id, agent_run, session, state, generation, expires_at_ms, claimed_until_ms, snapshot, lease, regrant, guest_build)
                     VALUES (?1, ?2, ?3, 'parked', ?4, ?5, NULL, ?6,
                       COALESCE((SELECT lease FROM runs WHERE run_id = ?1), 0), ?7, ?8)",
                    params![
                        run.run_id,
                        run.owner.agent_run,
                        run.owner.session,
                        to_i64(run.generation),
                        to_i64(run.expires_at_ms),
                        run.snapshot,
                        run.regrant,
                        build(&run.guest_build)
                    ],
                )?;
            }
        }
        // The ids awaited, as a JSON array (`json_each` reads it).
        let awaiting = serde_json::to_string(&run.awaiting)?;
        tx.execute(
            "DELETE FROM settlements WHERE run_id = ?1
               AND request_id NOT IN (SELECT value FROM json_each(?2))",
            params![run.run_id, awaiting],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> anyhow::Result<Result<Claimed, ClaimRefused>> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        type Row = (
            String,
            String,
            String,
            i64,
            i64,
            Option<i64>,
            bool,
            bool,
            Option<String>,
        );
        let row: Option<Row> = tx
            .query_row(
                "SELECT agent_run, session, state, generation, expires_at_ms, claimed_until_ms, regrant,
                        EXISTS (SELECT 1 FROM run_cancels c WHERE c.run_id = runs.run_id), guest_build
                 FROM runs WHERE run_id = ?1",
                params![run_id],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ))
                },
            )
            .optional()?;
        let Some((
            agent_run,
            session,
            state,
            generation,
            expires_at,
            claimed_until,
            regrant,
            cancelled,
            parked_by,
        )) = row
        else {
            return Ok(Err(ClaimRefused::Unavailable));
        };
        let row = super::RunRow {
            agent_run: &agent_run,
            session: &session,
            claimed_until_ms: (state == "resuming")
                .then(|| claimed_until.unwrap_or(0).max(0) as u64),
            expires_at_ms: expires_at.max(0) as u64,
            regrant,
            cancelled,
            guest_build: parked_by.as_deref(),
        };
        match row.claim(owner, guest_build, now_ms) {
            super::ClaimDecision::Remove => {
                tx.execute("DELETE FROM runs WHERE run_id = ?1", params![run_id])?;
                tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![run_id])?;
                tx.commit()?;
                return Ok(Err(ClaimRefused::Unavailable));
            }
            super::ClaimDecision::Refuse(refused) => return Ok(Err(refused)),
            super::ClaimDecision::Grant => {}
        }
        tx.execute(
            "UPDATE runs SET state = 'resuming', claimed_until_ms = ?2, lease = lease + 1
             WHERE run_id = ?1",
            params![run_id, to_i64(claim_until_ms)],
        )?;
        let (snapshot, lease): (Vec<u8>, i64) = tx.query_row(
            "SELECT snapshot, lease FROM runs WHERE run_id = ?1",
            params![run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let settlements = {
            let mut stmt = tx.prepare(
                "SELECT request_id, settlement FROM settlements WHERE run_id = ?1 ORDER BY rowid",
            )?;
            let rows = stmt.query_map(params![run_id], |r| {
                Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?))
            })?;
            rows.collect::<Result<Vec<(u64, String)>, _>>()?
        };
        tx.commit()?;
        Ok(Ok(Claimed {
            generation: generation as u64,
            snapshot,
            settlements,
            lease: lease as u64,
        }))
    }

    fn unclaim(&self, run_id: &str, lease: u64) -> anyhow::Result<()> {
        self.conn().execute(
            "UPDATE runs SET state = 'parked', claimed_until_ms = NULL
             WHERE run_id = ?1 AND lease = ?2",
            params![run_id, to_i64(lease)],
        )?;
        Ok(())
    }

    fn release(&self, run_id: &str, lease: u64) -> anyhow::Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let removed = tx.execute(
            "DELETE FROM runs WHERE run_id = ?1 AND lease = ?2",
            params![run_id, to_i64(lease)],
        )? > 0;
        if removed {
            tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![run_id])?;
        }
        tx.commit()?;
        Ok(removed)
    }

    fn remove(&self, run_id: &str) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute("DELETE FROM runs WHERE run_id = ?1", params![run_id])?;
        tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![run_id])?;
        tx.commit()?;
        Ok(())
    }

    fn extend_parked(
        &self,
        run_id: &str,
        owner: &Owner,
        expires_at_ms: u64,
    ) -> anyhow::Result<bool> {
        let changed = self.conn().execute(
            "UPDATE runs SET expires_at_ms = MAX(expires_at_ms, ?4)
             WHERE run_id = ?1 AND agent_run = ?2 AND session = ?3 AND state = 'parked'",
            params![
                run_id,
                owner.agent_run,
                owner.session,
                to_i64(expires_at_ms)
            ],
        )?;
        Ok(changed > 0)
    }

    fn remove_session_runs(&self, session: &str) -> anyhow::Result<Vec<String>> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ids = {
            let mut stmt = tx.prepare("SELECT run_id FROM runs WHERE session = ?1")?;
            let rows = stmt.query_map(params![session], |r| r.get(0))?;
            rows.collect::<Result<Vec<String>, _>>()?
        };
        delete_runs(&tx, &ids)?;
        tx.commit()?;
        Ok(ids)
    }

    /// Whether the run is held, and whether this call recorded the
    /// settlement (none was recorded for the request before).
    fn record_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        settlement: &str,
    ) -> anyhow::Result<(bool, bool)> {
        let conn = self.conn();
        let recorded = conn.execute(
            "INSERT OR IGNORE INTO settlements (run_id, request_id, settlement)
             SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = ?1)",
            params![run_id, to_i64(request_id), settlement],
        )? > 0;
        let held = recorded
            || conn
                .query_row(
                    "SELECT 1 FROM runs WHERE run_id = ?1",
                    params![run_id],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
        Ok((held, recorded))
    }

    fn recorded_settlements(
        &self,
        run_id: &str,
        request_ids: &[u64],
    ) -> anyhow::Result<Vec<(u64, String)>> {
        // The ids as a JSON array (`json_each` reads it).
        let ids = serde_json::to_string(request_ids)?;
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT request_id, settlement FROM settlements
             WHERE run_id = ?1 AND request_id IN (SELECT value FROM json_each(?2))
             ORDER BY rowid",
        )?;
        let rows = stmt.query_map(params![run_id, ids], |r| {
            Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?))
        })?;
        Ok(rows.collect::<Result<Vec<(u64, String)>, _>>()?)
    }

    fn count_runs(&self) -> anyhow::Result<usize> {
        let n: i64 = self
            .conn()
            .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))?;
        Ok(n as usize)
    }

    fn count_session_runs(&self, session: &str) -> anyhow::Result<usize> {
        let n: i64 = self.conn().query_row(
            "SELECT COUNT(*) FROM runs WHERE session = ?1",
            params![session],
            |r| r.get(0),
        )?;
        Ok(n as usize)
    }

    fn purge_expired(&self, now_ms: u64) -> anyhow::Result<Vec<String>> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = to_i64(now_ms);
        let ids = {
            let mut stmt = tx.prepare(
                "SELECT run_id FROM runs
                 WHERE (state = 'parked'
                        AND (expires_at_ms <= ?1 OR run_id IN (SELECT run_id FROM run_cancels)))
                    OR (state = 'resuming' AND claimed_until_ms < ?1
                        AND NOT (regrant AND expires_at_ms > ?1
                                 AND run_id NOT IN (SELECT run_id FROM run_cancels)))",
            )?;
            let rows = stmt.query_map(params![now], |r| r.get(0))?;
            rows.collect::<Result<Vec<String>, _>>()?
        };
        delete_runs(&tx, &ids)?;
        tx.execute(
            "DELETE FROM run_cancels WHERE expires_at_ms <= ?1",
            params![now],
        )?;
        tx.commit()?;
        Ok(ids)
    }

    fn record_cancels(&self, run_ids: &[String], expires_at_ms: u64) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for id in run_ids {
            tx.execute(
                "INSERT OR IGNORE INTO run_cancels (run_id, expires_at_ms) VALUES (?1, ?2)",
                params![id, to_i64(expires_at_ms)],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    fn cancelled_runs(&self, run_ids: &[String]) -> anyhow::Result<Vec<String>> {
        // The ids as a JSON array (`json_each` reads it).
        let ids = serde_json::to_string(run_ids)?;
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT run_id FROM run_cancels WHERE run_id IN (SELECT value FROM json_each(?1))",
        )?;
        let rows = stmt.query_map(params![ids], |r| r.get(0))?;
        Ok(rows.collect::<Result<Vec<String>, _>>()?)
    }

    fn store_get(&self, session: &str, key: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT value FROM session_store WHERE session = ?1 AND key = ?2",
                params![session, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn store_entries(&self, session: &str) -> anyhow::Result<Vec<(String, String)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT key, value FROM session_store WHERE session = ?1")?;
        let rows = stmt.query_map(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<(String, String)>, _>>()?)
    }

    fn store_total_bytes(&self, session: &str) -> anyhow::Result<usize> {
        let n: i64 = self.conn().query_row(
            "SELECT COALESCE(SUM(LENGTH(CAST(value AS BLOB))), 0) FROM session_store WHERE session = ?1",
            params![session],
            |r| r.get(0),
        )?;
        Ok(n as usize)
    }

    fn store_commit(
        &self,
        session: &str,
        writes: &[(String, Option<String>)],
    ) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (key, value) in writes {
            match value {
                Some(v) => tx.execute(
                    "INSERT OR REPLACE INTO session_store (session, key, value) VALUES (?1, ?2, ?3)",
                    params![session, key, v],
                )?,
                None => tx.execute(
                    "DELETE FROM session_store WHERE session = ?1 AND key = ?2",
                    params![session, key],
                )?,
            };
        }
        tx.commit()?;
        Ok(())
    }

    fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: &str,
        max_count: usize,
        max_bytes: usize,
    ) -> anyhow::Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (n, bytes): (i64, i64) = tx.query_row(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(json AS BLOB))), 0) FROM results WHERE agent_run = ?1",
            params![agent_run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if n as usize >= max_count || bytes as usize + json.len() > max_bytes {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO results (agent_run, id, json) VALUES (?1, ?2, ?3)",
            params![agent_run, id, json],
        )?;
        tx.commit()?;
        Ok(true)
    }

    fn result_load(&self, agent_run: &str, id: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT json FROM results WHERE agent_run = ?1 AND id = ?2",
                params![agent_run, id],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn result_clear(&self, agent_run: &str) -> anyhow::Result<usize> {
        Ok(self.conn().execute(
            "DELETE FROM results WHERE agent_run = ?1",
            params![agent_run],
        )?)
    }

    fn store_clear(&self, session: &str) -> anyhow::Result<usize> {
        Ok(self.conn().execute(
            "DELETE FROM session_store WHERE session = ?1",
            params![session],
        )?)
    }

    fn result_delete(&self, agent_run: &str, id: &str) -> anyhow::Result<bool> {
        let n = self.conn().execute(
            "DELETE FROM results WHERE agent_run = ?1 AND id = ?2",
            params![agent_run, id],
        )?;
        Ok(n > 0)
    }
}

/// Deletes the runs `ids` and their settlements within `tx`.
fn delete_runs(tx: &rusqlite::Transaction<'_>, ids: &[String]) -> anyhow::Result<()> {
    for id in ids {
        tx.execute("DELETE FROM runs WHERE run_id = ?1", params![id])?;
        tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![id])?;
    }
    Ok(())
}

/// A SQLite file is shared by the processes of one machine, which have no
/// way to wake each other: each store is a host of its own, alive for
/// itself only. A run this host drains is waited on here (a `wait` that
/// resumes a later generation of it while its drainer still runs); one
/// another process drains is treated as that process having ended.
#[async_trait]
impl super::HostStore for SqliteStateStore {
    async fn announce_host(&self) -> StoreResult<Option<String>> {
        Ok(self.shared.then(|| self.host_id.clone()))
    }

    async fn host_alive(&self, host: &str) -> StoreResult<bool> {
        Ok(self.shared && host == self.host_id)
    }

    async fn watch_settlements(&self, run_id: &str) -> StoreResult<super::SettlementWatch> {
        Ok(self.wakers.watch(run_id))
    }

    async fn record_cancels(&self, run_ids: &[String], expires_at_ms: u64) -> StoreResult<()> {
        let ids = run_ids.to_vec();
        self.blocking(move |db| db.record_cancels(&ids, expires_at_ms))
            .await?;
        self.cancel_wake.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    async fn cancelled_runs(&self, run_ids: &[String]) -> StoreResult<Vec<String>> {
        let ids = run_ids.to_vec();
        self.blocking(move |db| db.cancelled_runs(&ids)).await
    }

    async fn watch_cancels(&self) -> StoreResult<super::SettlementWatch> {
        Ok(super::SettlementWatch::of(&self.cancel_wake))
    }

    fn cancel_poll_interval(&self) -> Option<std::time::Duration> {
        Some(SQLITE_CANCEL_POLL)
    }

    async fn recorded_settlements(
        &self,
        run_id: &str,
        request_ids: &[u64],
    ) -> StoreResult<Vec<(u64, String)>> {
        let (run_id, ids) = (run_id.to_owned(), request_ids.to_vec());
        self.blocking(move |db| db.recorded_settlements(&run_id, &ids))
            .await
    }
}

impl StateStore for SqliteStateStore {
    fn is_shared(&self) -> bool {
        self.shared
    }
}

#[async_trait]
impl RunStore for SqliteStateStore {
    async fn park(&self, run: ParkedRun) -> StoreResult<()> {
        self.blocking(move |db| db.park(&run)).await
    }

    async fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> StoreResult<Result<Claimed, ClaimRefused>> {
        let (run_id, owner) = (run_id.to_owned(), owner.clone());
        let guest_build = guest_build.map(str::to_owned);
        self.blocking(move |db| {
            db.claim(
                &run_id,
                &owner,
                guest_build.as_deref(),
                now_ms,
                claim_until_ms,
            )
        })
        .await
    }

    async fn unclaim(&self, run_id: &str, lease: u64) -> StoreResult<()> {
        let run_id = run_id.to_owned();
        self.blocking(move |db| db.unclaim(&run_id, lease)).await
    }

    async fn release(&self, run_id: &str, lease: u64) -> StoreResult<bool> {
        let run_id = run_id.to_owned();
        self.blocking(move |db| db.release(&run_id, lease)).await
    }

    async fn remove(&self, run_id: &str) -> StoreResult<()> {
        let run_id = run_id.to_owned();
        self.blocking(move |db| db.remove(&run_id)).await
    }

    async fn extend_parked(
        &self,
        run_id: &str,
        owner: &Owner,
        expires_at_ms: u64,
    ) -> StoreResult<bool> {
        let (run_id, owner) = (run_id.to_owned(), owner.clone());
        self.blocking(move |db| db.extend_parked(&run_id, &owner, expires_at_ms))
            .await
    }

    async fn remove_session_runs(&self, session: &str) -> StoreResult<Vec<String>> {
        let session = session.to_owned();
        self.blocking(move |db| db.remove_session_runs(&session))
            .await
    }

    async fn record_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        settlement: &str,
    ) -> StoreResult<bool> {
        let (id, settlement) = (run_id.to_owned(), settlement.to_owned());
        let (held, recorded) = self
            .blocking(move |db| db.record_settlement(&id, request_id, &settlement))
            .await?;
        if recorded {
            self.wakers.wake(run_id);
        }
        Ok(held)
    }

    async fn count_runs(&self) -> StoreResult<usize> {
        self.blocking(|db| db.count_runs()).await
    }

    async fn count_session_runs(&self, session: &str) -> StoreResult<usize> {
        let session = session.to_owned();
        self.blocking(move |db| db.count_session_runs(&session))
            .await
    }

    async fn purge_expired(&self, now_ms: u64) -> StoreResult<Vec<String>> {
        self.blocking(move |db| db.purge_expired(now_ms)).await
    }

    async fn purge_and_count(&self, now_ms: u64, session: &str) -> StoreResult<RunCounts> {
        let session = session.to_owned();
        self.blocking(move |db| {
            Ok(RunCounts {
                purged: db.purge_expired(now_ms)?,
                runs: db.count_runs()?,
                session_runs: db.count_session_runs(&session)?,
            })
        })
        .await
    }
}

#[async_trait]
impl SessionStore for SqliteStateStore {
    async fn store_get(&self, session: &str, key: &str) -> StoreResult<Option<String>> {
        let (session, key) = (session.to_owned(), key.to_owned());
        self.blocking(move |db| db.store_get(&session, &key)).await
    }

    async fn store_entries(&self, session: &str) -> StoreResult<Vec<(String, String)>> {
        let session = session.to_owned();
        self.blocking(move |db| db.store_entries(&session)).await
    }

    async fn store_total_bytes(&self, session: &str) -> StoreResult<usize> {
        let session = session.to_owned();
        self.blocking(move |db| db.store_total_bytes(&session))
            .await
    }

    async fn store_commit(
        &self,
        session: &str,
        writes: Vec<(String, Option<String>)>,
    ) -> StoreResult<()> {
        let session = session.to_owned();
        self.blocking(move |db| db.store_commit(&session, &writes))
            .await
    }

    async fn store_clear(&self, session: &str) -> StoreResult<usize> {
        let session = session.to_owned();
        self.blocking(move |db| db.store_clear(&session)).await
    }
}

#[async_trait]
impl ResultStore for SqliteStateStore {
    async fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: String,
        max_count: usize,
        max_bytes: usize,
    ) -> StoreResult<bool> {
        let (agent_run, id) = (agent_run.to_owned(), id.to_owned());
        self.blocking(move |db| db.result_save(&agent_run, &id, &json, max_count, max_bytes))
            .await
    }

    async fn result_load(&self, agent_run: &str, id: &str) -> StoreResult<Option<String>> {
        let (agent_run, id) = (agent_run.to_owned(), id.to_owned());
        self.blocking(move |db| db.result_load(&agent_run, &id))
            .await
    }

    async fn result_clear(&self, agent_run: &str) -> StoreResult<usize> {
        let agent_run = agent_run.to_owned();
        self.blocking(move |db| db.result_clear(&agent_run)).await
    }

    async fn result_delete(&self, agent_run: &str, id: &str) -> StoreResult<bool> {
        let (agent_run, id) = (agent_run.to_owned(), id.to_owned());
        self.blocking(move |db| db.result_delete(&agent_run, &id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::HostStore as _;

    /// A store file from before settlements outlived their generation is
    /// upgraded when opened: the first settlement of each request is kept.
    #[tokio::test]
    async fn a_store_keyed_by_generation_is_upgraded() {
        let dir = std::env::temp_dir().join(format!("quickcell-upgrade-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let old = Connection::open(dir.join(STATE_FILE)).unwrap();
        old.execute_batch(
            "CREATE TABLE runs (
                run_id TEXT PRIMARY KEY, agent_run TEXT NOT NULL, session TEXT NOT NULL,
                state TEXT NOT NULL, generation INTEGER NOT NULL,
                expires_at_ms INTEGER NOT NULL, claimed_until_ms INTEGER, snapshot BLOB NOT NULL);
             CREATE TABLE settlements (
                run_id TEXT NOT NULL, generation INTEGER NOT NULL, request_id INTEGER NOT NULL,
                settlement TEXT NOT NULL, PRIMARY KEY (run_id, generation, request_id));
             INSERT INTO runs VALUES ('r1', 'a', 's', 'parked', 2, 9000000000000, NULL, x'01');
             INSERT INTO settlements VALUES
                ('r1', 1, 7, 'first'), ('r1', 2, 7, 'second'), ('r1', 2, 8, 'other');",
        )
        .unwrap();
        drop(old);
        let store = SqliteStateStore::open(Some(&dir)).unwrap();
        let kept = vec![(7, "first".to_string()), (8, "other".to_string())];
        assert_eq!(
            store.recorded_settlements("r1", &[7, 8]).await.unwrap(),
            kept
        );
        assert!(store.record_settlement("r1", 7, "third").await.unwrap());
        assert_eq!(
            store.recorded_settlements("r1", &[7, 8, 9]).await.unwrap(),
            kept
        );
        // Opened again: nothing left to upgrade.
        drop(store);
        let again = SqliteStateStore::open(Some(&dir)).unwrap();
        assert_eq!(
            again.recorded_settlements("r1", &[8]).await.unwrap(),
            kept[1..]
        );
        // The run names no guest build: any build may claim it (its
        // snapshot's header decides).
        let owner = Owner {
            agent_run: "a".into(),
            session: "s".into(),
        };
        let claimed = again
            .claim("r1", &owner, Some("b1"), 1, 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claimed.generation, 2);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
