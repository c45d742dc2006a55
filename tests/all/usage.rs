//! The usage ledger (operations.md §4.2): one record per `exec` / `wait`
//! call in the state store, summed by `Runtime::usage` and `quickcell
//! usage`.

use crate::bridge::t;
use crate::{failed, waiting};
use quickcell::store::UsageFilter;
use quickcell::{CellResult, ExecInput, Owner, Runtime, ToolRegistry, WaitInput};
use serde_json::json;
use std::sync::Arc;

fn owner(session: &str) -> Owner {
    Owner {
        agent_run: session.into(),
        session: session.into(),
    }
}

/// A session's ledger total equals the sum of the `fuelUsed` its results
/// reported; each record says what its call was and did.
#[tokio::test]
async fn a_sessions_ledger_adds_up_to_its_results_fuel() {
    let mut registry = ToolRegistry::new();
    registry
        .add(Arc::new(t("lookup", "Look a record up")))
        .unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let alice = owner("alice");
    let mut reported = 0;
    let mut add = |r: &CellResult| reported += r.telemetry().fuel_used;
    let r = rt
        .exec(
            ExecInput::new("two calls", "await lookup({}); await lookup({}); return 1")
                .with_owner(alice.clone()),
        )
        .await;
    add(&r);
    let r = rt
        .exec(
            ExecInput::new("park", "text('x'); await yield_control(); return 2")
                .with_owner(alice.clone()),
        )
        .await;
    add(&r);
    let id = waiting(&r).run_id.clone();
    let r = rt.wait(WaitInput::new(&id).with_owner(alice.clone())).await;
    add(&r);
    let r = rt
        .exec(ExecInput::new("fail", "throw new Error('no')").with_owner(alice.clone()))
        .await;
    add(&r);
    assert!(failed(&r).error.contains("no"));
    // Another session's call is not alice's.
    rt.exec(ExecInput::new("bob", "return 3").with_owner(owner("bob")))
        .await;

    let totals = rt
        .usage(&UsageFilter::all().session("alice"))
        .await
        .unwrap();
    assert_eq!((totals.calls, totals.fuel), (4, reported));
    assert_eq!(totals.tool_calls, 2);
    assert_eq!(rt.usage(&UsageFilter::all()).await.unwrap().calls, 5);

    let records = rt
        .usage_records(&UsageFilter::all().session("alice"), 10)
        .await
        .unwrap();
    let summary: Vec<(String, String, Option<String>, u64)> = records
        .iter()
        .map(|r| {
            (
                r.kind.clone(),
                r.outcome.clone(),
                r.run_id.clone(),
                r.tool_calls,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("exec".into(), "completed".into(), None, 2),
            ("exec".into(), "waiting".into(), Some(id.clone()), 0),
            ("wait".into(), "completed".into(), Some(id), 0),
            ("exec".into(), "failed:internal_error".into(), None, 0),
        ]
    );
    assert!(records[1].snapshot_bytes > 0 && records[0].snapshot_bytes == 0);
    assert!(records[1].output_bytes > 0);
    assert!(records
        .iter()
        .all(|r| r.session == "alice" && r.guest_us > 0));
    // Each record names the guest build that served it: a park names the
    // build its run needs to resume.
    assert!(records
        .iter()
        .all(|r| r.guest_build.as_deref() == Some(quickcell::guest_build())));
    // Later than everything: nothing.
    let future = UsageFilter::all().since_ms(u64::MAX);
    assert_eq!(rt.usage(&future).await.unwrap().calls, 0);
}

/// `quickcell usage --json` over a state directory that two `exec`
/// processes wrote: its `fuel` is the sum of their `fuelUsed`.
#[test]
fn quickcell_usage_sums_what_cli_calls_used() {
    let dir = std::env::temp_dir().join(format!("quickcell-usage-{}", uuid::Uuid::new_v4()));
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let run = crate::quickcell;
    let mut reported = 0;
    for code in ["return 1", "return [1, 2, 3].map((n) => n * 2)"] {
        let (status, v, _) = run(&["exec", "--state-dir", state, "--code", code]);
        assert_eq!(status, 0, "{v}");
        reported += v["telemetry"]["fuelUsed"].as_u64().unwrap();
    }
    let (status, v, _) = run(&["usage", "--json", "--state-dir", state, "--records", "5"]);
    assert_eq!(status, 0);
    assert_eq!(v["fuel"], json!(reported), "{v}");
    assert_eq!(v["calls"], 2);
    assert_eq!(v["records"].as_array().unwrap().len(), 2);
    assert_eq!(v["records"][0]["session"], "default");
    let (_, v, _) = run(&[
        "usage",
        "--json",
        "--state-dir",
        state,
        "--session",
        "other",
    ]);
    assert_eq!(
        (v["calls"].clone(), v["fuel"].clone()),
        (json!(0), json!(0))
    );
    let (_, v, _) = run(&["usage", "--json", "--state-dir", state, "--since", "1h"]);
    assert_eq!(v["calls"], 2);
    let (status, _, err) = run(&["usage", "--state-dir", state, "--since", "soon"]);
    assert_eq!(status, 2);
    assert!(
        err.contains("neither Unix milliseconds nor an age"),
        "{err}"
    );
    let (status, _, _) = run(&["usage", "--state-dir", state, "--since", "3é"]);
    assert_eq!(status, 2);
    std::fs::remove_dir_all(&dir).ok();
}

/// `cells_per_session_per_minute`: within it calls run (obeyed); past it
/// an `exec` fails before any guest code runs with `quota_exceeded`,
/// naming the quota and when it frees (violated); another session is
/// unaffected.
#[tokio::test]
async fn the_cell_rate_quota_refuses_before_anything_runs() {
    let rt = Runtime::builder()
        .quotas(quickcell::Quotas::default().with_cells_per_session_per_minute(2))
        .build()
        .await
        .unwrap();
    let cell = |who: &str| ExecInput::new("t", "text('ran'); return 1").with_owner(owner(who));
    for _ in 0..2 {
        assert_eq!(crate::value(&rt.exec(cell("alice")).await), json!(1));
    }
    let r = rt.exec(cell("alice")).await;
    let f = failed(&r);
    assert_eq!(f.code, quickcell::ErrorCode::QuotaExceeded);
    assert_eq!(f.failure_phase, quickcell::FailurePhase::Input);
    assert!(f.output.is_empty() && !f.bridge_dispatch_started);
    assert!(
        f.error.starts_with("quota exceeded: cells_per_session_per_minute (2 of 2 cells in the last minute); it frees in "),
        "{}",
        f.error
    );
    assert_eq!(crate::json(&r)["code"], "quota_exceeded");
    // Refused calls are not recorded.
    assert_eq!(
        rt.usage(&UsageFilter::all().session("alice"))
            .await
            .unwrap()
            .calls,
        2
    );
    assert_eq!(crate::value(&rt.exec(cell("bob")).await), json!(1));
}

/// `fuel_per_session_per_hour`: once a session has used it, its `exec` is
/// refused and so is a `wait` — whose run stays parked, intact: a runtime
/// without the quota over the same store resumes it.
#[tokio::test]
async fn the_fuel_quota_refuses_exec_and_wait_and_loses_nothing() {
    let dir = std::env::temp_dir().join(format!("quickcell-quota-{}", uuid::Uuid::new_v4()));
    let alice = owner("alice");
    let park =
        || ExecInput::new("park", "await yield_control(); return 'kept'").with_owner(alice.clone());
    // The quota is what parking the cell costs and 1,000,000 more, which a
    // second cell spends.
    let unlimited = Runtime::builder().build().await.unwrap();
    let cost = unlimited.exec(park()).await.telemetry().fuel_used;
    let quota = cost + 1_000_000;
    let limited = Runtime::builder()
        .state_dir(&dir)
        .quotas(quickcell::Quotas::default().with_fuel_per_session_per_hour(quota))
        .build()
        .await
        .unwrap();
    let r = limited.exec(park()).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(r.telemetry().fuel_used, cost);
    let r = limited
        .exec(ExecInput::new("spin", "while (true) {}").with_owner(alice.clone()))
        .await;
    assert_eq!(failed(&r).code, quickcell::ErrorCode::QuotaExceeded);
    assert_eq!(r.telemetry().fuel_used, 1_000_000);
    for r in [
        limited
            .exec(ExecInput::new("again", "return 1").with_owner(alice.clone()))
            .await,
        limited
            .wait(WaitInput::new(&id).with_owner(alice.clone()))
            .await,
    ] {
        let f = failed(&r);
        assert_eq!(f.code, quickcell::ErrorCode::QuotaExceeded);
        assert!(
            f.error
                .starts_with("quota exceeded: fuel_per_session_per_hour ("),
            "{}",
            f.error
        );
        assert!(
            f.error
                .contains(&format!("({quota} of {quota} fuel used in the last hour)")),
            "{}",
            f.error
        );
    }
    drop(limited);
    let open = Runtime::builder().state_dir(&dir).build().await.unwrap();
    let r = open.wait(WaitInput::new(&id).with_owner(alice)).await;
    assert_eq!(crate::value(&r), json!("kept"));
    std::fs::remove_dir_all(&dir).ok();
}

/// Four cells of `session` at once, each spinning until its fuel runs out.
async fn spin_four(rt: &Runtime, session: &str) -> Vec<CellResult> {
    let spin = |i: u32| {
        rt.exec(ExecInput::new(format!("spin {i}"), "while (true) {}").with_owner(owner(session)))
    };
    let (a, b, c, d) = tokio::join!(spin(0), spin(1), spin(2), spin(3));
    vec![a, b, c, d]
}

/// `fuel_per_session_per_hour` is hard for calls running at once
/// (violated): each call reserves its fuel before it runs — its own
/// 4,000,000, or what is left of the quota — so four cells that would
/// spend 16,000,000 together spend exactly the 10,000,000 of the quota.
/// The call given only the rest fails with `quota_exceeded` once it has
/// spent it; a call that finds nothing left is refused before it runs.
/// The ledger and the results agree; another session is unaffected.
#[tokio::test]
async fn the_fuel_quota_holds_for_cells_running_at_once() {
    let rt = Runtime::builder()
        .limits(quickcell::Limits::default().with_fuel(quickcell::Fuel::Limited(4_000_000)))
        .quotas(quickcell::Quotas::default().with_fuel_per_session_per_hour(10_000_000))
        .build()
        .await
        .unwrap();
    let results = spin_four(&rt, "alice").await;
    let spent: u64 = results.iter().map(|r| r.telemetry().fuel_used).sum();
    assert_eq!(spent, 10_000_000, "{results:?}");
    let ledger = rt
        .usage(&UsageFilter::all().session("alice"))
        .await
        .unwrap();
    assert_eq!(ledger.fuel, 10_000_000);
    let codes: Vec<_> = results.iter().map(|r| failed(r).code).collect();
    let own_limit = codes
        .iter()
        .filter(|c| **c == quickcell::ErrorCode::FuelExhausted)
        .count();
    assert_eq!(own_limit, 2, "two calls ran to their own limit: {codes:?}");
    let cut = results
        .iter()
        .filter(|r| r.telemetry().fuel_used == 2_000_000)
        .map(failed)
        .collect::<Vec<_>>();
    assert_eq!(cut.len(), 1, "{results:?}");
    assert_eq!(cut[0].code, quickcell::ErrorCode::QuotaExceeded);
    assert!(
        cut[0].error.starts_with("quota exceeded: fuel_per_session_per_hour (10000000 fuel an hour): this call was given the 2000000 fuel left"),
        "{}",
        cut[0].error
    );
    let refused = results
        .iter()
        .find(|r| r.telemetry().fuel_used == 0)
        .map(failed)
        .expect("the fourth call is refused");
    assert_eq!(refused.code, quickcell::ErrorCode::QuotaExceeded);
    assert_eq!(refused.failure_phase, quickcell::FailurePhase::Input);
    // Another session has its own quota.
    let bob = rt
        .exec(ExecInput::new("spin", "while (true) {}").with_owner(owner("bob")))
        .await;
    assert_eq!(failed(&bob).code, quickcell::ErrorCode::FuelExhausted);
    assert_eq!(bob.telemetry().fuel_used, 4_000_000);
}

/// Within the quota (obeyed), cells running at once spend what they spend
/// without one: the reservation changes nothing a cell can see. (Each
/// reserves its call limit, 50,000,000; the quota holds four of them.)
#[tokio::test]
async fn cells_within_the_fuel_quota_run_as_without_one() {
    let limits = quickcell::Limits::default().with_fuel(quickcell::Fuel::Limited(50_000_000));
    let cell = |i: u32| {
        ExecInput::new(
            format!("sum {i}"),
            "let s = 0; for (let i = 0; i < 10000; i++) s += i; return s",
        )
        .with_owner(owner("alice"))
    };
    let free = Runtime::builder()
        .limits(limits.clone())
        .build()
        .await
        .unwrap();
    let expected = free.exec(cell(0)).await.telemetry().fuel_used;
    let rt = Runtime::builder()
        .limits(limits)
        .quotas(quickcell::Quotas::default().with_fuel_per_session_per_hour(200_000_000))
        .build()
        .await
        .unwrap();
    let (a, b, c, d) = tokio::join!(
        rt.exec(cell(1)),
        rt.exec(cell(2)),
        rt.exec(cell(3)),
        rt.exec(cell(4))
    );
    for r in [&a, &b, &c, &d] {
        assert_eq!(crate::value(r), json!(49_995_000));
        assert_eq!(r.telemetry().fuel_used, expected);
    }
    let ledger = rt
        .usage(&UsageFilter::all().session("alice"))
        .await
        .unwrap();
    assert_eq!(ledger.fuel, expected * 4);
}
