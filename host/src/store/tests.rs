//! The conformance suite of the state-store traits: every backend passes it.

use super::*;
use std::sync::Arc;

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
        lease: None,
        regrant: false,
        awaiting: vec![1, 4, 5],
        guest_build: String::new(),
    }
}

/// One store of each backend built in (PostgreSQL: a fresh database).
async fn stores() -> Vec<Arc<dyn StateStore>> {
    vec![
        #[cfg(feature = "sqlite")]
        Arc::new(SqliteStateStore::open(None).unwrap()),
        #[cfg(feature = "postgres")]
        Arc::new(
            PostgresStateStore::connect(&crate::testing::postgres_database())
                .await
                .unwrap(),
        ),
        Arc::new(MemoryStateStore::default()),
    ]
}

#[tokio::test]
async fn claim_checks_in_the_contract_order() {
    for store in stores().await {
        claim_order(&*store).await;
    }
}

async fn claim_order(store: &dyn StateStore) {
    store.park(parked("r1", 1_000)).await.unwrap();
    let claim = async |o: &Owner, now| store.claim("r1", o, None, now, now + 100).await.unwrap();
    assert_eq!(
        claim(&owner("a", "s"), 2_000).await.unwrap_err(),
        ClaimRefused::Unavailable
    );
    store.park(parked("r1", 10_000)).await.unwrap();
    assert_eq!(
        claim(&owner("b", "s"), 1).await.unwrap_err(),
        ClaimRefused::OtherAgentRun
    );
    assert_eq!(
        claim(&owner("a", "t"), 1).await.unwrap_err(),
        ClaimRefused::OtherSession
    );
    assert!(store
        .record_settlement("r1", 4, "{\"id\":4}")
        .await
        .unwrap());
    // Not recorded for a run the store does not hold.
    assert!(!store
        .record_settlement("r9", 5, "{\"id\":5}")
        .await
        .unwrap());
    let got = claim(&owner("a", "s"), 1).await.unwrap();
    assert_eq!(got.snapshot, vec![1, 2, 3]);
    assert_eq!(got.settlements, vec![(4, "{\"id\":4}".to_string())]);
    assert_eq!(
        claim(&owner("a", "s"), 1).await.unwrap_err(),
        ClaimRefused::Busy
    );
    // A claim abandoned past its deadline is not re-granted.
    assert_eq!(
        claim(&owner("a", "s"), 500).await.unwrap_err(),
        ClaimRefused::Unavailable
    );
    store.purge_expired(500).await.unwrap();
    assert_eq!(store.count_runs().await.unwrap(), 0);
}

#[tokio::test]
async fn unclaim_makes_a_run_waitable_again() {
    for store in stores().await {
        unclaim(&*store).await;
    }
}

async fn unclaim(store: &dyn StateStore) {
    store.park(parked("r1", 10_000)).await.unwrap();
    let claimed = store
        .claim("r1", &owner("a", "s"), None, 1, 100)
        .await
        .unwrap()
        .unwrap();
    // A stale lease changes nothing; the claim's own returns the run.
    store.unclaim("r1", claimed.lease + 1).await.unwrap();
    assert_eq!(
        store
            .claim("r1", &owner("a", "s"), None, 1, 100)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Busy
    );
    store.unclaim("r1", claimed.lease).await.unwrap();
    assert!(store
        .claim("r1", &owner("a", "s"), None, 1, 100)
        .await
        .unwrap()
        .is_ok());
    store.remove("r1").await.unwrap();
    assert_eq!(
        store
            .claim("r1", &owner("a", "s"), None, 1, 100)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Unavailable
    );
}

#[tokio::test]
async fn purge_and_count_purges_then_counts_all_and_by_session() {
    for store in stores().await {
        store.park(parked("old", 1_000)).await.unwrap();
        store.park(parked("new", 10_000)).await.unwrap();
        let mut other = parked("theirs", 10_000);
        other.owner = owner("a", "t");
        store.park(other).await.unwrap();
        let counts = store.purge_and_count(5_000, "s").await.unwrap();
        assert_eq!(counts.purged, vec!["old".to_string()]);
        assert_eq!((counts.runs, counts.session_runs), (2, 1));
        let counts = store.purge_and_count(5_000, "nobody").await.unwrap();
        assert_eq!(
            (counts.purged.len(), counts.runs, counts.session_runs),
            (0, 2, 0)
        );
    }
}

