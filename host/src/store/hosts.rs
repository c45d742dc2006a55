//! Hosts that drain parked runs, and waking a `wait` when another host
//! records a settlement it waits for (operations.md §5).
//!
//! A host that parks a run with tool calls still running announces itself
//! ([`HostStore::announce_host`]) and names itself in the snapshot as the
//! drainer of those calls. A host that resumes the run elsewhere asks
//! whether that host is alive ([`HostStore::host_alive`]); while it is, it
//! waits for the calls' settlements instead of running them again,
//! registered with [`HostStore::watch_settlements`] before it reads the
//! store ([`HostStore::recorded_settlements`]), so that no settlement
//! recorded in between is missed.
//!
//! # Cancels across hosts
//!
//! A cancel of a run that another process holds — resuming it in a
//! `wait`, or draining the tool calls of its parked run — is recorded in
//! the store ([`HostStore::record_cancels`]). Each process that holds runs
//! asks the store which of them are cancelled
//! ([`HostStore::cancelled_runs`]) every [`HostStore::cancel_poll_interval`]
//! and whenever [`HostStore::watch_cancels`] wakes (PostgreSQL: a `NOTIFY`
//! on `quickcell_cancel`), and ends them there: the `wait` ends `aborted`,
//! the drained calls get their cancel signal. A cancel record also makes
//! the run unclaimable and purgeable once no claim holds it; records are
//! kept for [`CANCEL_RECORD_TTL_MS`], longer than any run lives.

use super::StoreResult;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// How long a cancel record is kept, in milliseconds: past the longest
/// snapshot TTL (86,400 s) and a claim's grace, so that no run outlives
/// the record of its cancel.
pub const CANCEL_RECORD_TTL_MS: u64 = 25 * 60 * 60 * 1000;

/// Most run ids one [`HostStore::cancelled_runs`] call is given; callers
/// holding more ask in chunks.
pub const MAX_CANCEL_QUERY_RUNS: usize = 512;

/// Host liveness and settlement wake-ups. The defaults describe a store
/// no other host shares: it announces no host, so no snapshot names a
/// drainer and nothing waits on another host.
#[async_trait]
pub trait HostStore: Send + Sync {
    /// Records this host as alive, and keeps it recorded while the store
    /// is open; returns its id (the same for every call). `None` when the
    /// store has no hosts to tell apart.
    async fn announce_host(&self) -> StoreResult<Option<String>> {
        Ok(None)
    }

    /// Whether the host `host` (an id [`HostStore::announce_host`]
    /// returned, here or elsewhere) is alive. A host that exited, or whose
    /// announcement lapsed, is not.
    async fn host_alive(&self, _host: &str) -> StoreResult<bool> {
        Ok(false)
    }

    /// Starts watching the settlements of `run_id`: the watch wakes when
    /// any host sharing the store records one
    /// ([`RunStore::record_settlement`](super::RunStore::record_settlement)).
    /// Register before reading the store, so a settlement recorded between
    /// the read and the wait wakes it.
    async fn watch_settlements(&self, _run_id: &str) -> StoreResult<SettlementWatch> {
        Ok(SettlementWatch::never())
    }

    /// The settlements recorded for those of `request_ids` of `run_id`
    /// that have one, by request id, in the order they were recorded.
    /// Callers pass at most the requests one cell may have outstanding.
    async fn recorded_settlements(
        &self,
        _run_id: &str,
        _request_ids: &[u64],
    ) -> StoreResult<Vec<(u64, String)>> {
        Ok(Vec::new())
    }

    /// Records a cancel of each of `run_ids` (their owners already
    /// checked by the caller), kept until `expires_at_ms`, and wakes the
    /// [`HostStore::watch_cancels`] of every host. Recording one twice
    /// keeps the first. A store no other process shares records nothing:
    /// its runs are cancelled in-process.
    async fn record_cancels(&self, _run_ids: &[String], _expires_at_ms: u64) -> StoreResult<()> {
        Ok(())
    }

