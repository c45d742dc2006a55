//! The structured tools: counters, `tool_search` batch limits and response
//! truncation, `tool_call` repair and ambiguity.

use super::ranking_catalog;
use crate::*;
use serde_json::{json, Value};

#[test]
fn counters_for_describe_call_and_batches() {
    let c = ranking_catalog();
    let p = c.callable_projection();
    c.describe("read_file").unwrap();
    c.guest_describe(&p, "web_search").unwrap();
    c.tool_call_prepare(&json!({"id": "read_file"})).unwrap();
    c.guest_prepare_call(&p, "web_search", Some(json!({})))
        .unwrap();
    c.guest_search(&p, "file", None);
    c.tool_search(&json!({"query": "web", "queries": [{"query": "file"}, {"query": "cron"}]}))
        .unwrap();
    let t = c.telemetry(&[]);
    assert_eq!((t.search_count, t.describe_count, t.call_count), (4, 2, 2));
    // A rejected batch runs zero searches.
    assert!(c
        .tool_search(&json!({"queries": [{"query": "a"}, {"query": " "}]}))
        .is_err());
    assert_eq!(c.telemetry(&[]).search_count, 4);
}

#[test]
fn tool_search_batch_limits() {
    let c = ranking_catalog();
    let err = |v: Value| c.tool_search(&v).unwrap_err().message;
    let qs = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"query": format!("q{i}"), "limit": 1}))
            .collect()
    };
    assert!(c.tool_search(&json!({"queries": qs(16)})).is_ok());
    assert!(err(json!({"queries": qs(17)})).contains("at most 16 entries"));
    assert!(err(json!({"query": "x", "queries": qs(16)})).contains("at most 16 entries"));
    assert_eq!(
        err(json!({"queries": [{"query": "web"}, {"query": "  "}]})),
        "queries[1].query must be a non-empty string."
    );
    assert_eq!(
        err(json!({"queries": [{"limit": 2}]})),
        "queries[0].query must be a non-empty string."
    );
    // 513 graphemes (each one a multi-code-point cluster) fail; 512 pass the
    // grapheme check but then fail the byte check.
    let g = "e\u{301}";
    assert!(err(json!({"query": g.repeat(513)})).contains("at most 512"));
    // `["a…a"]` is n + 4 bytes.
    let e = err(json!({"query": "a".repeat(509)}));
    assert!(e.contains("at most 512 UTF-8 bytes"), "{e}");
    assert!(c.tool_search(&json!({"query": "a".repeat(508)})).is_ok());
    let e = err(json!({"query": "a".repeat(300), "queries": [{"query": "b".repeat(300)}]}));
    assert!(e.contains("at most 512 UTF-8 bytes"), "{e}");
    let e = err(
        json!({"query": "web", "queries": [{"query": "file", "limit": 20}, {"query": "cron", "limit": 20}, {"query": "x", "limit": 12}]}),
    );
    assert!(e.contains("resolve to 60 results"), "{e}");
    // A top-level limit is the default for queries entries.
    let e = err(json!({"limit": 20, "queries": [{"query": "a"}, {"query": "b"}, {"query": "c"}]}));
    assert!(e.contains("resolve to 60 results"), "{e}");
    // Response shape.
    let r = c
        .tool_search(&json!({"query": "read", "queries": [{"query": "cron", "limit": 1}]}))
        .unwrap();
    assert_eq!(r["results"][0]["query"], "read");
    assert_eq!(r["results"][0]["hits"][0]["name"], "read_file");
    assert_eq!(r["results"][1]["query"], "cron");
    assert_eq!(r["results"][1]["hits"].as_array().unwrap().len(), 1);
    assert!(r.get("truncated").is_none());
}

#[test]
fn tool_search_response_truncation() {
    let mut b = Catalog::builder();
    for i in 0..40 {
        b = b.core(ToolSpec::new(
            format!("alpha_{i:02}"),
            format!("alpha tool {}", "z".repeat(150)),
        ));
    }
    let c = b.build();
    let r = c
        .tool_search(&json!({"queries": [{"query": "alpha", "limit": 20}, {"query": "alpha_05", "limit": 20}]}))
        .unwrap();
    let text = serde_json::to_string(&r).unwrap();
    assert!(utf16_len(&text) <= SEARCH_RESPONSE_CHARS, "{}", text.len());
    assert_eq!(r["truncated"], true);
    let first = r["results"][0]["hits"].as_array().unwrap().len();
    let second = r["results"][1]["hits"].as_array().unwrap().len();
    assert!(first > 0);
    assert!(second < 20 && first >= second);
}

#[test]
fn tool_call_repair_and_ambiguity() {
    let c = Catalog::builder()
        .core(
            ToolSpec::new("send_message", "Send a message").with_input_schema(json!({
                "type":"object","required":["to","text"],"additionalProperties":false,
                "properties":{"to":{"type":"string"},"text":{"type":"string"}}})),
        )
        .core(ToolSpec::new("other", "Other"))
        .build();
    // Flattened arguments beside the id are moved into arguments.
    let call = c
        .tool_call_prepare(&json!({"id": "host:core:send_message", "to": "bob", "text": "hi"}))
        .unwrap();
    assert_eq!(call.arguments, json!({"to": "bob", "text": "hi"}));
    assert_eq!(call.tool_name, "send_message");
    // Arguments as a JSON string.
    let call = c
        .tool_call_prepare(
            &json!({"name": "send_message", "arguments": "{\"to\":\"a\",\"text\":\"b\"}"}),
        )
        .unwrap();
    assert_eq!(call.arguments, json!({"to": "a", "text": "b"}));
    // Selectors naming different tools are rejected.
    let e = c
        .tool_call_prepare(&json!({"id": "send_message", "name": "other", "arguments": {}}))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::AmbiguousTool);
    // Explicit arguments plus stray top-level keys are rejected.
    let e = c
        .tool_call_prepare(&json!({"id": "send_message", "arguments": {"to": "a"}, "text": "b"}))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::AmbiguousTool);
    // Validation errors name the tool, never the id.
    let e = c
        .tool_call_prepare(
            &json!({"id": "host:core:send_message", "arguments": {"to": "a", "txet": "b"}}),
        )
        .unwrap_err();
    assert_eq!(
        e.message,
        "Invalid arguments for tool \"send_message\": missing required property \"text\"; unexpected property \"txet\". Did you mean: text? Expected input: { text: string; to: string }."
    );
    // In Code Mode the callable name is used.
    let p = c.callable_projection();
    let e = c
        .guest_prepare_call(&p, "send_message", Some(json!({"to": 1, "text": "x"})))
        .unwrap_err();
    assert!(e.message.starts_with(
        "Invalid arguments for tool \"send_message\": /to: expected string, got integer."
    ));
    assert_eq!(c.telemetry(&[]).call_count, 2);
}
