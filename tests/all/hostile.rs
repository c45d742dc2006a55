//! Hostile input: nothing a cell sends may abort, panic, exhaust or stall
//! the host (operations.md §1). Each case asserts a clean result *and* that
//! the next cell still works; caps come in obeyed / violated pairs.

use crate::bridge::{runtime_with, t};
use crate::{failed, json, runtime, value};
use quickcell::{
    CellResult, ErrorCode, ExecInput, Fuel, HostLimits, Limits, Owner, Runtime, WaitInput,
    MAX_SOURCE_BYTES, MAX_SOURCE_NESTING,
};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Duration;

fn owner(session: &str) -> Owner {
    Owner {
        agent_run: String::new(),
        session: session.to_string(),
    }
}

/// The runtime still runs an ordinary cell.
async fn still_works(rt: &Runtime) {
    let r = rt.exec(ExecInput::new("next", "return 6 * 7")).await;
    assert_eq!(value(&r), json!(42), "the next cell still works");
}

/// Runs `code` on `rt`, failing the test instead of hanging if the host
/// stalls.
async fn exec_bounded(rt: &Runtime, code: &str) -> CellResult {
    tokio::time::timeout(
        Duration::from_secs(60),
        rt.exec(ExecInput::new("hostile", code)),
    )
    .await
    .expect("the host answered (did not stall)")
}

// ---------------------------------------------------------------------------
// Source: size and nesting
// ---------------------------------------------------------------------------

fn nested(open: &str, inner: &str, close: &str, depth: usize) -> String {
    format!(
        "return {}{inner}{};",
        open.repeat(depth),
        close.repeat(depth)
    )
}

#[tokio::test]
async fn deep_nesting_in_source_is_refused_not_a_crash() {
    let rt = runtime(Limits::default()).await;
    // The issue's case: 200,000 levels (over the size cap as well).
    let r = exec_bounded(&rt, &nested("[", "1", "]", 200_000)).await;
    assert_eq!(failed(&r).code, ErrorCode::InvalidInput, "{}", r.to_json());
    // Every bracket shape, deep but within the size cap.
    let depth = 40_000;
    let shapes = [
        nested("[", "1", "]", depth),
        nested("{a:", "1", "}", depth),
        nested("(", "1", ")", depth),
        format!("return {}1{};", "f(".repeat(depth), ")".repeat(depth)),
        format!(
            "return `${{{}1{}}}`;",
            "`${".repeat(depth),
            "}`".repeat(depth)
        ),
        format!("{}{}", "{".repeat(depth), "}".repeat(depth)),
    ];
    for source in &shapes {
        let r = exec_bounded(&rt, source).await;
        let f = failed(&r);
        assert_eq!(f.code, ErrorCode::InvalidInput, "{}", r.to_json());
        assert!(
            f.error
                .contains(&format!("more than {MAX_SOURCE_NESTING} levels")),
            "{}",
            f.error
        );
        assert!(!f.bridge_dispatch_started);
    }
    still_works(&rt).await;
}

#[tokio::test]
async fn nesting_without_brackets_ends_cleanly() {
    // Shapes the bracket scan does not see: the parse runs on a stack sized
    // for the source, and QuickJS refuses what it cannot compile.
    let rt = runtime(Limits::default()).await;
    let depth = 100_000;
    // Each shape and what it must give: the guest's own verdict (a
    // RangeError when its parser runs out of native stack), never a host
    // failure or a crash.
    const STACK: &str = "RangeError: Maximum call stack size exceeded (native stack exhausted)";
    let shapes = [
        (format!("return {}1;", "!".repeat(depth)), Err(STACK)),
        // Brackets hidden from the scan by an ambiguous `/` (a regular
        // expression after `)` that the scan reads as division).
        (
            format!(
                "if (1) /`/; return {}1{};",
                "(".repeat(depth),
                ")".repeat(depth)
            ),
            Err(STACK),
        ),
        (format!("return {}1;", "- ".repeat(depth)), Err(STACK)),
        (
            format!("return {}0;", "typeof ".repeat(depth / 4)),
            Ok(json!("string")),
        ),
        (
            format!(
                "let x = 1; {} x = 2; return x;",
                "if (x) ".repeat(depth / 4)
            ),
            Ok(json!(2)),
        ),
        (
            format!("return {}0;", "x ? 1 : ".repeat(depth / 4)),
            Err("ReferenceError: x is not defined"),
        ),
        (
            format!("let a; return {}1;", "a = ".repeat(depth / 2)),
            Err(STACK),
        ),
    ];
    for (source, expected) in &shapes {
        let r = exec_bounded(&rt, source).await;
        match expected {
            Ok(v) => assert_eq!(&value(&r), v, "{}", r.to_json()),
            Err(error) => {
                let f = failed(&r);
                assert_eq!(f.code, ErrorCode::InternalError, "{}", r.to_json());
                assert_eq!(f.failure_phase, quickcell::FailurePhase::Guest);
                assert!(f.error.starts_with(error), "{}", f.error);
            }
        }
    }
    still_works(&rt).await;
}

