//! Tests of `describe.rs`.

use super::*;
use serde_json::json;

const ID: &str = "result_123e4567-e89b-12d3-a456-426614174000";

fn size(value: &Value) -> usize {
    serde_json::to_string(value).unwrap().len()
}

/// Checks the descriptor's bound, keys, order and types.
fn check_descriptor(value: &Value) -> Value {
    let d = describe(value);
    let j = descriptor_json(ID, &d);
    let text = serde_json::to_string(&j).unwrap();
    assert!(
        text.len() <= MAX_DESCRIPTOR_BYTES,
        "{} bytes: {text}",
        text.len()
    );
    let reparsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reparsed, j);
    let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "id",
            "bytes",
            "count",
            "shape",
            "preview",
            "previewTruncated"
        ]
    );
    assert_eq!(j["id"], ID);
    assert_eq!(j["bytes"], d.bytes);
    assert_eq!(j["count"], d.count);
    let shape = j["shape"].as_str().unwrap();
    assert!(!shape.contains(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}']));
    if j["previewTruncated"] == false {
        assert_eq!(&j["preview"], value);
    } else {
        assert_eq!(j["preview"]["sampled"], true);
        assert!(j["preview"]["traversalLimited"].is_boolean());
        assert!(j["preview"]["arrays"].is_array());
    }
    j
}

fn rows_value() -> Value {
    let rows: Vec<Value> = (0..180)
        .map(|i| match i {
            0..=59 => json!({"id": i, "name": format!("row {i}"), "tags": ["a", "b"]}),
            60..=119 => json!(format!("text row {i}")),
            _ => Value::Null,
        })
        .collect();
    json!({"structuredContent": {"rows": rows}, "isError": false})
}

/// A chain of `depth` nested objects `{"next": ...}` ending in `[1,2,3]`.
fn deep(depth: usize) -> Value {
    let mut value = json!([1, 2, 3]);
    for _ in 0..depth {
        value = json!({ "next": value });
    }
    value
}

