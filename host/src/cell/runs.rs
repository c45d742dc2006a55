//! The run registry: suspended-run slots, parked runs' live bridges, and
//! the hand-over between a parked run and the `wait` that resumes it.
//!
//! The state store ([`crate::store`]) holds every parked run; this module
//! adds what only the parking process has: the bridge whose requests are
//! still running. While a run is parked its bridge is owned by a drainer
//! task that records each settlement in the store as it lands — so a `wait`
//! in another process, or after a restart, delivers it — and keeps it for
//! a `wait` in this process, which takes the bridge back over — of the same
//! generation only: a run resumed and parked again elsewhere meanwhile is
//! restored from its snapshot, and the drainer of the earlier generation
//! keeps recording the settlements it still awaits. A parked bridge starts
//! no queued request. The drainer ends when the run expires or is gone
//! from the store (its tool calls are cancelled), or when nothing is left
//! running.
//!
//! # Slots
//!
//! `max_suspended_runs` runs ([`HostLimits`], default
//! [`MAX_SUSPENDED_RUNS`]) may hold a slot at once: runs held by the store
//! (parked or being resumed, by any process sharing it) plus cells of this
//! process that have dispatched host work and not parked yet; one session
//! may hold at most `max_suspended_runs_per_session` of them. A cell takes
//! its slot just before its first dispatch; a cell that never calls the
//! host takes none.
//!
//! # Running cells
//!
//! A session may have at most `max_running_cells_per_session` cells in an
//! `exec` or `wait` of this runtime at once ([`RunRegistry::start_cell`]),
//! so that one tenant cannot take every pool instance.
//!
//! # Cancels from other processes
//!
//! Once this process resumes or drains a run, a watcher task asks the
//! store which of the runs it holds another process cancelled
//! ([`crate::store::HostStore::cancelled_runs`]), every
//! [`crate::store::HostStore::cancel_poll_interval`] and whenever the
//! store's cancel watch wakes; it ends the `wait` resuming such a run
//! (`aborted`) and drops its drained bridge (its tool calls get their
//! cancel signal).

use crate::bridge::Bridge;
use crate::clock::unix_ms;
use crate::config::HostLimits;
#[cfg(doc)]
use crate::config::MAX_SUSPENDED_RUNS;
use crate::state_key::StateKey;
use crate::store::StateStore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A parked run's bridge, owned by its drainer or idle.
enum LiveRun {
    Draining {
        /// Return the bridge now.
        stop: CancellationToken,
        /// Return the bridge once no tool call is queued or running.
        stop_after_tool_calls: CancellationToken,
        /// Drop the bridge now (the run was cancelled): its tool calls get
        /// their cancel signal.
        end: CancellationToken,
        task: JoinHandle<Option<Bridge>>,
    },
    Idle(Box<Bridge>),
}

/// Why a slot could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotRefused {
    /// Every slot of the runtime is held.
    Full,
    /// The session holds its whole share.
    SessionShare,
}

impl SlotRefused {
    /// The model-facing error (the contract's slot error, with the share
    /// named when it is the session's).
    pub(crate) fn message(self, limits: &HostLimits) -> String {
        match self {
            Self::Full => "too many suspended code mode runs.".to_string(),
            Self::SessionShare => format!(
                "too many suspended code mode runs for this session ({} of {} slots). Wait or finish parked runs of this session first.",
                limits.max_suspended_runs_per_session(), limits.max_suspended_runs()
            ),
        }
    }
}

