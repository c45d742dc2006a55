//! The state store: parked runs (registry, snapshots and the settlements of
//! their requests), the session store and saved results.
//!
//! The store is the source of truth for parked runs, so any process that
//! opens the same store can `wait` a run another process parked, and a
//! restarted host loses none. [`StateStore`] is the interface the runtime
//! needs, in three parts by what they store: [`RunStore`] (parked runs),
//! [`SessionStore`] (session values) and [`ResultStore`] (saved results).
//! Every method is `async`, so that a networked backend is a second
//! implementation, not a rewrite; a backend over a blocking client runs its
//! work off the async workers (as [`SqliteStateStore`] does with
//! `spawn_blocking`).
//!
//! Backends here:
//! - [`SqliteStateStore`] (feature `sqlite`, on by default) over
//!   `<state dir>/state.sqlite3` (WAL journal, `synchronous=NORMAL`, a 5 s
//!   busy timeout for concurrent processes);
//! - [`PostgresStateStore`] (feature `postgres`, on by default) over one
//!   PostgreSQL database that any number of hosts share;
//! - [`MemoryStateStore`], runs in this process only, for runtimes without
//!   a state directory.
//!
//! A run is `parked` (waiting for `wait`) or `resuming` (claimed by a
//! `wait` in some process until its claim deadline). Claiming is one atomic
//! step that checks the contract's order — known and unexpired, same agent
//! run, same session, no other `wait` in flight — so a snapshot is resumed
//! at most once per park. A claim is a lease with a fencing counter: each
//! claim increments the run's counter and the claim's writes carry it, so
//! a host whose claim lapsed cannot write the run back once another host
//! has claimed it. A claim whose holder vanished (the process died
//! mid-`wait`) is re-granted after its deadline only for a restart-safe
//! run ([`ParkedRun::regrant`]); any other run is then reported unavailable
//! and removed, because its snapshot may already have been resumed once.
//!
//! # Settlements across hosts
//!
//! The host that parks a run keeps its tool calls running and records each
//! settlement in the store ([`RunStore::record_settlement`]), per request:
//! a request's id is unique within its run, so a settlement stays valid
//! across generations until a park no longer awaits it
//! ([`ParkedRun::awaiting`]). The snapshot names the host draining each
//! request. A `wait` on another host that resumes the run while that host
//! is alive ([`HostStore`]) does not run those requests again: it waits
//! for their settlements, woken when one is recorded
//! ([`HostStore::watch_settlements`]; PostgreSQL's `LISTEN`/`NOTIFY`), and
//! applies the restart rule (replay-safe calls run again, others report an
//! unknown effect) only once that host is no longer alive.
//!
//! `tests.rs` is the conformance suite every backend passes.

mod hosts;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(test)]
mod tests;

pub use hosts::{
    HostStore, SettlementWakers, SettlementWatch, CANCEL_RECORD_TTL_MS, MAX_CANCEL_QUERY_RUNS,
};
pub use memory::{MemoryStateStore, MAX_MEMORY_USAGE_RECORDS};
#[cfg(feature = "postgres")]
pub use postgres::{
    PostgresLimits, PostgresStateStore, DEFAULT_POSTGRES_CONNECTIONS, HOST_HEARTBEAT_INTERVAL,
    HOST_LIVENESS_TTL, MAX_POSTGRES_CONNECTIONS, POSTGRES_CANCEL_POLL, POSTGRES_CONNECT_TIMEOUT,
    POSTGRES_STATEMENT_TIMEOUT,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStateStore, SQLITE_CANCEL_POLL, STATE_FILE};

