//! Every limit in an obeyed / violated pair, each told apart by its code.

use crate::{failed, run, run_with, runtime, texts, value};
use quickcell::{ErrorCode, ExecInput, FailurePhase, Fuel, Limits};
use serde_json::json;

const BUSY_50MS: &str = "const end = Date.now() + 50; let n = 0; while (Date.now() < end) n++; text('done'); return n > 0;";

#[tokio::test]
async fn timeout_obeyed() {
    let r = run_with(Limits::default().with_timeout_ms(2_000), BUSY_50MS).await;
    assert_eq!(value(&r), json!(true));
}

#[tokio::test]
async fn timeout_violated_keeps_earlier_output() {
    let limits = Limits::default()
        .with_timeout_ms(300)
        .with_fuel(Fuel::Unlimited);
    let r = run_with(limits, "text('before'); while (true) {}").await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::Timeout);
    assert_eq!(f.error, "code mode timeout exceeded");
    assert_eq!(f.failure_phase, FailurePhase::Guest);
    assert_eq!(texts(&r), vec!["before"]);
}

#[tokio::test]
async fn timeout_stops_guest_code_that_never_returns_to_javascript() {
    // A catastrophic regex backtracks inside QuickJS's C regex engine for
    // minutes: no JavaScript loop, no host call. The guest still yields
    // to the host every million fuel, where the deadline is checked.
    let limits = Limits::default()
        .with_timeout_ms(300)
        .with_fuel(Fuel::Unlimited);
    let started = std::time::Instant::now();
    let r = run_with(
        limits,
        r#"text('before'); return /(a+)+$/.test("a".repeat(40) + "!");"#,
    )
    .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::Timeout, "{}", f.error);
    assert_eq!(texts(&r), vec!["before"]);
    // Not a timing assertion: the regex alone would run for minutes.
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[tokio::test]
async fn a_timed_out_cell_leaves_the_next_cell_its_own_budget() {
    // The deadline belongs to a call: a cell that timed out does not
    // shorten the budget of the next one on the same runtime, and the
    // next one's fuel count is unchanged by the yields.
    let rt = runtime(Limits::default().with_timeout_ms(200)).await;
    let timed_out = rt.exec(ExecInput::new("spin", "while (true) {}")).await;
    assert_eq!(failed(&timed_out).code, ErrorCode::Timeout);
    let input = || {
        ExecInput::new(
            "count",
            "let s = 0; for (let i = 0; i < 100000; i++) s += i; return s;",
        )
    };
    let first = rt.exec(input()).await;
    let second = rt.exec(input()).await;
    assert_eq!(value(&first), json!(4999950000u64));
    assert_eq!(first.telemetry().fuel_used, second.telemetry().fuel_used);
}

#[tokio::test]
async fn fuel_obeyed() {
    let r = run_with(
        Limits::default().with_fuel(Fuel::Limited(50_000_000)),
        "let s = 0; for (let i = 0; i < 1000; i++) s += i; return s;",
    )
    .await;
    assert_eq!(value(&r), json!(499500));
}

#[tokio::test]
async fn fuel_violated_is_deterministic_and_keeps_output() {
    let limits = Limits::default()
        .with_fuel(Fuel::Limited(20_000_000))
        .with_timeout_ms(60_000);
    let r = run_with(
        limits.clone(),
        "text('start'); let i = 0; while (true) i++;",
    )
    .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::FuelExhausted);
    assert_eq!(f.error, "code mode fuel exhausted");
    assert_eq!(texts(&r), vec!["start"]);
    // The whole allowance was used, exactly.
    assert_eq!(r.telemetry().fuel_used, 20_000_000);
}

#[tokio::test]
async fn fuel_off_means_unlimited() {
    let r = run_with(
        Limits::default().with_fuel(Fuel::Unlimited),
        "let s = 0; for (let i = 0; i < 100000; i++) s += i; return s;",
    )
    .await;
    assert_eq!(value(&r), json!(4999950000u64));
}

const MIB: u64 = 1 << 20;

#[tokio::test]
async fn memory_obeyed() {
    let r = run_with(
        Limits::default().with_memory_limit_bytes(16 * MIB),
        "const a = []; for (let i = 0; i < 50; i++) a.push('x'.repeat(100000) + i); return a.length;",
    )
    .await;
    assert_eq!(value(&r), json!(50));
}

/// Freed blocks are reused: a cell that allocates five times its memory
/// limit in short-lived objects and strings of many sizes completes, and
/// every block keeps its contents while it lives.
#[tokio::test]
async fn memory_churned_far_beyond_the_limit_is_reused() {
    let r = run_with(
        Limits::default().with_memory_limit_bytes(8 * MIB),
        r#"let sum = 0;
           for (let round = 0; round < 40; round++) {
             const batch = [];
             for (let i = 0; i < 2000; i++) {
               const n = (i * 37 + round) % 700;
               batch.push({ i, s: 'y'.repeat(n) + i, t: [i, n] });
             }
             for (const o of batch) sum += o.s.length + o.t[1] - o.i;
           }
           return sum;"#,
    )
    .await;
    let mut expected: i64 = 0;
    for round in 0..40 {
        for i in 0..2000i64 {
            let n = (i * 37 + round) % 700;
            expected += n + i.to_string().len() as i64 + n - i;
        }
    }
    assert_eq!(value(&r), json!(expected));
}