#[tokio::test]
async fn closing_a_session_removes_its_runs_values_and_results_only() {
    for store in stores().await {
        let mut other = parked("r2", 10_000);
        other.owner = owner("b", "t");
        store.park(parked("r1", 10_000)).await.unwrap();
        store.park(other).await.unwrap();
        store
            .record_settlement("r1", 1, "{\"id\":1}")
            .await
            .unwrap();
        // A run being resumed goes too.
        let mut resuming = parked("r3", 10_000);
        resuming.run_id = "r3".into();
        store.park(resuming).await.unwrap();
        store
            .claim("r3", &owner("a", "s"), None, 1, 100)
            .await
            .unwrap()
            .unwrap();
        let writes = |v: &str| vec![("k".to_string(), Some(v.to_string()))];
        store.store_commit("s", writes("1")).await.unwrap();
        store.store_commit("t", writes("2")).await.unwrap();
        assert!(store
            .result_save("a", "x", "1".into(), 10, 100)
            .await
            .unwrap());
        assert!(store
            .result_save("b", "y", "2".into(), 10, 100)
            .await
            .unwrap());

        let mut removed = store.remove_session_runs("s").await.unwrap();
        removed.sort();
        assert_eq!(removed, ["r1", "r3"]);
        assert_eq!(store.store_clear("s").await.unwrap(), 1);
        assert_eq!(store.result_clear("a").await.unwrap(), 1);

        assert_eq!(store.count_session_runs("s").await.unwrap(), 0);
        assert_eq!(store.count_runs().await.unwrap(), 1);
        assert_eq!(
            store
                .claim("r1", &owner("a", "s"), None, 1, 100)
                .await
                .unwrap()
                .unwrap_err(),
            ClaimRefused::Unavailable
        );
        assert_eq!(store.store_get("s", "k").await.unwrap(), None);
        assert_eq!(
            store.store_get("t", "k").await.unwrap().as_deref(),
            Some("2")
        );
        assert_eq!(store.result_load("a", "x").await.unwrap(), None);
        assert_eq!(
            store.result_load("b", "y").await.unwrap().as_deref(),
            Some("2")
        );
        // Closing again finds nothing.
        assert!(store.remove_session_runs("s").await.unwrap().is_empty());
        assert_eq!(store.result_clear("a").await.unwrap(), 0);
    }
}

#[tokio::test]
async fn a_claim_by_another_guest_build_is_refused_and_changes_nothing() {
    for store in stores().await {
        guest_builds(&*store).await;
    }
}

