//! The state store: parked runs (registry and snapshots) and the
//! settlements of their requests, in one embedded SQLite database.
//!
//! The store is the source of truth for parked runs, so any process that
//! opens the same state directory can `wait` a run another process parked,
//! and a restarted host loses none. [`StateStore`] is the small interface
//! the runtime needs. [`SqliteStateStore`] implements it over
//! `<state dir>/state.sqlite3` (WAL journal, `synchronous=NORMAL`, a 5 s
//! busy timeout for concurrent processes); [`MemoryStateStore`] keeps runs
//! in this process only, for runtimes without a state directory.
//!
//! A run row is `parked` (waiting for `wait`) or `resuming` (claimed by a
//! `wait` in some process until `claimed_until`). Claiming is one
//! transaction that checks the contract's order — known and unexpired,
//! same agent run, same session, no other `wait` in flight — so a snapshot
//! is resumed at most once. A claim whose holder vanished (the process
//! died mid-`wait`) is not re-granted: after `claimed_until` the run is
//! reported unavailable and removed, because its snapshot may already have
//! been resumed once.

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// Who may `wait` a run: the agent run and the session that created it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Owner {
    /// The creating agent run.
    pub agent_run: String,
    /// The creating session identity (session id, key, agent id).
    pub session: String,
}

/// A parked run as stored.
#[derive(Debug, Clone)]
pub(crate) struct ParkedRun {
    pub run_id: String,
    pub owner: Owner,
    /// Incremented at every park; settlements are recorded per generation.
    pub generation: u64,
    /// Unix milliseconds after which the run is expired.
    pub expires_at_ms: u64,
    pub snapshot: Vec<u8>,
}

/// A successful claim: the snapshot to resume.
#[derive(Debug)]
pub(crate) struct Claimed {
    pub generation: u64,
    pub snapshot: Vec<u8>,
    /// Settlements recorded for this generation while the run was parked.
    pub settlements: Vec<String>,
}

/// Why a run cannot be claimed (the contract's `wait` admission order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimRefused {
    Unavailable,
    OtherAgentRun,
    OtherSession,
    Busy,
}

/// Storage of parked runs. Implementations must make [`StateStore::claim`]
/// atomic across every host that shares the store.
pub(crate) trait StateStore: Send + Sync {
    /// Whether other processes (or a restarted host) can see these runs;
    /// only then are settlements of parked runs worth recording.
    fn is_shared(&self) -> bool;
    /// Stores (or replaces) a parked run in state `parked`.
    fn park(&self, run: &ParkedRun) -> anyhow::Result<()>;
    /// Claims a parked run for one `wait` until `claim_until_ms`.
    fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> anyhow::Result<Result<Claimed, ClaimRefused>>;
    /// Returns a claimed run to `parked` unchanged (the `wait` could not
    /// start it, e.g. the runtime was unavailable).
    fn unclaim(&self, run_id: &str) -> anyhow::Result<()>;
    /// Removes a run and its settlements.
    fn remove(&self, run_id: &str) -> anyhow::Result<()>;
    /// Records the settlement of a request of a parked run's generation.
    fn record_settlement(
        &self,
        run_id: &str,
        generation: u64,
        request_id: u64,
        settlement: &str,
    ) -> anyhow::Result<()>;
    /// Number of runs held (parked or resuming). Callers remove expired
    /// runs first ([`StateStore::purge_expired`]).
    fn count_runs(&self) -> anyhow::Result<usize>;
    /// Number of runs of `session` held (parked or resuming).
    fn count_session_runs(&self, session: &str) -> anyhow::Result<usize>;
    /// Removes runs expired at `now_ms` and claims abandoned before it;
    /// returns their ids.
    fn purge_expired(&self, now_ms: u64) -> anyhow::Result<Vec<String>>;