use async_trait::async_trait;

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
pub struct ParkedRun {
    /// The run's id (`cm_<uuid>`).
    pub run_id: String,
    /// Who may resume it.
    pub owner: Owner,
    /// Incremented at every park; settlements are recorded per generation.
    pub generation: u64,
    /// Unix milliseconds after which the run is expired.
    pub expires_at_ms: u64,
    /// The checkpoint (the snapshot crate's format), opaque to the store.
    pub snapshot: Vec<u8>,
    /// The lease of the claim this park ends ([`Claimed::lease`]); `None`
    /// for a run parked for the first time. A park under a lease that is
    /// no longer the run's latest (another host claimed it since) fails:
    /// that is the fencing that keeps a host whose claim lapsed from
    /// writing the run back.
    pub lease: Option<u64>,
    /// Whether the run may be claimed again once a claim on it has lapsed
    /// (its holder vanished mid-`wait`): only for restart-safe cells,
    /// which may run again from this snapshot. Otherwise a lapsed claim
    /// makes the run unavailable.
    pub regrant: bool,
    /// The ids of the requests the snapshot still waits on. Recorded
    /// settlements of other requests are forgotten: the run has delivered
    /// them, or never will.
    pub awaiting: Vec<u64>,
    /// The guest build that parked it ([`crate::guest_build`]: the hex
    /// SHA-256 of the guest module), which alone can resume it. A claim
    /// naming another build is refused and leaves the run as it is
    /// ([`ClaimRefused::OtherGuestBuild`]). Empty when unknown (a run
    /// stored before builds were recorded): any build may claim it, and
    /// the snapshot's own header decides.
    pub guest_build: String,
}

/// A successful claim: the snapshot to resume.
#[derive(Debug)]
pub struct Claimed {
    /// The generation claimed.
    pub generation: u64,
    /// The checkpoint stored with it.
    pub snapshot: Vec<u8>,
    /// Settlements recorded while the run was parked (by any host), by
    /// request id, in the order they were recorded; the restore keeps
    /// those of requests the snapshot still waits on.
    pub settlements: Vec<(u64, String)>,
    /// The claim's fencing token: the run's claim counter, incremented by
    /// every claim. Writes that end the claim ([`RunStore::park`],
    /// [`RunStore::release`], [`RunStore::unclaim`]) carry it and fail, or
    /// do nothing, once a later claim exists.
    pub lease: u64,
}

/// Why a run cannot be claimed (the contract's `wait` admission order,
/// then the guest build).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRefused {
    /// Unknown, expired, or abandoned by a claim holder that vanished.
    Unavailable,
    /// Parked by another agent run.
    OtherAgentRun,
    /// Parked by another session.
    OtherSession,
    /// Another `wait` holds it.
    Busy,
    /// Parked by another guest build than the claim names: only a host
    /// carrying that build can resume it. The run is left as it was.
    OtherGuestBuild {
        /// The build that parked it ([`ParkedRun::guest_build`]).
        parked: String,
    },
}

/// What a backend holds of a run when a `wait` claims it.
pub(crate) struct RunRow<'a> {
    pub agent_run: &'a str,
    pub session: &'a str,
    /// `Some(deadline)` while a claim holds it (state `resuming`).
    pub claimed_until_ms: Option<u64>,
    pub expires_at_ms: u64,
    pub regrant: bool,
    /// A cancel is recorded for it ([`HostStore::record_cancels`]).
    pub cancelled: bool,
    /// The guest build that parked it; `None` (or empty) when unknown.
    pub guest_build: Option<&'a str>,
}

/// What a claim does with a run, in the contract's admission order: known
/// and unexpired (a lapsed claim counts as expired unless the run may be
/// granted again), same agent run, same session, no other claim in force.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClaimDecision {
    /// Remove the run and refuse it as unavailable.
    Remove,
    /// Refuse it, leaving it as it is.
    Refuse(ClaimRefused),
    /// Claim it (a new lease).
    Grant,
}