/// Blocks of whole pages (32 KiB and up) go back to the allocator's page
/// pool when freed: a cell that allocates and drops a 1 MB string and a
/// 2 MB array sixty times (~180 MB in all) completes within an 8 MiB limit,
/// and the same blocks kept alive exceed it.
#[tokio::test]
async fn huge_blocks_are_reused_and_kept_ones_exceed_the_limit() {
    let churn = r#"let sum = 0;
        for (let round = 0; round < 60; round++) {
          const s = String.fromCharCode(97 + round % 26).repeat(1000000 + round);
          const a = new Array(125000).fill(round);
          sum += s.length + a[a.length - 1] + (s.charCodeAt(s.length - 1) - 97);
        }
        return sum;"#;
    let r = run_with(Limits::default().with_memory_limit_bytes(8 * MIB), churn).await;
    let expected: i64 = (0..60i64).map(|r| 1_000_000 + r + r + r % 26).sum();
    assert_eq!(value(&r), json!(expected));

    let kept = "const kept = []; for (let round = 0; round < 60; round++) kept.push('x'.repeat(1000000 + round)); return kept.length;";
    let r = run_with(Limits::default().with_memory_limit_bytes(8 * MIB), kept).await;
    assert_eq!(failed(&r).code, ErrorCode::MemoryLimitExceeded);
}

/// Blocks on both sides of the allocator's small/large (512 bytes) and
/// large/huge (32 KiB) boundaries, grown in place and moved, keep their
/// contents.
#[tokio::test]
async fn blocks_of_every_size_keep_their_contents() {
    let r = run(r#"const strings = [];
        for (let n = 1; n <= 3000; n += 7) strings.push(String.fromCharCode(65 + n % 26).repeat(n));
        const grown = [];
        for (let i = 0; i < 20000; i++) grown.push(i * 3);
        const floats = [];
        for (let n = 1; n <= 600; n += 13) floats.push(new Float64Array(n).map((_, k) => k / 2));
        const okStrings = strings.every((s, j) => s.length === 1 + j * 7 && s[s.length - 1] === String.fromCharCode(65 + s.length % 26));
        const okGrown = grown.every((v, i) => v === i * 3);
        const okFloats = floats.every(f => f.every((v, k) => v === k / 2));
        const huge = [32000, 32751, 32752, 32768, 65519, 65520, 65536, 200000].map((n) =>
          [n, new Float64Array(n >> 3).map((_, k) => k + n), String.fromCharCode(65 + n % 26).repeat(n)]);
        const okHuge = huge.every(([n, f, s]) => f.length === n >> 3 && f.every((v, k) => v === k + n)
          && s === String.fromCharCode(65 + n % 26).repeat(n));
        return [okStrings, okGrown, okFloats, okHuge, strings.length, floats.length];"#)
    .await;
    assert_eq!(value(&r), json!([true, true, true, true, 429, 47]));
}

#[tokio::test]
async fn memory_violated_uncaught() {
    let r = run_with(
        Limits::default().with_memory_limit_bytes(8 * MIB),
        "text('filling'); const a = []; while (true) a.push(new Array(10000).fill(1.5));",
    )
    .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::MemoryLimitExceeded, "{}", f.error);
    assert_eq!(f.error, "code mode memory limit exceeded");
    assert_eq!(texts(&r), vec!["filling"]);
}

#[tokio::test]
async fn memory_error_caught_does_not_end_the_cell() {
    let r = run_with(
        Limits::default().with_memory_limit_bytes(8 * MIB),
        r#"let a = [];
           try { while (true) a.push(new Array(10000).fill(1.5)); }
           catch (e) { a = null; return String(e); }"#,
    )
    .await;
    let v = value(&r);
    assert!(v.as_str().unwrap().contains("out of memory"), "{v}");
}

#[tokio::test]
async fn deep_recursion_is_a_catchable_range_error() {
    let r = run("function f(n) { return f(n + 1) + 1; } try { f(0); } catch (e) { return [e instanceof RangeError, e.message]; }").await;
    assert_eq!(value(&r), json!([true, "Maximum call stack size exceeded"]));
}

#[tokio::test]
async fn deep_recursion_uncaught_fails_as_guest_error_not_a_trap() {
    let r = run("function f(n) { return f(n + 1) + 1; } f(0);").await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InternalError);
    assert!(
        f.error
            .starts_with("RangeError: Maximum call stack size exceeded"),
        "{}",
        f.error
    );
}

#[tokio::test]
async fn recursion_within_the_limit_works() {
    let r = run("function f(n) { return n === 0 ? 0 : 1 + f(n - 1); } return f(2000);").await;
    assert_eq!(value(&r), json!(2000));
}