/// Slots, live bridges and the state store of one runtime.
pub(crate) struct RunRegistry {
    store: Arc<dyn StateStore>,
    /// Seals the settlements drainers record.
    state_key: Option<StateKey>,
    pub limits: HostLimits,
    /// By run id and generation.
    live: Mutex<HashMap<(String, u64), LiveRun>>,
    /// Cells of this process holding a slot without a stored run.
    running: AtomicUsize,
    /// The same, per session.
    running_by_session: Mutex<HashMap<String, usize>>,
    /// Cells of this process in an `exec` or `wait`, per session.
    active_by_session: Mutex<HashMap<String, ActiveSession>>,
    /// Woken whenever a session's last cell in progress ends.
    idle: tokio::sync::Notify,
    /// Runs a `wait` of this process is resuming, with that call's run
    /// token ([`RunRegistry::cancel_resuming`]).
    resuming: Mutex<HashMap<String, CancellationToken>>,
    /// Cancelled when the runtime begins to shut down: no call starts, and
    /// cells waiting on host work park at once.
    pub draining: CancellationToken,
    /// Cancelled when the shutdown's drain time is over: every cell still
    /// in progress ends `aborted` (each session's token is its child).
    stopping: CancellationToken,
    /// Whether the watcher of other processes' cancels has started.
    watching_cancels: std::sync::atomic::AtomicBool,
    /// Drainers [`RunRegistry::settle_tool_calls`] waits for, by run id
    /// and generation, with their `end` tokens.
    settling: Mutex<HashMap<(String, u64), CancellationToken>>,
}

/// A slot held by a running cell; released on drop (a parked run's slot
/// is its stored row).
pub(crate) struct SlotGuard {
    registry: Arc<RunRegistry>,
    session: String,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.registry.running.fetch_sub(1, Ordering::SeqCst);
        release(&self.registry.running_by_session, &self.session);
    }
}

/// A run being resumed by a `wait` of this process.
pub(crate) struct Resuming {
    registry: Arc<RunRegistry>,
    run_id: String,
    /// Cancels that `wait`.
    pub token: CancellationToken,
}

impl Drop for Resuming {
    fn drop(&mut self) {
        self.registry
            .resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.run_id);
    }
}

/// The cells a session has in progress in this process.
struct ActiveSession {
    count: usize,
    /// Cancelled when the session is closed ([`RunRegistry::cancel_session`]);
    /// a fresh one once the session has no cell left.
    cancel: CancellationToken,
}

/// A cell of a session in progress (`exec` or `wait`); released on drop.
pub(crate) struct ActiveCell {
    registry: Arc<RunRegistry>,
    session: String,
    /// The session's token: cancelled when the session is closed.
    pub cancel: CancellationToken,
}

impl Drop for ActiveCell {
    fn drop(&mut self) {
        let mut active = self.registry.active();
        if let Some(entry) = active.get_mut(&self.session) {
            entry.count = entry.count.saturating_sub(1);
            if entry.count == 0 {
                active.remove(&self.session);
                drop(active);
                self.registry.idle.notify_waiters();
            }
        }
    }
}

/// Counts one more for `session` if it holds fewer than `max`.
fn acquire(counts: &Mutex<HashMap<String, usize>>, session: &str, max: u64) -> bool {
    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
    let held = counts.entry(session.to_string()).or_insert(0);
    if *held as u64 >= max {
        return false;
    }
    *held += 1;
    true
}

/// Counts one less for `session`, forgetting sessions that hold none.
fn release(counts: &Mutex<HashMap<String, usize>>, session: &str) {
    let mut counts = counts.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(held) = counts.get_mut(session) {
        *held = held.saturating_sub(1);
        if *held == 0 {
            counts.remove(session);
        }
    }
}

impl RunRegistry {
    pub(crate) fn new(
        store: Arc<dyn StateStore>,
        limits: HostLimits,
        state_key: Option<StateKey>,
    ) -> Self {
        Self {
            store,
            state_key,
            limits,
            live: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            running_by_session: Mutex::new(HashMap::new()),
            active_by_session: Mutex::new(HashMap::new()),
            idle: tokio::sync::Notify::new(),
            resuming: Mutex::new(HashMap::new()),
            draining: CancellationToken::new(),
            stopping: CancellationToken::new(),
            watching_cancels: Default::default(),
            settling: Mutex::new(HashMap::new()),
        }
    }