#[tokio::test]
async fn nesting_at_the_cap_is_obeyed_past_it_refused() {
    let rt = runtime(Limits::default()).await;
    // QuickJS itself stops far below a thousand levels of arrays in a
    // value, so the obeyed case checks the host's verdict alone: the
    // source passes the source check (whatever the guest then says).
    let at_cap = nested("[", "1", "]", MAX_SOURCE_NESTING - 1);
    let r = exec_bounded(&rt, &at_cap).await;
    if let CellResult::Failed(f) = &r {
        assert!(!f.error.contains("levels deep"), "{}", f.error);
    }
    let shallow = nested("[", "1", "]", 40);
    let v = value(&exec_bounded(&rt, &shallow).await);
    assert!(v.to_string().starts_with("[[[[[[[[[[[[[[[[[[[[[["), "{v}");
    let over = nested("[", "1", "]", MAX_SOURCE_NESTING + 1);
    let f = failed(&exec_bounded(&rt, &over).await).clone();
    assert_eq!(f.code, ErrorCode::InvalidInput);
    // Brackets in strings and comments do not count.
    let quoted = format!(
        "const s = '{}'; /* {} */ return s.length;",
        "[".repeat(5_000),
        "(".repeat(5_000)
    );
    assert_eq!(value(&exec_bounded(&rt, &quoted).await), json!(5_000));
    still_works(&rt).await;
}

#[tokio::test]
async fn source_size_at_the_cap_is_obeyed_past_it_refused() {
    let rt = runtime(Limits::default()).await;
    let body = "return 1;";
    let at_cap = format!(
        "/*{}*/{body}",
        " ".repeat(MAX_SOURCE_BYTES - body.len() - 4)
    );
    assert_eq!(at_cap.len(), MAX_SOURCE_BYTES);
    assert_eq!(value(&exec_bounded(&rt, &at_cap).await), json!(1));
    let over = format!("/*{}*/{body}", " ".repeat(MAX_SOURCE_BYTES));
    let r = exec_bounded(&rt, &over).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert!(
        f.error
            .contains(&format!("at most {MAX_SOURCE_BYTES} bytes are accepted")),
        "{}",
        f.error
    );
    still_works(&rt).await;
}

// ---------------------------------------------------------------------------
// Output: surrogates and the budget
// ---------------------------------------------------------------------------

#[tokio::test]
async fn lone_surrogates_beside_multibyte_characters_end_cleanly() {
    let rt = runtime(Limits::default().with_max_output_bytes(1024)).await;
    let values = [
        r#""\ud800€€""#,
        r#""\udc00€€""#,
        r#""€\ud800€""#,
        r#""\ud83d€".repeat(300)"#,
        r#"["\ud800€€", {"k\udfff€": "\ud800😀😀".repeat(400)}]"#,
        r#""€".repeat(400) + "\ud800""#,
    ];
    for v in values {
        let code = format!("text({v}); return {v};");
        let r = exec_bounded(&rt, &code).await;
        let j = json(&r);
        assert!(j["status"] == "completed", "{}", r.to_json());
    }
    still_works(&rt).await;
}

