//! The run registry: suspended-run slots, parked runs' live bridges, and
//! the hand-over between a parked run and the `wait` that resumes it.
//!
//! The state store ([`crate::state`]) holds every parked run; this module
//! adds what only the parking process has: the bridge whose requests are
//! still running. While a run is parked its bridge is owned by a drainer
//! task that records each settlement in the store as it lands — so a `wait`
//! in another process, or after a restart, delivers it — and keeps it for
//! a `wait` in this process, which takes the bridge back over. The drainer
//! ends when the run expires (its tool calls are cancelled) or when nothing
//! is left running.
//!
//! # Slots
//!
//! [`MAX_SUSPENDED_RUNS`] runs may hold a slot at once: runs held by the
//! store (parked or being resumed, by any process sharing it) plus cells of
//! this process that have dispatched host work and not parked yet. A cell
//! takes its slot just before its first dispatch; a cell that never calls
//! the host takes none.

use crate::bridge::{unix_ms, Bridge};
use crate::state::StateStore;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Runs that may hold a slot at once (contract §6).
pub const MAX_SUSPENDED_RUNS: usize = 64;

/// A parked run's bridge, owned by its drainer or idle.
enum LiveRun {
    Draining {
        /// Return the bridge now.
        stop: CancellationToken,
        /// Return the bridge once no tool call is queued or running.
        stop_after_tool_calls: CancellationToken,
        task: JoinHandle<Option<Bridge>>,
    },
    Idle(Box<Bridge>),
}

/// Slots, live bridges and the state store of one runtime.
pub(crate) struct RunRegistry {
    pub store: Arc<dyn StateStore>,
    live: Mutex<HashMap<String, LiveRun>>,
    /// Cells of this process holding a slot without a stored run.
    running: AtomicUsize,
}

/// A slot held by a running cell; released on drop (a parked run's slot
/// is its stored row).
pub(crate) struct SlotGuard {
    registry: Arc<RunRegistry>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.registry.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RunRegistry {
    pub(crate) fn new(store: Arc<dyn StateStore>) -> Self {
        Self {
            store,
            live: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot for a cell about to dispatch its first request, or
    /// `None` when all are taken.
    pub(crate) fn take_slot(self: &Arc<Self>) -> anyhow::Result<Option<SlotGuard>> {
        let held = self.running.fetch_add(1, Ordering::SeqCst);
        let guard = SlotGuard {
            registry: self.clone(),
        };
        let now = unix_ms();
        for expired in self.store.purge_expired(now)? {
            // Dropping an expired run's bridge cancels its requests.
            self.live().remove(&expired);
        }
        let stored = self.store.count_runs()?;
        if held + stored >= MAX_SUSPENDED_RUNS {
            return Ok(None);
        }
        Ok(Some(guard))
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
        if !self.store.is_shared() {
            self.live()
                .insert(run_id.to_string(), LiveRun::Idle(Box::new(bridge)));
            return;
        }
        let stop = CancellationToken::new();
        let stop_after_tool_calls = CancellationToken::new();
        let store = self.store.clone();
        let id = run_id.to_string();
        let token = stop.clone();
        let after_tools = stop_after_tool_calls.clone();
        let task = tokio::spawn(async move {
            let expiry = std::time::Duration::from_millis(expires_at_ms.saturating_sub(unix_ms()));
            let expired = tokio::time::sleep(expiry);
            tokio::pin!(expired);
            loop {
                if after_tools.is_cancelled() && !bridge.has_tool_work() {
                    return Some(bridge);
                }
                tokio::select! {
                    _ = token.cancelled() => return Some(bridge),
                    _ = after_tools.cancelled(), if !after_tools.is_cancelled() => {}
                    _ = &mut expired => {
                        // Dropping the bridge cancels its requests.
                        let _ = store.purge_expired(unix_ms());
                        return None;
                    }
                    settled = bridge.next_settlements() => {
                        let Some(settled) = settled else { return Some(bridge) };
                        for s in settled {
                            let json = serde_json::to_string(&s).unwrap_or_default();
                            if let Err(e) = store.record_settlement(&id, generation, s.id, &json) {
                                tracing::warn!(run_id = %id, error = %e, "cannot record a settlement");
                            }
                        }
                    }
                }
            }
        });
        self.live().insert(
            run_id.to_string(),
            LiveRun::Draining {
                stop,
                stop_after_tool_calls,
                task,
            },
        );
    }

    /// Takes a parked run's bridge back from its drainer, if this process
    /// holds it.
    pub(crate) async fn take_live(&self, run_id: &str) -> Option<Bridge> {
        let live = self.live().remove(run_id)?;
        match live {
            LiveRun::Idle(bridge) => Some(*bridge),
            LiveRun::Draining { stop, task, .. } => {
                stop.cancel();
                task.await.ok().flatten()
            }
        }
    }

    /// Returns a bridge taken by a `wait` that was refused.
    pub(crate) fn put_back(&self, run_id: &str, bridge: Bridge) {
        self.live()
            .insert(run_id.to_string(), LiveRun::Idle(Box::new(bridge)));
    }

    /// Waits until no parked run of this process has a tool call queued or
    /// running (timers may remain: they are re-armed from their due time
    /// wherever the run resumes). A process that parks runs and then exits
    /// calls this first, so that calls it started settle and are recorded.
    pub(crate) async fn settle_tool_calls(&self) {
        let ids: Vec<String> = self.live().keys().cloned().collect();
        for id in ids {
            let Some(LiveRun::Draining {
                stop_after_tool_calls,
                task,
                ..
            }) = self.live().remove(&id)
            else {
                continue;
            };
            stop_after_tool_calls.cancel();
            if let Ok(Some(bridge)) = task.await {
                self.live().insert(id, LiveRun::Idle(Box::new(bridge)));
            }
        }
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