    /// Starts the watcher of cancels other processes record for the runs
    /// this one holds, once (when the store says there is anything to
    /// watch).
    fn watch_cancels(self: &Arc<Self>) {
        let Some(every) = self.store.cancel_poll_interval() else {
            return;
        };
        if self.watching_cancels.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(apply_cancels(
            Arc::downgrade(self),
            self.store.clone(),
            every,
            self.stopping.clone(),
        ));
    }

    /// The runs this process holds: being resumed, or drained.
    fn held_runs(&self) -> Vec<String> {
        let mut held: Vec<String> = self
            .resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        held.extend(self.live().keys().map(|(id, _)| id.clone()));
        held.extend(self.settling().keys().map(|(id, _)| id.clone()));
        held.sort_unstable();
        held.dedup();
        held
    }

    /// Ends what this process holds of the runs another process cancelled:
    /// the `wait` resuming one ends `aborted`, the bridges drained are
    /// dropped.
    fn end_cancelled(&self, runs: &[String]) {
        for run_id in runs {
            if self.cancel_resuming(run_id) {
                tracing::info!(
                    run_id,
                    "a cancel recorded elsewhere ends the wait resuming this run"
                );
            }
        }
        self.forget_live(runs);
    }

    /// Admits one more running cell of `session`, or `None` when the
    /// session already runs `max_running_cells_per_session`.
    pub(crate) fn start_cell(self: &Arc<Self>, session: &str) -> Option<ActiveCell> {
        let mut active = self.active();
        let entry = active
            .entry(session.to_string())
            .or_insert_with(|| ActiveSession {
                count: 0,
                cancel: self.stopping.child_token(),
            });
        if entry.count as u64 >= self.limits.max_running_cells_per_session() {
            return None;
        }
        entry.count += 1;
        Some(ActiveCell {
            registry: self.clone(),
            session: session.to_string(),
            cancel: entry.cancel.clone(),
        })
    }

    fn active(&self) -> std::sync::MutexGuard<'_, HashMap<String, ActiveSession>> {
        self.active_by_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Cancels every cell `session` has in progress in this process; each
    /// ends `aborted` at its next fuel yield or at once if it waits on
    /// tools. Returns how many there were.
    pub(crate) fn cancel_session(&self, session: &str) -> usize {
        match self.active().get_mut(session) {
            Some(entry) => {
                // Cells that start after the close get a fresh token.
                std::mem::replace(&mut entry.cancel, self.stopping.child_token()).cancel();
                entry.count
            }
            None => 0,
        }
    }