#[tokio::test]
async fn a_cell_after_a_trapped_cell_runs_normally() {
    let rt = runtime(
        Limits::default()
            .with_timeout_ms(200)
            .with_fuel(Fuel::Unlimited),
    )
    .await;
    let r = rt.exec(ExecInput::new("spin", "while (true) {}")).await;
    assert_eq!(failed(&r).code, ErrorCode::Timeout);
    let r = rt.exec(ExecInput::new("after", "return 'fine'")).await;
    assert_eq!(value(&r), json!("fine"));
    let rt = runtime(Limits::default().with_memory_limit_bytes(4 * MIB)).await;
    let r = rt
        .exec(ExecInput::new(
            "oom",
            "const a = []; while (true) a.push(new Array(1000).fill(0));",
        ))
        .await;
    assert_eq!(failed(&r).code, ErrorCode::MemoryLimitExceeded);
    let r = rt.exec(ExecInput::new("after", "return 'fine'")).await;
    assert_eq!(value(&r), json!("fine"));
}

/// Cells get their instance from the process's standby (made in the
/// background after the previous cell took one): each still starts from the
/// pristine image and under its own runtime's limits, whatever the cell
/// before it did or was allowed.
#[tokio::test]
async fn cells_from_the_standby_start_pristine_under_their_own_limits() {
    let loose = runtime(Limits::default().with_memory_limit_bytes(64 * MIB)).await;
    let small_memory = runtime(Limits::default().with_memory_limit_bytes(8 * MIB)).await;
    let small_fuel = runtime(Limits::default().with_fuel(Fuel::Limited(20_000_000))).await;
    for round in 0..3 {
        assert!(quickcell::testing::standby_ready().await, "round {round}");
        let r = loose
            .exec(ExecInput::new(
                "pollute",
                "globalThis.leak = 1; Array.prototype.x = 2; \
                 const a = []; for (let i = 0; i < 30; i++) a.push('x'.repeat(1 << 20) + i); \
                 return a.length",
            ))
            .await;
        assert_eq!(value(&r), json!(30), "round {round}");
        assert!(quickcell::testing::standby_ready().await, "round {round}");
        let r = small_memory
            .exec(ExecInput::new(
                "check",
                "text(`${typeof leak} ${[].x === undefined}`); \
                 const a = []; while (true) a.push('y'.repeat(1 << 20) + a.length);",
            ))
            .await;
        assert_eq!(
            failed(&r).code,
            ErrorCode::MemoryLimitExceeded,
            "round {round}"
        );
        assert_eq!(texts(&r), vec!["undefined true"], "round {round}");
        assert!(quickcell::testing::standby_ready().await, "round {round}");
        let r = small_fuel
            .exec(ExecInput::new("spin", "let i = 0; while (true) i++;"))
            .await;
        assert_eq!(failed(&r).code, ErrorCode::FuelExhausted, "round {round}");
        assert_eq!(r.telemetry().fuel_used, 20_000_000, "round {round}");
    }
}

/// A Tokio runtime that shuts down drops the task making the standby; the
/// next runtime of the process still gets one.
#[test]
fn the_standby_outlives_the_runtime_that_began_it() {
    for _ in 0..3 {
        // A current-thread runtime polls spawned tasks only while the cell
        // waits, so the standby's task is dropped before it ever runs.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(value(&rt.block_on(run("return 1"))), json!(1));
        drop(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    assert!(rt.block_on(quickcell::testing::standby_ready()));
    assert_eq!(value(&rt.block_on(run("return 2"))), json!(2));
}

#[tokio::test]
async fn console_cap_emits_exactly_one_marker() {
    let r = run("for (let i = 0; i < 2000; i++) console.log('line ' + i + ' ' + 'y'.repeat(40)); text('after'); return 1;").await;
    let out = r.output();
    let markers = out
        .iter()
        .filter(|e| e["text"] == "[console output truncated]")
        .count();
    assert_eq!(markers, 1);
    let console_units: usize = out
        .iter()
        .filter(|e| e["text"] != "after")
        .map(|e| serde_json::to_string(e).unwrap().encode_utf16().count())
        .sum();
    assert!(console_units <= 16_384, "{console_units}");
    assert_eq!(
        out.last().unwrap()["text"],
        "after",
        "text() is not subject to the console cap"
    );
}

#[tokio::test]
async fn console_inspection_is_bounded() {
    let r = run(r#"
        const wide = {}; for (let i = 0; i < 80; i++) wide['k' + i] = i;
        console.log(wide);
        console.log({a: {b: {c: {d: {e: 1}}}}});
        console.log('s'.repeat(600));
        console.log({ get x() { throw new Error('no'); } }, [1, 2n], null, undefined);
        console.log('%s stays', 'literal');
    "#)
    .await;
    let t = texts(&r);
    assert!(t[0].ends_with(",…}"), "{}", t[0]);
    assert_eq!(t[0].matches(':').count(), 50);
    assert_eq!(t[1], "{a:{b:{c:{d:[Object]}}}}");
    assert!(t[2].ends_with("…[truncated]") && t[2].starts_with("sss"));
    assert_eq!(t[2].chars().count(), 512 + "…[truncated]".chars().count());
    assert_eq!(t[3], "{x:[Accessor]} [1,2n] null undefined");
    assert_eq!(t[4], "%s stays literal");
}