async fn guest_builds(store: &dyn StateStore) {
    let me = owner("a", "s");
    let run = ParkedRun {
        guest_build: "b1".into(),
        ..parked("built", 100_000)
    };
    store.park(run.clone()).await.unwrap();
    // Violated: a host of another build is refused, the run left as it was
    // (not claimed, so not busy; no lease taken).
    for _ in 0..2 {
        assert_eq!(
            store
                .claim("built", &me, Some("b2"), 1, 100)
                .await
                .unwrap()
                .unwrap_err(),
            ClaimRefused::OtherGuestBuild {
                parked: "b1".into()
            }
        );
    }
    // The contract's refusals come first.
    assert_eq!(
        store
            .claim("built", &owner("x", "s"), Some("b2"), 1, 100)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::OtherAgentRun
    );
    // Obeyed: a host of its build claims it, as the first claim.
    let claimed = store
        .claim("built", &me, Some("b1"), 2, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((claimed.generation, claimed.lease), (1, 1));
    assert_eq!(claimed.snapshot, vec![1, 2, 3]);
    // Parked again by the same build, under its lease: still named.
    store
        .park(ParkedRun {
            generation: 2,
            lease: Some(claimed.lease),
            ..run.clone()
        })
        .await
        .unwrap();
    assert!(matches!(
        store.claim("built", &me, Some("b2"), 3, 100).await.unwrap(),
        Err(ClaimRefused::OtherGuestBuild { .. })
    ));
    // A cancel claims it whatever the build.
    let cancelling = store
        .claim("built", &me, None, 3, 100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cancelling.generation, 2);
    // A run that names no build (stored before builds were recorded) is
    // claimed by any.
    store.park(parked("unnamed", 100_000)).await.unwrap();
    assert!(store
        .claim("unnamed", &me, Some("b2"), 1, 100)
        .await
        .unwrap()
        .is_ok());
}

fn usage(session: &str, at_ms: u64, fuel: u64) -> UsageRecord {
    UsageRecord {
        at_ms,
        agent_run: "a".into(),
        session: session.into(),
        run_id: None,
        kind: "exec".into(),
        fuel,
        wall_ms: 2,
        guest_us: 3,
        tool_calls: 1,
        output_bytes: 10,
        snapshot_bytes: 0,
        outcome: "completed".into(),
        guest_build: Some("b1".into()),
    }
}

#[tokio::test]
async fn a_parked_run_s_expiry_moves_out_for_its_owner_only() {
    for store in stores().await {
        store.park(parked("r1", 1_000)).await.unwrap();
        let run_owner = parked("r1", 0).owner;
        // Another owner, an unknown run: nothing moves.
        assert!(!store
            .extend_parked("r1", &owner("x", "y"), 50_000)
            .await
            .unwrap());
        assert!(!store.extend_parked("r9", &run_owner, 50_000).await.unwrap());
        assert!(store.extend_parked("r1", &run_owner, 50_000).await.unwrap());
        // Never earlier.
        assert!(store.extend_parked("r1", &run_owner, 2_000).await.unwrap());
        assert_eq!(
            store.purge_expired(40_000).await.unwrap(),
            Vec::<String>::new()
        );
        // A run being resumed is its `wait`'s to park again.
        store
            .claim("r1", &run_owner, None, 41_000, 42_000)
            .await
            .unwrap()
            .unwrap();
        assert!(!store.extend_parked("r1", &run_owner, 90_000).await.unwrap());
        assert_eq!(store.purge_expired(60_000).await.unwrap(), ["r1"]);
    }
}

#[tokio::test]
async fn a_session_s_entries_are_its_committed_values_only() {
    for store in stores().await {
        assert_eq!(store.store_entries("s").await.unwrap(), []);
        let write = |k: &str, v: Option<&str>| (k.to_string(), v.map(str::to_string));
        store
            .store_commit("s", vec![write("b", Some("2")), write("a", Some("\"é\""))])
            .await
            .unwrap();
        store
            .store_commit("s2", vec![write("a", Some("3"))])
            .await
            .unwrap();
        store
            .store_commit("s", vec![write("b", None), write("c", Some("[1]"))])
            .await
            .unwrap();
        let mut entries = store.store_entries("s").await.unwrap();
        entries.sort();
        assert_eq!(
            entries,
            [
                ("a".to_string(), "\"é\"".to_string()),
                ("c".to_string(), "[1]".to_string())
            ]
        );
    }
}

#[tokio::test]
async fn the_ledger_sums_and_lists_what_a_filter_selects() {
    for store in stores().await {
        store.usage_record(usage("s", 100, 5)).await.unwrap();
        store.usage_record(usage("t", 200, 7)).await.unwrap();
        let mut waited = usage("s", 300, 11);
        waited.run_id = Some("cm_1".into());
        waited.kind = "wait".into();
        waited.outcome = "failed:timeout".into();
        store.usage_record(waited.clone()).await.unwrap();

        let all = store.usage_totals(&UsageFilter::all()).await.unwrap();
        assert_eq!(
            (all.calls, all.fuel, all.wall_ms, all.tool_calls),
            (3, 23, 6, 3)
        );
        let s = store
            .usage_totals(&UsageFilter::all().session("s"))
            .await
            .unwrap();
        assert_eq!((s.calls, s.fuel), (2, 16));
        let later = store
            .usage_totals(&UsageFilter::all().session("s").since_ms(200))
            .await
            .unwrap();
        assert_eq!((later.calls, later.fuel), (1, 11));
        let waits = store
            .usage_totals(&UsageFilter::all().kind("wait"))
            .await
            .unwrap();
        assert_eq!(
            (waits.calls, waits.fuel, waits.first_at_ms),
            (1, 11, Some(300))
        );
        assert_eq!(s.first_at_ms, Some(100));
        let none = store
            .usage_totals(&UsageFilter::all().session("x"))
            .await
            .unwrap();
        assert_eq!(none, UsageTotals::default());
        // The latest records, oldest first, whole.
        let listed = store.usage_list(&UsageFilter::all(), 2).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].session, "t");
        assert_eq!(listed[1], waited);
        assert_eq!(store.usage_list(&UsageFilter::all(), 0).await.unwrap(), []);
    }
}

