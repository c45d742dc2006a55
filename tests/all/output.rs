//! The shared output budget and truncation markers (contract §10).

use crate::{failed, json, run_with, value};
use quickcell::{ErrorCode, Limits};
use serde_json::Value;

fn payload_bytes(result: &quickcell::CellResult) -> usize {
    let j = json(result);
    let mut n = 0;
    if let Some(out) = j.get("output").and_then(Value::as_array) {
        n += out
            .iter()
            .map(|e| serde_json::to_string(e).unwrap().len())
            .sum::<usize>();
    }
    if let Some(v) = j.get("value") {
        n += serde_json::to_string(v).unwrap().len();
    }
    if let Some(e) = j.get("error").and_then(Value::as_str) {
        n += e.len();
    }
    n
}

fn assert_marker(v: &Value) {
    assert_eq!(v["truncated"], true, "{v}");
    assert_eq!(v["guidance"], "Output truncated; rerun with narrower args.");
    assert!(v["omittedBytes"].as_u64().unwrap() > 0);
    assert!(v["prefix"].is_string());
}

#[tokio::test]
async fn oversized_string_value_becomes_a_marker_and_stays_completed() {
    let r = run_with(
        Limits::default().with_max_output_bytes(1024),
        "return 'x'.repeat(2048)",
    )
    .await;
    let v = value(&r);
    assert_marker(&v);
    assert!(v["prefix"].as_str().unwrap().starts_with("\"xxxx"));
    assert!(
        v.get("reference").is_none(),
        "strings never get a reference"
    );
    assert!(payload_bytes(&r) <= 1024, "{}", payload_bytes(&r));
}

#[tokio::test]
async fn value_that_fits_is_kept_whole() {
    let r = run_with(
        Limits::default().with_max_output_bytes(1024),
        "return 'x'.repeat(900)",
    )
    .await;
    assert_eq!(value(&r), Value::String("x".repeat(900)));
}

#[tokio::test]
async fn emoji_and_cjk_are_cut_on_code_point_boundaries() {
    // (Objects become automatic references instead: see `store.rs`.)
    for code in [
        "return '🚀'.repeat(1000)",
        "return '漢字かな'.repeat(400)",
        "return ['🚀a'.repeat(700)].join('')",
    ] {
        let r = run_with(Limits::default().with_max_output_bytes(1024), code).await;
        let v = value(&r);
        assert_marker(&v);
        let prefix = v["prefix"].as_str().unwrap();
        assert!(!prefix.contains('\u{FFFD}'), "{code}: {prefix}");
        assert!(
            prefix.len() > 100,
            "{code}: the prefix uses the space there is ({} bytes)",
            prefix.len()
        );
        assert!(payload_bytes(&r) <= 1024, "{code}");
    }
}

#[tokio::test]
async fn output_and_value_share_the_budget() {
    let r = run_with(
        Limits::default().with_max_output_bytes(2048),
        "for (let i = 0; i < 100; i++) text('line ' + i + ' ' + 'z'.repeat(30)); return 'v'.repeat(1500);",
    )
    .await;
    assert!(payload_bytes(&r) <= 2048, "{}", payload_bytes(&r));
    let j = json(&r);
    let out = j["output"].as_array().unwrap();
    assert!(
        out.iter()
            .any(|e| e["type"] == "json" && e["value"]["truncated"] == true),
        "{j}"
    );
}

#[tokio::test]
async fn long_error_is_truncated_with_suffix() {
    let r = run_with(
        Limits::default().with_max_output_bytes(1024),
        "throw new Error('e'.repeat(5000))",
    )
    .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InternalError);
    assert!(f.error.starts_with("Error: eeee"));
    assert!(f.error.ends_with(" [error truncated]"), "{}", f.error);
    assert!(f.error.len() <= 1024);
}

#[tokio::test]
async fn huge_output_stream_is_bounded_on_the_host() {
    let r = run_with(
        Limits::default().with_max_output_bytes(4096),
        "for (let i = 0; i < 20000; i++) text('a'.repeat(1000)); return 'end';",
    )
    .await;
    assert!(payload_bytes(&r) <= 4096);
    assert_eq!(value(&r), "end");
}