impl RunRow<'_> {
    /// Whether a claim of it has lapsed at `now_ms`: `Some(true)` when it
    /// may be granted again, `Some(false)` when it is gone.
    pub(crate) fn lapsed(&self, now_ms: u64) -> Option<bool> {
        let until = self.claimed_until_ms?;
        (until < now_ms).then_some(self.regrant && self.expires_at_ms > now_ms)
    }

    /// Whether a purge at `now_ms` removes it.
    pub(crate) fn purgeable(&self, now_ms: u64) -> bool {
        match self.lapsed(now_ms) {
            Some(regrant) => !regrant || self.cancelled,
            None => {
                self.claimed_until_ms.is_none() && (self.expires_at_ms <= now_ms || self.cancelled)
            }
        }
    }

    /// What claiming it for `owner` at `now_ms`, by a host carrying
    /// `guest_build` (`None`: any build, as a cancel does), does.
    pub(crate) fn claim(
        &self,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
    ) -> ClaimDecision {
        // A cancelled run is gone unless a claim still holds it: its
        // holder ends that claim when it learns of the cancel.
        if self.purgeable(now_ms) {
            return ClaimDecision::Remove;
        }
        if self.agent_run != owner.agent_run {
            return ClaimDecision::Refuse(ClaimRefused::OtherAgentRun);
        }
        if self.session != owner.session {
            return ClaimDecision::Refuse(ClaimRefused::OtherSession);
        }
        if self.claimed_until_ms.is_some() && self.lapsed(now_ms).is_none() {
            return ClaimDecision::Refuse(ClaimRefused::Busy);
        }
        // Last, so that the contract's refusals come first; known builds
        // only (a run from before builds were recorded: its snapshot's
        // header decides).
        if let (Some(parked), Some(wanted)) =
            (self.guest_build.filter(|b| !b.is_empty()), guest_build)
        {
            if parked != wanted {
                return ClaimDecision::Refuse(ClaimRefused::OtherGuestBuild {
                    parked: parked.to_string(),
                });
            }
        }
        ClaimDecision::Grant
    }
}

/// A backend's mutex, also after a panic while it was held (what it guards
/// stays consistent: each holder changes it in one step).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The error of a write under a lease that a later claim replaced.
pub(crate) fn fenced(run_id: &str) -> String {
    format!("run {run_id} was claimed by another wait since this one's claim lapsed; its write is refused")
}

/// A state store failure: the backend's error with its source chain.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(#[from] anyhow::Error);

/// What a store method returns.
pub type StoreResult<T> = Result<T, StoreError>;

/// Parked runs and the settlements of their requests. Implementations must
/// make [`RunStore::claim`] atomic across every host that shares the store.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Stores (or replaces) a parked run in state `parked`, and forgets the
    /// recorded settlements of requests it no longer awaits
    /// ([`ParkedRun::awaiting`]). Fails when the run's
    /// [`ParkedRun::lease`] is not its latest claim (fencing).
    async fn park(&self, run: ParkedRun) -> StoreResult<()>;
    /// Claims a parked run for one `wait` until `claim_until_ms`, for a
    /// host carrying `guest_build` ([`crate::guest_build`]; `None` for
    /// any build: a cancel). A run parked by another known build is
    /// refused as [`ClaimRefused::OtherGuestBuild`] and left untouched.
    async fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> StoreResult<Result<Claimed, ClaimRefused>>;
    /// Returns a run claimed under `lease` to `parked` unchanged (the
    /// `wait` could not start it, e.g. the runtime was unavailable); does
    /// nothing once a later claim exists.
    async fn unclaim(&self, run_id: &str, lease: u64) -> StoreResult<()>;
    /// Removes a run and its settlements.
    async fn remove(&self, run_id: &str) -> StoreResult<()>;
    /// Moves the expiry of a run that is `parked` and belongs to `owner`
    /// out to `expires_at_ms` (never earlier); returns whether it did.
    async fn extend_parked(
        &self,
        run_id: &str,
        owner: &Owner,
        expires_at_ms: u64,
    ) -> StoreResult<bool>;
    /// Removes a run claimed under `lease` (its `wait` finished it), unless
    /// a later claim exists; returns whether it did.
    async fn release(&self, run_id: &str, lease: u64) -> StoreResult<bool>;
    /// Removes every run of `session` (parked or resuming) and their
    /// settlements; returns their ids. What closing a session does
    /// (operations.md §3.1).
    async fn remove_session_runs(&self, session: &str) -> StoreResult<Vec<String>>;
    /// Records the settlement of a request of a parked (or resuming) run,
    /// unless one is recorded for that request already, and wakes the
    /// hosts watching the run ([`HostStore::watch_settlements`]). Returns
    /// whether the run is still held: once it is gone, its drainer stops.
    async fn record_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        settlement: &str,
    ) -> StoreResult<bool>;
    /// Number of runs held (parked or resuming). Callers remove expired
    /// runs first ([`RunStore::purge_expired`]).
    async fn count_runs(&self) -> StoreResult<usize>;
    /// Number of runs of `session` held (parked or resuming).
    async fn count_session_runs(&self, session: &str) -> StoreResult<usize>;
    /// Removes runs expired at `now_ms` and claims abandoned before it;
    /// returns their ids.
    async fn purge_expired(&self, now_ms: u64) -> StoreResult<Vec<String>>;
    /// What admitting a new parked run needs, in one step: removes the runs
    /// expired at `now_ms` ([`RunStore::purge_expired`]), then counts the
    /// runs held in all and by `session`. A backend whose calls cost a
    /// round trip answers it in one; the default makes three calls.
    async fn purge_and_count(&self, now_ms: u64, session: &str) -> StoreResult<RunCounts> {
        let purged = self.purge_expired(now_ms).await?;
        Ok(RunCounts {
            purged,
            runs: self.count_runs().await?,
            session_runs: self.count_session_runs(session).await?,
        })
    }
}

