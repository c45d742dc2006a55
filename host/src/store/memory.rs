use super::{
    ClaimRefused, Claimed, Owner, ParkedRun, ResultStore, RunStore, SessionStore, StateStore,
    StoreResult, UsageFilter, UsageRecord, UsageStore, UsageTotals, MAX_USAGE_RECORDS_LISTED,
};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;

/// Most usage records [`MemoryStateStore`] keeps (about 20 MB); past it
/// the oldest tenth is dropped. A ledger that must be complete needs a
/// persistent store (SQLite keeps every record).
pub const MAX_MEMORY_USAGE_RECORDS: usize = 100_000;

/// [`StateStore`] in this process's memory: runs end with the runtime.
#[derive(Default)]
pub struct MemoryStateStore {
    runs: Mutex<HashMap<String, MemoryRun>>,
    /// (session, key) → value.
    session_store: Mutex<HashMap<(String, String), String>>,
    /// (agent run, id) → JSON.
    results: Mutex<HashMap<(String, String), String>>,
    /// The usage ledger, oldest first.
    usage: Mutex<Vec<UsageRecord>>,
    /// Watches of runs' settlements.
    wakers: super::SettlementWakers,
    /// Cancel records: run id → expiry (Unix ms).
    cancels: Mutex<HashMap<String, u64>>,
    /// Bumped by every cancel recorded.
    cancel_wake: tokio::sync::watch::Sender<u64>,
}

use super::lock;

struct MemoryRun {
    run: ParkedRun,
    /// `Some(until)` while a `wait` holds it.
    claimed_until_ms: Option<u64>,
    /// The claim counter (the latest claim's lease).
    lease: u64,
    /// Recorded settlements (request id, JSON), in the order recorded.
    settlements: Vec<(u64, String)>,
}

impl MemoryRun {
    fn row(&self, cancelled: bool) -> super::RunRow<'_> {
        super::RunRow {
            agent_run: &self.run.owner.agent_run,
            session: &self.run.owner.session,
            claimed_until_ms: self.claimed_until_ms,
            expires_at_ms: self.run.expires_at_ms,
            regrant: self.run.regrant,
            cancelled,
            guest_build: Some(&self.run.guest_build),
        }
    }
}

impl MemoryStateStore {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, MemoryRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn cancelled(&self, run_id: &str) -> bool {
        lock(&self.cancels).contains_key(run_id)
    }
}

