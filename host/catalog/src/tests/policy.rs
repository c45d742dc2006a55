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
        approve: vec![],
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
        approve: vec![],
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
        approve: vec![],
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

/// MCP tools are matched as `<server>.<tool>` (the configured server name,
/// the original tool name), not by their bare name; host tools by name.
/// `approve` keeps a tool visible and names the pattern its calls need.
#[test]
fn mcp_tools_match_as_server_dot_tool_and_approve_keeps_tools_visible() {
    let catalog = |policy: Policy| {
        Catalog::builder()
            .core(ToolSpec::new("read", "Read a file"))
            .mcp("fs", ToolSpec::new("read", "Read a file on the server"))
            .mcp(
                "fs",
                ToolSpec::new("write_file", "Write a file on the server"),
            )
            .policy(policy)
            .build()
    };
    let ids =
        |c: &Catalog| -> Vec<String> { c.entries().iter().map(|e| e.id().to_string()).collect() };
    let c = catalog(Policy {
        deny: vec!["fs.write*".into()],
        ..Policy::default()
    });
    assert_eq!(ids(&c), ["host:core:read", "mcp:fs:read"]);
    let c = catalog(Policy {
        deny: vec!["read".into()],
        ..Policy::default()
    });
    assert_eq!(
        ids(&c),
        ["mcp:fs:read", "mcp:fs:write_file"],
        "a bare name is the host tool's"
    );
    let c = catalog(Policy {
        allow: Some(vec!["fs.*".into()]),
        ..Policy::default()
    });
    assert_eq!(ids(&c), ["mcp:fs:read", "mcp:fs:write_file"]);
    let policy = Policy {
        approve: vec!["fs.write*".into()],
        ..Policy::default()
    };
    let c = catalog(policy.clone());
    assert_eq!(c.entries().len(), 3, "approve hides nothing");
    let entry = c.get("mcp:fs:write_file").unwrap();
    assert_eq!(
        policy.needs_approval(entry.source(), entry.name(), entry.id()),
        Some("fs.write*")
    );
    let entry = c.get("mcp:fs:read").unwrap();
    assert_eq!(
        policy.needs_approval(entry.source(), entry.name(), entry.id()),
        None
    );
}

/// Obeyed: lists at the caps pass the check. Violated: one pattern more,
/// or one byte longer, is refused naming the list.
#[test]
fn policy_lists_are_capped() {
    let at_cap = Policy {
        deny: vec!["x".repeat(MAX_POLICY_PATTERN_BYTES); MAX_POLICY_PATTERNS],
        ..Policy::default()
    };
    assert!(at_cap.check().is_ok());
    let too_many = Policy {
        approve: vec!["x".into(); MAX_POLICY_PATTERNS + 1],
        ..Policy::default()
    };
    assert!(too_many
        .check()
        .unwrap_err()
        .starts_with("policy.approve has 257 patterns"));
    let too_long = Policy {
        allow: Some(vec!["x".repeat(MAX_POLICY_PATTERN_BYTES + 1)]),
        ..Policy::default()
    };
    assert!(too_long
        .check()
        .unwrap_err()
        .contains("policy.allow pattern is 257 bytes"));
}
