//! The session store (`store` / `load`), saved results (`results.*`) and
//! automatic references.

use crate::suspend::state_dir;
use crate::{failed, json, value, waiting};
use quickcell::{ErrorCode, ExecInput, Fuel, Limits, Owner, Runtime, WaitInput};
use serde_json::json;

fn owner(session: &str) -> Owner {
    Owner {
        agent_run: "agent-run-1".into(),
        session: session.into(),
    }
}

fn cell(code: &str) -> ExecInput {
    ExecInput::new("store test", code).with_owner(owner("s1"))
}

async fn rt(limits: Limits) -> Runtime {
    Runtime::builder().limits(limits).build().await.unwrap()
}

#[tokio::test]
async fn values_are_detached_json_copies_committed_on_completion() {
    let rt = rt(Limits::default()).await;
    let r = rt
        .exec(cell(
            r#"const original = {list: [1, 2], when: "now", fn() {}};
               await store("k", original);
               original.list.push(3);
               const copy = await load("k");
               copy.list.push(99);
               await store("gone", 1); await store("gone", undefined);
               await store("nothing", null);
               return [await load("k"), await load("gone"), await load("nothing"), await load("missing")];"#,
        ))
        .await;
    assert_eq!(
        value(&r),
        json!([{"list": [1, 2], "when": "now"}, null, null, null]),
        "undefined (deleted, missing) projects to null in the result"
    );
    let r = rt
        .exec(cell(
            r#"return [await load("k"), typeof await load("gone"), await load("nothing")];"#,
        ))
        .await;
    assert_eq!(
        value(&r),
        json!([{"list": [1, 2], "when": "now"}, "undefined", null])
    );
}

#[tokio::test]
async fn keys_must_be_strings_of_1_to_256_characters() {
    let rt = rt(Limits::default()).await;
    let r = rt
        .exec(cell(
            r#"const bad = ["", "k".repeat(257), 7, null, {}, undefined];
               const out = [];
               for (const k of bad) {
                 for (const f of [() => store(k, 1), () => load(k)]) {
                   try { await f(); out.push("accepted"); } catch (e) { out.push(e instanceof TypeError); }
                 }
               }
               await store("k".repeat(256), "ok");
               out.push(await load("k".repeat(256)));
               return out;"#,
        ))
        .await;
    let v = value(&r);
    let checks = v.as_array().unwrap();
    assert!(checks[..12].iter().all(|c| c == &json!(true)), "{v}");
    assert_eq!(checks[12], "ok");
}

#[tokio::test]
async fn value_limit_exact_accepted_one_more_byte_rejected() {
    let rt = rt(Limits::default()).await;
    // JSON of "x".repeat(n) is n + 2 bytes; "é" is 2 bytes, "😀" 4.
    let r = rt
        .exec(cell(
            r#"const out = [];
               const attempt = async (k, v) => {
                 try { await store(k, v); out.push("ok"); }
                 catch (e) { out.push(e instanceof RangeError ? "RangeError" : String(e)); }
               };
               await attempt("ascii", "x".repeat(262142));
               await attempt("ascii", "y".repeat(262143));
               await attempt("accents", "é".repeat(131071));
               await attempt("accents", "é".repeat(131071) + "z");
               await attempt("emoji", "😀".repeat(65535) + "ab");
               await attempt("emoji", "😀".repeat(65536));
               const kept = await load("ascii");
               return [out, kept[0], kept.length];"#,
        ))
        .await;
    assert_eq!(
        value(&r),
        json!([
            ["ok", "RangeError", "ok", "RangeError", "ok", "RangeError"],
            "x",
            262142
        ])
    );
}

#[tokio::test]
async fn total_limit_is_one_mebibyte_of_values() {
    let rt = rt(Limits::default()).await;
    let r = rt
        .exec(cell(
            r#"for (const k of ["a", "b", "c", "d"]) await store(k, "x".repeat(262142));
               let over;
               try { await store("e", 1); over = "stored"; } catch (e) { over = [e.name, e.code]; }
               await store("a", "small");   // replacing frees room
               await store("e", 1);
               return [over, await load("e")];"#,
        ))
        .await;
    assert_eq!(value(&r), json!([["RangeError", "store_range"], 1]));
}