/// The answer of [`RunStore::purge_and_count`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Ids of the runs removed as expired.
    pub purged: Vec<String>,
    /// Runs held (parked or resuming) after the purge.
    pub runs: usize,
    /// Runs of the session held after the purge.
    pub session_runs: usize,
}

/// The session store: JSON values by session and key.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// A committed value (compact JSON).
    async fn store_get(&self, session: &str, key: &str) -> StoreResult<Option<String>>;
    /// Every committed value of a session, by key, in no order. Cells
    /// bound a session to the session store's caps; front ends that write
    /// with [`crate::Runtime::set_session_values`] bound what they write.
    async fn store_entries(&self, session: &str) -> StoreResult<Vec<(String, String)>>;
    /// Sum of the committed value sizes of a session, in bytes.
    async fn store_total_bytes(&self, session: &str) -> StoreResult<usize>;
    /// Commits a cell's buffered writes (`None` deletes) in one atomic step.
    async fn store_commit(
        &self,
        session: &str,
        writes: Vec<(String, Option<String>)>,
    ) -> StoreResult<()>;
    /// Deletes every value of `session`; returns how many there were.
    async fn store_clear(&self, session: &str) -> StoreResult<usize>;
}

/// Saved results (`results.save` / `load` / `delete`) by agent run and id.
#[async_trait]
pub trait ResultStore: Send + Sync {
    /// Saves a result of an agent run if, with it, the run holds at most
    /// `max_count` results and `max_bytes` bytes of JSON; the check and the
    /// insert are one atomic step. Returns whether it was saved.
    async fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: String,
        max_count: usize,
        max_bytes: usize,
    ) -> StoreResult<bool>;
    /// A saved result's JSON.
    async fn result_load(&self, agent_run: &str, id: &str) -> StoreResult<Option<String>>;
    /// Deletes a saved result; whether it existed.
    async fn result_delete(&self, agent_run: &str, id: &str) -> StoreResult<bool>;
    /// Deletes every saved result of an agent run; returns how many there
    /// were.
    async fn result_clear(&self, agent_run: &str) -> StoreResult<usize>;
}

/// What one `exec` or `wait` call used (operations.md §4.2): one record
/// per call in the usage ledger.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct UsageRecord {
    /// When the call ended, in Unix milliseconds.
    pub at_ms: u64,
    /// The caller's agent run.
    pub agent_run: String,
    /// The caller's session.
    pub session: String,
    /// The run the call parked or resumed, if any.
    pub run_id: Option<String>,
    /// `exec` or `wait`.
    pub kind: String,
    /// The fuel the result reported (`telemetry.fuelUsed`).
    pub fuel: u64,
    /// Wall time of the call, in milliseconds.
    pub wall_ms: u64,
    /// Time the call spent running guest code, in microseconds.
    pub guest_us: u64,
    /// Tool calls the cell started during the call.
    pub tool_calls: u64,
    /// Bytes of the result's `output` (compact JSON).
    pub output_bytes: u64,
    /// Bytes of the snapshot stored when the call parked the cell.
    pub snapshot_bytes: u64,
    /// `completed`, `waiting`, or `failed:<code>`.
    pub outcome: String,
    /// The guest build of the host that served the call
    /// ([`crate::guest_build`]): the build a run it parked needs to
    /// resume, the build a `wait` ran (or was refused) on. `None` in
    /// records from before the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_build: Option<String>,
}