    /// A committed session-store value (compact JSON).
    fn store_get(&self, session: &str, key: &str) -> anyhow::Result<Option<String>>;
    /// Sum of the committed value sizes of a session, in bytes.
    fn store_total_bytes(&self, session: &str) -> anyhow::Result<usize>;
    /// Commits a cell's buffered writes (`None` deletes) in one atomic step.
    fn store_commit(
        &self,
        session: &str,
        writes: &[(String, Option<String>)],
    ) -> anyhow::Result<()>;

    /// Saves a result of an agent run if, with it, the run holds at most
    /// `max_count` results and `max_bytes` bytes of JSON; the check and the
    /// insert are one atomic step. Returns whether it was saved.
    fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: &str,
        max_count: usize,
        max_bytes: usize,
    ) -> anyhow::Result<bool>;
    /// A saved result's JSON.
    fn result_load(&self, agent_run: &str, id: &str) -> anyhow::Result<Option<String>>;
    /// Deletes a saved result; whether it existed.
    fn result_delete(&self, agent_run: &str, id: &str) -> anyhow::Result<bool>;
}

/// Name of the database file inside the state directory.
pub const STATE_FILE: &str = "state.sqlite3";

/// [`StateStore`] over SQLite.
pub(crate) struct SqliteStateStore {
    conn: Mutex<Connection>,
    /// Backed by a file (not an in-memory database).
    shared: bool,
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
    snapshot BLOB NOT NULL
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
CREATE TABLE IF NOT EXISTS settlements (
    run_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    request_id INTEGER NOT NULL,
    settlement TEXT NOT NULL,
    PRIMARY KEY (run_id, generation, request_id)
);
";

impl SqliteStateStore {
    /// Opens (creating if needed) the store in `dir`, or a private
    /// in-memory database when `dir` is `None` (used by tests).
    pub(crate) fn open(dir: Option<&Path>) -> anyhow::Result<Self> {
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
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Mutex::new(conn),
            shared: dir.is_some(),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite inconsistent
        // (transactions roll back), so a poisoned lock is still usable.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl StateStore for SqliteStateStore {
    fn is_shared(&self) -> bool {
        self.shared
    }

    fn park(&self, run: &ParkedRun) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT OR REPLACE INTO runs
             (run_id, agent_run, session, state, generation, expires_at_ms, claimed_until_ms, snapshot)
             VALUES (?1, ?2, ?3, 'parked', ?4, ?5, NULL, ?6)",
            params![
                run.run_id,
                run.owner.agent_run,
                run.owner.session,
                to_i64(run.generation),
                to_i64(run.expires_at_ms),
                run.snapshot
            ],
        )?;
        tx.execute(
            "DELETE FROM settlements WHERE run_id = ?1 AND generation < ?2",
            params![run.run_id, to_i64(run.generation)],
        )?;
        tx.commit()?;
        Ok(())
    }

    fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> anyhow::Result<Result<Claimed, ClaimRefused>> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        type Row = (String, String, String, i64, i64, Option<i64>);
        let row: Option<Row> = tx
            .query_row(
                "SELECT agent_run, session, state, generation, expires_at_ms, claimed_until_ms
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
                    ))
                },
            )
            .optional()?;
        let Some((agent_run, session, state, generation, expires_at, claimed_until)) = row else {
            return Ok(Err(ClaimRefused::Unavailable));
        };
        let now = to_i64(now_ms);
        let stale_claim = state == "resuming" && claimed_until.is_some_and(|c| c < now);
        if (state == "parked" && expires_at <= now) || stale_claim {
            tx.execute("DELETE FROM runs WHERE run_id = ?1", params![run_id])?;
            tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![run_id])?;
            tx.commit()?;
            return Ok(Err(ClaimRefused::Unavailable));
        }
        if agent_run != owner.agent_run {
            return Ok(Err(ClaimRefused::OtherAgentRun));
        }
        if session != owner.session {
            return Ok(Err(ClaimRefused::OtherSession));
        }
        if state == "resuming" {
            return Ok(Err(ClaimRefused::Busy));
        }
        tx.execute(
            "UPDATE runs SET state = 'resuming', claimed_until_ms = ?2 WHERE run_id = ?1",
            params![run_id, to_i64(claim_until_ms)],
        )?;
        let snapshot: Vec<u8> = tx.query_row(
            "SELECT snapshot FROM runs WHERE run_id = ?1",
            params![run_id],
            |r| r.get(0),
        )?;
        let settlements = {
            let mut stmt = tx.prepare(
                "SELECT settlement FROM settlements WHERE run_id = ?1 AND generation = ?2
                 ORDER BY rowid",
            )?;
            let rows = stmt.query_map(params![run_id, generation], |r| r.get(0))?;
            rows.collect::<Result<Vec<String>, _>>()?
        };
        tx.commit()?;
        Ok(Ok(Claimed {
            generation: generation as u64,
            snapshot,
            settlements,
        }))
    }

    fn unclaim(&self, run_id: &str) -> anyhow::Result<()> {
        self.conn().execute(
            "UPDATE runs SET state = 'parked', claimed_until_ms = NULL WHERE run_id = ?1",
            params![run_id],
        )?;
        Ok(())
    }

    fn remove(&self, run_id: &str) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM runs WHERE run_id = ?1", params![run_id])?;
        tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![run_id])?;
        tx.commit()?;
        Ok(())
    }

    fn record_settlement(
        &self,
        run_id: &str,
        generation: u64,
        request_id: u64,
        settlement: &str,
    ) -> anyhow::Result<()> {
        self.conn().execute(
            "INSERT OR REPLACE INTO settlements (run_id, generation, request_id, settlement)
             SELECT ?1, ?2, ?3, ?4 WHERE EXISTS
               (SELECT 1 FROM runs WHERE run_id = ?1 AND generation = ?2)",
            params![run_id, to_i64(generation), to_i64(request_id), settlement],
        )?;
        Ok(())
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
        let tx = conn.transaction()?;
        let now = to_i64(now_ms);
        let ids = {
            let mut stmt = tx.prepare(
                "SELECT run_id FROM runs
                 WHERE (state = 'parked' AND expires_at_ms <= ?1)
                    OR (state = 'resuming' AND claimed_until_ms < ?1)",
            )?;
            let rows = stmt.query_map(params![now], |r| r.get(0))?;
            rows.collect::<Result<Vec<String>, _>>()?
        };
        for id in &ids {
            tx.execute("DELETE FROM runs WHERE run_id = ?1", params![id])?;
            tx.execute("DELETE FROM settlements WHERE run_id = ?1", params![id])?;
        }
        tx.commit()?;
        Ok(ids)
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

    fn result_delete(&self, agent_run: &str, id: &str) -> anyhow::Result<bool> {
        let n = self.conn().execute(
            "DELETE FROM results WHERE agent_run = ?1 AND id = ?2",
            params![agent_run, id],
        )?;
        Ok(n > 0)
    }
}

/// [`StateStore`] in this process's memory: runs end with the runtime.
#[derive(Default)]
pub(crate) struct MemoryStateStore {
    runs: Mutex<HashMap<String, MemoryRun>>,
    /// (session, key) → value.
    session_store: Mutex<HashMap<(String, String), String>>,
    /// (agent run, id) → JSON.
    results: Mutex<HashMap<(String, String), String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct MemoryRun {
    run: ParkedRun,
    /// `Some(until)` while a `wait` holds it.
    claimed_until_ms: Option<u64>,
    settlements: Vec<(u64, u64, String)>,
}

impl MemoryStateStore {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, MemoryRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StateStore for MemoryStateStore {
    fn is_shared(&self) -> bool {
        false
    }