    /// Those of `run_ids` (at most [`MAX_CANCEL_QUERY_RUNS`]) that have a
    /// cancel record.
    async fn cancelled_runs(&self, _run_ids: &[String]) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }

    /// A watch that wakes when any host records a cancel; one that never
    /// wakes when the store cannot tell (polling alone then finds them).
    async fn watch_cancels(&self) -> StoreResult<SettlementWatch> {
        Ok(SettlementWatch::never())
    }

    /// How often a process holding runs asks for their cancels, or `None`
    /// when no other process shares the store (nothing to ask for).
    fn cancel_poll_interval(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A wake-up from the store: one run's settlements
/// ([`HostStore::watch_settlements`]) or any host's cancels
/// ([`HostStore::watch_cancels`]).
pub struct SettlementWatch(watch::Receiver<u64>);

impl SettlementWatch {
    /// A watch that never wakes.
    pub fn never() -> Self {
        Self(watch::channel(0).1)
    }

    /// A watch woken by every change `sender` sends (a backend's own
    /// wake-up, such as its cancel notifications).
    pub(crate) fn of(sender: &watch::Sender<u64>) -> Self {
        Self(sender.subscribe())
    }

    /// Waits until a settlement of the run is recorded (or the store can
    /// no longer tell, and the caller should read again) after the watch
    /// was made or last woke.
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The watches of this process, by run: what a backend keeps to implement
/// [`HostStore::watch_settlements`]. Entries nobody watches any more are
/// dropped as the map grows, so it holds at most about twice the watched
/// runs.
#[derive(Default)]
pub struct SettlementWakers {
    runs: Mutex<Wakers>,
}

#[derive(Default)]
struct Wakers {
    by_run: HashMap<String, watch::Sender<u64>>,
    /// Size past which the next watch forgets unwatched runs.
    sweep_at: usize,
}

/// Fewest entries before unwatched runs are swept.
const MIN_SWEEP_AT: usize = 64;

impl SettlementWakers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Wakers> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A watch on `run_id`'s settlements.
    pub fn watch(&self, run_id: &str) -> SettlementWatch {
        let mut wakers = self.lock();
        if wakers.by_run.len() >= wakers.sweep_at.max(MIN_SWEEP_AT) {
            wakers.by_run.retain(|_, s| s.receiver_count() > 0);
            wakers.sweep_at = wakers.by_run.len() * 2;
        }
        let receiver = match wakers.by_run.get(run_id) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, receiver) = watch::channel(0);
                wakers.by_run.insert(run_id.to_string(), sender);
                receiver
            }
        };
        SettlementWatch(receiver)
    }

    /// Wakes the watches of `run_id`.
    pub fn wake(&self, run_id: &str) {
        let mut wakers = self.lock();
        if let Some(sender) = wakers.by_run.get(run_id) {
            if sender.receiver_count() == 0 {
                wakers.by_run.remove(run_id);
            } else {
                sender.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// Wakes every watch (the backend may have missed wake-ups, e.g. while
    /// it reconnected), and forgets runs nobody watches.
    pub fn wake_all(&self) {
        let mut wakers = self.lock();
        wakers.by_run.retain(|_, s| s.receiver_count() > 0);
        for sender in wakers.by_run.values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Runs watched now.
    pub fn watched(&self) -> usize {
        self.lock()
            .by_run
            .values()
            .filter(|s| s.receiver_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woke(watch: &mut SettlementWatch) -> bool {
        tokio::time::timeout(Duration::from_millis(50), watch.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_watch_wakes_for_its_run_only_and_after_it_was_made() {
        let wakers = SettlementWakers::default();
        wakers.wake("cm_a");
        let mut a = wakers.watch("cm_a");
        let mut b = wakers.watch("cm_b");
        assert!(
            !woke(&mut a).await,
            "a wake before the watch does not count"
        );
        wakers.wake("cm_a");
        assert!(woke(&mut a).await);
        assert!(!woke(&mut b).await);
        // A wake between two waits is not lost.
        wakers.wake("cm_b");
        assert!(woke(&mut b).await);
        wakers.wake_all();
        assert!(woke(&mut a).await && woke(&mut b).await);
        assert!(!woke(&mut SettlementWatch::never()).await);
    }

    #[test]
    fn unwatched_runs_are_forgotten_as_the_map_grows() {
        let wakers = SettlementWakers::default();
        let kept = wakers.watch("cm_kept");
        for i in 0..10_000 {
            drop(wakers.watch(&format!("cm_{i}")));
        }
        assert!(wakers.lock().by_run.len() <= 2 * MIN_SWEEP_AT);
        assert_eq!(wakers.watched(), 1);
        drop(kept);
        wakers.wake_all();
        assert_eq!(wakers.lock().by_run.len(), 0);
    }
}
