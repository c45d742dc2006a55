//! Tests of `output.rs`.

use super::*;

fn text_entry(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

fn string_json(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn total(fitted: &Fitted) -> usize {
    output_len(&fitted.output)
        + fitted.value.as_ref().map_or(0, json_len)
        + fitted.error.as_deref().map_or(0, json_string_len)
}

fn assert_marker(value: &Value, original: &str) -> String {
    assert_eq!(value["truncated"], json!(true));
    assert_eq!(value["guidance"], json!(TRUNCATION_GUIDANCE));
    let prefix = value["prefix"].as_str().unwrap().to_owned();
    assert!(original.starts_with(&prefix), "prefix is not a prefix");
    assert_eq!(
        value["omittedBytes"].as_u64().unwrap() as usize,
        original.len() - prefix.len()
    );
    assert!(!prefix.contains('\u{fffd}'));
    prefix
}

/// Largest atom-boundary prefix that fits, by brute force.
fn brute_force_best(item: &str, allowance: usize) -> Option<usize> {
    let mut boundaries = vec![0];
    let mut at = 0;
    for (len, _) in json_atoms(item) {
        at += len;
        boundaries.push(at);
    }
    boundaries
        .into_iter()
        // A prefix's escaped form is never shorter than the prefix.
        .filter(|&p| p <= allowance)
        .filter(|&p| json_len(&marker(item.len() - p, &item[..p])) <= allowance)
        .max()
}

#[test]
fn contract_example_6_oversized_string() {
    let value = string_json(&"x".repeat(2048));
    let fitted = fit_to_budget(1024, vec![], Some(&value), None).unwrap();
    assert!(fitted.value_truncated);
    let marker = fitted.value.as_ref().unwrap();
    let prefix = assert_marker(marker, &value);
    assert!(prefix.starts_with("\"xxx"));
    assert!(prefix.len() > 800, "prefix too short: {}", prefix.len());
    assert!(json_len(marker) <= 1024);
    assert_eq!(fitted.used_bytes, json_len(marker));
    assert!(fitted.used_bytes <= 1024);
    assert_eq!(total(&fitted), fitted.used_bytes);
}

#[test]
fn value_exact_fit_and_one_byte_over() {
    let value = string_json(&"v".repeat(300));
    let v = value.len();
    let fitted = fit_to_budget(v, vec![], Some(&value), None).unwrap();
    assert!(!fitted.value_truncated);
    assert_eq!(fitted.value, Some(json!("v".repeat(300))));
    assert_eq!(fitted.used_bytes, v);

    let fitted = fit_to_budget(v - 1, vec![], Some(&value), None).unwrap();
    assert!(fitted.value_truncated);
    assert_marker(fitted.value.as_ref().unwrap(), &value);
    assert!(fitted.used_bytes < v);
}

#[test]
fn output_exact_fit_and_one_byte_over() {
    let output = vec![text_entry(&"a".repeat(200)), text_entry(&"b".repeat(200))];
    // The list as the result carries it: entries, a comma, brackets.
    let o = output_len(&output);
    assert_eq!(o, serde_json::to_string(&output).unwrap().len());
    let fitted = fit_to_budget(o, output.clone(), None, None).unwrap();
    assert!(!fitted.output_truncated);
    assert_eq!(fitted.output, output);
    assert_eq!(fitted.used_bytes, o);

    let fitted = fit_to_budget(o - 1, output.clone(), None, None).unwrap();
    assert!(fitted.output_truncated);
    assert!(fitted.used_bytes < o);
    let last = fitted.output.last().unwrap();
    assert_eq!(last["type"], json!("json"));
    assert_eq!(last["value"]["truncated"], json!(true));
}

#[test]
fn error_exact_fit_and_one_byte_over() {
    let error = "Error: boom";
    let e = json_string_len(error);
    let fitted = fit_to_budget(e, vec![], None, Some(error)).unwrap();
    assert_eq!(fitted.error.as_deref(), Some(error));
    assert!(!fitted.error_truncated);
    let long = format!("Error: {}", "z".repeat(100));
    let e = json_string_len(&long);
    let fitted = fit_to_budget(e - 1, vec![], None, Some(&long)).unwrap();
    let cut = fitted.error.unwrap();
    assert!(fitted.error_truncated);
    assert!(cut.starts_with("Error: zzz"));
    assert!(cut.ends_with(ERROR_TRUNCATED_SUFFIX));
    assert_eq!(json_string_len(&cut), e - 1);
}

#[test]
fn empty_output_costs_nothing() {
    let fitted = fit_to_budget(0, vec![], None, None).unwrap();
    assert_eq!(fitted.used_bytes, 0);
    assert!(fitted.output.is_empty());
    assert_eq!(fitted.value, None);
    assert_eq!(fitted.error, None);
    let fitted = fit_to_budget(4, vec![], Some("null"), None).unwrap();
    assert_eq!(fitted.value, Some(Value::Null));
    assert_eq!(fitted.used_bytes, 4);
}

#[test]
fn emoji_and_cjk_are_cut_on_code_points() {
    for unit in ["😀", "漢字", "é", "a😀b"] {
        let original = unit.repeat(700);
        let value = string_json(&original);
        for budget in [200, 333, 517, 1024, 1025, 1026, 1027] {
            let fitted = fit_to_budget(budget, vec![], Some(&value), None).unwrap();
            let marker = fitted.value.as_ref().unwrap();
            let prefix = assert_marker(marker, &value);
            assert!(value.is_char_boundary(prefix.len()));
            assert!(json_len(marker) <= budget);
            assert_eq!(
                Some(prefix.len()),
                brute_force_best(&value, budget),
                "{unit} {budget}"
            );
        }
    }
    let output = vec![text_entry(&"中文😀".repeat(500))];
    let fitted = fit_to_budget(1024, output, None, None).unwrap();
    assert!(fitted.used_bytes <= 1024);
    let prefix = fitted.output[0]["value"]["prefix"].as_str().unwrap();
    assert!(!prefix.contains('\u{fffd}'));
    assert!(prefix.len() > 700);
}

#[test]
fn escape_heavy_values_keep_a_prefix() {
    for unit in ["\"", "\\", "\n", "\u{1}", "\u{1f}", "\"😀\u{7}"] {
        let original = unit.repeat(2000);
        let value = string_json(&original);
        for budget in [150, 200, 512, 1024] {
            let fitted = fit_to_budget(budget, vec![], Some(&value), None).unwrap();
            let marker = fitted.value.as_ref().unwrap();
            let prefix = assert_marker(marker, &value);
            assert!(json_len(marker) <= budget);
            assert!(prefix.len() > 1, "{unit:?} {budget}: prefix collapsed");
            assert_eq!(
                Some(prefix.len()),
                brute_force_best(&value, budget),
                "{unit:?} {budget}"
            );
            // Never split an escape: the prefix parses as the start of a
            // JSON string once closed.
            let closed = format!("{prefix}\"");
            assert!(
                serde_json::from_str::<String>(&closed).is_ok(),
                "{unit:?}: {prefix:?}"
            );
        }
    }
}

#[test]
fn marker_prefix_is_maximal_for_every_allowance() {
    let value = string_json("ab\"c\\d\ne😀f漢\u{2}g".repeat(20).as_str());
    for allowance in 0..600 {
        let best = brute_force_best(&value, allowance);
        let marker = truncation_marker(&value, allowance);
        match (marker, best) {
            (None, None) => {}
            (Some(marker), Some(best)) => {
                assert!(json_len(&marker) <= allowance);
                assert_eq!(
                    marker["prefix"].as_str().unwrap().len(),
                    best,
                    "{allowance}"
                );
            }
            (marker, best) => panic!("{allowance}: {marker:?} vs {best:?}"),
        }
    }
}

#[test]
fn surrogate_pair_escapes_are_one_atom() {
    let text = r#""\ud83d\ude00\ud83d\ude00\u0001x""#;
    let atoms: Vec<(usize, usize)> = json_atoms(text).collect();
    assert_eq!(atoms[1], (12, 14));
    assert_eq!(atoms[3], (6, 7));
    for allowance in 90..140 {
        if let Some(marker) = truncation_marker(text, allowance) {
            let prefix = marker["prefix"].as_str().unwrap();
            assert!(
                matches!(prefix.len(), 0 | 1 | 13 | 25 | 31 | 32 | 33),
                "{prefix}"
            );
        }
    }
}

#[test]
fn lone_surrogates_keep_their_escapes_in_the_exact_text() {
    let fitted = fit_to_budget(
        1024,
        vec![],
        Some(&format!(
            r#"["\ud800x","\udc00","\ud83d\ude00","{}"]"#,
            "y".repeat(200)
        )),
        None,
    )
    .unwrap();
    // The projection holds U+FFFD; the exact text the escapes, and its
    // bytes are what the budget counts.
    let long = "y".repeat(200);
    assert_eq!(
        fitted.value,
        Some(json!(["\u{fffd}x", "\u{fffd}", "😀", long]))
    );
    let exact = format!(r#"["\ud800x","\udc00","😀","{long}"]"#);
    let exact = exact.as_str();
    assert_eq!(fitted.value_exact.as_deref(), Some(exact));
    assert_eq!(fitted.used_bytes, exact.len());
    // One byte less and the value is cut, its marker's prefix taken from
    // the exact text.
    let cut = fit_to_budget(exact.len() - 1, vec![], Some(exact), None).unwrap();
    assert!(cut.value_truncated && cut.value_exact.is_none());
    // Without lone surrogates there is no exact text.
    let plain = fit_to_budget(1024, vec![], Some(r#""\ud83d\ude00\ufffd""#), None).unwrap();
    assert_eq!(
        (plain.value, plain.value_exact),
        (Some(json!("😀\u{fffd}")), None)
    );
    assert_eq!(
        fit_to_budget(1024, vec![], Some("{oops"), None).map(|_| ()),
        Err(FitError::InvalidValueJson(
            "key must be a string at line 1 column 2".into()
        ))
    );
}

/// The exact text is the canonical text `serde_json` writes for the
/// projection, but for the lone surrogates: whitespace dropped, numbers
/// and escapes rewritten, keys and nesting kept, valid pairs decoded.
#[test]
fn the_exact_text_is_canonical_but_for_lone_surrogates() {
    let cases = [
        (r#"  "\ud800"  "#, r#""\ud800""#),
        (r#""\uD800\u0041\/\n\u001f""#, r#""\ud800A/\n\u001f""#),
        (
            r#"{ "k\udc00" : [1e+21, -0.0, 1.50, true, null, "\ud83d\ude00\ud83d"] }"#,
            r#"{"k\udc00":[1e+21,-0.0,1.5,true,null,"😀\ud83d"]}"#,
        ),
        (r#""\ud800\ud800\udc00\udc00""#, r#""\ud800𐀀\udc00""#),
        (r#"["\\ud800", "\ud800\\"]"#, r#"["\\ud800","\ud800\\"]"#),
    ];
    for (guest, exact) in cases {
        let fitted = fit_to_budget(1024, vec![], Some(guest), None).unwrap();
        assert_eq!(fitted.value_exact.as_deref(), Some(exact), "{guest}");
        assert_eq!(fitted.used_bytes, exact.len(), "{guest}");
        // The exact text projects to the same value.
        let projected: Value = serde_json::from_str(&replace_lone_surrogates(exact)).unwrap();
        assert_eq!(Some(projected), fitted.value, "{guest}");
    }
    // A backslash-escaped `\\ud800` is text, not a surrogate: no exact.
    let text = fit_to_budget(1024, vec![], Some(r#""\\ud800""#), None).unwrap();
    assert_eq!(text.value_exact, None);
}

/// Output entries with lone surrogates keep their exact texts too, and
/// their bytes count; a summary marker's prefix is cut from them.
#[test]
fn output_entries_keep_their_exact_texts() {
    let long = "p".repeat(300);
    let entries: Vec<GuestJson> = [
        r#"{"type":"text","text":"a\ud800b"}"#,
        &format!(r#"{{"type":"text","text":"{long}"}}"#),
        r#"{"type":"json","value":["\udfff"]}"#,
    ]
    .iter()
    .map(|t| parse_guest_entry(t).unwrap())
    .collect();
    let fitted = fit_to_budget_with_dropped(4096, entries.clone(), None, None, 0).unwrap();
    assert_eq!(
        fitted.output_exact,
        vec![
            (0, r#"{"type":"text","text":"a\ud800b"}"#.to_string()),
            (2, r#"{"type":"json","value":["\udfff"]}"#.to_string()),
        ]
    );
    assert_eq!(fitted.output[0]["text"], "a\u{fffd}b");
    let list = &format!(
        r#"[{{"type":"text","text":"a\ud800b"}},{{"type":"text","text":"{long}"}},{{"type":"json","value":["\udfff"]}}]"#
    );
    assert_eq!(fitted.used_bytes, list.len());
    // One byte less: the first entry is kept whole with its exact text,
    // the rest summarized, its omitted bytes counted on the exact texts.
    let cut = fit_to_budget_with_dropped(list.len() - 1, entries, None, None, 0).unwrap();
    assert!(cut.output_truncated);
    assert_eq!(
        cut.output_exact,
        vec![(0, r#"{"type":"text","text":"a\ud800b"}"#.to_string())]
    );
    assert_eq!(cut.output.len(), 2);
    let marker = &cut.output[1]["value"];
    let rest =
        format!(r#"[{{"type":"text","text":"{long}"}},{{"type":"json","value":["\udfff"]}}]"#);
    let prefix = marker["prefix"].as_str().unwrap();
    assert!(rest.starts_with(prefix), "{marker}");
    assert_eq!(
        marker["omittedBytes"].as_u64().unwrap() as usize + prefix.len(),
        rest.len()
    );
    assert!(cut.used_bytes < list.len());
}

#[test]
fn value_is_measured_canonically() {
    let fitted = fit_to_budget(100, vec![], Some("{ \"a\" : [ 1 , 2 ] }"), None).unwrap();
    assert_eq!(fitted.used_bytes, r#"{"a":[1,2]}"#.len());
}

#[test]
fn error_truncation_keeps_start_and_suffix() {
    let error = format!("TypeError: {}", "detail ".repeat(1000));
    let fitted = fit_to_budget(1024, vec![], None, Some(&error)).unwrap();
    let cut = fitted.error.as_deref().unwrap();
    assert!(cut.starts_with("TypeError: detail"));
    assert!(cut.ends_with(" [error truncated]"));
    assert_eq!(json_string_len(cut), 1024);
    // Escape-heavy and multi-byte errors are cut on code points.
    let error = format!("Error: {}", "\"😀\n".repeat(500));
    let fitted = fit_to_budget(1000, vec![], None, Some(&error)).unwrap();
    let cut = fitted.error.as_deref().unwrap();
    assert!(json_string_len(cut) <= 1000);
    assert!(json_string_len(cut) >= 995);
    assert!(cut.ends_with(ERROR_TRUNCATED_SUFFIX));
}

#[test]
fn error_gets_at_least_half_when_everything_is_large() {
    let error = format!("Error: {}", "e".repeat(5000));
    let value = string_json(&"v".repeat(5000));
    let output = vec![text_entry(&"o".repeat(5000))];
    let fitted = fit_to_budget(2048, output, Some(&value), Some(&error)).unwrap();
    let used_error = json_string_len(fitted.error.as_deref().unwrap());
    assert_eq!(used_error, 1024);
    assert!(fitted.error_truncated && fitted.output_truncated && fitted.value_truncated);
    assert!(fitted.used_bytes <= 2048);
    assert_eq!(total(&fitted), fitted.used_bytes);
}

#[test]
fn small_error_leaves_the_rest_to_output_and_value() {
    let value = string_json(&"v".repeat(5000));
    let output = vec![text_entry(&"o".repeat(5000))];
    let fitted = fit_to_budget(4096, output, Some(&value), Some("Error: x")).unwrap();
    assert_eq!(fitted.error.as_deref(), Some("Error: x"));
    let r = 4096 - json_string_len("Error: x");
    // Output gets R − min(V, R/2) = R − R/2; the value gets the rest.
    let used_output = output_len(&fitted.output);
    assert!(used_output <= r - r / 2);
    assert!(fitted.used_bytes <= 4096);
    assert!(
        fitted.used_bytes > 4000,
        "budget underused: {}",
        fitted.used_bytes
    );
}

#[test]
fn small_value_is_kept_whole_while_output_is_truncated() {
    let output = vec![text_entry(&"o".repeat(5000))];
    let fitted = fit_to_budget(1024, output, Some("{\"ok\":true}"), None).unwrap();
    assert_eq!(fitted.value, Some(json!({ "ok": true })));
    assert!(fitted.output_truncated);
    assert!(fitted.used_bytes <= 1024);
}

#[test]
fn summary_marker_keeps_leading_entries() {
    let small = text_entry("starting");
    let huge = text_entry(&"h".repeat(5000));
    let tail = text_entry("done");
    let output = vec![small.clone(), huge.clone(), tail.clone()];
    let fitted = fit_to_budget(1024, output, None, None).unwrap();
    assert!(fitted.output_truncated);
    assert_eq!(fitted.output.len(), 2);
    assert_eq!(fitted.output[0], small);
    let summary = &fitted.output[1];
    assert_eq!(summary["type"], json!("json"));
    let rest_text = serde_json::to_string(&json!([huge, tail])).unwrap();
    let prefix = assert_marker(&summary["value"], &rest_text);
    assert!(prefix.starts_with("[{\"type\":\"text\",\"text\":\"hhh"));
    assert!(fitted.used_bytes <= 1024);
    assert_eq!(total(&fitted), fitted.used_bytes);
}

#[test]
fn summary_marker_replaces_everything_when_the_first_entry_is_huge() {
    let output = vec![text_entry(&"h".repeat(5000)), text_entry("x")];
    let fitted = fit_to_budget(1024, output, None, None).unwrap();
    assert_eq!(fitted.output.len(), 1);
    assert_eq!(fitted.output[0]["value"]["truncated"], json!(true));
    assert!(fitted.used_bytes <= 1024);
}

#[test]
fn many_small_entries_overflowing() {
    let output: Vec<Value> = (0..500).map(|i| text_entry(&format!("line {i}"))).collect();
    let fitted = fit_to_budget(2000, output, None, None).unwrap();
    assert!(fitted.output.len() > 10);
    assert_eq!(fitted.output[0], text_entry("line 0"));
    assert_eq!(fitted.output.last().unwrap()["type"], json!("json"));
    assert!(fitted.used_bytes <= 2000);
}

#[test]
fn tiny_budgets_never_overflow() {
    let error = format!("Error: {}", "e".repeat(300));
    let value = string_json(&"v".repeat(300));
    let output = vec![text_entry("hi"), text_entry(&"o".repeat(300))];
    for budget in 0..1500 {
        for (with_output, with_value, with_error) in [
            (true, true, true),
            (true, false, false),
            (false, true, false),
            (false, false, true),
            (true, true, false),
            (true, false, true),
        ] {
            let result = fit_to_budget(
                budget,
                if with_output { output.clone() } else { vec![] },
                with_value.then_some(value.as_str()),
                with_error.then_some(error.as_str()),
            );
            match result {
                Ok(fitted) => {
                    assert!(fitted.used_bytes <= budget, "{budget}");
                    assert_eq!(total(&fitted), fitted.used_bytes, "{budget}");
                    assert_eq!(fitted.error.is_some(), with_error);
                    assert_eq!(fitted.value.is_some(), with_value);
                }
                Err(FitError::OutputLimitExceeded) => {
                    // Only when even the smallest value marker cannot
                    // fit (the value gets at least about a quarter).
                    assert!(budget < 450, "{budget}");
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn tiny_error_allowance_drops_the_suffix_then_fails() {
    assert_eq!(
        truncate_error("Error: boom", 10).as_deref(),
        Some("Error: b")
    );
    assert_eq!(truncate_error("Error: boom", 2).as_deref(), Some(""));
    assert_eq!(truncate_error("Error: boom", 1), None);
    assert_eq!(
        fit_to_budget(1, vec![], None, Some("Error: boom")),
        Err(FitError::OutputLimitExceeded)
    );
}

#[test]
fn safe_cut_utf8_respects_code_points() {
    assert_eq!(safe_cut_utf8("abc", 10), "abc");
    assert_eq!(safe_cut_utf8("abc", 2), "ab");
    assert_eq!(safe_cut_utf8("a😀", 4), "a");
    assert_eq!(safe_cut_utf8("a😀", 5), "a😀");
    assert_eq!(safe_cut_utf8("漢字", 5), "漢");
    assert_eq!(safe_cut_utf8("漢字", 0), "");
}

#[test]
fn escaped_lengths_match_serde_json() {
    for code in (0u32..0x300).chain([0x2028, 0x2029, 0xfeff, 0x1f600]) {
        let c = char::from_u32(code).unwrap();
        let s = c.to_string();
        assert_eq!(
            json_string_len(&s),
            serde_json::to_string(&s).unwrap().len(),
            "{code:#x}"
        );
    }
}

/// Guest JSON with lone surrogate escapes next to multi-byte characters
/// (the cutter once sliced inside a character here and panicked).
#[test]
fn lone_surrogates_beside_multibyte_characters_never_panic() {
    let texts = [
        r#""\ud800€€""#,
        r#""\udc00€€""#,
        r#""€\ud800€""#,
        r#""\ud83d€""#,
        r#""\ud83d\u€""#,
        r#""\ud83d\ude00€\ud800""#,
        r#""\u€€€€€""#,
        r#"["\ud800€€",{"k\udfff€":"\ud800😀😀"}]"#,
    ];
    for text in texts {
        for budget in 0..96 {
            let fitted = fit_to_budget(budget, vec![], Some(text), None);
            if let Ok(fitted) = fitted {
                assert!(fitted.used_bytes <= budget, "{text} at {budget}");
            }
        }
        // The raw text as an item, too (a marker's prefix is cut in it).
        for allowance in 0..96 {
            if let Some(marker) = truncation_marker(text, allowance) {
                assert!(json_len(&marker) <= allowance, "{text} at {allowance}");
            }
        }
        let _ = parse_guest_json(text);
    }
    assert_eq!(
        parse_guest_json(r#""\ud800€€""#).unwrap(),
        json!("\u{fffd}€€")
    );
}
