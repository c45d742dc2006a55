//! The library's public surface as an embedder uses it: thread safety, and
//! a state store of the embedder's own behind the `StateStore` trait.

use crate::{value, waiting};
use quickcell::store::{
    ClaimRefused, Claimed, HostStore, MemoryStateStore, ParkedRun, ResultStore, RunStore,
    SessionStore, SettlementWatch, SqliteStateStore, StateStore, StoreResult, UsageFilter,
    UsageRecord, UsageStore, UsageTotals,
};
use quickcell::{ExecInput, Owner, Runtime, WaitInput};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

#[test]
fn runtime_and_its_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<Runtime>();
    send_sync::<quickcell::RuntimeBuilder>();
    send_sync::<Arc<dyn StateStore>>();
    let runtime = async {
        let rt = Runtime::builder().build().await.unwrap();
        rt.exec(ExecInput::new("t", "return 1")).await
    };
    send(&runtime);
}

/// An embedder's backend: another store (the in-memory one by default),
/// counting what reaches it; it refuses the first `refused_records`
/// settlements recorded.
struct Counting {
    inner: Arc<dyn StateStore>,
    parks: AtomicUsize,
    claims: AtomicUsize,
    commits: AtomicUsize,
    records: AtomicUsize,
    refused_records: AtomicUsize,
}

impl Default for Counting {
    fn default() -> Self {
        Self::over(Arc::new(MemoryStateStore::default()))
    }
}

impl Counting {
    fn over(inner: Arc<dyn StateStore>) -> Self {
        Self {
            inner,
            parks: AtomicUsize::new(0),
            claims: AtomicUsize::new(0),
            commits: AtomicUsize::new(0),
            records: AtomicUsize::new(0),
            refused_records: AtomicUsize::new(0),
        }
    }
}

#[async_trait::async_trait]
impl RunStore for Counting {
    async fn park(&self, run: ParkedRun) -> StoreResult<()> {
        self.parks.fetch_add(1, SeqCst);
        self.inner.park(run).await
    }
    async fn claim(
        &self,
        run_id: &str,
        owner: &Owner,
        guest_build: Option<&str>,
        now_ms: u64,
        claim_until_ms: u64,
    ) -> StoreResult<Result<Claimed, ClaimRefused>> {
        self.claims.fetch_add(1, SeqCst);
        self.inner
            .claim(run_id, owner, guest_build, now_ms, claim_until_ms)
            .await
    }
    async fn unclaim(&self, run_id: &str, lease: u64) -> StoreResult<()> {
        self.inner.unclaim(run_id, lease).await
    }
    async fn remove(&self, run_id: &str) -> StoreResult<()> {
        self.inner.remove(run_id).await
    }
    async fn extend_parked(
        &self,
        run_id: &str,
        owner: &Owner,
        expires_at_ms: u64,
    ) -> StoreResult<bool> {
        self.inner.extend_parked(run_id, owner, expires_at_ms).await
    }
    async fn release(&self, run_id: &str, lease: u64) -> StoreResult<bool> {
        self.inner.release(run_id, lease).await
    }
    async fn record_settlement(
        &self,
        run_id: &str,
        request_id: u64,
        settlement: &str,
    ) -> StoreResult<bool> {
        self.records.fetch_add(1, SeqCst);
        let refuse = self
            .refused_records
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refuse {
            return Err(quickcell::store::StoreError::from(anyhow::anyhow!(
                "the store is down"
            )));
        }
        self.inner
            .record_settlement(run_id, request_id, settlement)
            .await
    }
    async fn count_runs(&self) -> StoreResult<usize> {
        self.inner.count_runs().await
    }
    async fn count_session_runs(&self, session: &str) -> StoreResult<usize> {
        self.inner.count_session_runs(session).await
    }
    async fn purge_expired(&self, now_ms: u64) -> StoreResult<Vec<String>> {
        self.inner.purge_expired(now_ms).await
    }
    async fn remove_session_runs(&self, session: &str) -> StoreResult<Vec<String>> {
        self.inner.remove_session_runs(session).await
    }
}

#[async_trait::async_trait]
impl HostStore for Counting {
    async fn announce_host(&self) -> StoreResult<Option<String>> {
        self.inner.announce_host().await
    }
    async fn host_alive(&self, host: &str) -> StoreResult<bool> {
        self.inner.host_alive(host).await
    }
    async fn watch_settlements(&self, run_id: &str) -> StoreResult<SettlementWatch> {
        self.inner.watch_settlements(run_id).await
    }
    async fn recorded_settlements(
        &self,
        run_id: &str,
        request_ids: &[u64],
    ) -> StoreResult<Vec<(u64, String)>> {
        self.inner.recorded_settlements(run_id, request_ids).await
    }
}