#[tokio::test]
async fn claims_are_leases_with_a_fencing_counter() {
    for store in stores().await {
        leases(&*store).await;
    }
}

async fn leases(store: &dyn StateStore) {
    let a = owner("a", "s");
    // A restart-safe run: a lapsed claim is granted again.
    let run = ParkedRun {
        regrant: true,
        ..parked("safe", 100_000)
    };
    store.park(run.clone()).await.unwrap();
    let first = store
        .claim("safe", &a, None, 10, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .claim("safe", &a, None, 999, 2_000)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Busy,
        "the claim holds until its deadline"
    );
    // The holder vanished; after the deadline another host claims it.
    assert!(store.purge_expired(1_001).await.unwrap().is_empty());
    let second = store
        .claim("safe", &a, None, 1_001, 3_000)
        .await
        .unwrap()
        .unwrap();
    assert!(second.lease > first.lease);
    assert_eq!(second.snapshot, vec![1, 2, 3]);
    // The first holder comes back: its writes are refused or do nothing.
    let late = ParkedRun {
        generation: 2,
        lease: Some(first.lease),
        snapshot: vec![9],
        ..run.clone()
    };
    let e = store.park(late).await.unwrap_err().to_string();
    assert!(e.contains("claimed by another wait"), "{e}");
    assert!(!store.release("safe", first.lease).await.unwrap());
    store.unclaim("safe", first.lease).await.unwrap();
    assert_eq!(
        store
            .claim("safe", &a, None, 1_002, 3_000)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Busy,
        "still the second holder's"
    );
    // The current holder parks the next generation, and releases it later.
    let next = ParkedRun {
        generation: 2,
        lease: Some(second.lease),
        snapshot: vec![4, 5],
        ..run.clone()
    };
    store.park(next).await.unwrap();
    let third = store
        .claim("safe", &a, None, 1_003, 4_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((third.generation, third.snapshot), (2, vec![4, 5]));
    assert!(store.release("safe", third.lease).await.unwrap());
    assert_eq!(store.count_runs().await.unwrap(), 0);

    // Any other run: a lapsed claim makes it unavailable (it may have been
    // resumed once), whether a claim or a purge meets it first.
    store.park(parked("once", 100_000)).await.unwrap();
    store
        .claim("once", &a, None, 10, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .claim("once", &a, None, 1_001, 3_000)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Unavailable
    );
    store.park(parked("once", 100_000)).await.unwrap();
    store
        .claim("once", &a, None, 10, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.purge_expired(1_001).await.unwrap(),
        vec!["once".to_string()]
    );
    // A restart-safe run still expires.
    store.park(run).await.unwrap();
    store
        .claim("safe", &a, None, 10, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .claim("safe", &a, None, 100_001, 200_000)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Unavailable
    );
}

#[tokio::test]
async fn settlements_outlive_generations_while_awaited() {
    for store in stores().await {
        settlements_by_request(&*store).await;
    }
}

async fn settlements_by_request(store: &dyn StateStore) {
    let mut run = parked("r1", 10_000);
    run.awaiting = vec![1, 2, 3];
    store.park(run).await.unwrap();
    let claim = async || {
        store
            .claim("r1", &owner("a", "s"), None, 1, 100)
            .await
            .unwrap()
            .unwrap()
    };
    let settlement = |id: u64, v: &str| format!("{{\"id\":{id},\"v\":\"{v}\"}}");
    assert!(store
        .record_settlement("r1", 1, &settlement(1, "a"))
        .await
        .unwrap());
    // The first settlement recorded for a request is the one kept.
    assert!(store
        .record_settlement("r1", 1, &settlement(1, "b"))
        .await
        .unwrap());
    let first = claim().await;
    assert_eq!(first.settlements, vec![(1, settlement(1, "a"))]);
    // Recorded while a `wait` resumes the run.
    let mut watch = store.watch_settlements("r1").await.unwrap();
    let mut unrelated = store.watch_settlements("r2").await.unwrap();
    assert!(store
        .record_settlement("r1", 2, &settlement(2, "a"))
        .await
        .unwrap());
    assert!(
        tokio::time::timeout(std::time::Duration::from_secs(5), watch.changed())
            .await
            .is_ok(),
        "a recorded settlement wakes its run's watch"
    );
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), unrelated.changed())
            .await
            .is_err(),
        "and no other run's"
    );
    assert_eq!(
        store.recorded_settlements("r1", &[2, 9]).await.unwrap(),
        vec![(2, settlement(2, "a"))]
    );
    // Parked again, awaiting 2 and 3: 1 was delivered and is forgotten.
    let mut again = parked("r1", 10_000);
    again.generation = 2;
    again.lease = Some(first.lease);
    again.awaiting = vec![2, 3];
    store.park(again).await.unwrap();
    assert_eq!(
        store.recorded_settlements("r1", &[1]).await.unwrap(),
        vec![]
    );
    // The drainer of generation 1 still records what generation 2 awaits.
    assert!(store
        .record_settlement("r1", 3, &settlement(3, "a"))
        .await
        .unwrap());
    let second = claim().await;
    assert_eq!(second.generation, 2);
    assert_eq!(
        second.settlements,
        vec![(2, settlement(2, "a")), (3, settlement(3, "a"))]
    );
    // Once the run is finished, its drainers are told it is gone.
    assert!(store.release("r1", second.lease).await.unwrap());
    assert!(!store
        .record_settlement("r1", 4, &settlement(4, "a"))
        .await
        .unwrap());
    assert_eq!(
        store.recorded_settlements("r1", &[2]).await.unwrap(),
        vec![]
    );
}

