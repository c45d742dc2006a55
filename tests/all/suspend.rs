//! Suspension: parking cells as snapshots, `wait`, runs and durability.

use crate::bridge::{runtime_with, t};
use crate::{failed, json, runtime, texts, value, waiting};
use quickcell::{
    CellResult, ErrorCode, ExecInput, FailurePhase, Limits, Owner, Runtime, WaitInput, WaitReason,
    MAX_SUSPENDED_RUNS,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A fresh state directory under the system temp dir.
pub fn state_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quickcell-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn runtime_in(dir: &PathBuf, limits: Limits) -> Runtime {
    Runtime::builder()
        .limits(limits)
        .state_dir(dir)
        .build()
        .await
        .unwrap()
}

fn exec(code: &str) -> ExecInput {
    ExecInput::new("suspension test", code)
}

#[tokio::test]
async fn restart_safe_yield_then_wait() {
    let rt = runtime(Limits::default()).await;
    let mut input =
        exec(r#"text("before"); await yield_control("pause"); text("after"); return "done";"#);
    input.restart_safe = true;
    let r = rt.exec(input).await;
    let w = waiting(&r);
    assert_eq!(w.reason, WaitReason::Yield);
    assert_eq!(w.replay_safe, Some(true));
    assert_eq!(texts(&r), vec!["before"]);
    let id = &w.run_id;
    let uuid = regex::Regex::new(
        r"^cm_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
    )
    .unwrap();
    assert!(uuid.is_match(id), "{id}");
    assert_eq!(
        json(&r)["pendingToolCalls"],
        json!([{"id": "bridge:yield:1", "method": "yield"}])
    );
    let r = rt.wait(WaitInput::new(id.clone())).await;
    assert_eq!(value(&r), json!("done"));
    assert_eq!(texts(&r), vec!["after"]);
    assert_eq!(json(&r)["replaySafe"], json!(true));
}

#[tokio::test]
async fn three_yields_deliver_output_incrementally() {
    let rt = runtime(Limits::default()).await;
    let code = r#"
        let total = 0;
        for (const step of ["one", "two", "three"]) {
            text(step); total += step.length;
            await yield_control(step);
        }
        text("end");
        return total;
    "#;
    let r = rt.exec(exec(code)).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(texts(&r), vec!["one"]);
    let r = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(waiting(&r).run_id, id, "the run id is kept across waits");
    assert_eq!(texts(&r), vec!["two"]);
    assert_eq!(json(&r)["pendingToolCalls"][0]["id"], "bridge:yield:2");
    let r = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(texts(&r), vec!["three"]);
    let r = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(value(&r), json!(11));
    assert_eq!(texts(&r), vec!["end"]);
}

#[tokio::test]
async fn failure_after_resume_carries_only_new_output_and_removes_the_run() {
    let rt = runtime(Limits::default()).await;
    let code = r#"text("before pause"); await yield_control(); text("before failure"); throw new Error("resumed failure")"#;
    let r = rt.exec(exec(code)).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(texts(&r), vec!["before pause"]);
    let r = rt.wait(WaitInput::new(&id)).await;
    let f = failed(&r);
    assert!(f.error.contains("resumed failure"), "{}", f.error);
    assert_eq!(f.failure_phase, FailurePhase::Guest);
    assert_eq!(texts(&r), vec!["before failure"]);
    let again = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(
        failed(&again).error,
        "code mode run is unavailable or expired."
    );
}

#[tokio::test]
async fn wrong_owner_is_refused_and_leaves_the_run_intact() {
    let rt = runtime(Limits::default()).await;
    let owner = Owner {
        agent_run: "run-1".into(),
        session: "session-1".into(),
    };
    let r = rt
        .exec(exec("await yield_control(); return 'mine';").with_owner(owner.clone()))
        .await;
    let id = waiting(&r).run_id.clone();
    let other_run = Owner {
        agent_run: "run-2".into(),
        ..owner.clone()
    };
    let r = rt.wait(WaitInput::new(&id).with_owner(other_run)).await;
    let f = failed(&r);
    assert_eq!(f.error, "code mode run belongs to a different agent run.");
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert_eq!(f.failure_phase, FailurePhase::Input);
    let other_session = Owner {
        session: "session-2".into(),
        ..owner.clone()
    };
    let r = rt.wait(WaitInput::new(&id).with_owner(other_session)).await;
    assert_eq!(
        failed(&r).error,
        "code mode run belongs to a different session."
    );
    let r = rt.wait(WaitInput::new(&id).with_owner(owner)).await;
    assert_eq!(value(&r), json!("mine"));
}

#[tokio::test]
async fn concurrent_waits_resume_the_run_once() {
    let mut slow = t("slow", "Slow tool");
    slow.delay = Duration::from_millis(300);
    let calls = slow.calls.clone();
    let (rt, _) = runtime_with(vec![slow], Limits::default()).await;
    let r = rt
        .exec(exec(
            "await yield_control(); const r = await slow({}); return r.name;",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    let (a, b) = tokio::join!(rt.wait(WaitInput::new(&id)), rt.wait(WaitInput::new(&id)));
    let (done, refused) = match (&a, &b) {
        (CellResult::Completed(_), _) => (&a, &b),
        _ => (&b, &a),
    };
    assert_eq!(value(done), json!("slow"));
    assert_eq!(
        failed(refused).error,
        "code mode run is already being resumed."
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unknown_blank_and_expired_run_ids() {
    let rt = runtime(Limits::default().with_snapshot_ttl_seconds(1)).await;
    let r = rt
        .wait(WaitInput::new("cm_00000000-0000-4000-8000-000000000000"))
        .await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    assert!(!failed(&r).bridge_dispatch_started);
    let r = rt.wait_json(&json!({"runId": "  "})).await;
    assert_eq!(failed(&r).error, "runId must be a non-empty string.");
    let r = rt.exec(exec("await yield_control(); return 1;")).await;
    let id = waiting(&r).run_id.clone();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let r = rt.wait_json(&json!({"run_id": format!(" {id} ")})).await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
}

/// The unknown-run error tells how to poll a shell's background session
/// only when the catalog has a tool named `process` (contract §4's message
/// catalogue), and never mentions `process` otherwise.
#[tokio::test]
async fn unknown_run_guidance_names_process_only_when_the_catalog_has_it() {
    let unknown = WaitInput::new("proc_4242");
    let (rt, _) = crate::bridge::runtime_with(
        vec![crate::bridge::t(
            "process",
            "Manage background shell sessions",
        )],
        Limits::default(),
    )
    .await;
    let error = failed(&rt.wait(unknown.clone()).await).error.clone();
    assert!(
        error.starts_with("code mode run is unavailable or expired. ")
            && error.contains("`process` tool (action \"poll\")")
            && error.contains("not with `wait`"),
        "{error}"
    );
    let (rt, _) = crate::bridge::runtime_with(
        vec![crate::bridge::t("processes", "List processes")],
        Limits::default(),
    )
    .await;
    let error = failed(&rt.wait(unknown).await).error.clone();
    assert_eq!(error, "code mode run is unavailable or expired.");
}

#[tokio::test]
async fn a_run_within_its_ttl_resumes() {
    let rt = runtime(Limits::default().with_snapshot_ttl_seconds(5)).await;
    let r = rt.exec(exec("await yield_control(); return 1;")).await;
    let id = waiting(&r).run_id.clone();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(value(&rt.wait(WaitInput::new(id)).await), json!(1));
}

#[tokio::test]
async fn slot_cap_refuses_the_sixty_fifth_run() {
    let rt = runtime(Limits::default()).await;
    // Spread over sessions: one session may hold 16 of the 64 slots.
    let session = |i: usize| Owner {
        agent_run: String::new(),
        session: format!("tenant-{}", i % 8),
    };
    let mut ids = Vec::new();
    for i in 0..MAX_SUSPENDED_RUNS {
        let r = rt
            .exec(exec("await yield_control(); return 'parked';").with_owner(session(i)))
            .await;
        ids.push((waiting(&r).run_id.clone(), session(i)));
    }
    let r = rt
        .exec(exec("await yield_control(); return 'one too many';"))
        .await;
    let f = failed(&r);
    assert_eq!(f.error, "too many suspended code mode runs.");
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert!(!f.bridge_dispatch_started);
    // A cell that never calls the host needs no slot.
    assert_eq!(value(&rt.exec(exec("return 2;")).await), json!(2));
    // Finishing one run frees its slot.
    let (first, owner) = &ids[0];
    assert_eq!(
        value(
            &rt.wait(WaitInput::new(first).with_owner(owner.clone()))
                .await
        ),
        json!("parked")
    );
    let r = rt.exec(exec("await yield_control(); return 'fits';")).await;
    waiting(&r);
}

#[tokio::test]
async fn snapshot_limit_obeyed_and_exceeded() {
    let code = r#"text("kept"); const big = "x".repeat(200000); await yield_control(); return big.length;"#;
    let rt = runtime(Limits::default().with_max_snapshot_bytes(4 << 20)).await;
    let r = rt.exec(exec(code)).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(value(&rt.wait(WaitInput::new(id)).await), json!(200000));

    let rt = runtime(Limits::default().with_max_snapshot_bytes(64 * 1024)).await;
    let r = rt.exec(exec(code)).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::SnapshotLimitExceeded);
    assert_eq!(f.error, "code mode snapshot limit exceeded");
    assert_eq!(f.failure_phase, FailurePhase::Host);
    assert_eq!(
        texts(&r),
        vec!["kept"],
        "output before the failed checkpoint is kept"
    );
}

#[tokio::test]
async fn a_small_cell_parks_without_rewriting_the_heap() {
    // A collection rewrites the links of every object, the pre-initialized
    // runtime's included (a one-tool cell's payload: 257 KiB of changed
    // pages, against 181 KiB without), so a checkpoint collects only after
    // the cell has taken 1 MiB of new heap. Gate: a cell that starts a call
    // and yields parks under a 200 KiB payload limit. (QuickJS-ng 0.16
    // takes small blocks from 4 KiB arenas, one set per size class: the
    // cell touches one pre-initialized arena page per class it allocates
    // from, 45 pages where 0.15.1 touched 33 and the gate was 160 KiB.)
    let (rt, _) = runtime_with(
        vec![t("lookup", "Looks a value up")],
        Limits::default().with_max_snapshot_bytes(200 * 1024),
    )
    .await;
    let r = rt
        .exec(exec(
            "const p = lookup({value: 'a'}); await yield_control(); return (await p).input;",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(
        value(&rt.wait(WaitInput::new(id)).await),
        json!({"value": "a"})
    );
}

#[tokio::test]
async fn a_cell_parks_with_one_fuel_left() {
    // The checkpoint (which zeroes the blocks the cell freed) runs on the
    // host's fuel, not the cell's: a cell with next to no fuel left when it
    // parks parks all the same, as it would have completed inline.
    let code = "let tmp = Array.from({length: 200}, (_, i) => ({i, s: 'x' + i})); \
                tmp = null; await yield_control(); return 'resumed';";
    let r = runtime(Limits::default()).await.exec(exec(code)).await;
    waiting(&r);
    let used = r.telemetry().fuel_used;
    let tight = runtime(Limits::default().with_fuel(quickcell::Fuel::Limited(used + 1))).await;
    let r = tight.exec(exec(code)).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(r.telemetry().fuel_used, used);
    assert_eq!(
        value(&tight.wait(WaitInput::new(id)).await),
        json!("resumed")
    );
}

#[tokio::test]
async fn a_wait_with_one_fuel_resumes_the_cell_and_runs_out_in_it() {
    // The restore's reseed runs on fuel of its own, as the checkpoint does:
    // a wait given almost no fuel resumes the cell, which then runs out of
    // fuel in its own code, never a broken snapshot.
    let dir = state_dir();
    let rt = runtime_in(&dir, Limits::default()).await;
    let r = rt
        .exec(exec(
            "await yield_control(); let s = 0; for (let i = 0; i < 1e5; i++) s += i; return s;",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    drop(rt);
    let starved = runtime_in(
        &dir,
        Limits::default().with_fuel(quickcell::Fuel::Limited(1)),
    )
    .await;
    let done = starved.wait(WaitInput::new(&id)).await;
    let f = failed(&done);
    assert_eq!(
        (f.code, f.failure_phase),
        (ErrorCode::FuelExhausted, FailurePhase::Guest),
        "{}",
        f.error
    );
}

/// The snapshot size of a cell that runs each `prologue`, then starts a
/// tool call and parks; each run is resumed and must finish.
async fn parked_snapshot_bytes<const N: usize>(prologues: [String; N]) -> [u64; N] {
    let (rt, _) = runtime_with(vec![t("lookup", "Looks a value up")], Limits::default()).await;
    let mut sizes = [0; N];
    for (size, prologue) in sizes.iter_mut().zip(prologues) {
        let r = rt
            .exec(exec(&format!(
                "{prologue} const p = lookup({{value: 'a'}}); await yield_control(); return (await p).input;"
            )))
            .await;
        let id = waiting(&r).run_id.clone();
        *size = quickcell::testing::last_suspend_stats().snapshot_bytes;
        assert_eq!(
            value(&rt.wait(WaitInput::new(id)).await),
            json!({"value": "a"})
        );
    }
    sizes
}

#[tokio::test]
async fn pages_a_freed_buffer_gave_back_are_stored_as_zeros() {
    // A 256 KiB buffer of noise is a huge block (whole pages); dropped, its
    // pages go back to the pool, and the small blocks the cell takes next
    // are carved from them. Those pages are zeroed as they become spans (the
    // rest at the checkpoint), so none of the noise is stored. Measured: the
    // snapshot 0.3 KB larger than the same cell's without the buffer; 140 KB
    // larger with the spans' pages not zeroed.
    let keep = "const keep = Array.from({length: 3000}, (_, i) => ({i}));";
    let noise = "let buf = new Uint32Array(65536); let x = 1; \
                 for (let i = 0; i < buf.length; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; buf[i] = x; } \
                 buf = null;";
    let [plain, reused] =
        parked_snapshot_bytes([keep.to_string(), format!("{noise} {keep}")]).await;
    assert!(
        reused < plain + 4 * 1024,
        "{reused} bytes after reusing the buffer's pages, {plain} without"
    );
}

#[tokio::test]
async fn blocks_freed_before_a_park_are_stored_as_zeros() {
    // A cell that builds 1,000 small records and drops them before it
    // parks frees ~3,000 small blocks and the array's large ones without a
    // collection (reference counts reach zero). Large blocks are zeroed as
    // they are freed, the small ones' bodies at the checkpoint (as the
    // image's free blocks are), and the links of the free lists they now
    // fill are stored as differences, so its snapshot is barely larger
    // than that of a cell that never built them. Measured: 1.2 KB larger;
    // 16.8 KB with the small blocks' garbage zeroed only, 8.9 KB with the
    // large blocks zeroed too but the links stored as they are.
    let [plain, dropped] = parked_snapshot_bytes([
        String::new(),
        "let tmp = Array.from({length: 1000}, (_, i) => ({i, s: 'x' + i})); tmp = null;".into(),
    ])
    .await;
    assert!(
        dropped < plain + 2048,
        "{dropped} bytes after dropping the records, {plain} without"
    );
}

#[tokio::test]
async fn garbage_freed_before_a_checkpoint_is_not_stored() {
    // Each round builds ~3 MB of small blocks (a linked list whose nodes
    // refer to themselves, so only the garbage collector frees them), drops
    // it and parks. The checkpoint collects it and zeroes the allocator's
    // emptied pages, so every snapshot stays far below the list's size; the
    // next round (blocks of another size) reuses those pages.
    let build = r#"
        const build = (round) => {
            let head = null;
            for (let i = 0; i < 20000; i++) {
                const node = {i, s: "item".repeat(round + 1) + i, next: head};
                node.self = node;
                head = node;
            }
            return head;
        };
        const sum = (head) => {
            let n = 0, len = 0;
            for (let node = head; node !== null; node = node.next) { n += node.i; len += node.s.length; }
            return [n, len];
        };
    "#;
    let dropped = format!(
        "{build} const sums = []; for (let round = 0; round < 3; round++) {{ let list = build(round); sums.push(sum(list)); list = null; await yield_control(); }} return sums;"
    );
    let rt = runtime(Limits::default().with_max_snapshot_bytes(1 << 20)).await;
    let mut r = rt.exec(exec(&dropped)).await;
    for _ in 0..3 {
        let id = waiting(&r).run_id.clone();
        r = rt.wait(WaitInput::new(id)).await;
    }
    let n: u64 = (0..20000).sum();
    let digits: u64 = (0..20000u64).map(|i| i.to_string().len() as u64).sum();
    let expected: Vec<_> = (0..3u64)
        .map(|round| json!([n, 20000 * 4 * (round + 1) + digits]))
        .collect();
    assert_eq!(value(&r), json!(expected));

    // The same lists kept alive do not fit.
    let kept = format!(
        "{build} const lists = []; for (let round = 0; round < 3; round++) {{ lists.push(build(round)); await yield_control(); }} return lists.length;"
    );
    let r = rt.exec(exec(&kept)).await;
    assert_eq!(failed(&r).code, ErrorCode::SnapshotLimitExceeded);

    // Blocks of whole pages (a 3 MB string, a 2 MB array) likewise.
    let huge = "let s = 'x'.repeat(3000000), a = new Array(125000).fill(1); const n = s.length + a.length; s = a = null; await yield_control(); return n;";
    let r = rt.exec(exec(huge)).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(value(&rt.wait(WaitInput::new(id)).await), json!(3125000));
    let r = rt
        .exec(exec(
            "const s = 'x'.repeat(3000000); await yield_control(); return s.length;",
        ))
        .await;
    assert_eq!(failed(&r).code, ErrorCode::SnapshotLimitExceeded);
}

#[tokio::test]
async fn a_tool_that_outlives_the_deadline_parks_then_completes_on_wait() {
    let mut slow = t("slow", "Slow tool");
    slow.delay = Duration::from_millis(700);
    let calls = slow.calls.clone();
    let (rt, _) = runtime_with(vec![slow], Limits::default().with_timeout_ms(400)).await;
    let r = rt
        .exec(exec(
            "text('asked'); const r = await slow({value: 'v'}); text('got'); return r.input;",
        ))
        .await;
    let w = waiting(&r);
    assert_eq!(w.reason, WaitReason::PendingTools);
    assert_eq!(
        json(&r)["pendingToolCalls"],
        json!([{"id": "bridge:callValue:1", "method": "callValue"}])
    );
    assert_eq!(texts(&r), vec!["asked"]);
    let id = w.run_id.clone();
    // The tool keeps running while the cell is parked.
    let mut r = rt.wait(WaitInput::new(&id)).await;
    while let CellResult::Waiting(_) = r {
        r = rt.wait(WaitInput::new(&id)).await;
    }
    assert_eq!(value(&r), json!({"value": "v"}));
    assert_eq!(texts(&r), vec!["got"]);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the tool ran once");
}

#[tokio::test]
async fn await_results_keeps_the_call_open() {
    let mut slow = t("slow", "Slow tool");
    slow.delay = Duration::from_millis(600);
    let (rt, _) = runtime_with(vec![slow], Limits::default().with_timeout_ms(300)).await;
    let mut input = exec("await yield_control(); const r = await slow({}); return r.name;");
    input.await_results = true;
    let r = rt.exec(input).await;
    assert_eq!(value(&r), json!("slow"));
}

/// `[host] max_await_results_ms` bounds how long a required cell may wait
/// off the VM in all. Obeyed: a 300 ms timer under a 1,000 ms bound
/// completes (longer than the call's own 300 ms budget: waiting pauses the
/// cell's clock). Violated: a 60 s timer fails with `timeout` at the bound,
/// naming it, and the session can run its next cell.
#[tokio::test]
async fn await_results_waits_are_bounded_by_the_host() {
    let rt = Runtime::builder()
        .limits(Limits::default().with_timeout_ms(300))
        .host_limits(quickcell::HostLimits::default().with_max_await_results_ms(1_000))
        .build()
        .await
        .unwrap();
    let mut input = exec("await new Promise((r) => setTimeout(r, 300)); return 'slept';");
    input.await_results = true;
    assert_eq!(value(&rt.exec(input).await), json!("slept"));

    let started = std::time::Instant::now();
    let mut input =
        exec("text('before'); await new Promise((r) => setTimeout(r, 60_000)); return 'never';");
    input.await_results = true;
    let r = rt.exec(input).await;
    let f = failed(&r);
    assert_eq!(f.code, quickcell::ErrorCode::Timeout);
    assert!(
        f.error.contains("waited 1000 ms") && f.error.contains("max_await_results_ms"),
        "{}",
        f.error
    );
    assert_eq!(
        texts(&r),
        vec!["before"],
        "output before the timeout is kept"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "ended at the bound, not the timer"
    );
    assert_eq!(value(&rt.exec(exec("return 1")).await), json!(1));
}

#[tokio::test]
async fn timers_fire_and_clear_across_suspension() {
    let rt = runtime(Limits::default()).await;
    let code = r#"
        const fired = [];
        setTimeout(() => fired.push("early"), 30);
        const late = setTimeout(() => fired.push("cleared"), 400);
        await yield_control();
        clearTimeout(late);
        await new Promise((resolve) => setTimeout(resolve, 60));
        return fired;
    "#;
    let r = rt.exec(exec(code)).await;
    let w = waiting(&r);
    assert_eq!(w.reason, WaitReason::PendingTools, "timers are host work");
    let id = w.run_id.clone();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = rt.wait(WaitInput::new(id)).await;
    assert_eq!(value(&r), json!(["early"]));
}

#[tokio::test]
async fn a_run_parked_by_one_runtime_is_resumed_by_another() {
    let dir = state_dir();
    let code = r#"
        const t0 = performance.now();
        setTimeout(() => text("timer"), 150);
        text("parked");
        await yield_control();
        await new Promise((r) => setTimeout(r, 250));
        return { clockForward: performance.now() >= t0 };
    "#;
    let id = {
        let first = runtime_in(&dir, Limits::default()).await;
        let r = first.exec(exec(code)).await;
        waiting(&r).run_id.clone()
    };
    // The first runtime is gone; a second one opens the same state store.
    let second = runtime_in(&dir, Limits::default()).await;
    let r = second.wait(WaitInput::new(&id)).await;
    assert_eq!(value(&r), json!({"clockForward": true}));
    assert_eq!(texts(&r), vec!["timer"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn calls_in_flight_when_the_host_ended_replay_only_if_replay_safe() {
    let dir = state_dir();
    let mut safe = t("safe_read", "A replay-safe tool");
    safe.delay = Duration::from_millis(600);
    safe.replay_safe = true;
    let mut unsafe_tool = t("mutate", "A tool with side effects");
    unsafe_tool.delay = Duration::from_millis(600);
    let (safe_calls, unsafe_calls) = (safe.calls.clone(), unsafe_tool.calls.clone());
    let code = r#"
        const [a, b] = await Promise.allSettled([safe_read({value: "x"}), mutate({value: "y"})]);
        return [a.status, a.value?.name, b.status, b.reason?.message, b.reason?.code];
    "#;
    let id = {
        let mut registry = quickcell::ToolRegistry::new();
        registry.add(std::sync::Arc::new(safe)).unwrap();
        registry.add(std::sync::Arc::new(unsafe_tool)).unwrap();
        let host = Runtime::builder()
            .limits(Limits::default().with_timeout_ms(300))
            .tools(registry.clone())
            .state_dir(&dir)
            .build()
            .await
            .unwrap();
        let r = host.exec(exec(code)).await;
        let id = waiting(&r).run_id.clone();
        // Dropping the runtime ends its host: the calls in flight are lost.
        drop(host);
        id
    };
    assert_eq!(safe_calls.load(Ordering::SeqCst), 1);
    assert_eq!(unsafe_calls.load(Ordering::SeqCst), 1);
    let mut safe = t("safe_read", "A replay-safe tool");
    safe.replay_safe = true;
    let safe_again = safe.calls.clone();
    let unsafe_again = t("mutate", "A tool with side effects");
    let unsafe_again_calls = unsafe_again.calls.clone();
    let mut registry = quickcell::ToolRegistry::new();
    registry.add(std::sync::Arc::new(safe)).unwrap();
    registry.add(std::sync::Arc::new(unsafe_again)).unwrap();
    let restarted = Runtime::builder()
        .tools(registry)
        .state_dir(&dir)
        .build()
        .await
        .unwrap();
    let r = restarted.wait(WaitInput::new(&id)).await;
    let v = value(&r);
    assert_eq!(v[0], "fulfilled");
    assert_eq!(v[1], "safe_read");
    assert_eq!(v[2], "rejected");
    assert!(v[3].as_str().unwrap().contains("effect is unknown"), "{v}");
    assert_eq!(v[4], "tool_error");
    assert_eq!(
        safe_again.load(Ordering::SeqCst),
        1,
        "the replay-safe call ran again"
    );
    assert_eq!(
        unsafe_again_calls.load(Ordering::SeqCst),
        0,
        "the other did not"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The heap a cell grew is stored as differences between neighbouring
/// blocks of each size class (snapshot format 4), split into byte lanes.
/// Gate: 20,000 records (4.3 MB of changed pages) are stored in under
/// 260 KB; in place they took ~635 KB, in lanes alone (format 3) ~345 KB,
/// with block strides ~218 KB.
#[tokio::test]
async fn a_grown_heap_is_stored_compactly() {
    let dir = state_dir();
    let rt = runtime_in(&dir, Limits::default()).await;
    let r = rt
        .exec(exec(
            "const big = Array.from({length: 20000}, (_, i) => ({i, s: 'item ' + i, t: [i, i + 1]})); \
             await yield_control(); \
             return big.reduce((sum, r) => sum + r.i + r.t[1] + r.s.length, 0);",
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    let stored = stored_snapshot(&conn, &id).len();
    drop(conn);
    assert!(stored < 260_000, "snapshot of {stored} bytes");
    // And it restores intact: every record is read back.
    let expected: u64 = (0..20000u64)
        .map(|i| i + (i + 1) + format!("item {i}").len() as u64)
        .sum();
    assert_eq!(value(&rt.wait(WaitInput::new(id)).await), json!(expected));
    std::fs::remove_dir_all(&dir).ok();
}

/// The stored snapshot of `run_id`.
fn stored_snapshot(conn: &rusqlite::Connection, run_id: &str) -> Vec<u8> {
    conn.query_row(
        "SELECT snapshot FROM runs WHERE run_id = ?1",
        [run_id],
        |r| r.get(0),
    )
    .unwrap()
}

/// Rewrites the stored snapshot of `run_id` with `f`: the snapshot
/// itself, opened and sealed again with the state directory's key when
/// `reseal` (so the decoder's checks are what meets the damage), else the
/// stored, encrypted bytes.
fn tamper(dir: &std::path::Path, run_id: &str, reseal: bool, f: impl FnOnce(&mut Vec<u8>)) {
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    let mut blob = stored_snapshot(&conn, run_id);
    if reseal {
        let (agent_run, session, generation): (String, String, i64) = conn
            .query_row(
                "SELECT agent_run, session, generation FROM runs WHERE run_id = ?1",
                [run_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        let key = quickcell::StateKey::from_file(&dir.join(quickcell::STATE_KEY_FILE)).unwrap();
        let owner = quickcell::Owner { agent_run, session };
        let generation = generation as u64;
        blob = quickcell::testing::open_snapshot(&key, run_id, &owner, generation, blob).unwrap();
        f(&mut blob);
        blob = quickcell::testing::seal_snapshot(&key, run_id, &owner, generation, blob);
    } else {
        f(&mut blob);
    }
    conn.execute(
        "UPDATE runs SET snapshot = ?2 WHERE run_id = ?1",
        rusqlite::params![run_id, blob],
    )
    .unwrap();
}

#[tokio::test]
async fn corrupt_truncated_and_foreign_snapshots_fail_alone() {
    let dir = state_dir();
    let rt = runtime_in(&dir, Limits::default()).await;
    let park = || async {
        let r = rt
            .exec(exec("await yield_control(); return 'intact';"))
            .await;
        waiting(&r).run_id.clone()
    };
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "authentication tag does not verify",
            Box::new(|b: &mut Vec<u8>| b[40] ^= 1),
        ),
        (
            "checksum",
            Box::new(|b: &mut Vec<u8>| {
                let at = b.len() - 10;
                b[at] ^= 0xff;
            }),
        ),
        ("truncated", Box::new(|b: &mut Vec<u8>| b.truncate(30))),
        (
            "not a quickcell snapshot",
            Box::new(|b: &mut Vec<u8>| b[0] = b'X'),
        ),
    ];
    let bystander = park().await;
    for (expected, damage) in cases {
        let id = park().await;
        let reseal = !expected.starts_with("authentication");
        tamper(&dir, &id, reseal, damage);
        let r = rt.wait(WaitInput::new(&id)).await;
        let f = failed(&r);
        assert_eq!(f.code, ErrorCode::InternalError);
        assert_eq!(f.failure_phase, FailurePhase::Host);
        assert!(
            f.error.contains("snapshot is unusable") && f.error.contains(expected),
            "{expected}: {}",
            f.error
        );
        let again = rt.wait(WaitInput::new(&id)).await;
        assert_eq!(
            failed(&again).error,
            "code mode run is unavailable or expired."
        );
    }
    assert_eq!(
        value(&rt.wait(WaitInput::new(&bystander)).await),
        json!("intact")
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// What the SQLite store holds of `run_id`: its state, generation, lease,
/// guest build and snapshot.
fn run_row(dir: &std::path::Path, run_id: &str) -> (String, i64, i64, Option<String>, Vec<u8>) {
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    conn.query_row(
        "SELECT state, generation, lease, guest_build, snapshot FROM runs WHERE run_id = ?1",
        [run_id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
    )
    .unwrap()
}

/// Sets the guest build the store names for `run_id` (`None`: a run
/// stored before builds were recorded).
fn set_run_build(dir: &std::path::Path, run_id: &str, build: Option<&str>) {
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    conn.execute(
        "UPDATE runs SET guest_build = ?2 WHERE run_id = ?1",
        rusqlite::params![run_id, build],
    )
    .unwrap();
}

/// The refusal of a run parked by another guest build: `snapshot_incompatible`,
/// phase `host`, a message that says the run stays parked.
fn incompatible(r: &CellResult) -> String {
    let f = failed(r);
    assert_eq!(f.code, ErrorCode::SnapshotIncompatible, "{}", f.error);
    assert_eq!(json(r)["code"], "snapshot_incompatible");
    assert_eq!(f.failure_phase, FailurePhase::Host);
    assert!(f.error.contains("The run stays parked"), "{}", f.error);
    assert!(f.error.contains(quickcell::guest_build()), "{}", f.error);
    f.error.clone()
}

#[tokio::test]
async fn a_run_parked_by_another_guest_build_is_refused_and_stays_parked() {
    let dir = state_dir();
    let rt = runtime_in(&dir, Limits::default()).await;
    let ours = quickcell::guest_build();
    let park = || async {
        let r = rt
            .exec(exec(
                "text('before'); await yield_control(); text('after'); return 'resumed';",
            ))
            .await;
        waiting(&r).run_id.clone()
    };

    // Obeyed: the run names the build that parked it, which resumes it.
    let id = park().await;
    assert_eq!(run_row(&dir, &id).3.as_deref(), Some(ours));
    let r = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(value(&r), json!("resumed"));

    // Violated at the claim: the run's record names another build. It is
    // refused before the claim: nothing of the run changes.
    let id = park().await;
    let other = "ab".repeat(32);
    set_run_build(&dir, &id, Some(&other));
    let before = run_row(&dir, &id);
    for _ in 0..2 {
        let error = incompatible(&rt.wait(WaitInput::new(&id)).await);
        assert!(
            error.contains(&format!(
                "run {id} was parked by guest build {other}; this host carries guest build {ours}"
            )),
            "{error}"
        );
    }
    assert_eq!(run_row(&dir, &id), before, "the run is untouched");
    // A host of its build resumes it, with nothing lost.
    set_run_build(&dir, &id, Some(ours));
    let r = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(value(&r), json!("resumed"));
    assert_eq!(texts(&r), vec!["after"]);

    // Violated at decoding: the record names no build (stored before
    // builds were recorded), the snapshot's header another guest, another
    // pre-initialization of this one, or another format. The run is handed
    // back parked, its generation and snapshot intact.
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let other_bytes = [0xab_u8; 32];
    let cases: Vec<(String, Damage)> = vec![
        (
            format!("was parked by guest build {other}; this host carries guest build {ours}"),
            Box::new(move |b: &mut Vec<u8>| {
                b[12..44].fill(0xcd);
                b[44..76].copy_from_slice(&other_bytes);
            }),
        ),
        (
            format!("was parked by guest build {ours}, which this host carries too, but pre-initialized otherwise"),
            Box::new(|b: &mut Vec<u8>| b[20] ^= 1),
        ),
        (
            "snapshot format 4; this host reads formats 5 to 8".to_string(),
            Box::new(|b: &mut Vec<u8>| b[8] = 4),
        ),
    ];
    for (expected, damage) in cases {
        let id = park().await;
        set_run_build(&dir, &id, None);
        let intact = run_row(&dir, &id);
        tamper(&dir, &id, true, damage);
        let error = incompatible(&rt.wait(WaitInput::new(&id)).await);
        assert!(error.contains(&expected), "{expected}: {error}");
        let (state, generation, _, _, _) = run_row(&dir, &id);
        assert_eq!((state.as_str(), generation), ("parked", intact.1));
        // A host of the quickcell that parked it resumes it.
        tamper(&dir, &id, false, |b| *b = intact.4.clone());
        let r = rt.wait(WaitInput::new(&id)).await;
        assert_eq!(value(&r), json!("resumed"), "{expected}");
    }

    // A cancel needs no guest: it ends a run of another build.
    let id = park().await;
    set_run_build(&dir, &id, Some(&other));
    let mut cancel = WaitInput::new(&id);
    cancel.cancel = true;
    assert_eq!(failed(&rt.wait(cancel).await).code, ErrorCode::Aborted);
    assert!(!run_exists(&dir, &id));
    std::fs::remove_dir_all(&dir).ok();
}

/// Whether the SQLite store holds `run_id`.
fn run_exists(dir: &std::path::Path, run_id: &str) -> bool {
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM runs WHERE run_id = ?1",
        [run_id],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        > 0
}

#[tokio::test]
async fn a_snapshot_is_resumed_once_and_reseeded_on_resume() {
    let dir = state_dir();
    let rt = runtime_in(&dir, Limits::default()).await;
    let r = rt
        .exec(exec("await yield_control(); return Math.random();"))
        .await;
    let id = waiting(&r).run_id.clone();
    // Keep a copy of the stored run, as an attacker or a buggy host might.
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    let row: (String, String, i64, i64, Vec<u8>) = conn
        .query_row(
            "SELECT agent_run, session, generation, expires_at_ms, snapshot FROM runs WHERE run_id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .unwrap();
    let first = value(&rt.wait(WaitInput::new(&id)).await);
    let again = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(
        failed(&again).error,
        "code mode run is unavailable or expired."
    );
    // Even a snapshot put back by hand does not repeat its random sequence.
    conn.execute(
        "INSERT INTO runs (run_id, agent_run, session, state, generation, expires_at_ms, claimed_until_ms, snapshot)
         VALUES (?1, ?2, ?3, 'parked', ?4, ?5, NULL, ?6)",
        rusqlite::params![id, row.0, row.1, row.2, row.3, row.4],
    )
    .unwrap();
    let second = value(&rt.wait(WaitInput::new(&id)).await);
    assert_ne!(first, second, "Math.random is reseeded on every resume");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn output_budget_spans_calls() {
    let rt = runtime(Limits::default().with_max_output_bytes(1024)).await;
    let code = r#"text("a".repeat(600)); await yield_control(); text("b".repeat(600)); return 1;"#;
    let r = rt.exec(exec(code)).await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(texts(&r), vec!["a".repeat(600)]);
    let r = rt.wait(WaitInput::new(id)).await;
    let out = r.output();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["value"]["truncated"], json!(true), "{}", r.to_json());
    let total: usize = r.to_json().len();
    assert!(total < 2048);
}

#[tokio::test]
async fn fuel_is_per_call_and_restoring_costs_none() {
    let rt = runtime(Limits::default()).await;
    let r = rt.exec(exec("await yield_control(); return 1;")).await;
    let id = waiting(&r).run_id.clone();
    let r = rt.wait(WaitInput::new(id)).await;
    let fuel = r.telemetry().fuel_used;
    // Settling one yield and returning: far below a fresh cell's start-up.
    assert!(fuel > 1_000 && fuel < 200_000, "{fuel}");
}

#[tokio::test]
async fn deep_stack_use_before_and_after_a_checkpoint() {
    // The dead part of the shadow stack is not stored; the cell must not
    // notice.
    let rt = runtime(Limits::default()).await;
    let code = r#"
        function depth(n) { return n === 0 ? 0 : 1 + depth(n - 1); }
        const before = depth(3000);
        const keep = { nested: [before, "kept"] };
        await yield_control();
        return [before, depth(3000), keep];
    "#;
    let r = rt.exec(exec(code)).await;
    let id = waiting(&r).run_id.clone();
    let r = rt.wait(WaitInput::new(id)).await;
    assert_eq!(value(&r), json!([3000, 3000, {"nested": [3000, "kept"]}]));
}

/// Tool globals no cell touched before parking are still accessors in the
/// snapshot (their native getters are table indexes, valid in any instance
/// of the guest): after `wait` they become their handles and call through.
#[tokio::test]
async fn tool_globals_untouched_before_parking_work_after_wait() {
    let (rt, calls) = runtime_with(vec![t("alpha", "a"), t("beta", "b")], Limits::default()).await;
    let r = rt
        .exec(exec(
            r#"await yield_control();
               const got = await alpha({ value: "x" });
               return [typeof beta, got.name, catalog.all().map((h) => h.callableName)];"#,
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    assert_eq!(calls[0].load(Ordering::SeqCst), 0);
    let r = rt.wait(WaitInput::new(&id)).await;
    assert_eq!(value(&r), json!(["function", "alpha", ["alpha", "beta"]]));
    assert_eq!(calls[0].load(Ordering::SeqCst), 1);
}
