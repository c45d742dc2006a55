//! `[policy]` / `RuntimeBuilder::policy` (operations.md §3.3): a tool
//! outside the policy is on no surface a cell or a model sees, and cannot be
//! called; an `approve` tool stays visible but, with no way to ask, each
//! call is denied.

use crate::bridge::t;
use quickcell::catalog::Policy;
use quickcell::{ExecInput, Runtime, ToolRegistry};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A runtime with `payroll_read` and `payroll_write` under `policy`; the
/// second value counts `payroll_write`'s executions.
async fn payroll(policy: Policy) -> (Runtime, Arc<AtomicUsize>) {
    let read = t("payroll_read", "Read payroll records");
    let write = t("payroll_write", "Write payroll records");
    let writes = write.calls.clone();
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(read)).unwrap();
    registry.add(Arc::new(write)).unwrap();
    let rt = Runtime::builder()
        .tools(registry)
        .policy(policy)
        .build()
        .await
        .unwrap();
    (rt, writes)
}

/// What a cell sees of `payroll_write`: catalog.all(), catalog.search, the
/// global, API.read of its declaration, and a call by its name.
const SURFACES: &str = r#"
    const all = (await catalog.all()).map((h) => h.callableName);
    const found = (await catalog.search("payroll write records", { limit: 10 })).map((h) => h.callableName);
    const exact = (await catalog.search("payroll_write")).map((h) => h.callableName);
    let api;
    try { api = typeof (await API.read("tools/payroll_write.d.ts")); } catch (e) { api = "refused"; }
    let call;
    try { await payroll_write({ value: "x" }); call = "ran"; } catch (e) { call = `${e.name}: ${e.message}`; }
    return { all, found, exact, global: typeof payroll_write, api, call };
"#;

async fn surfaces(rt: &Runtime) -> Value {
    crate::value(&rt.exec(ExecInput::new("surfaces", SURFACES)).await)
}

/// The tool is on none of the surfaces, and the call fails.
fn assert_hidden(rt: &Runtime, seen: &Value) {
    assert_eq!(seen["all"], json!(["payroll_read"]), "{seen}");
    assert_eq!(seen["found"], json!(["payroll_read"]), "{seen}");
    assert!(
        !seen["exact"].to_string().contains("payroll_write"),
        "{seen}"
    );
    assert_eq!(seen["global"], "undefined");
    assert_eq!(seen["api"], "refused");
    assert!(
        seen["call"].as_str().unwrap().starts_with("ReferenceError"),
        "{seen}"
    );
    // The model's surfaces: the quick index in exec's description, the
    // catalog behind Tool Search (describe, call by name, the directory).
    assert!(!rt.exec_description().contains("payroll_write"));
    assert!(rt.exec_description().contains("payroll_read"));
    assert!(rt.catalog().describe("payroll_write").is_err());
    assert!(rt
        .catalog()
        .tool_call_prepare(&json!({"id": "payroll_write", "arguments": {}}))
        .is_err());
    assert!(!rt.catalog().directory().contains("payroll_write"));
}

