//! Cells that complete: values, projection, output helpers, globals.

use crate::{failed, json, run, runtime, texts, value};
use quickcell::{ErrorCode, ExecInput, FailurePhase, Limits};
use serde_json::json;

#[tokio::test]
async fn returns_a_value_with_telemetry() {
    let r = run("return 1 + 1").await;
    assert_eq!(value(&r), json!(2));
    let j = json(&r);
    assert_eq!(j["status"], "completed");
    let t = &j["telemetry"];
    assert_eq!(t["visibleTools"], json!(["exec", "wait"]));
    assert_eq!(t["counterScope"].as_str().unwrap().len(), 24);
    assert!(t["counterScope"]
        .as_str()
        .unwrap()
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert!(t["fuelUsed"].as_u64().unwrap() > 0);
    assert_eq!(t["searchCount"], 0);
    assert!(j.get("output").is_none(), "empty output is omitted: {j}");
}

#[tokio::test]
async fn top_level_await_and_undefined_is_null() {
    let r = run("const x = await Promise.resolve(20); const y = await new Promise(r => r(22)); return x + y;").await;
    assert_eq!(value(&r), json!(42));
    assert_eq!(value(&run("let a = 1;").await), json!(null));
}

#[tokio::test]
async fn fuel_used_is_deterministic() {
    let code = "let s = 0; for (let i = 0; i < 10000; i++) s += i % 7; const o = {a: [1,2,3], s}; return JSON.stringify(o).length;";
    let a = run(code).await;
    let b = run(code).await;
    assert_eq!(value(&a), value(&b));
    let fa = a.telemetry().fuel_used;
    assert_eq!(fa, b.telemetry().fuel_used);
    let trivial = run("return 1").await.telemetry().fuel_used;
    assert!(
        fa > trivial,
        "a loop costs more fuel than `return 1` ({fa} vs {trivial})"
    );
}

#[tokio::test]
async fn trivial_cell_fuel_is_a_regression_gate() {
    // Fuel is deterministic, so it is a cheap regression gate for the
    // per-cell work of the guest (start, prelude runner, status).
    let fuel = run("return 1+1").await.telemetry().fuel_used;
    assert!(
        (1_000..=400_000).contains(&fuel),
        "fuel for `return 1+1` moved to {fuel}; investigate before widening"
    );
}

#[tokio::test]
async fn top_level_bindings_behave_as_written() {
    // The host adds an arrow function that closes over the body's top-level
    // bindings (it keeps their values from being freed at the end); none of
    // this may show.
    let r = run(r#"
        const a = hoisted();
        const {b, c: [d, ...e]} = {b: 2, c: [3, 4, 5]};
        let f; var g = 6;
        function hoisted() { return 1; }
        class H { get v() { return 7; } }
        f = new H().v;
        return [a, b, d, e, f, g, typeof __qcKeep];
    "#)
    .await;
    assert_eq!(value(&r), json!([1, 2, 3, [4, 5], 7, 6, "undefined"]));
    // Sloppy stays sloppy, strict stays strict.
    let r = run("const x = 1; implicitGlobal = x + 1; return implicitGlobal").await;
    assert_eq!(value(&r), json!(2));
    let r = run("'use strict'; const x = 1; undeclared = x; return 0").await;
    assert!(
        failed(&r).error.starts_with("ReferenceError"),
        "{}",
        failed(&r).error
    );
    let r = run(
        "'use strict'; const x = 1; return (function () { return this; })() === undefined && x",
    )
    .await;
    assert_eq!(value(&r), json!(1));
    // Sources that use the helper's names get other ones.
    let r = run("const __qcKeep = 1, __qcKeep1 = 2; return __qcKeep + __qcKeep1").await;
    assert_eq!(value(&r), json!(3));
    // A binding still in its temporal dead zone when the cell ends.
    let r = run("if (true) return 5; const late = 1;").await;
    assert_eq!(value(&r), json!(5));
}

#[tokio::test]
async fn values_alive_when_the_cell_ends_are_not_freed_one_by_one() {
    // The instance is discarded when the cell ends, so freeing what the
    // cell's top-level bindings hold would be wasted work (~500 fuel per
    // object). Fuel is exact: a cell that leaves 2,000 objects in a
    // top-level binding costs what the same cell costs when it also stores
    // them in a global (which no end of cell frees).
    let build = "const big = Array.from({length: 2000}, (_, i) => ({i, s: 'x' + i}));";
    let local = run(&format!("{build} return big.length")).await;
    let global = run(&format!("{build} globalThis.keep = big; return big.length")).await;
    assert_eq!(value(&local), json!(2000));
    let (l, g) = (local.telemetry().fuel_used, global.telemetry().fuel_used);
    assert!(
        l <= g + g / 100,
        "a local holding 2,000 objects costs {l} fuel, a global {g}"
    );
}

#[tokio::test]
async fn text_json_and_console_share_one_ordered_stream() {
    let r = run(r#"text("a"); json({b: 1}); console.log("c", 1, {d: [1, "x"]}); console.warn("w"); console.error(new Error("boom")); text(5); return null;"#).await;
    assert_eq!(
        json(&r)["output"],
        json!([
            {"type": "text", "text": "a"},
            {"type": "json", "value": {"b": 1}},
            {"type": "text", "text": "c 1 {d:[1,\"x\"]}"},
            {"type": "text", "text": "[warn] w"},
            {"type": "text", "text": "[error] Error: boom"},
            {"type": "text", "text": "5"},
        ])
    );
}

#[tokio::test]
async fn safe_projection_never_runs_guest_code() {
    let r = run(r#"
        let called = 0;
        const o = { a: 1, get g() { called++; return 2; }, toJSON() { called++; return "no"; } };
        o.self = o;
        const e = new TypeError("bad"); e.extra = 7;
        const p = Promise.resolve(1);
        json({ o, e, p, big: 10n ** 20n, d: new Date(0), u8: new Uint8Array([1, 2]), f: () => 1, s: Symbol("x"), m: new Map([[1, 2]]), arr: [undefined, () => 1, NaN] });
        return { called, proto: JSON.parse('{"__proto__": {"x": 1}}') };
    "#)
    .await;
    let v = value(&r);
    assert_eq!(v["called"], 0);
    assert_eq!(v["proto"], json!({"__proto__": {"x": 1}}));
    let out = &r.output()[0]["value"];
    assert_eq!(out["o"], json!({"a": 1, "self": "[Circular]"}));
    assert_eq!(
        out["e"],
        json!({"name": "TypeError", "message": "bad", "extra": 7})
    );
    assert_eq!(
        out["p"],
        "[Unawaited Promise: use await or Promise.all(...) before emitting or returning values.]"
    );
    assert_eq!(out["big"], "100000000000000000000");
    assert_eq!(out["d"], "1970-01-01T00:00:00.000Z");
    assert_eq!(out["u8"], json!([1, 2]));
    assert!(out.get("f").is_none() && out.get("s").is_none());
    assert_eq!(out["m"], json!({}));
    assert_eq!(out["arr"], json!([null, null, null]));
}

#[tokio::test]
async fn shared_references_are_not_cycles() {
    let v = value(&run("const x = {n: 1}; return [x, x, {x}];").await);
    assert_eq!(v, json!([{"n": 1}, {"n": 1}, {"x": {"n": 1}}]));
}

#[tokio::test]
async fn hostile_proxy_is_unserializable() {
    let r =
        run(r#"return { p: new Proxy({}, { ownKeys() { throw new Error("trap"); } }) };"#).await;
    assert_eq!(value(&r), json!({"p": "[Unserializable]"}));
}

#[tokio::test]
async fn forbidden_globals_are_absent_and_host_hooks_unreachable() {
    let r = run(r#"
        return [typeof require, typeof process, typeof module, typeof tools, typeof ALL_TOOLS,
                Object.getOwnPropertyNames(globalThis).filter(n => n.startsWith("__quickcell")).length,
                typeof Javy, typeof text, typeof json, typeof console.log, typeof console.table];
    "#)
    .await;
    assert_eq!(
        value(&r),
        json!([
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            0,
            "undefined",
            "function",
            "function",
            "function",
            "undefined"
        ])
    );
}

#[tokio::test]
async fn text_encoder_and_decoder() {
    let r = run(r#"const b = new TextEncoder().encode("héllo 🚀"); return [Array.from(b).length, new TextDecoder().decode(b)];"#).await;
    assert_eq!(value(&r), json!([11, "héllo 🚀"]));
}

/// The UTF-8 codec's edges, as the WHATWG Encoding Standard has them: lone
/// surrogates encode as U+FFFD, invalid bytes decode as U+FFFD (or throw a
/// `TypeError` when `fatal`), a leading byte order mark is dropped unless
/// `ignoreBOM`, views decode their own bytes only, `encodeInto` writes whole
/// code points, and other encodings are refused.
#[tokio::test]
async fn text_codec_edges() {
    let r = run(r#"
        const enc = new TextEncoder(), dec = new TextDecoder();
        const bytes = (s) => Array.from(enc.encode(s));
        let fatal;
        try { new TextDecoder("utf-8", { fatal: true }).decode(new Uint8Array([0x61, 0xff])); }
        catch (e) { fatal = e.name; }
        let label;
        try { new TextDecoder("latin1"); } catch (e) { label = e.name; }
        const into = new Uint8Array(5);
        const wrote = enc.encodeInto("ab🚀c", into);
        const view = new Uint8Array([0x78, 0x68, 0x69, 0x79]).subarray(1, 3);
        return [
            bytes("\ud800"),
            dec.decode(new Uint8Array([0x61, 0xff, 0x62])),
            fatal,
            dec.decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x68])),
            new TextDecoder("UTF8", { ignoreBOM: true }).decode(new Uint8Array([0xef, 0xbb, 0xbf])).length,
            dec.decode(view),
            dec.decode(view.buffer),
            [wrote.read, wrote.written, Array.from(into)],
            label,
            [enc.encoding, dec.encoding, dec.fatal, dec.ignoreBOM],
            dec.decode(),
        ];
    "#)
    .await;
    assert_eq!(
        value(&r),
        json!([
            [0xef, 0xbf, 0xbd],
            "a\u{fffd}b",
            "TypeError",
            "h",
            1,
            "hi",
            "xhiy",
            [2, 2, [0x61, 0x62, 0, 0, 0]],
            "RangeError",
            ["utf-8", "utf-8", false, false],
            ""
        ])
    );
}

#[tokio::test]
async fn uncaught_error_fails_in_guest_phase_with_frames() {
    let r = run("text('before');\nfunction f() { throw new TypeError('nope'); }\nf();").await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InternalError);
    assert_eq!(f.failure_phase, FailurePhase::Guest);
    assert!(!f.bridge_dispatch_started);
    assert!(f.error.starts_with("TypeError: nope"), "{}", f.error);
    assert!(
        f.error.contains("quickcell:user.js:2:"),
        "frames use user lines: {}",
        f.error
    );
    assert_eq!(texts(&r), vec!["before"]);
    // Non-Error throws still read as "<Name>: <message>".
    let r = run("throw 'plain'").await;
    assert_eq!(failed(&r).error, "Error: plain");
    let r = run("throw new Error('interrupted')").await;
    assert_eq!(
        failed(&r).code,
        ErrorCode::InternalError,
        "a guest 'interrupted' is not a timeout"
    );
}

#[tokio::test]
async fn pending_forever_fails_without_host_work() {
    let r = run("await new Promise(() => undefined); return 'never';").await;
    let f = failed(&r);
    assert!(f.error.contains("pending without host work"), "{}", f.error);
    assert_eq!(f.code, ErrorCode::InternalError);
}

#[tokio::test]
async fn runtime_require_is_module_access() {
    for code in [
        "return eval('require')('fs')",
        "return process.env",
        "module.exports = 1",
    ] {
        let f = failed(&run(code).await).clone();
        assert_eq!(f.code, ErrorCode::InvalidInput, "{code}");
        assert!(
            f.error.starts_with("code mode module access is disabled."),
            "{code}: {}",
            f.error
        );
    }
}

#[tokio::test]
async fn cells_do_not_share_state() {
    let rt = runtime(Limits::default()).await;
    let a = rt
        .exec(ExecInput::new(
            "t",
            "globalThis.leak = 1; Array.prototype.x = 2; return 1",
        ))
        .await;
    assert_eq!(value(&a), json!(1));
    let b = rt
        .exec(ExecInput::new(
            "t",
            "return [typeof leak, [].x === undefined]",
        ))
        .await;
    assert_eq!(value(&b), json!(["undefined", true]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twelve_cells_in_parallel_each_return_their_own_value() {
    let rt = std::sync::Arc::new(runtime(Limits::default()).await);
    let mut handles = Vec::new();
    for i in 0..12 {
        let rt = rt.clone();
        handles.push(tokio::spawn(async move {
            let code = format!("let s = 0; for (let k = 0; k < 20000; k++) s += k; text('cell {i}'); return {{ i: {i}, s }};");
            // One session per cell: a session runs at most 4 cells at once.
            let owner = quickcell::Owner {
                agent_run: String::new(),
                session: format!("tenant-{i}"),
            };
            (
                i,
                rt.exec(ExecInput::new("parallel", code).with_owner(owner))
                    .await,
            )
        }));
    }
    for h in handles {
        let (i, r) = h.await.unwrap();
        assert_eq!(value(&r), json!({"i": i, "s": 199990000}));
        assert_eq!(texts(&r), vec![format!("cell {i}")]);
    }
}

#[tokio::test]
async fn exec_json_applies_argument_rules() {
    let rt = runtime(Limits::default()).await;
    let r = rt
        .exec_json(&json!({"title": "t", "code": "return 1", "command": "return 2"}))
        .await;
    let f = failed(&r);
    assert_eq!(
        f.error,
        "code and command must match when both are provided."
    );
    assert_eq!(f.failure_phase, FailurePhase::Input);
    let r = rt
        .exec_json(&json!({"title": "t", "command": "return 3"}))
        .await;
    assert_eq!(value(&r), json!(3));
    let r = rt
        .exec_json(&json!({"title": "", "code": "return 3"}))
        .await;
    assert_eq!(failed(&r).code, ErrorCode::InvalidInput);
}

#[cfg(feature = "compiler")]
#[test]
fn guest_module_has_the_expected_shape() {
    quickcell::testing::check_guest_module_shape(quickcell::testing::guest_wasm()).unwrap();
}

/// A lone surrogate the cell writes (value, `text`, `console.log`,
/// `json`, an object key) comes out of the text form as its JSON escape,
/// as `JSON.stringify` writes it; the structured form has U+FFFD in its
/// place; valid pairs and a genuine U+FFFD are themselves.
#[tokio::test]
async fn lone_surrogates_keep_their_escapes_in_the_text_form() {
    let r = run(
        r#"text("a\ud800b"); console.log("\udc00"); json({"k\udfff": "\ud83d"}); text("\ud83d\ude00\ufffd"); return "\ud800x""#,
    )
    .await;
    assert_eq!(value(&r), json!("\u{FFFD}x"));
    assert_eq!(
        json(&r)["output"],
        json!([
            {"type": "text", "text": "a\u{FFFD}b"},
            {"type": "text", "text": "\u{FFFD}"},
            {"type": "json", "value": {"k\u{FFFD}": "\u{FFFD}"}},
            {"type": "text", "text": "😀\u{FFFD}"},
        ])
    );
    let text = r.to_json();
    assert!(text.contains(r#""value":"\ud800x""#), "{text}");
    assert!(
        text.contains(
            r#""output":[{"type":"text","text":"a\ud800b"},{"type":"text","text":"\udc00"},{"type":"json","value":{"k\udfff":"\ud83d"}},{"type":"text","text":"😀�"}]"#
        ),
        "{text}"
    );
}

#[tokio::test]
async fn back_to_back_cells_on_a_current_thread_runtime_release_their_instances() {
    // `#[tokio::test]` runs on a current-thread runtime, where a cell's
    // instance is released (and the next standby made) by tasks that run
    // only while the caller's task waits. Cells that never wait on
    // anything must still hand their pool slots back: more cells than
    // the pool has slots (256), one after another, all complete.
    let rt = runtime(Limits::default()).await;
    for i in 0..300 {
        let r = rt.exec(ExecInput::new("loop", "return 1")).await;
        assert_eq!(r.status(), "completed", "cell {i}: {}", r.to_json());
    }
}