#[tokio::test]
async fn output_never_exceeds_the_budget() {
    let rt = runtime(Limits::default()).await;
    let cases = [
        "for (let i = 0; i < 200000; i++) text('x'); return 1;",
        "for (let i = 0; i < 200000; i++) text(String(i)); return 1;",
        "for (let i = 0; i < 50000; i++) json({i}); return 'v'.repeat(40000);",
        "for (let i = 0; i < 3000; i++) text('€'.repeat(50)); return null;",
        "for (let i = 0; i < 200000; i++) text('x'.repeat(100)); return 1;",
    ];
    for code in cases {
        let r = exec_bounded(&rt, code).await;
        let j = json(&r);
        // The output list as the result carries it: entries, commas and
        // brackets (an empty list costs nothing).
        let output = match j["output"].as_array().unwrap().len() {
            0 => 0,
            _ => j["output"].to_string().len(),
        };
        let v = j.get("value").map_or(0, |v| v.to_string().len());
        let e = j.get("error").map_or(0, |e| e.to_string().len());
        assert!(
            output + v + e <= 65_536,
            "{code}: {} bytes of output, value and error",
            output + v + e
        );
    }
    still_works(&rt).await;
}

// ---------------------------------------------------------------------------
// Deadlines
// ---------------------------------------------------------------------------

/// Endless microtask chains end, each for its own reason (never "pending
/// without host work"): a chain whose promises hold each other grows until
/// the memory limit stops it (well before a 30 s deadline: under a second
/// here), the same way each time; a chain that holds nothing runs until
/// the deadline.
#[tokio::test]
async fn endless_microtask_chains_end_at_the_memory_limit_or_the_deadline() {
    let rt = runtime(Limits::default().with_timeout_ms(30_000)).await;
    let growing = "function loop() { return Promise.resolve().then(loop); } loop(); await new Promise(() => {});";
    let mut fuel = Vec::new();
    for _ in 0..2 {
        let r = exec_bounded(&rt, growing).await;
        let f = failed(&r);
        assert_eq!(f.code, ErrorCode::MemoryLimitExceeded, "{}", r.to_json());
        fuel.push(r.telemetry().fuel_used);
    }
    assert_eq!(fuel[0], fuel[1], "the same chain, the same stop");
    // 300 ms: QuickJS-ng 0.16 runs the flat chain through the default 10^10
    // fuel in under a second on this machine.
    let rt = runtime(Limits::default().with_timeout_ms(300)).await;
    let flat =
        "function loop() { Promise.resolve().then(loop); } loop(); await new Promise(() => {});";
    let r = exec_bounded(&rt, flat).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::Timeout, "{}", r.to_json());
    still_works(&rt).await;
}

// ---------------------------------------------------------------------------
// Fair shares
// ---------------------------------------------------------------------------