    fn park(&self, run: &ParkedRun) -> anyhow::Result<()> {
        let mut runs = self.runs();
        let settlements = runs
            .remove(&run.run_id)
            .map(|old| old.settlements)
            .unwrap_or_default()
            .into_iter()
            .filter(|(generation, _, _)| *generation >= run.generation)
            .collect();
        runs.insert(
            run.run_id.clone(),
            MemoryRun {
                run: run.clone(),
                claimed_until_ms: None,
                settlements,
            },
        );
        Ok(())
    }

    fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> anyhow::Result<Result<Claimed, ClaimRefused>> {
        let mut runs = self.runs();
        let Some(entry) = runs.get_mut(run_id) else {
            return Ok(Err(ClaimRefused::Unavailable));
        };
        let stale_claim = entry.claimed_until_ms.is_some_and(|c| c < now_ms);
        if (entry.claimed_until_ms.is_none() && entry.run.expires_at_ms <= now_ms) || stale_claim {
            runs.remove(run_id);
            return Ok(Err(ClaimRefused::Unavailable));
        }
        if entry.run.owner.agent_run != owner.agent_run {
            return Ok(Err(ClaimRefused::OtherAgentRun));
        }
        if entry.run.owner.session != owner.session {
            return Ok(Err(ClaimRefused::OtherSession));
        }
        if entry.claimed_until_ms.is_some() {
            return Ok(Err(ClaimRefused::Busy));
        }
        entry.claimed_until_ms = Some(claim_until_ms);
        let generation = entry.run.generation;
        Ok(Ok(Claimed {
            generation,
            snapshot: entry.run.snapshot.clone(),
            settlements: entry
                .settlements
                .iter()
                .filter(|(g, _, _)| *g == generation)
                .map(|(_, _, s)| s.clone())
                .collect(),
        }))
    }

    fn unclaim(&self, run_id: &str) -> anyhow::Result<()> {
        if let Some(entry) = self.runs().get_mut(run_id) {
            entry.claimed_until_ms = None;
        }
        Ok(())
    }

    fn remove(&self, run_id: &str) -> anyhow::Result<()> {
        self.runs().remove(run_id);
        Ok(())
    }

    fn record_settlement(
        &self,
        run_id: &str,
        generation: u64,
        request_id: u64,
        settlement: &str,
    ) -> anyhow::Result<()> {
        if let Some(entry) = self.runs().get_mut(run_id) {
            if entry.run.generation == generation {
                entry
                    .settlements
                    .retain(|(g, id, _)| !(*g == generation && *id == request_id));
                entry
                    .settlements
                    .push((generation, request_id, settlement.to_string()));
            }
        }
        Ok(())
    }

    fn count_runs(&self) -> anyhow::Result<usize> {
        Ok(self.runs().len())
    }

    fn count_session_runs(&self, session: &str) -> anyhow::Result<usize> {
        Ok(self
            .runs()
            .values()
            .filter(|e| e.run.owner.session == session)
            .count())
    }

