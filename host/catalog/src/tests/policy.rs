//! Policy on every surface, policy changes after indexing, direct-only
//! tools.

use super::{names, search};
use crate::*;
use serde_json::json;
use std::collections::HashSet;

fn policy_catalog(policy: Policy) -> Catalog {
    Catalog::builder()
        .core(
            ToolSpec::new("secret_tool", "Handles secret payroll data")
                .with_input_schema(json!({"type":"object","properties":{"x":{"type":"string"}}})),
        )
        .core(ToolSpec::new("public_tool", "Public payroll summary"))
        .core(ToolSpec::new("direct_secret", "Direct only secret").direct_only())
        .mcp("hr", ToolSpec::new("payroll_export", "Export payroll"))
        .policy(policy)
        .build()
}

#[test]
fn policy_filters_every_surface() {
    let deny = Policy {
        allow: None,
        deny: vec!["secret_tool".into(), "mcp:hr:*".into(), "direct_*".into()],
    };
    let c = policy_catalog(deny);
    // search
    assert_eq!(search(&c, "payroll"), ["public_tool"]);
    assert!(!search(&c, "secret_tool").contains(&"secret_tool".to_string()));
    // describe
    assert_eq!(
        c.describe("secret_tool").unwrap_err().kind,
        ErrorKind::UnknownTool
    );
    assert_eq!(
        c.describe("host:core:secret_tool").unwrap_err().kind,
        ErrorKind::UnknownTool
    );
    // call lookup: outside policy is unknown (even the direct-only one)
    for key in ["secret_tool", "direct_secret", "payroll_export"] {
        let e = c.tool_call_prepare(&json!({"id": key})).unwrap_err();
        assert_eq!(e.kind, ErrorKind::UnknownTool, "{key}");
        assert!(e.message.contains("Use tool_search"), "{}", e.message);
    }
    // projection, guest search, quick index, directory, API.read
    let p = c.callable_projection();
    assert!(p.resolve("secret_tool").is_none());
    assert!(p.mcp_bindings().is_empty());
    assert!(c
        .guest_search(&p, "secret_tool", None)
        .iter()
        .all(|m| m.tool_name == "public_tool"));
    assert!(c
        .guest_search(&p, "MCP.hr.payrollExport", None)
        .iter()
        .all(|m| m.tool_name == "public_tool"));
    assert_eq!(
        c.guest_prepare_call(&p, "secret_tool", None)
            .unwrap_err()
            .message,
        "Unknown catalog function: secret_tool."
    );
    let qi = c.quick_index(&p);
    assert!(!qi.contains("secret"), "{qi}");
    assert!(qi.contains("- public_tool unknown -> ?"));
    let dir = c.directory();
    assert!(!dir.contains("secret"), "{dir}");
    assert!(dir.contains("public_tool"));
    assert!(c.api_read(&p, "tools/secret_tool.d.ts").is_err());
    assert!(c.api_read(&p, "mcp/hr.d.ts").is_err());
    assert_eq!(c.telemetry(&[]).catalog_size, 1);
    assert!(c.direct_only_names().next().is_none());

    // An allow list narrows the same way.
    let allow = Policy {
        allow: Some(vec!["public_*".into()]),
        deny: vec![],
    };
    let c = policy_catalog(allow);
    assert_eq!(c.entries().len(), 1);
    assert_eq!(search(&c, "secret payroll"), ["public_tool"]);

    // Search filters only narrow.
    let c = policy_catalog(Policy::allow_all());
    let allowed: HashSet<String> = ["host:core:public_tool".to_string()].into();
    let hits = c.search(
        "payroll",
        SearchOptions {
            allowed_ids: Some(&allowed),
            ..SearchOptions::default()
        },
    );
    assert_eq!(names(&hits), ["public_tool"]);
    let no_mcp = c.search(
        "payroll",
        SearchOptions {
            include_mcp: false,
            ..SearchOptions::default()
        },
    );
    assert!(no_mcp.iter().all(|e| e.kind() != SourceKind::Mcp));
    assert!(search(&c, "payroll").contains(&"payroll_export".to_string()));
}

#[test]
fn policy_change_after_indexing_fails_at_call_time() {
    let mut c = policy_catalog(Policy::allow_all());
    let p = c.callable_projection();
    let scope = c.counter_scope().to_string();
    c.set_policy(Policy {
        allow: None,
        deny: vec!["public_tool".into()],
    });
    assert_eq!(c.counter_scope(), scope, "shrinking keeps counterScope");
    // The handle computed before the change now rejects.
    assert_eq!(
        c.guest_prepare_call(&p, "public_tool", None)
            .unwrap_err()
            .message,
        "Unknown catalog function: public_tool."
    );
    assert!(c.tool_call_prepare(&json!({"id": "public_tool"})).is_err());
}

#[test]
fn direct_only_tools_are_not_cataloged() {
    let c = policy_catalog(Policy::allow_all());
    assert!(!search(&c, "direct_secret").contains(&"direct_secret".to_string()));
    assert!(c.callable_projection().resolve("direct_secret").is_none());
    assert!(!c.directory().contains("direct_secret"));
    let e = c
        .tool_call_prepare(&json!({"id": "direct_secret"}))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::DirectOnly);
    assert!(
        e.message.contains("Call it directly by its declared name"),
        "{}",
        e.message
    );
    assert!(c
        .describe("direct_secret")
        .unwrap_err()
        .message
        .contains("Call it directly by its declared name"));
    let e = c.tool_call_prepare(&json!({"id": "nope"})).unwrap_err();
    assert!(e.message.contains("Use tool_search"));
    // Every deferred tool made direct → the directory says none.
    let c = Catalog::builder()
        .core(ToolSpec::new("a", "x").direct_only())
        .core(ToolSpec::new("b", "y").direct_only())
        .mcp("s", ToolSpec::new("m", "mcp"))
        .client(ToolSpec::new("c", "client"))
        .build();
    assert_eq!(c.directory(), "Available deferred-schema tools: none.");
}