#[tokio::test]
async fn one_session_holds_at_most_its_share_of_parked_runs() {
    let limits = HostLimits::default()
        .with_max_suspended_runs(8)
        .with_max_suspended_runs_per_session(3);
    let rt = Runtime::builder()
        .host_limits(limits)
        .build()
        .await
        .unwrap();
    let park = |session: &str| {
        ExecInput::new("park", "await yield_control(); return 'resumed';")
            .with_owner(owner(session))
    };
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = rt.exec(park("greedy")).await;
        ids.push(crate::waiting(&r).run_id.clone());
    }
    // Obeyed: three parked. Violated: the fourth of the same session.
    let r = rt.exec(park("greedy")).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert!(f.error.contains("for this session"), "{}", f.error);
    // Another session is unaffected.
    let r = rt.exec(park("polite")).await;
    let polite = crate::waiting(&r).run_id.clone();
    assert_eq!(
        value(
            &rt.wait(WaitInput::new(polite).with_owner(owner("polite")))
                .await
        ),
        json!("resumed")
    );
    // Finishing one run frees the session's slot.
    let r = rt
        .wait(WaitInput::new(&ids[0]).with_owner(owner("greedy")))
        .await;
    assert_eq!(value(&r), json!("resumed"));
    crate::waiting(&rt.exec(park("greedy")).await);
    still_works(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_runs_at_most_its_share_of_cells() {
    let rt = std::sync::Arc::new(
        Runtime::builder()
            .host_limits(HostLimits::default().with_max_running_cells_per_session(2))
            .build()
            .await
            .unwrap(),
    );
    let slow = "await new Promise(r => setTimeout(r, 4000)); return 'slow';";
    let mut running = Vec::new();
    for _ in 0..2 {
        let rt = rt.clone();
        running.push(tokio::spawn(async move {
            rt.exec(ExecInput::new("slow", slow).with_owner(owner("busy")))
                .await
        }));
    }
    // Time for both to be admitted (they wait on a timer for seconds).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Violated: a third cell of the session, while two run.
    let r = rt
        .exec(ExecInput::new("third", "return 3").with_owner(owner("busy")))
        .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert!(
        f.error.contains("too many running code mode cells"),
        "{}",
        f.error
    );
    // Another session is unaffected.
    let r = rt
        .exec(ExecInput::new("other", "return 4").with_owner(owner("other")))
        .await;
    assert_eq!(value(&r), json!(4));
    // Obeyed: the two complete, and the session may run again.
    for h in running {
        assert_eq!(value(&h.await.unwrap()), json!("slow"));
    }
    let r = rt
        .exec(ExecInput::new("again", "return 5").with_owner(owner("busy")))
        .await;
    assert_eq!(value(&r), json!(5));
}

// ---------------------------------------------------------------------------
// Bridge amplification
// ---------------------------------------------------------------------------

#[tokio::test]
async fn outstanding_argument_bytes_are_capped() {
    let (rt, calls) = runtime_with(
        vec![{
            let mut tool = t("echo", "Echo");
            tool.delay = Duration::from_millis(200);
            tool
        }],
        Limits::default()
            .with_memory_limit_bytes(256 << 20)
            .with_max_snapshot_bytes(64 << 20)
            .with_fuel(Fuel::Unlimited),
    )
    .await;
    // One 3 MiB string passed to 20 calls: the host holds at most 8 MiB of
    // arguments, so two are accepted and the rest reject catchably.
    let code = r#"
        const big = "a".repeat(3 * 1024 * 1024);
        const settled = await Promise.allSettled(
          Array.from({length: 20}, () => echo({value: big})));
        const ok = settled.filter(s => s.status === "fulfilled").length;
        const refused = settled.filter(s => s.status === "rejected"
          && s.reason.code === "invalid_input"
          && /unsettled calls hold more than/.test(s.reason.message)).length;
        // Obeyed: once they settle, more may go.
        const later = (await echo({value: big})).input.value.length;
        return [ok, refused, later];
    "#;
    let r = exec_bounded(&rt, code).await;
    assert_eq!(
        value(&r),
        json!([2, 18, 3 * 1024 * 1024]),
        "{}",
        r.to_json()
    );
    assert_eq!(calls[0].load(std::sync::atomic::Ordering::SeqCst), 3);
    still_works(&rt).await;
}

#[tokio::test]
async fn a_runaway_request_loop_fails_the_cell_not_the_host() {
    let rt = runtime(Limits::default().with_fuel(Fuel::Unlimited)).await;
    // 300 requests in one guest run, each with 256 KiB of arguments: the
    // host reads 8 MiB of them, records 256, and the batch overflows.
    let code = r#"
        const big = "b".repeat(1 << 18);
        for (let i = 0; i < 300; i++) { catalog.search(big); }
        return "unreachable";
    "#;
    let r = exec_bounded(&rt, code).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput, "{}", r.to_json());
    assert!(f.error.contains("queue limit exceeded"), "{}", f.error);
    still_works(&rt).await;
}

#[tokio::test]
async fn many_catalog_replies_are_delivered_in_bounded_batches() {
    let (rt, _) = runtime_with(
        (0..40)
            .map(|i| t(&format!("tool_{i:02}"), "A tool that does a thing"))
            .collect(),
        Limits::default().with_max_snapshot_bytes(64 * 1024),
    )
    .await;
    let code = r#"
        const handles = await catalog.all();
        const replies = await Promise.all([
          ...Array.from({length: 70}, (_, i) => handles[i % handles.length].describe()),
          ...Array.from({length: 70}, (_, i) => API.read(`tools/tool_${String(i % 40).padStart(2, "0")}.d.ts`)),
        ]);
        return [replies.length, replies.every(r => r !== undefined)];
    "#;
    let r = exec_bounded(&rt, code).await;
    assert_eq!(value(&r), json!([140, true]), "{}", r.to_json());
    still_works(&rt).await;
}