/// Two stores over one database are two hosts: each sees the other alive
/// while it is open, and is woken by the other's settlements.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_hosts_see_each_other_and_wake_each_other() {
    let url = crate::testing::postgres_database();
    let a = PostgresStateStore::connect(&url).await.unwrap();
    let b = PostgresStateStore::connect(&url).await.unwrap();
    let host_a = a.announce_host().await.unwrap().unwrap();
    assert_eq!(a.announce_host().await.unwrap().as_deref(), Some(&*host_a));
    assert!(b.host_alive(&host_a).await.unwrap());
    assert!(!b.host_alive("h_never_announced").await.unwrap());
    b.park(parked("r1", u64::MAX / 2)).await.unwrap();
    let mut watch = b.watch_settlements("r1").await.unwrap();
    assert!(a.record_settlement("r1", 4, "{\"id\":4}").await.unwrap());
    tokio::time::timeout(std::time::Duration::from_secs(10), watch.changed())
        .await
        .expect("B is woken by A's settlement");
    // A closed store withdraws its host; one that died lapses after the
    // TTL. Either way B stops taking it for alive.
    drop(a);
    let until = std::time::Instant::now() + HOST_LIVENESS_TTL + std::time::Duration::from_secs(5);
    while b.host_alive(&host_a).await.unwrap() {
        assert!(std::time::Instant::now() < until, "host A still alive");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_sqlite_host_is_alive_for_itself_only() {
    let dir = std::env::temp_dir().join(format!("quickcell-hosts-{}", uuid::Uuid::new_v4()));
    let a = SqliteStateStore::open(Some(&dir)).unwrap();
    let b = SqliteStateStore::open(Some(&dir)).unwrap();
    let host_a = a.announce_host().await.unwrap().unwrap();
    assert!(a.host_alive(&host_a).await.unwrap());
    // Processes sharing one file cannot wake each other: B waits on no
    // call A drains.
    assert!(!b.host_alive(&host_a).await.unwrap());
    // A store in memory is one process's: it has no host to name.
    let private = SqliteStateStore::open(None).unwrap();
    assert_eq!(private.announce_host().await.unwrap(), None);
    assert_eq!(
        MemoryStateStore::default().announce_host().await.unwrap(),
        None
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_cancel_record_ends_a_run_once_no_claim_holds_it() {
    for store in stores().await {
        cancel_records(&*store).await;
    }
}

async fn cancel_records(store: &dyn StateStore) {
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let me = owner("a", "s");
    let mut woken = store.watch_cancels().await.unwrap();
    for id in ["parked", "held", "held_regrant", "other"] {
        let mut run = parked(id, 10_000);
        run.regrant = id == "held_regrant";
        store.park(run).await.unwrap();
    }
    for id in ["held", "held_regrant"] {
        store.claim(id, &me, None, 1, 100).await.unwrap().unwrap();
    }
    assert!(store
        .cancelled_runs(&ids(&["parked", "held"]))
        .await
        .unwrap()
        .is_empty());
    store
        .record_cancels(&ids(&["parked", "held", "held_regrant", "gone"]), 5_000)
        .await
        .unwrap();
    // Recording one twice keeps the first (its expiry too).
    store
        .record_cancels(&ids(&["parked"]), 50_000)
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), woken.changed())
        .await
        .expect("the cancel watch wakes");
    let mut cancelled = store
        .cancelled_runs(&ids(&["parked", "held", "other", "gone"]))
        .await
        .unwrap();
    cancelled.sort();
    assert_eq!(cancelled, ids(&["gone", "held", "parked"]));
    // A parked run with a cancel record is gone for a claim; one a claim
    // holds stays held for that claim's holder to end.
    assert_eq!(
        store
            .claim("parked", &me, None, 2, 100)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Unavailable
    );
    assert_eq!(
        store
            .claim("held", &me, None, 2, 100)
            .await
            .unwrap()
            .unwrap_err(),
        ClaimRefused::Busy
    );
    // Once its claim has lapsed, a cancelled run is purged even if it
    // could otherwise be claimed again.
    let mut purged = store.purge_expired(200).await.unwrap();
    purged.sort();
    assert_eq!(purged, ids(&["held", "held_regrant"]));
    assert_eq!(store.count_runs().await.unwrap(), 1);
    assert!(store
        .claim("other", &me, None, 300, 400)
        .await
        .unwrap()
        .is_ok());
    // Records are kept until their expiry, then purged.
    store.purge_expired(5_000).await.unwrap();
    assert!(store
        .cancelled_runs(&ids(&["parked", "held", "gone"]))
        .await
        .unwrap()
        .is_empty());
}

/// A cancel recorded through one PostgreSQL store wakes another store's
/// cancel watch (`NOTIFY quickcell_cancel`) and is visible to it.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_cancel_wakes_another_host() {
    let url = crate::testing::postgres_database();
    let a = PostgresStateStore::connect(&url).await.unwrap();
    let b = PostgresStateStore::connect(&url).await.unwrap();
    let mut woken = b.watch_cancels().await.unwrap();
    // No wake without a cancel.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), woken.changed())
            .await
            .is_err()
    );
    a.record_cancels(&["cm_x".to_string()], u64::MAX / 2)
        .await
        .unwrap();
    // The watch does not poll: only the notification wakes it.
    tokio::time::timeout(std::time::Duration::from_secs(10), woken.changed())
        .await
        .expect("B is woken by A's cancel");
    assert_eq!(
        b.cancelled_runs(&["cm_x".to_string(), "cm_y".to_string()])
            .await
            .unwrap(),
        vec!["cm_x".to_string()]
    );
}