/// Values reach the host as JSON text written by the guest's own serializer
/// (not QuickJS's `JSON.stringify`, which costs ten times the fuel). Each
/// value here must come out exactly as `JSON.stringify` writes it.
#[tokio::test]
async fn values_serialize_exactly_as_json_stringify_would() {
    let r = crate::run(
        r#"
        const values = [
          0.1, -0, 1e21, 1e20, 1.5e-7, 0.000001, -2.5, 123456789.125, 2 ** 53 + 2, -1e-300, 5e-324,
          "quote \" backslash \\ newline \n tab \t bell \x07 del \x7f é 😀",
          { b: 1, a: 2, 10: "ten", 2: "two", "": "empty" },
          [1, "x", null, true, false, [], {}],
          { nested: { deeper: [{ k: [0.5] }] } },
        ];
        return values.map((v) => [v, JSON.stringify(v)]);
        "#,
    )
    .await;
    for pair in value(&r).as_array().unwrap() {
        let expected: Value = serde_json::from_str(pair[1].as_str().unwrap()).unwrap();
        assert_eq!(pair[0], expected, "{}", pair[1]);
        // Key order is part of the text.
        assert_eq!(
            serde_json::to_string(&pair[0]).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
    }
}

/// The guest projects values in Rust and falls back to the JavaScript
/// projection for functions, proxies and typed arrays. A value next to a
/// function takes the JavaScript path, alone it takes the Rust path: both
/// must agree on every edge of the projection.
#[tokio::test]
async fn the_rust_and_javascript_projections_agree() {
    let r = crate::run(
        r#"
        const err = new TypeError("bad");
        err.code = "E1"; err[3] = "three"; err.name = "Custom";
        const cyclic = { a: 1 }; cyclic.self = cyclic;
        let deep = {}; const root = deep;
        for (let i = 0; i < 300; i++) { deep.next = {}; deep = deep.next; }
        const withGetter = { plain: 1, get secret() { throw new Error("getter ran"); } };
        Object.defineProperty(withGetter, "hidden", { value: 2, enumerable: false });
        withGetter[Symbol("s")] = 3;
        const sparse = [1, , 3]; sparse.extra = "ignored";
        Object.defineProperty(sparse, 1, { get() { return "getter"; }, enumerable: true });
        class Point { constructor() { this.x = 1; this.y = 2; } get len() { return 3; } }
        const nullProto = Object.create(null); nullProto.k = "v";
        const values = [
          err, cyclic, root, withGetter, sparse, new Point(), nullProto,
          new Date(0), new Date(NaN), Object.create(Date.prototype),
          { b: 1, 2: "two", a: 3, 1: "one" }, new String("ab"), new Map([[1, 2]]),
          12345678901234567890n, Promise.resolve(1), [undefined, Symbol("x"), null],
          { u: undefined, n: NaN, i: -Infinity, z: -0 }, "lone \ud800 surrogate", [[[[]]]],
          Object.assign(new Error("m"), { stack: "hidden?" }), new RangeError(),
        ];
        for (const v of values) { json([v, () => 0]); json([v]); }
        return values.length;
        "#,
    )
    .await;
    let v = json(&r);
    let n = v["value"].as_u64().unwrap() as usize;
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2 * n, "{v}");
    for pair in out.chunks(2) {
        let javascript = &pair[0]["value"];
        let rust = &pair[1]["value"];
        assert_eq!(javascript[1], Value::Null, "the function projects to null");
        assert_eq!(
            serde_json::to_string(&javascript[0]).unwrap(),
            serde_json::to_string(&rust[0]).unwrap(),
            "the two projections differ"
        );
    }
    // Spot checks of what both produce.
    assert_eq!(
        out[1]["value"][0],
        serde_json::json!({"3": "three", "name": "Custom", "message": "bad", "code": "E1"})
    );
    assert_eq!(
        out[3]["value"][0],
        serde_json::json!({"a": 1, "self": "[Circular]"})
    );
    // 300 levels stop at the depth limit (100 below the value itself).
    let mut deep = &out[5]["value"][0];
    let mut levels = 0;
    while let Some(next) = deep.get("next") {
        deep = next;
        levels += 1;
    }
    assert_eq!(levels, 99);
    assert_eq!(deep, &serde_json::json!("[Depth limit]"));
}

/// A proxy on a prototype chain is left to the JavaScript projection: its
/// traps run as often as that projection runs them, and a throwing trap
/// makes the object `[Unserializable]` on both paths.
#[tokio::test]
async fn proxies_on_prototype_chains_run_their_traps_once_per_projection() {
    let r = crate::run(
        r#"
        let runs = 0;
        const counting = Object.create(new Proxy({}, { getPrototypeOf() { runs++; return null; } }));
        counting.v = 1;
        const throwing = Object.create(new Proxy({}, { getPrototypeOf() { throw new Error("trap"); } }));
        throwing.v = 2;
        json([counting, () => 0]);
        const javascript = runs;
        json([counting]);
        return { javascript, rust: runs - javascript, throwing: [throwing] };
        "#,
    )
    .await;
    let v = value(&r);
    assert!(v["javascript"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["rust"], v["javascript"], "{v}");
    assert_eq!(v["throwing"], serde_json::json!(["[Unserializable]"]));
    let out = json(&r)["output"].clone();
    assert_eq!(out[0]["value"][0], out[1]["value"][0]);
}
