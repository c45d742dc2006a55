//! Catalog ids, order and shadowing, callable names (contract.md §13
//! example 2), rebuilds on mutation and the counters that survive them.

use super::{ranking_catalog, search};
use crate::*;
use serde_json::json;
use std::collections::HashSet;

#[test]
fn ids_order_and_shadowing() {
    let c = Catalog::builder()
        .client(ToolSpec::new("read", "client read v1"))
        .mcp("My Server!", ToolSpec::new("read", "mcp read"))
        .plugin("ext", false, ToolSpec::new("ext_tool", "external plugin"))
        .plugin("bundled", true, ToolSpec::new("b_tool", "bundled plugin"))
        .core(ToolSpec::new("read", "core read"))
        .core(ToolSpec::new("write", "core write"))
        .client(ToolSpec::new("read", "client read v2"))
        .build();
    let ids: Vec<&str> = c.entries().iter().map(Entry::id).collect();
    assert_eq!(
        ids,
        [
            "host:core:write",
            "host:bundled:b_tool",
            "host:ext:ext_tool",
            "mcp:My_Server_:read",
            "client:client:read",
        ]
    );
    let read = c.get("client:client:read").unwrap();
    assert_eq!(read.description(), "client read v2", "later client wins");
    // The shadowed host entry is not searchable, describable or callable.
    assert!(c.get("host:core:read").is_none());
    assert!(c
        .search("core read", SearchOptions::default())
        .iter()
        .all(|e| e.id() != "host:core:read"));
    assert_eq!(
        c.describe("host:core:read").unwrap_err().kind,
        ErrorKind::UnknownTool
    );
    // By name, `read` is ambiguous between the client tool and the MCP tool.
    assert_eq!(
        c.resolve("read").unwrap_err().kind,
        ErrorKind::AmbiguousTool
    );
    assert_eq!(
        c.resolve("MCP.myServer.read").unwrap().id(),
        "mcp:My_Server_:read"
    );
    let p = c.callable_projection();
    let all: Vec<&str> = p
        .bindings()
        .iter()
        .map(|b| b.callable_name.as_str())
        .collect();
    assert_eq!(all, ["b_tool", "ext_tool", "read", "write"]);
    assert_eq!(p.resolve("read").unwrap().id, "client:client:read");
}

#[test]
fn contract_example_2_callable_names_through_catalog() {
    let mut b = Catalog::builder();
    for n in [
        "llm-task",
        "llm_task",
        "catalog",
        "class",
        "9patch",
        "__quickcellResult",
        "tool___quickcellResult",
    ] {
        b = b.core(ToolSpec::new(n, format!("tool {n}")));
    }
    let c = b.build();
    let p = c.callable_projection();
    let metas = c.guest_all(&p);
    let names: Vec<&str> = metas.iter().map(|m| m.callable_name.as_str()).collect();
    let is_hex8 = |s: &str, base: &str| {
        s.strip_prefix(base)
            .and_then(|r| r.strip_prefix('_'))
            .is_some_and(|h| {
                h.len() == 8
                    && h.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
    };
    assert!(names.contains(&"llm_task"));
    assert!(names.contains(&"tool_9patch"));
    assert!(names.contains(&"tool___quickcellResult"));
    for base in ["llm_task", "catalog", "class", "tool___quickcellResult"] {
        assert!(
            names.iter().any(|n| is_hex8(n, base)),
            "{base} in {names:?}"
        );
    }
    assert!(names.iter().all(|n| !n.starts_with("__quickcell")));
    // Sorted by callable name, and each routes to its own tool.
    let mut sorted = names.clone();
    sorted.sort_by(|a, b| collate(a, b));
    assert_eq!(names, sorted);
    let mut tools = HashSet::new();
    for m in &metas {
        let call = c.guest_prepare_call(&p, &m.callable_name, None).unwrap();
        assert_eq!(call.tool_name, m.tool_name);
        tools.insert(call.id);
    }
    assert_eq!(tools.len(), 7);
    // No catalog id in metadata.
    let text = serde_json::to_string(&metas).unwrap();
    assert!(!text.contains("host:core"), "{text}");
}

#[test]
fn index_rebuilds_on_a_policy_change_and_counters_persist() {
    let mut c = ranking_catalog();
    let scope = c.counter_scope().to_string();
    assert_eq!(scope.len(), 24);
    assert!(scope
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_ne!(
        ranking_catalog().counter_scope(),
        scope,
        "a new catalog gets a new scope"
    );
    // Narrowing the policy re-indexes and keeps the scope.
    assert_eq!(search(&c, "spreadsheet"), ["spreadsheet_open"]);
    c.set_policy(Policy {
        deny: vec!["spreadsheet_open".into()],
        ..Policy::default()
    });
    assert!(search(&c, "spreadsheet").is_empty());
    assert_eq!(c.counter_scope(), scope);
    let t = c.telemetry(&["exec", "wait"]);
    assert_eq!(t.search_count, 2);
    assert_eq!(t.catalog_size, 4);
    assert_eq!(
        t.sources,
        SourceCounts {
            host: 4,
            mcp: 0,
            client: 0
        }
    );
    let v = serde_json::to_value(&t).unwrap();
    for k in [
        "catalogSize",
        "sources",
        "counterScope",
        "searchCount",
        "describeCount",
        "callCount",
        "visibleTools",
    ] {
        assert!(v.get(k).is_some(), "{k}");
    }
    assert_eq!(v["visibleTools"], json!(["exec", "wait"]));
}

#[test]
fn catalog_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Catalog>();
    assert_send_sync::<Projection>();
    assert_send_sync::<CatalogError>();
}