/// How often a runtime over a [`MemoryStateStore`] another runtime of the
/// process shares asks for cancels (a recorded cancel also wakes it).
const MEMORY_CANCEL_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs here are this process's alone: no host is announced, so no run
/// waits on another host; watches and recorded settlements work as in the
/// shared backends.
#[async_trait]
impl super::HostStore for MemoryStateStore {
    async fn record_cancels(&self, run_ids: &[String], expires_at_ms: u64) -> StoreResult<()> {
        let mut cancels = lock(&self.cancels);
        for id in run_ids {
            cancels.entry(id.clone()).or_insert(expires_at_ms);
        }
        drop(cancels);
        self.cancel_wake.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    async fn cancelled_runs(&self, run_ids: &[String]) -> StoreResult<Vec<String>> {
        let cancels = lock(&self.cancels);
        Ok(run_ids
            .iter()
            .filter(|id| cancels.contains_key(*id))
            .cloned()
            .collect())
    }

    async fn watch_cancels(&self) -> StoreResult<super::SettlementWatch> {
        Ok(super::SettlementWatch::of(&self.cancel_wake))
    }

    fn cancel_poll_interval(&self) -> Option<std::time::Duration> {
        Some(MEMORY_CANCEL_POLL)
    }

    async fn watch_settlements(&self, run_id: &str) -> StoreResult<super::SettlementWatch> {
        Ok(self.wakers.watch(run_id))
    }

    async fn recorded_settlements(
        &self,
        run_id: &str,
        request_ids: &[u64],
    ) -> StoreResult<Vec<(u64, String)>> {
        let wanted: std::collections::HashSet<u64> = request_ids.iter().copied().collect();
        Ok(self
            .runs()
            .get(run_id)
            .map(|entry| {
                entry
                    .settlements
                    .iter()
                    .filter(|(id, _)| wanted.contains(id))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }
}

impl StateStore for MemoryStateStore {
    fn is_shared(&self) -> bool {
        false
    }
}

#[async_trait]
impl RunStore for MemoryStateStore {
    async fn park(&self, run: ParkedRun) -> StoreResult<()> {
        let mut runs = self.runs();
        let lease = runs.get(&run.run_id).map_or(0, |old| old.lease);
        if let Some(held) = run.lease {
            if !runs.contains_key(&run.run_id) || held != lease {
                return Err(anyhow::anyhow!(super::fenced(&run.run_id)).into());
            }
        }
        let settlements = runs
            .remove(&run.run_id)
            .map(|old| old.settlements)
            .unwrap_or_default()
            .into_iter()
            .filter(|(id, _)| run.awaiting.contains(id))
            .collect();
        runs.insert(
            run.run_id.clone(),
            MemoryRun {
                run,
                claimed_until_ms: None,
                lease,
                settlements,
            },
        );
        Ok(())
    }

    async fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> StoreResult<Result<Claimed, ClaimRefused>> {
        let mut runs = self.runs();
        let Some(entry) = runs.get_mut(run_id) else {
            return Ok(Err(ClaimRefused::Unavailable));
        };
        match entry
            .row(self.cancelled(run_id))
            .claim(owner, guest_build, now_ms)
        {
            super::ClaimDecision::Remove => {
                runs.remove(run_id);
                return Ok(Err(ClaimRefused::Unavailable));
            }
            super::ClaimDecision::Refuse(refused) => return Ok(Err(refused)),
            super::ClaimDecision::Grant => {}
        }
        entry.claimed_until_ms = Some(claim_until_ms);
        entry.lease += 1;
        let generation = entry.run.generation;
        Ok(Ok(Claimed {
            lease: entry.lease,
            generation,
            snapshot: entry.run.snapshot.clone(),
            settlements: entry.settlements.clone(),
        }))
    }

    async fn unclaim(&self, run_id: &str, lease: u64) -> StoreResult<()> {
        if let Some(entry) = self.runs().get_mut(run_id) {
            if entry.lease == lease {
                entry.claimed_until_ms = None;
            }
        }
        Ok(())
    }

    async fn remove(&self, run_id: &str) -> StoreResult<()> {
        self.runs().remove(run_id);
        Ok(())
    }

    async fn extend_parked(
        &self,
        run_id: &str,
        owner: &Owner,
        expires_at_ms: u64,
    ) -> StoreResult<bool> {
        let mut runs = self.runs();
        match runs.get_mut(run_id) {
            Some(entry) if entry.claimed_until_ms.is_none() && entry.run.owner == *owner => {
                entry.run.expires_at_ms = entry.run.expires_at_ms.max(expires_at_ms);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release(&self, run_id: &str, lease: u64) -> StoreResult<bool> {
        let mut runs = self.runs();
        if runs.get(run_id).is_some_and(|e| e.lease == lease) {
            runs.remove(run_id);
            return Ok(true);
        }
        Ok(false)
    }

    async fn remove_session_runs(&self, session: &str) -> StoreResult<Vec<String>> {
        let mut runs = self.runs();
        let ids: Vec<String> = runs
            .iter()
            .filter(|(_, e)| e.run.owner.session == session)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            runs.remove(id);
        }
        Ok(ids)
    }

    async fn record_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        settlement: &str,
    ) -> StoreResult<bool> {
        let recorded = match self.runs().get_mut(run_id) {
            None => return Ok(false),
            Some(entry) if entry.settlements.iter().any(|(id, _)| *id == request_id) => false,
            Some(entry) => {
                entry.settlements.push((request_id, settlement.to_string()));
                true
            }
        };
        if recorded {
            self.wakers.wake(run_id);
        }
        Ok(true)
    }

    async fn count_runs(&self) -> StoreResult<usize> {
        Ok(self.runs().len())
    }

    async fn count_session_runs(&self, session: &str) -> StoreResult<usize> {
        Ok(self
            .runs()
            .values()
            .filter(|e| e.run.owner.session == session)
            .count())
    }

    async fn purge_expired(&self, now_ms: u64) -> StoreResult<Vec<String>> {
        let mut runs = self.runs();
        let expired: Vec<String> = runs
            .iter()
            // A lapsed claim of a restart-safe run stays for a new one.
            .filter(|(id, e)| e.row(self.cancelled(id)).purgeable(now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            runs.remove(id);
        }
        drop(runs);
        lock(&self.cancels).retain(|_, expires| *expires > now_ms);
        Ok(expired)
    }
}

#[async_trait]
impl SessionStore for MemoryStateStore {
    async fn store_get(&self, session: &str, key: &str) -> StoreResult<Option<String>> {
        Ok(lock(&self.session_store)
            .get(&(session.to_string(), key.to_string()))
            .cloned())
    }

    async fn store_entries(&self, session: &str) -> StoreResult<Vec<(String, String)>> {
        Ok(lock(&self.session_store)
            .iter()
            .filter(|((s, _), _)| s == session)
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect())
    }

    async fn store_total_bytes(&self, session: &str) -> StoreResult<usize> {
        Ok(lock(&self.session_store)
            .iter()
            .filter(|((s, _), _)| s == session)
            .map(|(_, v)| v.len())
            .sum())
    }

    async fn store_commit(
        &self,
        session: &str,
        writes: Vec<(String, Option<String>)>,
    ) -> StoreResult<()> {
        let mut store = lock(&self.session_store);
        for (key, value) in writes {
            let k = (session.to_string(), key);
            match value {
                Some(v) => store.insert(k, v),
                None => store.remove(&k),
            };
        }
        Ok(())
    }

    async fn store_clear(&self, session: &str) -> StoreResult<usize> {
        let mut store = lock(&self.session_store);
        let before = store.len();
        store.retain(|(s, _), _| s != session);
        Ok(before - store.len())
    }
}

#[async_trait]
impl ResultStore for MemoryStateStore {
    async fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: String,
        max_count: usize,
        max_bytes: usize,
    ) -> StoreResult<bool> {
        let mut results = lock(&self.results);
        let (n, bytes) = results
            .iter()
            .filter(|((a, _), _)| a == agent_run)
            .fold((0, 0), |(n, b), (_, v)| (n + 1, b + v.len()));
        if n >= max_count || bytes + json.len() > max_bytes {
            return Ok(false);
        }
        results.insert((agent_run.to_string(), id.to_string()), json);
        Ok(true)
    }

    async fn result_clear(&self, agent_run: &str) -> StoreResult<usize> {
        let mut results = lock(&self.results);
        let before = results.len();
        results.retain(|(a, _), _| a != agent_run);
        Ok(before - results.len())
    }

    async fn result_load(&self, agent_run: &str, id: &str) -> StoreResult<Option<String>> {
        Ok(lock(&self.results)
            .get(&(agent_run.to_string(), id.to_string()))
            .cloned())
    }

    async fn result_delete(&self, agent_run: &str, id: &str) -> StoreResult<bool> {
        Ok(lock(&self.results)
            .remove(&(agent_run.to_string(), id.to_string()))
            .is_some())
    }
}

#[async_trait]
impl UsageStore for MemoryStateStore {
    async fn usage_record(&self, record: UsageRecord) -> StoreResult<()> {
        let mut usage = lock(&self.usage);
        if usage.len() >= MAX_MEMORY_USAGE_RECORDS {
            // The oldest tenth goes at once, so dropping stays amortized O(1).
            usage.drain(..MAX_MEMORY_USAGE_RECORDS / 10);
        }
        usage.push(record);
        Ok(())
    }

    async fn usage_totals(&self, filter: &UsageFilter) -> StoreResult<UsageTotals> {
        let mut totals = UsageTotals::default();
        for record in lock(&self.usage).iter().filter(|r| filter.selects(r)) {
            totals.add(record);
        }
        Ok(totals)
    }

    async fn usage_list(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        let limit = limit.min(MAX_USAGE_RECORDS_LISTED);
        let usage = lock(&self.usage);
        let mut latest: Vec<UsageRecord> = usage
            .iter()
            .rev()
            .filter(|r| filter.selects(r))
            .take(limit)
            .cloned()
            .collect();
        latest.reverse();
        Ok(latest)
    }
}