#[tokio::test]
async fn a_denied_tool_is_on_no_surface_and_cannot_be_called() {
    let (rt, writes) = payroll(Policy {
        deny: vec!["payroll_w*".into()],
        ..Policy::default()
    })
    .await;
    let seen = surfaces(&rt).await;
    assert_hidden(&rt, &seen);
    assert_eq!(writes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn only_allowed_tools_are_on_the_surfaces() {
    let (rt, writes) = payroll(Policy {
        allow: Some(vec!["payroll_read".into(), "no_such_tool".into()]),
        ..Policy::default()
    })
    .await;
    let seen = surfaces(&rt).await;
    assert_hidden(&rt, &seen);
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    // Deny wins over allow.
    let (rt, _) = payroll(Policy {
        allow: Some(vec!["payroll_*".into()]),
        deny: vec!["payroll_write".into()],
        ..Policy::default()
    })
    .await;
    assert_hidden(&rt, &surfaces(&rt).await);
}

/// Obeyed: without a policy both tools are everywhere and the call runs.
/// `approve`: the tool stays visible, but its call is denied with a
/// catchable `tool_error` naming the pattern (no way to ask a person), and
/// the tool never runs.
#[tokio::test]
async fn an_approve_tool_is_visible_and_its_call_is_denied_without_an_approver() {
    let (rt, writes) = payroll(Policy::default()).await;
    let seen = surfaces(&rt).await;
    assert_eq!(seen["all"], json!(["payroll_read", "payroll_write"]));
    assert_eq!(seen["call"], "ran");
    assert_eq!(writes.load(Ordering::SeqCst), 1);

    let (rt, writes) = payroll(Policy {
        approve: vec!["payroll_write".into()],
        ..Policy::default()
    })
    .await;
    let seen = surfaces(&rt).await;
    assert_eq!(seen["all"], json!(["payroll_read", "payroll_write"]));
    assert_eq!(seen["global"], "function");
    assert!(rt.exec_description().contains("payroll_write"));
    let code = r#"
        try { await payroll_write({ value: "x" }); return "ran"; }
        catch (e) { return { code: e.code, message: e.message }; }
    "#;
    let denied = crate::value(&rt.exec(ExecInput::new("approve", code)).await);
    assert_eq!(denied["code"], "tool_error", "{denied}");
    let message = denied["message"].as_str().unwrap();
    assert!(
        message.contains("needs an approval (policy approve = \"payroll_write\")")
            && message.contains("denied"),
        "{message}"
    );
    assert_eq!(writes.load(Ordering::SeqCst), 0, "the tool never ran");
}

/// A policy over the caps is refused when the runtime is built.
#[tokio::test]
async fn a_policy_over_its_caps_is_refused() {
    let Err(err) = Runtime::builder()
        .policy(Policy {
            deny: vec!["x".into(); quickcell::catalog::MAX_POLICY_PATTERNS + 1],
            ..Policy::default()
        })
        .build()
        .await
    else {
        panic!("a policy over its caps was accepted");
    };
    assert!(
        err.to_string().contains("policy.deny has 257 patterns"),
        "{err}"
    );
}

/// A scratch directory with a configuration serving this repository's
/// workspace tools under the `[policy]` lines `policy`.
fn workspace_config(policy: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("quickcell-policy-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("quickcell.toml");
    let text = format!(
        "[workspace]\nroot = {:?}\n[policy]\n{policy}\n",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::write(&config, text).unwrap();
    (dir, config)
}

/// `[policy]` in the configuration reaches `quickcell tools` (and every
/// command that builds a runtime).
#[test]
fn the_config_policy_reaches_the_cli() {
    let (dir, config) = workspace_config("deny = [\"gr*\"]");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"))
            .args(args)
            .args(["--config", config.to_str().unwrap()])
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let out = run(&["tools"]);
    let directory = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        directory.contains("read") && !directory.contains("grep"),
        "{directory}"
    );
    let out = run(&["exec", "--code", "return [typeof read, typeof grep]"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], json!(["function", "undefined"]), "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Tool Search (`serve --mode tools`, driven by the Python MCP SDK) obeys
/// the policy too: a denied tool is not found and cannot be called, an
/// `approve` tool's call is denied naming the pattern, others run.
#[test]
fn tool_search_mode_obeys_the_policy() {
    let (dir, config) = workspace_config("deny = [\"grep\"]\napprove = [\"read\"]");
    let steps = json!([
        {"op": "call_tool", "name": "tool_search", "args": {"query": "search file contents for a pattern", "limit": 10}},
        {"op": "call_tool", "name": "tool_call", "args": {"id": "grep", "pattern": "x"}},
        {"op": "call_tool", "name": "tool_call", "args": {"id": "read", "path": "Cargo.toml", "limit": 1}},
        {"op": "call_tool", "name": "tool_call", "args": {"id": "ls", "path": "."}},
    ]);
    let out = crate::mcp::run(
        steps,
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--mode",
            "tools",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    let hits = out[0]["structuredContent"]["results"][0]["hits"].to_string();
    assert!(!hits.contains("\"grep\""), "{hits}");
    assert_eq!(out[1]["isError"], true, "{}", out[1]);
    assert!(
        out[1]["text"][0]
            .as_str()
            .unwrap()
            .contains("Use tool_search"),
        "{}",
        out[1]
    );
    assert_eq!(out[2]["isError"], true, "{}", out[2]);
    assert!(
        out[2]["text"][0]
            .as_str()
            .unwrap()
            .contains("needs an approval (policy approve = \"read\")"),
        "{}",
        out[2]
    );
    assert_eq!(out[3]["isError"], false, "{}", out[3]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A client tool that shadows a host tool of the same name, denied by the
/// policy: the host tool is what cells see, and calls reach the host tool,
/// never the denied client tool.
#[tokio::test]
async fn a_denied_client_tool_does_not_take_over_the_host_tool_it_shadows() {
    let host = t("lookup", "Look a record up");
    let client = t("lookup", "Look a record up (client)");
    let (host_calls, client_calls) = (host.calls.clone(), client.calls.clone());
    let mut registry = ToolRegistry::new();
    registry.add(Arc::new(host)).unwrap();
    registry.add_client(Arc::new(client)).unwrap();
    let rt = Runtime::builder()
        .tools(registry)
        .policy(Policy {
            deny: vec!["client:*".into()],
            ..Policy::default()
        })
        .build()
        .await
        .unwrap();
    let r = rt
        .exec(ExecInput::new("lookup", "return (await lookup({})).name"))
        .await;
    assert_eq!(crate::value(&r), json!("lookup"));
    assert_eq!(host_calls.load(Ordering::SeqCst), 1);
    assert_eq!(client_calls.load(Ordering::SeqCst), 0);
}

/// A call's own policy narrows the runtime's for that cell alone: the tool
/// it denies is on none of the cell's surfaces, other cells see it, and it
/// cannot widen what the runtime denies.
#[tokio::test]
async fn a_calls_policy_narrows_the_runtimes_for_its_cell() {
    let (rt, writes) = payroll(Policy::default()).await;
    let deny_write = Policy {
        deny: vec!["payroll_write".into()],
        ..Policy::default()
    };
    let seen = crate::value(
        &rt.exec(ExecInput::new("surfaces", SURFACES).with_policy(deny_write))
            .await,
    );
    assert_eq!(seen["all"], json!(["payroll_read"]), "{seen}");
    assert_eq!(seen["found"], json!(["payroll_read"]), "{seen}");
    assert_eq!(seen["global"], "undefined");
    assert_eq!(seen["api"], "refused");
    assert!(
        seen["call"].as_str().unwrap().starts_with("ReferenceError"),
        "{seen}"
    );
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    // Another cell of the runtime sees it.
    assert_eq!(surfaces(&rt).await["call"], "ran");
    // The runtime's deny wins over a call's allow.
    let (rt, _) = payroll(Policy {
        deny: vec!["payroll_write".into()],
        ..Policy::default()
    })
    .await;
    let seen = crate::value(
        &rt.exec(ExecInput::new("surfaces", SURFACES).with_policy(Policy {
            allow: Some(vec!["payroll_*".into()]),
            ..Policy::default()
        }))
        .await,
    );
    assert_eq!(seen["all"], json!(["payroll_read"]), "{seen}");
}

/// A parked cell resumed under a policy that denies a tool it was going to
/// call gets `Permission change interrupted this Code Mode program` from
/// that call: catchable, and `aborted` when not caught.
#[tokio::test]
async fn a_permission_change_interrupts_a_resumed_cell() {
    let (rt, writes) = payroll(Policy::default()).await;
    let deny_write = || Policy {
        deny: vec!["payroll_write".into()],
        ..Policy::default()
    };
    let park = |code: &str| ExecInput::new("park", format!("await yield_control(); {code}"));
    let r = rt
        .exec(park("return await payroll_write({value: 1})"))
        .await;
    let id = crate::waiting(&r).run_id.clone();
    let r = rt
        .wait(quickcell::WaitInput::new(id).with_policy(deny_write()))
        .await;
    let f = crate::failed(&r);
    assert_eq!(f.code, quickcell::ErrorCode::Aborted, "{}", f.error);
    assert!(
        f.error
            .contains("Permission change interrupted this Code Mode program"),
        "{}",
        f.error
    );
    let r = rt
        .exec(park(
            "try { await payroll_write({value: 1}) } catch (e) { return e.message }",
        ))
        .await;
    let id = crate::waiting(&r).run_id.clone();
    let r = rt
        .wait(quickcell::WaitInput::new(id).with_policy(deny_write()))
        .await;
    assert_eq!(
        crate::value(&r),
        json!("Permission change interrupted this Code Mode program")
    );
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    // Under the same policy at exec and wait nothing changed: the tool was
    // never there, and the call is an ordinary ReferenceError.
    let r = rt
        .exec(park("return await payroll_write({value: 1})").with_policy(deny_write()))
        .await;
    let id = crate::waiting(&r).run_id.clone();
    let r = rt
        .wait(quickcell::WaitInput::new(id).with_policy(deny_write()))
        .await;
    let f = crate::failed(&r);
    assert_eq!(f.code, quickcell::ErrorCode::InternalError);
    assert!(f.error.starts_with("ReferenceError"), "{}", f.error);
}