#[tokio::test]
async fn long_store_keys_are_refused() {
    let rt = runtime(Limits::default()).await;
    let code = r#"
        let refused = null;
        try { await store("k".repeat(257), 1); } catch (e) { refused = e.code; }
        try { await store("k".repeat(4 << 20), 1); } catch (e) { refused += "," + e.code; }
        await store("k".repeat(256), "at the cap");
        return [refused, await load("k".repeat(256))];
    "#;
    let r = rt
        .exec(ExecInput::new("keys", code).with_owner(owner("keys")))
        .await;
    assert_eq!(
        value(&r),
        json!(["store_type,store_type", "at the cap"]),
        "{}",
        r.to_json()
    );
    still_works(&rt).await;
}

// ---------------------------------------------------------------------------
// Peak memory of amplifiers, measured on the CLI in its own process
// ---------------------------------------------------------------------------

/// Runs `quickcell exec` with `config` and `code`; returns its result and
/// its peak resident set size in bytes (`wait4`'s `ru_maxrss`).
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which also gives its usage
fn exec_measured(config: &str, code: &str) -> (Value, u64) {
    let dir = std::env::temp_dir().join(format!("quickcell-hostile-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config_path = dir.join("quickcell.toml");
    std::fs::write(&config_path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["exec", "--config"])
        .arg(&config_path)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--code", code])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut stdout = child.stdout.unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; `usage` is a valid out-pointer.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    let _ = std::fs::remove_dir_all(&dir);
    let result = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    (result, usage.ru_maxrss as u64 * 1024)
}

const BIG_LIMITS: &str = "[limits]\nmemory_limit_bytes = 536870912\nmax_snapshot_bytes = 67108864\ntimeout_ms = 60000\nfuel = false\n";

#[test]
fn sixty_concurrent_loads_of_a_saved_value_stay_small() {
    // A 4 MB value of many small objects (a parsed tree of it is many
    // times larger); sixty loads at once once took 8.5 GB.
    let code = r#"
        const rows = Array.from({length: 150000}, (_, i) => ({i, t: "r"}));
        const ref = await results.save(rows);
        const lengths = await Promise.all(
          Array.from({length: 60}, () => results.load(ref.id).then(v => v.length)));
        return [ref.bytes > 2000000, lengths.length, lengths.every(n => n === 150000)];
    "#;
    let (result, peak) = exec_measured(BIG_LIMITS, code);
    eprintln!("sixty loads of a saved value: peak RSS {} MiB", peak >> 20);
    assert_eq!(result["value"], json!([true, 60, true]), "{result}");
    assert!(
        peak < 1_500 << 20,
        "peak RSS {} MiB for sixty loads of a 4 MB value",
        peak >> 20
    );
}

#[test]
fn a_huge_completed_value_is_not_parsed_on_the_host() {
    // A 210 MB value (15 million references to one small object) against
    // a 64 KiB output budget.
    let code = r#"
        const row = {a: 1, b: "x"};
        return Array.from({length: 15000000}, () => row);
    "#;
    let config = "[limits]\nmemory_limit_bytes = 1073741824\ntimeout_ms = 60000\nfuel = false\n";
    let (result, peak) = exec_measured(config, code);
    eprintln!("a 210 MB completed value: peak RSS {} MiB", peak >> 20);
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"]["truncated"], json!(true), "{result}");
    assert!(
        peak < 2_500 << 20,
        "peak RSS {} MiB for a 210 MB value",
        peak >> 20
    );
}

// ---------------------------------------------------------------------------
// Files: special files and permissions
// ---------------------------------------------------------------------------

#[tokio::test]
async fn fifos_and_special_files_are_refused_without_blocking() {
    let ws = std::env::temp_dir().join(format!("quickcell-fifo-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(ws.join("dir")).unwrap();
    std::fs::write(ws.join("plain.txt"), "hello\n").unwrap();
    for fifo in [ws.join("pipe"), ws.join("dir/pipe.txt")] {
        let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    }
    let mut registry = quickcell::ToolRegistry::new();
    registry.add_workspace(&ws).unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let code = r#"
        const out = {};
        for (const [name, call] of [
          ["read", () => read({path: "pipe"})],
          ["grepFile", () => grep({pattern: "x", path: "pipe"})],
          ["grepDir", () => grep({pattern: "hello", path: "."})],
          ["ls", () => ls({path: "pipe"})],
          ["readPlain", () => read({path: "plain.txt"})],
        ]) {
          try { const r = await call(); out[name] = r.matches ? r.matches.length : (r.content ?? "listed"); }
          catch (e) { out[name] = e.message.includes("not a regular file") ? "refused" : e.message; }
        }
        return out;
    "#;
    let r = exec_bounded(&rt, code).await;
    let v = value(&r);
    assert_eq!(v["read"], "refused", "{v}");
    assert_eq!(v["grepFile"], "refused", "{v}");
    assert_eq!(v["grepDir"], 1, "the FIFO in the tree is skipped: {v}");
    assert_eq!(v["readPlain"], "hello", "{v}");
    still_works(&rt).await;
    let _ = std::fs::remove_dir_all(&ws);
}

#[tokio::test]
async fn the_state_store_is_private_to_its_user() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = std::env::temp_dir()
        .join(format!("quickcell-perm-{}", uuid::Uuid::new_v4()))
        .join("state");
    let rt = Runtime::builder().state_dir(&dir).build().await.unwrap();
    crate::waiting(
        &rt.exec(ExecInput::new("p", "await yield_control(); return 1"))
            .await,
    );
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join(quickcell::STATE_FILE)), 0o600);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path) & 0o077, 0, "{} is private", path.display());
    }
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[cfg(feature = "compiler")]
/// Runs `quickcell exec` with a module cache in `cache`; returns stderr.
fn exec_with_cache(cache: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["exec", "--code", "return 'cached?'"])
        .env("QUICKCELL_CACHE_DIR", cache)
        .env("QUICKCELL_IGNORE_PRECOMPILED", "1")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("\"cached?\""), "{stdout}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[cfg(feature = "compiler")]