/// Which usage records [`UsageStore::usage_totals`] and
/// [`UsageStore::usage_list`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UsageFilter {
    /// Only this session's records.
    pub session: Option<String>,
    /// Only records at or after this time (Unix milliseconds).
    pub since_ms: Option<u64>,
    /// Only records of this kind (`exec` or `wait`).
    pub kind: Option<String>,
}

impl UsageFilter {
    /// Every record.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only `session`'s records.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Only records at or after `since_ms` (Unix milliseconds).
    pub fn since_ms(mut self, since_ms: u64) -> Self {
        self.since_ms = Some(since_ms);
        self
    }

    /// Only records of `kind` (`exec` or `wait`).
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Whether `record` is one of those it selects.
    pub fn selects(&self, record: &UsageRecord) -> bool {
        self.session.as_ref().is_none_or(|s| *s == record.session)
            && self.since_ms.is_none_or(|t| record.at_ms >= t)
            && self.kind.as_ref().is_none_or(|k| *k == record.kind)
    }
}

/// Sums of usage records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct UsageTotals {
    /// Calls (records).
    pub calls: u64,
    /// Fuel.
    pub fuel: u64,
    /// Wall time, in milliseconds.
    pub wall_ms: u64,
    /// Guest time, in microseconds.
    pub guest_us: u64,
    /// Tool calls started.
    pub tool_calls: u64,
    /// Output bytes.
    pub output_bytes: u64,
    /// Snapshot bytes.
    pub snapshot_bytes: u64,
    /// When the oldest record summed was written (Unix milliseconds).
    pub first_at_ms: Option<u64>,
}

impl UsageTotals {
    /// Adds one record.
    pub fn add(&mut self, record: &UsageRecord) {
        self.calls += 1;
        self.fuel = self.fuel.saturating_add(record.fuel);
        self.wall_ms = self.wall_ms.saturating_add(record.wall_ms);
        self.guest_us = self.guest_us.saturating_add(record.guest_us);
        self.tool_calls = self.tool_calls.saturating_add(record.tool_calls);
        self.output_bytes = self.output_bytes.saturating_add(record.output_bytes);
        self.snapshot_bytes = self.snapshot_bytes.saturating_add(record.snapshot_bytes);
        self.first_at_ms = Some(
            self.first_at_ms
                .map_or(record.at_ms, |t| t.min(record.at_ms)),
        );
    }
}

/// Most records [`UsageStore::usage_list`] returns at once.
pub const MAX_USAGE_RECORDS_LISTED: usize = 10_000;

/// The usage ledger: one record per `exec` / `wait` call.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Appends a record.
    async fn usage_record(&self, record: UsageRecord) -> StoreResult<()>;
    /// Sums the records `filter` selects.
    async fn usage_totals(&self, filter: &UsageFilter) -> StoreResult<UsageTotals>;
    /// The latest `limit` records `filter` selects (at most
    /// [`MAX_USAGE_RECORDS_LISTED`]), oldest first.
    async fn usage_list(&self, filter: &UsageFilter, limit: usize)
        -> StoreResult<Vec<UsageRecord>>;
}

/// Everything a runtime keeps: runs, session values, saved results and the
/// usage ledger. Give one to
/// [`RuntimeBuilder::state_store`](crate::RuntimeBuilder::state_store) to use
/// another backend.
pub trait StateStore: RunStore + SessionStore + ResultStore + UsageStore + HostStore {
    /// Whether other processes (or a restarted host) can see these runs;
    /// only then are settlements of parked runs worth recording.
    fn is_shared(&self) -> bool;
}