    /// Waits until `session` has no cell in progress in this process, or
    /// `within` has passed; whether it has none.
    pub(crate) async fn session_idle(&self, session: &str, within: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if !self.active().contains_key(session) {
                return true;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                return !self.active().contains_key(session);
            }
        }
    }

    /// Waits until no cell is in progress in this process, or `within` has
    /// passed; whether none is.
    pub(crate) async fn all_idle(&self, within: std::time::Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.active().is_empty() {
                return true;
            }
            if tokio::time::timeout_at(until, idle).await.is_err() {
                return self.active().is_empty();
            }
        }
    }

    /// Ends every cell in progress in this process (`aborted`).
    pub(crate) fn abort_all(&self) {
        self.stopping.cancel();
    }

    /// Drops every parked run's bridge this process holds: the tool calls
    /// still running get their cancel signal and are dropped (a command
    /// tool's process group is killed). Their runs stay parked in the
    /// store; whoever resumes them applies the restart rule to those calls.
    pub(crate) async fn drop_live(&self) {
        let live: Vec<LiveRun> = self.live().drain().map(|(_, live)| live).collect();
        for run in live {
            if let LiveRun::Draining { stop, task, .. } = run {
                stop.cancel();
                drop(task.await);
            }
        }
    }

    /// Marks `run_id` as being resumed by this process until the guard is
    /// dropped; its token cancels that `wait`.
    pub(crate) fn resuming(self: &Arc<Self>, run_id: &str) -> Resuming {
        self.watch_cancels();
        let token = CancellationToken::new();
        self.resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(run_id.to_string(), token.clone());
        Resuming {
            registry: self.clone(),
            run_id: run_id.to_string(),
            token,
        }
    }

    /// Cancels the `wait` of this process that is resuming `run_id`, if
    /// any; whether there was one.
    pub(crate) fn cancel_resuming(&self, run_id: &str) -> bool {
        match self
            .resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
        {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Drops this process's bridges of `runs` (removed from the store):
    /// their tool calls get their cancel signal.
    pub(crate) fn forget_live(&self, runs: &[String]) {
        let mut live = self.live();
        let runs: std::collections::HashSet<&String> = runs.iter().collect();
        let gone: Vec<(String, u64)> = live
            .keys()
            .filter(|(id, _)| runs.contains(id))
            .cloned()
            .collect();
        for key in gone {
            if let Some(LiveRun::Draining { end, .. }) = live.remove(&key) {
                // The drainer drops the bridge.
                end.cancel();
            }
        }
        drop(live);
        for ((id, _), end) in self.settling().iter() {
            if runs.contains(id) {
                end.cancel();
            }
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), LiveRun>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn settling(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), CancellationToken>> {
        self.settling.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a cell of `session` about to dispatch its first
    /// request, or says why it cannot: all slots are held, or the session
    /// holds its share.
    pub(crate) async fn take_slot(
        self: &Arc<Self>,
        session: &str,
    ) -> anyhow::Result<Result<SlotGuard, SlotRefused>> {
        if !acquire(&self.running_by_session, session, u64::MAX) {
            return Ok(Err(SlotRefused::SessionShare));
        }
        let held = self.running.fetch_add(1, Ordering::SeqCst);
        let guard = SlotGuard {
            registry: self.clone(),
            session: session.to_string(),
        };
        // One store call: a networked store answers it in one round trip.
        let counts = self.store.purge_and_count(unix_ms(), session).await?;
        if !counts.purged.is_empty() {
            // Dropping an expired run's bridge cancels its requests.
            self.forget_live(&counts.purged);
        }
        if (held + counts.runs) as u64 >= self.limits.max_suspended_runs() {
            return Ok(Err(SlotRefused::Full));
        }
        let session_held = self
            .running_by_session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .copied()
            .unwrap_or(1)
            - 1;
        if (session_held + counts.session_runs) as u64
            >= self.limits.max_suspended_runs_per_session()
        {
            return Ok(Err(SlotRefused::SessionShare));
        }
        Ok(Ok(guard))
    }

    /// Keeps a parked run's bridge. With a shared store a drainer task
    /// records each settlement as it lands; otherwise the bridge waits idle
    /// (its requests still run) for a `wait` in this process.
    pub(crate) fn keep_live(
        self: &Arc<Self>,
        run_id: &str,
        generation: u64,
        expires_at_ms: u64,
        mut bridge: Bridge,
    ) {
        bridge.set_parked(true);
        self.watch_cancels();
        let key = (run_id.to_string(), generation);
        if !self.store.is_shared() {
            self.live().insert(key, LiveRun::Idle(Box::new(bridge)));
            return;
        }
        let stop = CancellationToken::new();
        let stop_after_tool_calls = CancellationToken::new();
        let end = CancellationToken::new();
        let drainer = Drainer {
            store: self.store.clone(),
            state_key: self.state_key.clone(),
            run_id: run_id.to_string(),
        };
        let task = tokio::spawn(drainer.drain(
            bridge,
            expires_at_ms,
            Stops {
                stop: stop.clone(),
                after_tools: stop_after_tool_calls.clone(),
                end: end.clone(),
            },
        ));
        self.live().insert(
            key,
            LiveRun::Draining {
                stop,
                stop_after_tool_calls,
                end,
                task,
            },
        );
    }

    /// Takes a parked run's bridge of `generation` back from its drainer,
    /// if this process holds it. The drainer of an earlier generation
    /// (the run was resumed and parked again elsewhere) keeps draining.
    pub(crate) async fn take_live(&self, run_id: &str, generation: u64) -> Option<Bridge> {
        let live = self.live().remove(&(run_id.to_string(), generation))?;
        let mut bridge = match live {
            LiveRun::Idle(bridge) => *bridge,
            LiveRun::Draining { stop, task, .. } => {
                stop.cancel();
                task.await.ok().flatten()?
            }
        };
        bridge.set_parked(false);
        Some(bridge)
    }

    /// Waits until no parked run of this process has a tool call queued or
    /// running (timers may remain: they are re-armed from their due time
    /// wherever the run resumes). A process that parks runs and then exits
    /// calls this first, so that calls it started settle and are recorded.
    pub(crate) async fn settle_tool_calls(&self) {
        let ids: Vec<(String, u64)> = self.live().keys().cloned().collect();
        for id in ids {
            let Some(LiveRun::Draining {
                stop_after_tool_calls,
                end,
                task,
                ..
            }) = self.live().remove(&id)
            else {
                continue;
            };
            // A cancel recorded meanwhile still reaches it.
            self.settling().insert(id.clone(), end);
            stop_after_tool_calls.cancel();
            let settled = task.await;
            self.settling().remove(&id);
            if let Ok(Some(bridge)) = settled {
                self.live().insert(id, LiveRun::Idle(Box::new(bridge)));
            }
        }
    }
}

/// Asks `store` which of the runs `registry` holds another process
/// cancelled — at once, then every `every` and whenever the store's
/// cancel watch wakes — and ends them, until the registry is gone or
/// `stop`.
async fn apply_cancels(
    registry: std::sync::Weak<RunRegistry>,
    store: Arc<dyn StateStore>,
    every: std::time::Duration,
    stop: CancellationToken,
) {
    let mut woken = match store.watch_cancels().await {
        Ok(watch) => watch,
        Err(e) => {
            tracing::warn!(error = %e, every_ms = every.as_millis() as u64, "cannot watch for cancels; polling for them");
            crate::store::SettlementWatch::never()
        }
    };
    loop {
        let Some(held) = registry.upgrade().map(|r| r.held_runs()) else {
            return;
        };
        let mut cancelled = Vec::new();
        for chunk in held.chunks(crate::store::MAX_CANCEL_QUERY_RUNS) {
            match store.cancelled_runs(chunk).await {
                Ok(ids) => cancelled.extend(ids),
                Err(e) => tracing::warn!(error = %e, "cannot read the cancels of held runs"),
            }
        }
        if !cancelled.is_empty() {
            match registry.upgrade() {
                Some(registry) => registry.end_cancelled(&cancelled),
                None => return,
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = woken.changed() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

/// Attempts at recording one settlement before a drainer gives it up (the
/// store is failing; a `wait` in this process still gets it).
const RECORD_ATTEMPTS: u32 = 6;

/// The wait before a settlement's second attempt; doubled for each later
/// one (about 8 s in all).
const RECORD_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(250);

/// What a parked run's drainer task records into.
struct Drainer {
    store: Arc<dyn StateStore>,
    state_key: Option<StateKey>,
    run_id: String,
}

/// What ends a drainer ([`Drainer::drain`]).
struct Stops {
    /// Return the bridge now.
    stop: CancellationToken,
    /// Return the bridge once no tool call is left running.
    after_tools: CancellationToken,
    /// Drop the bridge now: the run was cancelled.
    end: CancellationToken,
}

/// Why a drainer stopped recording a settlement.
enum Recorded {
    /// Recorded; whether the run is still held.
    Held(bool),
    /// Told to return the bridge meanwhile.
    Stopped,
}

impl Drainer {
    /// Records each settlement of `bridge` as it lands, until `stop` (the
    /// bridge is returned), `after_tools` with no tool call left running
    /// here (returned too), `end` or the run's end (dropped: its calls are
    /// cancelled), or its expiry. At the expiry it purges expired runs and
    /// keeps draining if the run was not among them: a host that resumed
    /// it parked it again with a later expiry, and its snapshot may await
    /// the calls running here.
    async fn drain(self, mut bridge: Bridge, expires_at_ms: u64, stops: Stops) -> Option<Bridge> {
        let Stops {
            stop,
            after_tools,
            end,
        } = stops;
        let ttl = std::time::Duration::from_millis(expires_at_ms.saturating_sub(unix_ms()))
            .max(std::time::Duration::from_secs(1));
        let expired = tokio::time::sleep(ttl);
        tokio::pin!(expired);
        loop {
            if after_tools.is_cancelled() && !bridge.has_tool_work() {
                return Some(bridge);
            }
            tokio::select! {
                biased;
                _ = end.cancelled() => return None,
                _ = stop.cancelled() => return Some(bridge),
                _ = after_tools.cancelled(), if !after_tools.is_cancelled() => {}
                _ = &mut expired => {
                    let purged = self.store.purge_expired(unix_ms()).await;
                    if purged.is_ok_and(|ids| ids.contains(&self.run_id)) {
                        // Dropping the bridge cancels its requests.
                        return None;
                    }
                    expired.as_mut().reset(tokio::time::Instant::now() + ttl);
                }
                settled = bridge.next_settlements() => {
                    let Some(settled) = settled else { return Some(bridge) };
                    for settlement in settled {
                        match self.record(&settlement, &stop).await {
                            Recorded::Held(true) => {}
                            // The run is gone (finished or abandoned
                            // elsewhere): dropping the bridge cancels
                            // what it still runs.
                            Recorded::Held(false) => return None,
                            // What was not recorded stays ready in the
                            // bridge for the `wait` taking it.
                            Recorded::Stopped => return Some(bridge),
                        }
                    }
                }
            }
        }
    }

    /// Seals and records one settlement, retrying a failing store with
    /// backoff ([`RECORD_ATTEMPTS`]); a settlement it gives up stays
    /// unrecorded (logged), as if held by the run's host alone.
    async fn record(
        &self,
        settlement: &crate::bridge::Settlement,
        stop: &CancellationToken,
    ) -> Recorded {
        let json = serde_json::to_string(settlement).unwrap_or_default();
        let mut delay = RECORD_RETRY_DELAY;
        for attempt in 1..=RECORD_ATTEMPTS {
            let stored = match &self.state_key {
                Some(key) => key
                    .seal_settlement(&self.run_id, settlement.id, &json)
                    .map_err(|e| anyhow::anyhow!(e)),
                None => Ok(json.clone()),
            };
            let recorded = match stored {
                Ok(stored) => self
                    .store
                    .record_settlement(&self.run_id, settlement.id, &stored)
                    .await
                    .map_err(anyhow::Error::from),
                Err(e) => Err(e),
            };
            match recorded {
                Ok(held) => return Recorded::Held(held),
                Err(e) if attempt == RECORD_ATTEMPTS => {
                    tracing::warn!(run_id = %self.run_id, request_id = settlement.id, error = %format!("{e:#}"), "cannot record a settlement; giving it up");
                }
                Err(e) => {
                    tracing::warn!(run_id = %self.run_id, request_id = settlement.id, attempt, error = %format!("{e:#}"), "cannot record a settlement; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return Recorded::Stopped,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay *= 2;
                }
            }
        }
        Recorded::Held(true)
    }
}

impl Drop for RunRegistry {
    /// A runtime that goes away ends its host: the requests of its parked
    /// runs are cancelled (the runs themselves stay in the state store).
    fn drop(&mut self) {
        for (_, live) in self.live().drain() {
            if let LiveRun::Draining { stop, .. } = live {
                stop.cancel();
            }
        }
    }
}