#[test]
fn a_module_cache_others_could_write_is_ignored() {
    use std::os::unix::fs::PermissionsExt as _;
    let base = std::env::temp_dir().join(format!("quickcell-cache-{}", uuid::Uuid::new_v4()));
    // Obeyed: a private cache is created 0700 / 0600 and used.
    let private = base.join("private");
    exec_with_cache(&private);
    assert_eq!(
        std::fs::metadata(&private).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let entries: Vec<_> = std::fs::read_dir(&private)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        std::fs::metadata(&entries[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A directory of ours that others may write (umask 002) is made
    // private, and its entries of ours are used.
    let shared = base.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::copy(&entries[0], shared.join(entries[0].file_name().unwrap())).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stderr = exec_with_cache(&shared);
    assert!(!stderr.contains("ignoring"), "{stderr}");
    assert_eq!(
        std::fs::metadata(&shared).unwrap().permissions().mode() & 0o777,
        0o700
    );
    // Violated: a directory another user owns is ignored (never
    // deserialized from) and nothing is written there.
    if unsafe { libc::geteuid() } == 0 {
        let foreign = base.join("foreign");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::copy(&entries[0], foreign.join(entries[0].file_name().unwrap())).unwrap();
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        let stderr = exec_with_cache(&foreign);
        assert!(stderr.contains("ignoring the module cache"), "{stderr}");
        assert_eq!(
            std::fs::read_dir(&foreign).unwrap().count(),
            1,
            "nothing written"
        );
    }
    // An entry writable by others, in a private directory, is ignored too.
    let loose = base.join("loose");
    std::fs::create_dir_all(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o700)).unwrap();
    let copied = loose.join(entries[0].file_name().unwrap());
    std::fs::copy(&entries[0], &copied).unwrap();
    std::fs::set_permissions(&copied, std::fs::Permissions::from_mode(0o666)).unwrap();
    let stderr = exec_with_cache(&loose);
    assert!(stderr.contains("ignoring a module cache entry"), "{stderr}");
    let _ = std::fs::remove_dir_all(&base);
}

// ---------------------------------------------------------------------------
// The same cases under `quickcell serve`, over stdio and HTTP
// ---------------------------------------------------------------------------

/// Hostile cells one after another on one MCP connection, then an ordinary
/// one; every call gets a clean result and the server keeps serving.
fn hostile_steps() -> Value {
    let cells = [
        format!("return {}1{};", "[".repeat(200_000), "]".repeat(200_000)),
        format!("return {}1{};", "(".repeat(40_000), ")".repeat(40_000)),
        format!("if (1) /`/; return {}1{};", "(".repeat(60_000), ")".repeat(60_000)),
        r#"return "\ud800€€";"#.to_string(),
        "for (let i = 0; i < 200000; i++) text('x'.repeat(100)); return 1;".to_string(),
        "function loop() { return Promise.resolve().then(loop); } loop(); await new Promise(() => {});".to_string(),
        "return 6 * 7;".to_string(),
    ];
    Value::Array(
        cells
            .iter()
            .map(|code| json!({"op": "call_tool", "name": "exec", "args": {"title": "hostile", "code": code}}))
            .collect(),
    )
}

fn assert_hostile_results(out: &[Value]) {
    assert_eq!(out.len(), 7, "{out:?}");
    for (i, step) in out[..6].iter().enumerate() {
        let r = crate::mcp::result(step);
        assert!(
            r["status"] == "failed" || r["status"] == "completed",
            "{step}"
        );
        // The hidden brackets reach QuickJS, which refuses them itself.
        if i != 2 {
            assert_ne!(r["code"], "internal_error", "{step}");
        }
    }
    assert_eq!(crate::mcp::result(&out[0])["code"], "invalid_input");
    assert_eq!(crate::mcp::result(&out[1])["code"], "invalid_input");
    assert_eq!(crate::mcp::result(&out[3])["status"], "completed");
    assert_eq!(crate::mcp::result(&out[6])["value"], 42);
}

#[test]
fn hostile_cells_under_serve_over_stdio() {
    let state = std::env::temp_dir().join(format!("quickcell-hostile-{}", uuid::Uuid::new_v4()));
    let out = crate::mcp::run(
        hostile_steps(),
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/hostile.toml"),
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    assert_hostile_results(&out);
}

#[test]
fn hostile_cells_under_serve_over_http() {
    let state = std::env::temp_dir().join(format!("quickcell-hostile-{}", uuid::Uuid::new_v4()));
    let server = crate::mcp::HttpServer::spawn(|port| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--http", &format!("127.0.0.1:{port}")])
            .args([
                "--config",
                concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/hostile.toml"),
            ])
            .arg("--state-dir")
            .arg(&state);
        command
    });
    let out = crate::mcp::run(hostile_steps(), &["--http", &server.url]);
    assert_hostile_results(&out);
}

/// A tool that returns `bytes` bytes of JSON string, however it is called.
struct Huge {
    bytes: usize,
}

#[quickcell::tools::async_trait]
impl quickcell::tools::Tool for Huge {
    fn name(&self) -> &str {
        "huge"
    }
    fn description(&self) -> &str {
        "Returns a very large result"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(
        &self,
        _args: Value,
        _cancel: quickcell::tools::CancelSignal,
    ) -> Result<Value, quickcell::tools::ToolError> {
        Ok(Value::String("h".repeat(self.bytes)))
    }
}

#[tokio::test]
async fn huge_tool_results_reject_the_call_not_the_host() {
    let mut registry = quickcell::ToolRegistry::new();
    registry
        .add(std::sync::Arc::new(Huge { bytes: 40 << 20 }))
        .unwrap();
    // Reply inbox: min(64 MiB, 10 MiB) = 10 MiB; each result is 40 MB.
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let code = r#"
        const settled = await Promise.allSettled(Array.from({length: 8}, () => huge({})));
        return settled.map(s => s.status === "rejected" ? s.reason.code : "delivered");
    "#;
    let r = exec_bounded(&rt, code).await;
    assert_eq!(value(&r), json!(vec!["tool_error"; 8]), "{}", r.to_json());
    still_works(&rt).await;

    // Obeyed: a result within the inbox is delivered.
    let mut registry = quickcell::ToolRegistry::new();
    registry
        .add(std::sync::Arc::new(Huge { bytes: 1 << 20 }))
        .unwrap();
    let rt = Runtime::builder().tools(registry).build().await.unwrap();
    let r = exec_bounded(&rt, "return (await huge({})).length;").await;
    assert_eq!(value(&r), json!(1 << 20));
}

/// Clearing timers reaches the host and costs it a bounded amount: ids
/// that name nothing (200,000 of them) never leave the guest, and 100
/// real timers of ten minutes each, cleared at once, are cancelled on the
/// host — had any stayed, the cell would wait for it (a dispatched request
/// is drained before the cell completes) and could not complete in the
/// 10 s it has.
#[tokio::test]
async fn a_flood_of_cleared_timers_is_bounded() {
    let rt = runtime(Limits::default().with_timeout_ms(10_000)).await;
    let code = r#"
        for (let i = 0; i < 200000; i++) clearTimeout(i);
        const ts = [];
        for (let i = 0; i < 100; i++) ts.push(setTimeout(() => text("never"), 600000));
        for (const t of ts) { clearTimeout(t); clearTimeout(t); }
        await new Promise(r => setTimeout(r, 20));
        return "done";
    "#;
    let r = exec_bounded(&rt, code).await;
    assert_eq!(value(&r), json!("done"), "{}", r.to_json());
    assert!(crate::texts(&r).is_empty());
    still_works(&rt).await;
}

/// `hold`: counts that it was entered, then answers once the test opens
/// its gate.
struct Hold {
    entered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    gate: std::sync::Arc<tokio::sync::Semaphore>,
}

#[quickcell::tools::async_trait]
impl quickcell::tools::Tool for Hold {
    fn name(&self) -> &str {
        "hold"
    }
    fn description(&self) -> &str {
        "Holds until released"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(
        &self,
        _args: Value,
        _cancel: quickcell::tools::CancelSignal,
    ) -> Result<Value, quickcell::tools::ToolError> {
        self.entered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _permit = self.gate.acquire().await;
        Ok(json!(1))
    }
}

/// More cells at once than the instance pool holds: 300 cells that each
/// hold their instance while they wait on a tool. The first 255 (the pool
/// less the standby) get one; the rest wait their turn instead of failing
/// on the pool's limit (obeyed: all 300 complete once the tool answers).
/// A cell that cannot get an instance within its own time fails with
/// `runtime_unavailable`, saying the host is at capacity (violated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_beyond_the_instance_pool_wait_their_turn() {
    let entered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
    let mut registry = quickcell::ToolRegistry::new();
    registry
        .add(std::sync::Arc::new(Hold {
            entered: entered.clone(),
            gate: gate.clone(),
        }))
        .unwrap();
    let rt = std::sync::Arc::new(
        Runtime::builder()
            .limits(Limits::default().with_timeout_ms(120_000))
            .host_limits(
                HostLimits::default()
                    .with_max_suspended_runs(1000)
                    .with_max_suspended_runs_per_session(1000)
                    .with_max_running_cells_per_session(256),
            )
            .tools(registry)
            .build()
            .await
            .unwrap(),
    );
    let cells: Vec<_> = (0..300)
        .map(|i| {
            let rt = rt.clone();
            tokio::spawn(async move {
                rt.exec(
                    ExecInput::new("hold", "return await hold({})")
                        .with_owner(owner(&format!("s{}", i % 100))),
                )
                .await
            })
        })
        .collect();
    let started = std::time::Instant::now();
    while entered.load(std::sync::atomic::Ordering::SeqCst) < 255 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "255 cells hold an instance"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every instance a cell may hold is held: a cell with 300 ms to run
    // waits them out and fails, saying why.
    let short = Runtime::builder()
        .limits(Limits::default().with_timeout_ms(300))
        .build()
        .await
        .unwrap();
    let r = short.exec(ExecInput::new("late", "return 1")).await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::RuntimeUnavailable, "{}", r.to_json());
    assert!(f.error.contains("the host is at capacity"), "{}", f.error);
    assert_eq!(entered.load(std::sync::atomic::Ordering::SeqCst), 255);
    gate.add_permits(1_000);
    for cell in cells {
        let r = cell.await.unwrap();
        assert_eq!(value(&r), json!(1), "{}", r.to_json());
    }
    assert_eq!(entered.load(std::sync::atomic::Ordering::SeqCst), 300);
}