#[async_trait::async_trait]
impl SessionStore for Counting {
    async fn store_get(&self, session: &str, key: &str) -> StoreResult<Option<String>> {
        self.inner.store_get(session, key).await
    }
    async fn store_entries(&self, session: &str) -> StoreResult<Vec<(String, String)>> {
        self.inner.store_entries(session).await
    }
    async fn store_total_bytes(&self, session: &str) -> StoreResult<usize> {
        self.inner.store_total_bytes(session).await
    }
    async fn store_commit(
        &self,
        session: &str,
        writes: Vec<(String, Option<String>)>,
    ) -> StoreResult<()> {
        self.commits.fetch_add(1, SeqCst);
        self.inner.store_commit(session, writes).await
    }
    async fn store_clear(&self, session: &str) -> StoreResult<usize> {
        self.inner.store_clear(session).await
    }
}

#[async_trait::async_trait]
impl ResultStore for Counting {
    async fn result_save(
        &self,
        agent_run: &str,
        id: &str,
        json: String,
        max_count: usize,
        max_bytes: usize,
    ) -> StoreResult<bool> {
        self.inner
            .result_save(agent_run, id, json, max_count, max_bytes)
            .await
    }
    async fn result_load(&self, agent_run: &str, id: &str) -> StoreResult<Option<String>> {
        self.inner.result_load(agent_run, id).await
    }
    async fn result_delete(&self, agent_run: &str, id: &str) -> StoreResult<bool> {
        self.inner.result_delete(agent_run, id).await
    }
    async fn result_clear(&self, agent_run: &str) -> StoreResult<usize> {
        self.inner.result_clear(agent_run).await
    }
}

#[async_trait::async_trait]
impl UsageStore for Counting {
    async fn usage_record(&self, record: UsageRecord) -> StoreResult<()> {
        self.inner.usage_record(record).await
    }
    async fn usage_totals(&self, filter: &UsageFilter) -> StoreResult<UsageTotals> {
        self.inner.usage_totals(filter).await
    }
    async fn usage_list(
        &self,
        filter: &UsageFilter,
        limit: usize,
    ) -> StoreResult<Vec<UsageRecord>> {
        self.inner.usage_list(filter, limit).await
    }
}

impl StateStore for Counting {
    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }
}

#[tokio::test]
async fn an_embedders_state_store_holds_parked_runs_and_session_values() {
    let store = Arc::new(Counting::default());
    let rt = Runtime::builder()
        .state_store(store.clone())
        .build()
        .await
        .unwrap();
    let owner = Owner {
        agent_run: "run".into(),
        session: "session".into(),
    };
    let cell = "await store('k', {n: 1}); await yield_control(); \
                const saved = await results.save([1, 2, 3]); \
                return [await load('k'), await results.load(saved.id)];";
    let r = rt
        .exec(ExecInput::new("park", cell).with_owner(owner.clone()))
        .await;
    let run_id = waiting(&r).run_id.clone();
    assert_eq!(
        store.parks.load(SeqCst),
        1,
        "the parked run went to the store"
    );
    assert_eq!(store.inner.count_runs().await.unwrap(), 1);
    let r = rt.wait(WaitInput::new(&run_id).with_owner(owner)).await;
    assert_eq!(value(&r), json!([{"n": 1}, [1, 2, 3]]));
    assert_eq!(store.claims.load(SeqCst), 1);
    assert_eq!(
        store.commits.load(SeqCst),
        1,
        "the writes were committed once"
    );
    assert_eq!(
        store
            .inner
            .store_get("session", "k")
            .await
            .unwrap()
            .as_deref(),
        Some(r#"{"n":1}"#)
    );
    assert_eq!(
        store.inner.count_runs().await.unwrap(),
        0,
        "the run is gone"
    );
}

/// A drainer retries a store that refuses its records: the settlement of a
/// call still running when the cell parked is recorded at the third
/// attempt, and a `wait` of another runtime on the same store (which has
/// no live bridge, so it restores the snapshot and awaits the call from
/// the host draining it) gets it; the call ran once.
#[tokio::test]
async fn a_drainer_retries_records_the_store_refuses() {
    let dir = std::env::temp_dir().join(format!("quickcell-retry-{}", uuid::Uuid::new_v4()));
    let store = Arc::new(Counting::over(Arc::new(
        SqliteStateStore::open(Some(&dir)).unwrap(),
    )));
    store.refused_records.store(2, SeqCst);
    let count = dir.join("runs");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/nap.sh");
    let config = quickcell::Config::parse(&format!(
        "[[tools]]\nname = \"nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"1\"]\n",
        script.display().to_string(),
        count.display().to_string(),
    ))
    .unwrap();
    let runtime = async |timeout_ms| {
        Runtime::builder()
            .state_store(store.clone())
            .limits(quickcell::Limits::default().with_timeout_ms(timeout_ms))
            .tools(quickcell::ToolRegistry::from_config(&config).unwrap())
            .build()
            .await
            .unwrap()
    };
    let (parking, resuming) = (runtime(300).await, runtime(20_000).await);
    let r = parking
        .exec(ExecInput::new("nap", "return await nap({n: 7})"))
        .await;
    let run_id = waiting(&r).run_id.clone();
    let r = resuming.wait(WaitInput::new(&run_id)).await;
    assert_eq!(value(&r), json!({"napped": {"n": 7}}));
    assert_eq!(
        store.records.load(SeqCst),
        3,
        "two refused, the third recorded"
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);
    drop((parking, resuming));
    std::fs::remove_dir_all(dir).unwrap();
}