    fn purge_expired(&self, now_ms: u64) -> anyhow::Result<Vec<String>> {
        let mut runs = self.runs();
        let expired: Vec<String> = runs
            .iter()
            .filter(|(_, e)| match e.claimed_until_ms {
                Some(until) => until < now_ms,
                None => e.run.expires_at_ms <= now_ms,
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            runs.remove(id);
        }
        Ok(expired)
    }

    fn store_get(&self, session: &str, key: &str) -> anyhow::Result<Option<String>> {
        Ok(lock(&self.session_store)
            .get(&(session.to_string(), key.to_string()))
            .cloned())
    }

    fn store_total_bytes(&self, session: &str) -> anyhow::Result<usize> {
        Ok(lock(&self.session_store)
            .iter()
            .filter(|((s, _), _)| s == session)
            .map(|(_, v)| v.len())
            .sum())
    }

    fn store_commit(
        &self,
        session: &str,
        writes: &[(String, Option<String>)],
    ) -> anyhow::Result<()> {
        let mut store = lock(&self.session_store);
        for (key, value) in writes {
            let k = (session.to_string(), key.clone());
            match value {
                Some(v) => store.insert(k, v.clone()),
                None => store.remove(&k),
            };
        }
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
        let mut results = lock(&self.results);
        let (n, bytes) = results
            .iter()
            .filter(|((a, _), _)| a == agent_run)
            .fold((0, 0), |(n, b), (_, v)| (n + 1, b + v.len()));
        if n >= max_count || bytes + json.len() > max_bytes {
            return Ok(false);
        }
        results.insert((agent_run.to_string(), id.to_string()), json.to_string());
        Ok(true)
    }

    fn result_load(&self, agent_run: &str, id: &str) -> anyhow::Result<Option<String>> {
        Ok(lock(&self.results)
            .get(&(agent_run.to_string(), id.to_string()))
            .cloned())
    }

    fn result_delete(&self, agent_run: &str, id: &str) -> anyhow::Result<bool> {
        Ok(lock(&self.results)
            .remove(&(agent_run.to_string(), id.to_string()))
            .is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(a: &str, s: &str) -> Owner {
        Owner {
            agent_run: a.into(),
            session: s.into(),
        }
    }

    fn parked(id: &str, expires: u64) -> ParkedRun {
        ParkedRun {
            run_id: id.into(),
            owner: owner("a", "s"),
            generation: 1,
            expires_at_ms: expires,
            snapshot: vec![1, 2, 3],
        }
    }

    fn stores() -> Vec<Box<dyn StateStore>> {
        vec![
            Box::new(SqliteStateStore::open(None).unwrap()),
            Box::new(MemoryStateStore::default()),
        ]
    }

    #[test]
    fn claim_checks_in_the_contract_order() {
        for store in stores() {
            claim_order(&*store);
        }
    }

    fn claim_order(store: &dyn StateStore) {
        store.park(&parked("r1", 1_000)).unwrap();
        let claim = |o: &Owner, now| store.claim("r1", o, now, now + 100).unwrap();
        assert_eq!(
            claim(&owner("a", "s"), 2_000).unwrap_err(),
            ClaimRefused::Unavailable
        );
        store.park(&parked("r1", 10_000)).unwrap();
        assert_eq!(
            claim(&owner("b", "s"), 1).unwrap_err(),
            ClaimRefused::OtherAgentRun
        );
        assert_eq!(
            claim(&owner("a", "t"), 1).unwrap_err(),
            ClaimRefused::OtherSession
        );
        store.record_settlement("r1", 1, 4, "{\"id\":4}").unwrap();
        store.record_settlement("r1", 7, 5, "{\"id\":5}").unwrap();
        let got = claim(&owner("a", "s"), 1).unwrap();
        assert_eq!(got.snapshot, vec![1, 2, 3]);
        assert_eq!(got.settlements, vec!["{\"id\":4}".to_string()]);
        assert_eq!(claim(&owner("a", "s"), 1).unwrap_err(), ClaimRefused::Busy);
        // A claim abandoned past its deadline is not re-granted.
        assert_eq!(
            claim(&owner("a", "s"), 500).unwrap_err(),
            ClaimRefused::Unavailable
        );
        store.purge_expired(500).unwrap();
        assert_eq!(store.count_runs().unwrap(), 0);
    }

    #[test]
    fn unclaim_makes_a_run_waitable_again() {
        for store in stores() {
            unclaim(&*store);
        }
    }

    fn unclaim(store: &dyn StateStore) {
        store.park(&parked("r1", 10_000)).unwrap();
        store
            .claim("r1", &owner("a", "s"), 1, 100)
            .unwrap()
            .unwrap();
        store.unclaim("r1").unwrap();
        assert!(store.claim("r1", &owner("a", "s"), 1, 100).unwrap().is_ok());
        store.remove("r1").unwrap();
        assert_eq!(
            store
                .claim("r1", &owner("a", "s"), 1, 100)
                .unwrap()
                .unwrap_err(),
            ClaimRefused::Unavailable
        );
    }
}
