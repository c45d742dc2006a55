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
use crate::state_key::StateKey;
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
/// the run, which of the hosts its snapshot names are alive, and the key
/// recorded settlements are sealed with.
pub(crate) struct Drainers {
    pub store: Arc<dyn StateStore>,
    pub run_id: String,
    pub alive: HashSet<String>,
    pub key: Option<StateKey>,
}

/// Waits for the settlement of request `id` of `run_id`, which `host`
/// drains.
pub(super) async fn await_settlement(
    store: Arc<dyn StateStore>,
    key: Option<StateKey>,
    run_id: String,
    id: u64,
    host: String,
) -> Landed {
    let recorded = |stored: &str| Landed::Settled(recorded(key.as_ref(), &run_id, id, stored));
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
                Ok(Some(stored)) => return recorded(&stored),
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
            if let Ok(Some(stored)) = store.recorded_settlement(&run_id, id).await {
                return recorded(&stored);
            }
            return Landed::Orphaned(id);
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
        _ => err(
            id,
            "the settlement recorded for this call is unreadable",
            "tool_error",
        ),
    }
}
