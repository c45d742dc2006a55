//! Code Mode: `catalog.search` shortcut and handle metadata, `describe`,
//! `MCP.<server>.$api`, `API.read`.

use crate::*;
use serde_json::json;

#[test]
fn guest_search_exact_shortcut_and_meta() {
    let c = Catalog::builder()
        .core(
            ToolSpec::new("llm-task", "Run an LLM task")
                .with_output_schema(json!({"type":"string"})),
        )
        .mcp(
            "Linear",
            ToolSpec::new("list-issues", "List issues in Linear"),
        )
        .mcp(
            "Linear",
            ToolSpec::new("create_issue", "Create an issue in Linear"),
        )
        .client(ToolSpec::new("notify", "Notify someone"))
        .limits(SearchLimits {
            default_limit: 8,
            max_limit: 50,
        })
        .build();
    let p = c.callable_projection();
    let r = c.guest_search(&p, "MCP.linear.listIssues", None);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].tool_name, "list-issues");
    assert_eq!(r[0].api_path.as_deref(), Some("mcp/linear.d.ts"));
    assert_eq!(r[0].input, None);
    assert_eq!(
        c.guest_search(&p, "mcp.LINEAR.listissues", None)[0].tool_name,
        "list-issues"
    );
    // Native callable name and original tool name both shortcut.
    assert_eq!(
        c.guest_search(&p, "llm_task", None)[0].tool_name,
        "llm-task"
    );
    assert_eq!(
        c.guest_search(&p, "LLM-TASK", None)[0].callable_name,
        "llm_task"
    );
    let v = serde_json::to_value(&c.guest_search(&p, "llm_task", None)[0]).unwrap();
    assert_eq!(
        v,
        json!({"callableName":"llm_task","toolName":"llm-task","label":"llm-task",
            "description":"Run an LLM task","source":"host","apiPath":"tools/llm_task.d.ts",
            "input":"unknown","output":"string"})
    );
    // BM25 over native and MCP together.
    let r = c.guest_search(&p, "issues", Some(&json!(50)));
    assert!(r
        .iter()
        .any(|m| m.callable_name == "MCP.linear.createIssue"));
    // all(): native and client only.
    let all: Vec<String> = c
        .guest_all(&p)
        .into_iter()
        .map(|m| m.callable_name)
        .collect();
    assert_eq!(all, ["llm_task", "notify"]);
    // describe() of a host tool omits toolName and carries parameters.
    let d = c.guest_describe(&p, "llm_task").unwrap();
    assert_eq!(d["name"], "llm-task");
    assert!(d.get("toolName").is_none());
    assert_eq!(d["parameters"], json!({"type":"object"}));
    assert_eq!(d["outputSchema"], json!({"type":"string"}));
    let d = c.guest_describe(&p, "MCP.linear.createIssue").unwrap();
    assert_eq!(d["kind"], "mcp_api");
    // $api: identifier beats colliding original names.
    let api = c.mcp_api("linear", Some("createIssue"), true).unwrap();
    assert_eq!(api["tools"][0]["toolName"], "create_issue");
    assert!(api["schemas"].get("createIssue").is_some());
    let api = c.mcp_api("linear", None, false).unwrap();
    assert_eq!(api["tools"].as_array().unwrap().len(), 2);
    assert!(api.get("schemas").is_none());
}

#[test]
fn api_read_files() {
    let c = Catalog::builder()
        .core(
            ToolSpec::new("web_search", "Search the web */ sneaky")
                .with_input_schema(
                    json!({"type":"object","required":["q"],"properties":{"q":{"type":"string"}}}),
                )
                .with_output_schema(json!({"type":"array","items":{"type":"string"}})),
        )
        .mcp("Linear", ToolSpec::new("list-issues", "List issues"))
        .build();
    let p = c.callable_projection();
    let t = c.api_read(&p, "tools/web_search.d.ts").unwrap();
    assert!(
        t.contains("declare function web_search(input?: { q: string }): Promise<Array<string>>;"),
        "{t}"
    );
    assert!(!t.contains("*/ sneaky"));
    let m = c.api_read(&p, "mcp/linear.d.ts").unwrap();
    assert!(m.contains("declare namespace MCP.linear {"), "{m}");
    assert!(m.contains("function listIssues(args: Record<string, unknown>): Promise<McpResult>;"));
    assert_eq!(c.api_read(&p, "results.d.ts").unwrap(), RESULTS_DTS);
    for bad in [
        "tools/../results.d.ts",
        "./results.d.ts",
        "mcp/./linear.d.ts",
        "..",
    ] {
        let e = c.api_read(&p, bad).unwrap_err();
        assert_eq!(e.message, "invalid API file path", "{bad}");
    }
    for unknown in ["tools/nope.d.ts", "mcp/other.d.ts", "secrets.txt", ""] {
        let e = c.api_read(&p, unknown).unwrap_err();
        assert_eq!(e.message, format!("Unknown API file: {unknown}"));
    }
    assert_eq!(
        c.api_files(&p),
        ["mcp/linear.d.ts", "results.d.ts", "tools/web_search.d.ts"]
    );
}