fn preview_counts(d: &Described) -> Vec<u64> {
    d.preview["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["count"].as_u64().unwrap())
        .collect()
}

#[test]
fn small_value_preview_is_the_value_itself() {
    let value = json!({"a": 1, "b": [1, 2, 3], "c": "héllo 👋"});
    let d = describe(&value);
    assert_eq!(d.preview, value);
    assert!(!d.preview_truncated);
    assert_eq!(d.bytes, size(&value));
    let j = check_descriptor(&value);
    assert_eq!(j["preview"], value);
    assert_eq!(j["previewTruncated"], false);
    assert_eq!(d.shape, "$.b: 3 items, sampled 3/3 homogeneous: number");
}

#[test]
fn preview_boundary_is_256_bytes() {
    // `"` + 254 + `"` = 256 bytes: still the value itself.
    let at = json!("x".repeat(254));
    assert_eq!(size(&at), 256);
    assert!(!describe(&at).preview_truncated);
    let over = json!("x".repeat(255));
    let d = describe(&over);
    assert!(d.preview_truncated);
    assert_eq!(
        d.preview,
        json!({"sampled": true, "traversalLimited": false, "arrays": []})
    );
    assert_eq!(d.shape, "$: string");
}

#[test]
fn count_of_array_object_and_scalars() {
    assert_eq!(describe(&json!([1, 2, 3, 4])).count, 4);
    assert_eq!(describe(&json!([])).count, 0);
    assert_eq!(describe(&json!({"a": 1, "b": 2})).count, 2);
    assert_eq!(describe(&json!({})).count, 0);
    for scalar in [json!(null), json!(true), json!(3.5), json!("s")] {
        assert_eq!(describe(&scalar).count, 1);
    }
    let big: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
    assert_eq!(describe(&Value::Array(big)).count, 1000);
}

#[test]
fn bytes_is_compact_json_size() {
    let value = json!({"k": "日本語 🎉", "n": [1.5, null, true], "e": "\u{1}\"\\"});
    assert_eq!(describe(&value).bytes, size(&value));
    let big = rows_value();
    assert_eq!(describe(&big).bytes, size(&big));
}

#[test]
fn scalar_and_object_shapes() {
    assert_eq!(describe(&json!("s")).shape, "$: string");
    assert_eq!(describe(&json!(1)).shape, "$: number");
    assert_eq!(describe(&json!(false)).shape, "$: boolean");
    assert_eq!(describe(&json!(null)).shape, "$: null");
    assert_eq!(describe(&json!({"a": 1})).shape, "$: object with 1 key");
    let twelve: Map<String, Value> = (0..12).map(|i| (format!("k{i}"), json!(i))).collect();
    assert_eq!(
        describe(&Value::Object(twelve)).shape,
        "$: object with 12 keys"
    );
    assert_eq!(describe(&json!([])).shape, "$: 0 items");
    assert_eq!(
        describe(&json!(["x"])).shape,
        "$: 1 item, sampled 1/1 homogeneous: string"
    );
    assert_eq!(
        describe(&json!([1, "x"])).shape,
        "$: 2 items, sampled 2/2 heterogeneous: number | string"
    );
    assert_eq!(
        describe(&json!([[1], {"a": 1}, true])).shape,
        "$: 3 items, sampled 3/3 heterogeneous: [...] | {...} | boolean"
    );
}

#[test]
fn structured_content_rows() {
    let value = rows_value();
    let d = describe(&value);
    assert_eq!(d.count, 2);
    assert!(d.preview_truncated);
    assert!(d
        .shape
        .starts_with("$.structuredContent.rows: 180 items, sampled 3/180 heterogeneous:"));
    assert_eq!(
        d.shape,
        "$.structuredContent.rows: 180 items, sampled 3/180 heterogeneous: {...} | string | null"
    );
    let p = &d.preview;
    assert_eq!(p["sampled"], true);
    assert_eq!(p["traversalLimited"], false);
    assert_eq!(p["fields"], json!(["structuredContent", "isError"]));
    let rows = &p["arrays"][0];
    assert_eq!(rows["path"], "$.structuredContent.rows");
    assert_eq!(rows["count"], 180);
    assert_eq!(
        rows["items"],
        json!([
            {"index": 0, "value": {"id": 0, "name": "row 0", "tags": ["a", "b"]}},
            {"index": 90, "value": "text row 90"},
            {"index": 179, "value": null}
        ])
    );
    // The tags array inside the first sampled item was found too.
    assert_eq!(p["arrays"][1]["path"], "$.structuredContent.rows[0].tags");
    assert_eq!(p["arrays"][1]["count"], 2);
    let j = check_descriptor(&value);
    assert_eq!(j["shape"], d.shape);
    assert_eq!(j["preview"], d.preview);
}

#[test]
fn homogeneous_rows() {
    let rows: Vec<Value> = (0..50).map(|i| json!({"id": i, "ok": true})).collect();
    let d = describe(&json!({ "rows": rows }));
    assert_eq!(d.shape, "$.rows: 50 items, sampled 3/50 homogeneous: {...}");
    let indices: Vec<u64> = d.preview["arrays"][0]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indices, [0, 25, 49]);
}

#[test]
fn sample_indices_are_first_middle_last() {
    assert_eq!(sample_indices(0), Vec::<usize>::new());
    assert_eq!(sample_indices(1), [0]);
    assert_eq!(sample_indices(2), [0, 1]);
    assert_eq!(sample_indices(3), [0, 1, 2]);
    assert_eq!(sample_indices(4), [0, 2, 3]);
    assert_eq!(sample_indices(180), [0, 90, 179]);
}

#[test]
fn wide_and_deep_value_is_limited() {
    let mut root: Map<String, Value> = (0..10_000)
        .map(|i| (format!("key{i}"), json!({ "v": [i] })))
        .collect();
    root.insert("deep".to_owned(), deep(50));
    let value = Value::Object(root);
    let d = describe(&value);
    assert_eq!(d.count, 10_001);
    assert!(d.shape.starts_with("limited traversal; "), "{}", d.shape);
    assert_eq!(d.preview["traversalLimited"], true);
    assert_eq!(d.preview["fields"].as_array().unwrap().len(), 16);
    let j = check_descriptor(&value);
    assert_eq!(j["preview"]["traversalLimited"], true);
    assert!(j["shape"]
        .as_str()
        .unwrap()
        .starts_with("limited traversal; "));
}

#[test]
fn limited_by_skipped_keys_holding_containers() {
    let mut root: Map<String, Value> = (0..16).map(|i| (format!("k{i}"), json!(i))).collect();
    root.insert("hidden".to_owned(), json!([1, 2, 3]));
    let d = describe(&Value::Object(root));
    assert!(d
        .shape
        .starts_with("limited traversal; $: object with 17 keys"));
}

