//! Requests another host drains (operations.md §5): a run resumed here
//! while the host that parked it still runs its tool calls waits for their
//! settlements in the state store instead of running them again.
//!
//! Each such request is one task of the bridge's in-flight set: it
//! registers a watch on the run's settlements, reads the store, and reads
//! it again only when the watch wakes (a host recorded a settlement of the
//! run: PostgreSQL's `NOTIFY`). Every [`DRAINER_LIVENESS_CHECK`] it asks
//! whether the draining host is still alive; once it is not, the request
//! lands [`Landed::Orphaned`] and the bridge applies the restart rule.

use super::settlement::{err, Settlement};
use crate::store::{SettlementWatch, StateStore};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How often a request awaited from another host checks that host's
/// liveness.
pub(crate) const DRAINER_LIVENESS_CHECK: Duration = Duration::from_secs(1);

/// How a request ends for the bridge.
pub(crate) enum Landed {
    /// It settled (here or on the host draining it).
    Settled(Settlement),
    /// The host draining it ended before recording its settlement.
    Orphaned(u64),
}

/// What a restore needs to await requests another host drains: the store,
/// the run, and which of the hosts its snapshot names are alive.
pub(crate) struct Drainers {
    pub store: Arc<dyn StateStore>,
    pub run_id: String,
    pub alive: HashSet<String>,
}

/// Waits for the settlement of request `id` of `run_id`, which `host`
/// drains.
pub(super) async fn await_settlement(
    store: Arc<dyn StateStore>,
    run_id: String,
    id: u64,
    host: String,
) -> Landed {
    // Without a watch (the store cannot listen now) the store is read at
    // every liveness check instead.
    let (mut watch, watching) = match store.watch_settlements(&run_id).await {
        Ok(watch) => (watch, true),
        Err(e) => {
            tracing::warn!(run_id, error = %e, "cannot watch a run's settlements; reading them every second");
            (SettlementWatch::never(), false)
        }
    };
    let mut read = true;
    loop {
        if read {
            match store.recorded_settlement(&run_id, id).await {
                Ok(Some(json)) => return Landed::Settled(recorded(id, &json)),
                Ok(None) => {}
                Err(e) => tracing::warn!(run_id, error = %e, "cannot read a recorded settlement"),
            }
        }
        tokio::select! {
            _ = watch.changed() => {
                read = true;
                continue;
            }
            _ = tokio::time::sleep(DRAINER_LIVENESS_CHECK) => read = !watching,
        }
        // A store that cannot answer leaves the request waiting: the
        // cell's deadline bounds the wait.
        if let Ok(false) = store.host_alive(&host).await {
            // What it recorded before it ended still counts.
            if let Ok(Some(json)) = store.recorded_settlement(&run_id, id).await {
                return Landed::Settled(recorded(id, &json));
            }
            return Landed::Orphaned(id);
        }
    }
}

/// A recorded settlement of request `id`, or the error it settles with
/// when the record is unreadable or names another request.
fn recorded(id: u64, json: &str) -> Settlement {
    match serde_json::from_str::<Settlement>(json) {
        Ok(settlement) if settlement.id == id => settlement,
        _ => err(
            id,
            "the settlement another host recorded for this call is unreadable",
            "tool_error",
        ),
    }
}
