//! Requests another host drains (operations.md §5): a run resumed here
//! while the host that parked it still runs its tool calls waits for their
//! settlements in the state store instead of running them again.
//!
//! One task of the bridge's in-flight set awaits them all: it registers a
//! watch on the run's settlements, reads those of the awaited requests in
//! one query, and reads again when the watch wakes (a host recorded a
//! settlement of the run: PostgreSQL's `NOTIFY`) — one query per wake-up,
//! however many requests it awaits. Every [`DRAINER_LIVENESS_CHECK`] (the
//! first at once) it asks whether the draining hosts are alive; a request
//! whose host is not lands orphaned, and the bridge applies the restart
//! rule. Every [`FALLBACK_READ_CHECKS`] checks it also reads the store, in
//! case a wake-up was lost (a notification the server could not queue, a
//! `LISTEN` connection that died unnoticed); without a watch, and after a
//! failed read, it reads at every check. The task ends at the first
//! settlement or orphan, and the bridge starts it again for the requests
//! still awaited.

use super::settlement::{err, Settlement};
use crate::state_key::StateKey;
use crate::store::{SettlementWatch, StateStore};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// How often a request awaited from another host checks that host's
/// liveness.
pub(crate) const DRAINER_LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// Liveness checks between two reads of the store that no wake-up asked
/// for (a guard against lost wake-ups: 10 s).
pub(crate) const FALLBACK_READ_CHECKS: u32 = 10;

/// How a request, or the requests other hosts drain, end for the bridge.
pub(crate) enum Landed {
    /// It settled here.
    Settled(Settlement),
    /// Settlements the draining hosts recorded, in the order recorded, and
    /// requests whose host ended before recording theirs.
    Remote {
        settled: Vec<Settlement>,
        orphaned: Vec<u64>,
    },
}

/// What a restore needs to await requests the hosts its snapshot names
/// drain: the store, the run, and the key recorded settlements are sealed
/// with.
pub(crate) struct Drainers {
    pub store: Arc<dyn StateStore>,
    pub run_id: String,
    pub key: Option<StateKey>,
}

/// Waits until a request of `awaited` (request id → the host draining it)
/// settles or loses its host.
pub(super) async fn await_settlements(
    store: Arc<dyn StateStore>,
    key: Option<StateKey>,
    run_id: String,
    awaited: BTreeMap<u64, String>,
) -> Landed {
    let ids: Vec<u64> = awaited.keys().copied().collect();
    let read = async |store: &Arc<dyn StateStore>| -> Result<Vec<Settlement>, ()> {
        match store.recorded_settlements(&run_id, &ids).await {
            Ok(found) => Ok(found
                .iter()
                .map(|(id, stored)| recorded(key.as_ref(), &run_id, *id, stored))
                .collect()),
            Err(e) => {
                tracing::warn!(run_id, error = %format!("{e:#}"), "cannot read recorded settlements");
                Err(())
            }
        }
    };
    let (mut watch, watching) = match store.watch_settlements(&run_id).await {
        Ok(watch) => (watch, true),
        Err(e) => {
            tracing::warn!(run_id, error = %format!("{e:#}"), "cannot watch a run's settlements; reading them every second");
            (SettlementWatch::never(), false)
        }
    };
    let hosts: BTreeSet<&String> = awaited.values().collect();
    // One schedule for the checks, which wake-ups do not postpone; its
    // first tick is at once, so a host that ended before the restore is
    // found at once.
    let mut checks = tokio::time::interval(DRAINER_LIVENESS_CHECK);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u32 = 0;
    let mut due = true;
    loop {
        if due {
            match read(&store).await {
                Ok(settled) if !settled.is_empty() => {
                    return Landed::Remote {
                        settled,
                        orphaned: Vec::new(),
                    }
                }
                Ok(_) => due = false,
                // Read again at the next check.
                Err(()) => {}
            }
        }
        tokio::select! {
            _ = watch.changed() => {
                due = true;
                continue;
            }
            _ = checks.tick() => {}
        }
        ticks = ticks.wrapping_add(1);
        if !watching || ticks.is_multiple_of(FALLBACK_READ_CHECKS) {
            due = true;
        }
        let mut ended = Vec::new();
        for host in &hosts {
            // A store that cannot answer leaves the requests waiting: the
            // cell's deadline bounds the wait.
            if let Ok(false) = store.host_alive(host).await {
                ended.push(*host);
            }
        }
        if !ended.is_empty() {
            // What they recorded before they ended still counts.
            let settled = read(&store).await.unwrap_or_default();
            let orphaned = awaited
                .iter()
                .filter(|(id, host)| ended.contains(host) && !settled.iter().any(|s| s.id == **id))
                .map(|(id, _)| *id)
                .collect();
            return Landed::Remote { settled, orphaned };
        }
    }
}

/// The settlement recorded for request `id` of `run_id` (`stored`: sealed
/// with `key`, or JSON without one), or the error it settles with when the
/// record does not open, is unreadable or names another request.
pub(crate) fn recorded(key: Option<&StateKey>, run_id: &str, id: u64, stored: &str) -> Settlement {
    let json = match key {
        Some(key) => match key.open_settlement(run_id, id, stored) {
            Ok(json) => json,
            Err(e) => {
                tracing::warn!(run_id, request_id = id, error = %e, "a recorded settlement is refused");
                return err(
                    id,
                    format!("the settlement recorded for this call is refused: {e}"),
                    "tool_error",
                );
            }
        },
        None => stored.to_string(),
    };
    match serde_json::from_str::<Settlement>(&json) {
        Ok(settlement) if settlement.id == id => settlement,
        Ok(settlement) => err(
            id,
            format!(
                "the settlement recorded for this call names another call ({})",
                settlement.id
            ),
            "tool_error",
        ),
        Err(e) => err(
            id,
            format!("the settlement recorded for this call is unreadable: {e}"),
            "tool_error",
        ),
    }
}