#[test]
fn not_limited_by_skipped_scalar_keys() {
    let root: Map<String, Value> = (0..40)
        .map(|i| (format!("key{i}"), json!("some text value")))
        .collect();
    let d = describe(&Value::Object(root));
    assert_eq!(d.shape, "$: object with 40 keys");
    assert_eq!(d.preview["traversalLimited"], false);
    assert_eq!(d.preview["fields"].as_array().unwrap().len(), 16);
}

#[test]
fn limited_by_depth() {
    // The array at depth 5 is found; at depth 6 it is not.
    let d = describe(&deep(5));
    assert_eq!(
        d.shape,
        "$.next.next.next.next.next: 3 items, sampled 3/3 homogeneous: number"
    );
    let d = describe(&deep(6));
    assert_eq!(d.shape, "limited traversal; $: object with 1 key");
    // An array at depth 5 holding containers is found, its items are not.
    let mut value = json!([[1], [2]]);
    for _ in 0..5 {
        value = json!({ "n": value });
    }
    let d = describe(&value);
    assert!(d
        .shape
        .starts_with("limited traversal; $.n.n.n.n.n: 2 items"));
}

#[test]
fn limited_by_node_budget() {
    // 1 + 16 + 256 objects: more than 128 containers within depth 2.
    let inner: Map<String, Value> = (0..16)
        .map(|i| (format!("c{i}"), json!({"x": 1})))
        .collect();
    let root: Map<String, Value> = (0..16)
        .map(|i| (format!("b{i}"), Value::Object(inner.clone())))
        .collect();
    let d = describe(&Value::Object(root));
    assert!(d.shape.starts_with("limited traversal; "));
    assert_eq!(d.preview["traversalLimited"], true);
    // Exactly 128 containers (1 + 16 objects + 111 arrays): no limit;
    // one more array and the budget runs out.
    let build = |arrays: usize| {
        let mut left = arrays;
        let root: Map<String, Value> = (0..16)
            .map(|i| {
                let n = left.min(7);
                left -= n;
                let inner: Map<String, Value> =
                    (0..n).map(|j| (format!("a{j}"), json!([j]))).collect();
                (format!("o{i}"), Value::Object(inner))
            })
            .collect();
        describe(&Value::Object(root))
    };
    let d = build(111);
    assert!(!d.shape.starts_with("limited"), "{}", d.shape);
    assert_eq!(d.preview["traversalLimited"], false);
    let d = build(112);
    assert!(d.shape.starts_with("limited traversal; "), "{}", d.shape);
}