#[tokio::test]
async fn writes_are_buffered_per_cell_and_visible_across_wait() {
    let rt = rt(Limits::default()).await;
    // Contract example 8.
    let a = rt
        .exec(cell(
            r#"await store("key", 7); await yield_control(); const b = await load("key"); await store("key", b + 1); return b;"#,
        ))
        .await;
    let id = waiting(&a).run_id.clone();
    let sibling = rt.exec(cell(r#"return typeof await load("key");"#)).await;
    assert_eq!(
        value(&sibling),
        json!("undefined"),
        "uncommitted writes are private"
    );
    let done = rt.wait(WaitInput::new(id).with_owner(owner("s1"))).await;
    assert_eq!(value(&done), json!(7));
    let later = rt.exec(cell(r#"return await load("key");"#)).await;
    assert_eq!(value(&later), json!(8));
    // Another session has its own store.
    let other = rt
        .exec(
            ExecInput::new("other", r#"return typeof await load("key");"#).with_owner(owner("s2")),
        )
        .await;
    assert_eq!(value(&other), json!("undefined"));
}

#[tokio::test]
async fn writes_are_discarded_on_every_failure_kind() {
    let cases: Vec<(Limits, &str, ErrorCode)> = vec![
        (
            Limits::default(),
            r#"await store("w", 1); throw new Error("no");"#,
            ErrorCode::InternalError,
        ),
        (
            Limits::default().with_timeout_ms(300),
            r#"await store("w", 2); for (;;) {}"#,
            ErrorCode::Timeout,
        ),
        (
            Limits::default().with_fuel(Fuel::Limited(3_000_000)),
            r#"await store("w", 3); for (;;) {}"#,
            ErrorCode::FuelExhausted,
        ),
        (
            Limits::default().with_memory_limit_bytes(4 << 20),
            r#"await store("w", 4); const a = []; for (;;) a.push("x".repeat(1000) + a.length);"#,
            ErrorCode::MemoryLimitExceeded,
        ),
    ];
    for (limits, code, expected) in cases {
        let rt = rt(limits).await;
        let r = rt.exec(cell(code)).await;
        assert_eq!(failed(&r).code, expected, "{}", r.to_json());
        let check = rt.exec(cell(r#"return typeof await load("w");"#)).await;
        assert_eq!(value(&check), json!("undefined"), "{code}");
    }
    // Expiry of a parked cell discards its writes too.
    let rt = rt(Limits::default().with_snapshot_ttl_seconds(1)).await;
    let r = rt
        .exec(cell(
            r#"await store("w", 5); await yield_control(); return 1;"#,
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    let r = rt.wait(WaitInput::new(id).with_owner(owner("s1"))).await;
    assert_eq!(failed(&r).error, "code mode run is unavailable or expired.");
    let check = rt.exec(cell(r#"return typeof await load("w");"#)).await;
    assert_eq!(value(&check), json!("undefined"));
}

#[tokio::test]
async fn committed_values_survive_a_restart() {
    let dir = state_dir();
    {
        let first = Runtime::builder().state_dir(&dir).build().await.unwrap();
        let r = first
            .exec(cell(r#"await store("persist", {n: 42}); return 1;"#))
            .await;
        assert_eq!(value(&r), json!(1));
    }
    let second = Runtime::builder().state_dir(&dir).build().await.unwrap();
    let r = second.exec(cell(r#"return await load("persist");"#)).await;
    assert_eq!(value(&r), json!({"n": 42}));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn two_cells_racing_on_a_key_last_commit_wins() {
    let rt = rt(Limits::default()).await;
    let a = rt
        .exec(cell(
            r#"await store("race", "from A"); await yield_control(); return "A";"#,
        ))
        .await;
    let b = rt
        .exec(cell(
            r#"await store("race", "from B"); await yield_control(); return "B";"#,
        ))
        .await;
    let (a, b) = (waiting(&a).run_id.clone(), waiting(&b).run_id.clone());
    // B completes first, then A: A's commit is the later one and wins.
    assert_eq!(
        value(&rt.wait(WaitInput::new(b).with_owner(owner("s1"))).await),
        json!("B")
    );
    assert_eq!(
        value(&rt.wait(WaitInput::new(a).with_owner(owner("s1"))).await),
        json!("A")
    );
    let r = rt.exec(cell(r#"return await load("race");"#)).await;
    assert_eq!(value(&r), json!("from A"));
}

#[tokio::test]
async fn store_is_unavailable_in_restart_safe_cells_and_without_a_session() {
    let rt = rt(Limits::default()).await;
    let mut input = cell(r#"try { await store("k", 1); } catch (e) { return e.message; }"#);
    input.restart_safe = true;
    let r = rt.exec(input).await;
    assert!(
        value(&r).as_str().unwrap().contains("restart-safe"),
        "{}",
        r.to_json()
    );
    let r = rt
        .exec(ExecInput::new(
            "no session",
            r#"try { await load("k"); } catch (e) { return e.message; }"#,
        ))
        .await;
    assert!(
        value(&r).as_str().unwrap().contains("session"),
        "{}",
        r.to_json()
    );
}

#[tokio::test]
async fn results_save_load_delete() {
    let rt = rt(Limits::default()).await;
    let r = rt
        .exec(cell(
            r#"const v = {rows: [1, 2, 3], name: "n"};
               const d = await results.save(v);
               v.rows.push(4);
               const loaded = await results.load(d.id);
               loaded.rows.push(5);
               const again = await results.load(d.id);
               const deleted = await results.delete(d.id);
               let missing;
               try { await results.load(d.id); } catch (e) { missing = e.message; }
               return { d, again, deleted, missing };"#,
        ))
        .await;
    let v = value(&r);
    let d = &v["d"];
    assert!(
        regex::Regex::new(r"^result_[0-9a-f-]{36}$")
            .unwrap()
            .is_match(d["id"].as_str().unwrap()),
        "{d}"
    );
    assert_eq!(d["bytes"], json!(r#"{"rows":[1,2,3],"name":"n"}"#.len()));
    assert_eq!(d["count"], 2);
    assert_eq!(d["preview"], json!({"rows": [1, 2, 3], "name": "n"}));
    assert_eq!(d["previewTruncated"], false);
    assert!(serde_json::to_string(d).unwrap().len() <= 768);
    assert_eq!(v["again"], json!({"rows": [1, 2, 3], "name": "n"}));
    assert_eq!(v["deleted"], true);
    assert_eq!(
        v["missing"],
        "Code Mode result is unavailable or expired; fetch fresh data if needed."
    );
}

#[tokio::test]
async fn results_capacity_is_64_entries_and_the_byte_allowance() {
    let rt = rt(Limits::default()).await;
    let r = rt
        .exec(cell(
            r#"const ids = [];
               for (let i = 0; i < 64; i++) ids.push((await results.save(i)).id);
               let full;
               try { await results.save("one more"); } catch (e) { full = e.message; }
               await results.delete(ids[0]);
               const after = (await results.save("fits")).count;
               return [full, after, await results.load(ids[1])];"#,
        ))
        .await;
    assert_eq!(
        value(&r),
        json!(["Code Mode results capacity exceeded; delete saved references or save a smaller value. Existing references are unchanged.", 1, 1])
    );
    // Bytes: min(memoryLimitBytes, maxSnapshotBytes) = 4,096 here.
    let rt2 = Runtime::builder()
        .limits(Limits::default().with_max_snapshot_bytes(4096))
        .build()
        .await
        .unwrap();
    let r = rt2
        .exec(cell(
            r#"await results.save("x".repeat(3000));
               try { await results.save("y".repeat(1200)); return "saved"; } catch (e) { return e.message; }"#,
        ))
        .await;
    assert!(
        value(&r)
            .as_str()
            .unwrap()
            .starts_with("Code Mode results capacity exceeded"),
        "{}",
        r.to_json()
    );
}

#[tokio::test]
async fn an_oversized_final_value_becomes_a_reference_the_next_cell_loads() {
    let rt = rt(Limits::default().with_max_output_bytes(1024)).await;
    let r = rt
        .exec(cell(
            r#"return Array.from({length: 300}, (_, i) => ({i, label: "row " + i}));"#,
        ))
        .await;
    let v = value(&r);
    assert_eq!(v["truncated"], true);
    let id = v["reference"]["id"]
        .as_str()
        .expect("a reference")
        .to_string();
    assert_eq!(v["reference"]["count"], 300);
    assert!(v["guidance"].as_str().unwrap().contains("results.load"));
    assert!(
        r.to_json().len() < 1024 + 400,
        "the result stays within the budget (plus telemetry)"
    );
    let r = rt
        .exec(cell(&format!(
            r#"const rows = await results.load("{id}"); return [rows.length, rows[299].label];"#
        )))
        .await;
    assert_eq!(value(&r), json!([300, "row 299"]));
}

#[tokio::test]
async fn strings_and_restart_safe_values_are_not_retained() {
    let rt = rt(Limits::default().with_max_output_bytes(1024)).await;
    let r = rt.exec(cell(r#"return "x".repeat(2048);"#)).await;
    let v = value(&r);
    assert_eq!(v["guidance"], "Output truncated; rerun with narrower args.");
    assert!(v.get("reference").is_none());
    let mut input = cell(r#"return Array.from({length: 300}, (_, i) => i);"#);
    input.restart_safe = true;
    let r = rt.exec(input).await;
    let v = value(&r);
    assert!(
        v["guidance"]
            .as_str()
            .unwrap()
            .starts_with("Not retained in restart-safe mode."),
        "{v}"
    );
    assert!(json(&r).to_string().len() < 1500);
}

#[tokio::test]
async fn an_unconfirmed_commit_completes_with_the_warning() {
    let dir = state_dir();
    let rt = Runtime::builder().state_dir(&dir).build().await.unwrap();
    let r = rt
        .exec(cell(
            r#"await store("k", 1); await yield_control(); return "done";"#,
        ))
        .await;
    let id = waiting(&r).run_id.clone();
    // The store's table disappears while the cell is parked: the commit
    // at completion cannot succeed.
    let conn = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
    conn.execute_batch("ALTER TABLE session_store RENAME TO session_store_away")
        .unwrap();
    let r = rt.wait(WaitInput::new(id).with_owner(owner("s1"))).await;
    assert_eq!(value(&r), json!("done"));
    assert_eq!(
        json(&r)["warnings"],
        json!(["Code Mode session store persistence could not be confirmed. The cell completed; verify the session transcript before relying on these values in a later cell or reply."])
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A write still running when its cell parks (SQLite answers off-thread) is
/// part of the parked run: a resume in another runtime sees it, and the
/// cell parked for its yield, not for the write.
#[tokio::test]
async fn a_write_running_when_the_cell_parks_survives_a_resume_elsewhere() {
    let dir = state_dir();
    let first = Runtime::builder().state_dir(&dir).build().await.unwrap();
    let r = first
        .exec(cell(
            "store('k', {v: 1}); await yield_control(); return await load('k');",
        ))
        .await;
    let parked = waiting(&r);
    assert_eq!(json(&r)["reason"], "yield", "{}", r.to_json());
    let run_id = parked.run_id.clone();
    first.settle_parked_tool_calls().await;
    drop(first);
    let second = Runtime::builder().state_dir(&dir).build().await.unwrap();
    let r = second
        .wait(WaitInput::new(&run_id).with_owner(owner("s1")))
        .await;
    assert_eq!(value(&r), json!({"v": 1}));
    let r = second.exec(cell("return await load('k');")).await;
    assert_eq!(value(&r), json!({"v": 1}), "the write was committed");
}

/// The size check of a parked cell's writes sees what other cells of the
/// session committed meanwhile: here a delete that makes an earlier write
/// of this cell replace nothing, so a write that fit before no longer does.
#[tokio::test]
async fn the_size_check_sees_commits_made_while_the_cell_was_parked() {
    let rt = rt(Limits::default()).await;
    // 4 × 250,002 bytes = 1,000,008 of the 1,048,576 bytes a session holds.
    let r = rt
        .exec(cell(
            "const big = 'x'.repeat(250000); for (const k of ['a', 'b', 'c', 'd']) await store(k, big); return 1;",
        ))
        .await;
    assert_eq!(value(&r), json!(1));
    let r = rt
        .exec(cell(
            "await store('a', 1); await yield_control();
             await store('e', 'x'.repeat(250000));
             try { await store('f', 'x'.repeat(100000)); return 'stored'; }
             catch (e) { return e.code; }",
        ))
        .await;
    let run_id = waiting(&r).run_id.clone();
    // Another cell deletes `a`: the parked cell's write of `a` now adds
    // one byte instead of replacing 250,002.
    let r = rt
        .exec(cell("await store('a', undefined); return 2;"))
        .await;
    assert_eq!(value(&r), json!(2));
    let r = rt
        .wait(WaitInput::new(&run_id).with_owner(owner("s1")))
        .await;
    // 750,006 committed + 1 + 250,002 buffered + 100,002 > 1,048,576.
    assert_eq!(value(&r), json!("store_range"));
}