#[test]
fn eight_largest_arrays_are_kept() {
    // Lengths 1..=12 in shuffled key order, plus ties.
    let lengths = [3, 12, 1, 7, 9, 5, 11, 2, 10, 4, 8, 6];
    let mut root = Map::new();
    for (i, n) in lengths.iter().enumerate() {
        root.insert(format!("a{i}"), Value::Array(vec![json!(1000); *n]));
    }
    let d = describe(&Value::Object(root));
    assert_eq!(preview_counts(&d), [12, 11, 10, 9, 8, 7, 6, 5]);
    assert_eq!(d.preview["arrays"][0]["path"], "$.a1");
    assert_eq!(d.shape, "$.a1: 12 items, sampled 3/12 homogeneous: number");
    // Ties keep BFS order: shallower first, then key order.
    let value = json!({
        "x": {"deep": [1, 2]},
        "y": [1, 2],
        "z": [1, 2],
        "pad": "p".repeat(300)
    });
    let d = describe(&value);
    let paths: Vec<&str> = d.preview["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["$.y", "$.z", "$.x.deep"]);
}

#[test]
fn items_show_two_levels_and_six_fields() {
    let item = json!({
        "a": 1, "b": {"c": {"d": 1}, "e": [1, [2]], "f": {}, "g": []},
        "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8
    });
    let rendered = render(&item, SAMPLE_LEVELS, MAX_STRING_BYTES);
    assert_eq!(
        rendered,
        json!({
            "a": 1, "b": {"c": "{...}", "e": "[...]", "f": {}, "g": []},
            "c": 3, "d": 4, "e": 5, "f": 6
        })
    );
    let list = json!([1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        render(&list, SAMPLE_LEVELS, MAX_STRING_BYTES),
        json!([1, 2, 3, 4, 5, 6])
    );
    // Idempotent on its own output.
    assert_eq!(render(&rendered, SAMPLE_LEVELS, MAX_STRING_BYTES), rendered);
}

#[test]
fn strings_and_keys_are_cut() {
    let long = "a".repeat(100);
    assert_eq!(cut_string(&long, 48), format!("{}…", "a".repeat(48)));
    assert_eq!(cut_string(&"a".repeat(48), 48), "a".repeat(48));
    assert_eq!(cut_key(&long), format!("{}…", "a".repeat(37)));
    assert_eq!(cut_key(&long).len(), 40);
    assert_eq!(cut_key(&"k".repeat(40)), "k".repeat(40));
    // Escapes count as their JSON size.
    let quotes = "\"".repeat(30); // 60 escaped bytes
    assert_eq!(cut_string(&quotes, 48), format!("{}…", "\"".repeat(24)));
    let controls = "\u{1}".repeat(10); // 60 escaped bytes
    assert_eq!(cut_string(&controls, 48), format!("{}…", "\u{1}".repeat(8)));
    // Keys that collide after the cut appear once.
    let value = json!({
        format!("{long}1"): 1, format!("{long}2"): 2, "pad": "p".repeat(300)
    });
    let d = describe(&value);
    assert_eq!(
        d.preview["fields"],
        json!([format!("{}…", "a".repeat(37)), "pad"])
    );
}

#[test]
fn unicode_is_cut_on_char_boundaries() {
    let emoji = "😀".repeat(30); // 4 bytes each
    let cut = cut_string(&emoji, 48);
    assert_eq!(cut, format!("{}…", "😀".repeat(12)));
    let cjk = "漢字かな".repeat(20); // 3 bytes each
    let cut = cut_string(&cjk, 48);
    assert_eq!(cut.len(), 48 + 3);
    assert!(cjk.starts_with(cut.trim_end_matches('…')));
    // 47 ASCII bytes then an emoji: the emoji does not fit, no half of it.
    let mixed = format!("{}😀😀", "a".repeat(47));
    assert_eq!(cut_string(&mixed, 48), format!("{}…", "a".repeat(47)));
    // A ZWJ sequence cut right after the joiner drops the joiner.
    let family = format!("{}👨\u{200d}👩", "a".repeat(41)); // 41 + 4 + 3 = 48
    assert_eq!(cut_string(&family, 47), format!("{}👨…", "a".repeat(41)));
    let key = "é".repeat(30); // 60 bytes
    let cut = cut_key(&key);
    assert!(cut.len() <= 40);
    assert_eq!(cut, format!("{}…", "é".repeat(18)));
    let shape = cut_text(&"日".repeat(100), MAX_SHAPE_BYTES);
    assert!(shape.len() <= MAX_SHAPE_BYTES);
    assert_eq!(shape, format!("{}…", "日".repeat(79)));
    // Sampled items of unicode-heavy values.
    let rows: Vec<Value> = (0..20)
        .map(|i| json!({"t": format!("{i}{}", "🎉漢".repeat(40))}))
        .collect();
    let d = describe(&json!({ "rows": rows }));
    let first = d.preview["arrays"][0]["items"][0]["value"]["t"]
        .as_str()
        .unwrap();
    assert!(first.ends_with('…'));
    assert!(first.len() <= 48 + 3);
    check_descriptor(&json!({ "rows": rows }));
}

#[test]
fn escaped_len_matches_serde_json() {
    let mut chars: Vec<char> = (0u32..0x80).filter_map(char::from_u32).collect();
    chars.extend(['é', '漢', '😀', '\u{2028}', '\u{85}', '\u{7f}', '\u{200d}']);
    for c in chars {
        let json = serde_json::to_string(&c.to_string()).unwrap();
        assert_eq!(escaped_char_len(c), json.len() - 2, "{c:?}");
    }
}

#[test]
fn paths_use_dots_brackets_and_indices() {
    assert_eq!(key_segment("rows"), ".rows");
    assert_eq!(key_segment("_a$1"), "._a$1");
    assert_eq!(key_segment("1a"), "[\"1a\"]");
    assert_eq!(key_segment("with space"), "[\"with space\"]");
    assert_eq!(key_segment(""), "[\"\"]");
    assert_eq!(key_segment("日本"), "[\"日本\"]");
    assert_eq!(key_segment("a\"b"), "[\"a\\\"b\"]");
    assert_eq!(key_segment("l\ni\u{2028}ne"), "[\"l\\ni\\u2028ne\"]");
    assert_eq!(
        key_segment(&"k".repeat(50)),
        format!("[\"{}…\"]", "k".repeat(37))
    );
    let value = json!({"my key": [[1, 2], {"x": [true, false]}]});
    let d = describe(&value);
    let paths: Vec<&str> = d.preview["arrays"]
        .as_array()
        .map(|a| a.iter().map(|a| a["path"].as_str().unwrap()).collect())
        .unwrap_or_default();
    // Small value: the preview is the value; check the traversal directly.
    assert!(paths.is_empty());
    let t = traverse(&value);
    let paths: Vec<&str> = t.arrays.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(
        paths,
        ["$[\"my key\"]", "$[\"my key\"][0]", "$[\"my key\"][1].x"]
    );
}

#[test]
fn shape_is_one_line_and_bounded() {
    let key = format!("{}\n\u{2028}", "κλειδί".repeat(20));
    let mut value = json!({ key.clone(): [1, 2, 3] });
    for _ in 0..4 {
        value = json!({ key.clone(): value });
    }
    let d = describe(&value);
    assert!(d.shape.len() <= MAX_SHAPE_BYTES, "{}", d.shape.len());
    assert!(!d.shape.contains(['\n', '\u{2028}']));
    assert!(d.shape.ends_with('…'));
    check_descriptor(&value);
}

#[test]
fn descriptor_of_small_values_is_complete() {
    for value in [
        json!(null),
        json!(0),
        json!("text"),
        json!([]),
        json!({}),
        json!({"a": [1, 2, 3], "b": {"c": "d"}}),
    ] {
        let j = check_descriptor(&value);
        assert_eq!(j["preview"], value);
        assert_eq!(j["previewTruncated"], false);
    }
}

#[test]
fn descriptor_fits_adversarial_values() {
    let long_key = "K".repeat(10_000);
    let escapes = "\u{1}\"\\".repeat(2_000);
    let emoji = "👨\u{200d}👩\u{200d}👧".repeat(500);
    // 16 × 16 arrays: more than the node budget, all with fat items.
    let many_arrays: Map<String, Value> = (0..16)
        .map(|i| {
            let inner: Map<String, Value> = (0..16)
                .map(|k| {
                    let items = (0..=(i * 16 + k) % 40)
                        .map(|j| json!({"v": escapes[..600].to_owned(), "j": j}))
                        .collect();
                    (
                        format!("array {k} with a long name {}", "x".repeat(60)),
                        items,
                    )
                })
                .collect();
            (format!("group{i}"), Value::Object(inner))
        })
        .collect();
    let long_keys: Map<String, Value> = (0..100)
        .map(|i| {
            (
                format!("{i}{long_key}"),
                json!([{ long_key.clone(): emoji.clone() }]),
            )
        })
        .collect();
    let fat_items: Vec<Value> = (0..10)
        .map(|_| {
            let obj: Map<String, Value> = (0..6)
                .map(|k| {
                    let inner: Map<String, Value> = (0..6)
                        .map(|m| (format!("{escapes}{m}"), json!(escapes)))
                        .collect();
                    (format!("{k}{escapes}"), Value::Object(inner))
                })
                .collect();
            Value::Object(obj)
        })
        .collect();
    let mut nested = json!([escapes.clone()]);
    for i in 0..60 {
        nested = json!({ format!("\u{2028}{i}\n{long_key}"): [nested, [i]] });
    }
    let values = [
        Value::Object(many_arrays),
        Value::Object(long_keys),
        Value::Array(fat_items),
        nested,
        json!(escapes),
        json!(emoji),
        json!({ long_key.clone(): escapes }),
        json!([[[[[[[[[[1]]]]]]]]]]),
    ];
    for value in &values {
        let j = check_descriptor(value);
        assert_eq!(j["previewTruncated"], json!(size(value) > 256));
    }
}

#[test]
fn descriptor_fits_generated_values() {
    // A small deterministic generator (no external crates).
    struct Lcg(u64, usize);
    impl Lcg {
        fn next(&mut self, n: u64) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from((self.0 >> 33) % n).unwrap_or_default()
        }
        fn text(&mut self) -> String {
            const PARTS: [&str; 8] = ["a", "é", "漢", "😀", "\"", "\u{1}", "\n", "\u{200d}"];
            let len = [0, 3, 40, 200][self.next(4)];
            (0..len).map(|_| PARTS[self.next(8)]).collect()
        }
        fn value(&mut self, depth: usize) -> Value {
            // Field 1 bounds the containers' total size.
            self.1 = self.1.saturating_sub(1);
            let kind = if depth > 7 || self.1 == 0 {
                self.next(4)
            } else {
                self.next(7)
            };
            match kind {
                0 => Value::Null,
                1 => json!(self.next(1_000_000)),
                2 => json!(self.next(2) == 0),
                3 => json!(self.text()),
                4 | 5 => {
                    let n = [0, 1, 3, 30][self.next(4)];
                    (0..n).map(|_| self.value(depth + 1)).collect()
                }
                _ => {
                    let n = [0, 2, 8, 25][self.next(4)];
                    let map: Map<String, Value> = (0..n)
                        .map(|_| (self.text(), self.value(depth + 1)))
                        .collect();
                    Value::Object(map)
                }
            }
        }
    }
    let mut rng = Lcg(42, 0);
    for _ in 0..300 {
        rng.1 = 3_000;
        let value = rng.value(0);
        check_descriptor(&value);
    }
}

#[test]
fn shrinking_keeps_the_largest_array_first() {
    // Many mid-sized arrays with fat items: they cannot all fit.
    let mut root = Map::new();
    for i in 0..8 {
        let items: Vec<Value> = (0..(20 + i))
            .map(|j| json!({"name": "n".repeat(60), "j": j, "more": "m".repeat(60)}))
            .collect();
        root.insert(format!("list{i}"), Value::Array(items));
    }
    let value = Value::Object(root);
    let d = describe(&value);
    assert_eq!(preview_counts(&d), [27, 26, 25, 24, 23, 22, 21, 20]);
    assert!(size(&d.preview) > MAX_DESCRIPTOR_BYTES);
    let j = check_descriptor(&value);
    assert_eq!(j["preview"]["arrays"][0]["path"], "$.list7");
    assert_eq!(j["preview"]["arrays"][0]["count"], 27);
    assert!(!j["preview"]["arrays"][0]["items"]
        .as_array()
        .unwrap()
        .is_empty());
    assert_eq!(j["shape"], d.shape);
}

#[test]
fn shrinking_ladder_ends_minimal() {
    let d = describe(&rows_value());
    let ladder = shrink_ladder(&d.preview);
    assert_eq!(ladder.first(), Some(&d.preview));
    assert_eq!(
        ladder.last(),
        Some(&json!({"sampled": true, "traversalLimited": true, "arrays": []}))
    );
    for pair in ladder.windows(2) {
        assert!(size(&pair[1]) < size(&pair[0]), "{pair:?}");
    }
    // Nothing to drop: the flag is kept.
    let ladder = shrink_ladder(&describe(&json!("x".repeat(300))).preview);
    assert_eq!(
        ladder,
        [json!({"sampled": true, "traversalLimited": false, "arrays": []})]
    );
}

#[test]
fn descriptor_fits_caller_made_descriptors() {
    let escapes = "\u{1}\"".repeat(400);
    // A huge, escape-heavy shape with a full preview.
    let d = Described {
        bytes: 10,
        count: 1,
        shape: escapes.clone(),
        preview: json!({"a": [1, 2]}),
        preview_truncated: false,
    };
    let j = descriptor_json(ID, &d);
    assert!(size(&j) <= MAX_DESCRIPTOR_BYTES);
    assert_eq!(j["preview"], json!({"a": [1, 2]}));
    assert!(j["shape"].as_str().unwrap().ends_with('…'));
    assert!(j["shape"].as_str().unwrap().len() >= MIN_CUT_SHAPE_BYTES);
    // A malformed sampled preview and a huge shape.
    let d = Described {
        bytes: usize::MAX,
        count: usize::MAX,
        shape: "日".repeat(5_000),
        preview: json!(escapes),
        preview_truncated: true,
    };
    let j = descriptor_json(ID, &d);
    assert!(size(&j) <= MAX_DESCRIPTOR_BYTES);
    assert_eq!(
        j["preview"],
        json!({"sampled": true, "traversalLimited": true, "arrays": []})
    );
    // The bound holds for a 600-byte id, even with the largest numbers.
    let j = descriptor_json(&"i".repeat(600), &d);
    assert!(size(&j) <= MAX_DESCRIPTOR_BYTES, "{}", size(&j));
    // A full preview too large to be one.
    let big: Vec<Value> = (0..100).map(|i| json!({ "i": i })).collect();
    let d = Described {
        bytes: 1,
        count: 1,
        shape: "$".to_owned(),
        preview: Value::Array(big),
        preview_truncated: false,
    };
    let j = descriptor_json(ID, &d);
    assert!(size(&j) <= MAX_DESCRIPTOR_BYTES);
    assert_eq!(j["previewTruncated"], true);
    assert_eq!(j["preview"]["arrays"][0]["count"], 100);
}
