//! Downstream MCP servers as tools: a real server written with the Python
//! `mcp` SDK (`fixtures/mcp/server.py`, installed into `.venv-mcp` by
//! `scripts/setup-tests`), reached over stdio and streamable HTTP.

use crate::mcp::{python, HttpServer};
use crate::{json, value};
use quickcell::{CellResult, ExecInput, Limits, McpServerConfig, Runtime, WaitInput};
use serde_json::json;
use std::process::Command;

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp/server.py");

/// The fixture server over stdio, as `[mcp.servers.<name>]`.
fn accounting(name: &str) -> McpServerConfig {
    McpServerConfig::stdio(name, python(), &[SERVER])
}

async fn runtime_with(servers: Vec<McpServerConfig>, limits: Limits) -> Runtime {
    Runtime::builder()
        .limits(limits)
        .mcp_servers(servers)
        .build()
        .await
        .expect("runtime builds")
}

async fn exec(rt: &Runtime, code: &str) -> CellResult {
    rt.exec(ExecInput::new("mcp cell", code)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_tools_are_listed_searched_described_and_called() {
    let rt = runtime_with(vec![accounting("accounting")], Limits::default()).await;
    let r = exec(
        &rt,
        r#"
        const hits = await catalog.search("open invoices of a customer");
        const h = hits.find((x) => x.source === "mcp");
        const d = await h.describe();
        const direct = await MCP.accounting.listInvoices({ customer: "acme" });
        const viaHandle = await h({ customer: "bolt" });
        const exact = await catalog.search("MCP.accounting.echo");
        const echoed = await MCP.accounting.echo({ message: "hi there" });
        const failedCall = await MCP.accounting.fail({});
        const api = await MCP.accounting.$api("listInvoices", { schema: true });
        const file = await API.read(h.apiPath);
        let typeError = null;
        try { await MCP.accounting.echo("not an object"); } catch (e) { typeError = e.name + ": " + e.message; }
        return {
          meta: h, describeKind: d.kind, describeServer: d.server, describeSchema: d.schemas.listInvoices,
          structured: direct.structuredContent, viaHandle: viaHandle.structuredContent.invoices[0].customer,
          exact: exact.map((x) => x.callableName), echoed: echoed.content, failedIsError: failedCall.isError,
          apiKeys: Object.keys(api.schemas), fileMentions: file.includes("function listInvoices("),
          all: catalog.all().length, methods: Object.keys(MCP.accounting).sort(),
          namespacesMcp: namespaces.MCP === MCP, typeError,
        };
        "#,
    )
    .await;
    let v = value(&r);
    assert_eq!(
        v["meta"],
        json!({
            "callableName": "MCP.accounting.listInvoices",
            "toolName": "list-invoices",
            "label": "list-invoices",
            "description": "List the open invoices of a customer, with amounts in cents.",
            "source": "mcp",
            "apiPath": "mcp/accounting.d.ts",
        }),
        "MCP handles carry no input or output hint: {v}"
    );
    assert_eq!(v["describeKind"], "mcp_api");
    assert_eq!(v["describeServer"]["identifier"], "accounting");
    assert_eq!(v["describeSchema"]["required"], json!(["customer"]));
    assert_eq!(v["structured"]["total"], 15050);
    assert_eq!(v["structured"]["invoices"][0]["customer"], "acme");
    assert_eq!(v["viaHandle"], "bolt");
    assert_eq!(v["exact"], json!(["MCP.accounting.echo"]));
    assert_eq!(v["echoed"], json!([{"type": "text", "text": "hi there"}]));
    assert_eq!(v["failedIsError"], true, "a tool error keeps the MCP shape");
    assert_eq!(v["apiKeys"], json!(["listInvoices"]));
    assert_eq!(v["fileMentions"], true);
    assert_eq!(
        v["all"], 0,
        "catalog.all() lists native and client tools only"
    );
    assert_eq!(
        v["methods"],
        json!([
            "$api",
            "crash",
            "echo",
            "fail",
            "listInvoices",
            "pid",
            "slow"
        ])
    );
    assert_eq!(v["namespacesMcp"], true);
    assert_eq!(
        v["typeError"],
        "TypeError: MCP.accounting.echo takes one object argument"
    );
    let t = &json(&r)["telemetry"];
    assert_eq!(t["sources"]["mcp"], 6, "{t}");
    assert_eq!(t["callCount"], 4, "four MCP calls reached the server: {t}");
    assert!(json(&r).get("unavailableMcpServers").is_none());
    assert_eq!(
        r.untrusted_source(),
        Some("mcp"),
        "model-facing text gets wrapped"
    );
    // Every cell of a runtime with MCP tools is marked: the `MCP` namespace
    // (identifiers derived from untrusted tool names) reaches each of them.
    let plain = exec(&rt, "return Object.keys(MCP.accounting)").await;
    assert_eq!(plain.untrusted_source(), Some("mcp"));
    // Without untrusted providers nothing is marked.
    let trusted = crate::run("return 1 + 1").await;
    assert_eq!(trusted.untrusted_source(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_safe_cells_cannot_call_mcp_tools() {
    let rt = runtime_with(vec![accounting("accounting")], Limits::default()).await;
    let mut input = ExecInput::new(
        "restart-safe",
        r#"try { await MCP.accounting.pid({}); return "called"; } catch (e) { return e.message; }"#,
    );
    input.restart_safe = true;
    let r = rt.exec(input).await;
    assert_eq!(
        value(&r),
        json!("restart-safe code mode cannot call namespace tools.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_down_at_start_is_reported_on_every_result() {
    let rt = runtime_with(
        vec![
            accounting("accounting"),
            McpServerConfig::stdio("ghost", "/nonexistent/mcp-server", &[]),
            McpServerConfig::stdio("quitter", "/bin/sh", &["-c", "echo bye >&2; exit 1"]),
        ],
        Limits::default(),
    )
    .await;
    // A cell that does not use the missing servers runs normally, and so
    // does one that uses the server that is up.
    let r = exec(
        &rt,
        r#"const r = await MCP.accounting.echo({ message: "up" }); return [r.content[0].text, typeof MCP.ghost];"#,
    )
    .await;
    assert_eq!(value(&r), json!(["up", "undefined"]));
    let j = json(&r);
    assert_eq!(j["unavailableMcpServers"], json!(["ghost", "quitter"]));
    assert_eq!(
        r.untrusted_source(),
        Some("mcp"),
        "the note quotes server output"
    );
    let note = j["note"].as_str().unwrap();
    assert!(
        note.contains("`ghost`") && note.contains("cannot start"),
        "{note}"
    );
    assert!(
        note.contains("`quitter`") && note.contains("bye"),
        "stderr tail in the note: {note}"
    );
    // Failed results carry it too.
    let f = exec(&rt, "throw new Error('x')").await;
    assert_eq!(
        json(&f)["unavailableMcpServers"],
        json!(["ghost", "quitter"])
    );
    // And the catalog holds the tools of the server that is up only.
    assert_eq!(json(&f)["telemetry"]["sources"]["mcp"], 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_rejects_that_call_and_is_reconnected_on_next_use() {
    let rt = runtime_with(vec![accounting("accounting")], Limits::default()).await;
    let r = exec(
        &rt,
        r#"
        const before = (await MCP.accounting.pid({})).content[0].text;
        try { await MCP.accounting.crash({}); return "no error"; }
        catch (e) { return { before, message: e.message, code: e.code }; }
        "#,
    )
    .await;
    let v = value(&r);
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("MCP server `accounting` failed during `crash`")
            && message.contains("reconnected on next use"),
        "{message}"
    );
    assert!(
        message.contains("crashing on purpose"),
        "stderr tail: {message}"
    );
    assert_eq!(v["code"], "tool_error");
    assert_eq!(
        json(&r)["unavailableMcpServers"],
        json!(["accounting"]),
        "the broken connection is reported until it is reconnected"
    );
    let before = v["before"].as_str().unwrap().to_string();
    let r = exec(
        &rt,
        r#"return (await MCP.accounting.pid({})).content[0].text;"#,
    )
    .await;
    let after = value(&r);
    assert_ne!(after, json!(before), "a new server process answered");
    assert!(
        json(&r).get("unavailableMcpServers").is_none(),
        "{}",
        r.to_json()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_mcp_call_parks_the_cell_and_wait_finishes_it() {
    let rt = runtime_with(
        vec![accounting("accounting")],
        Limits::default().with_timeout_ms(600),
    )
    .await;
    let r = exec(
        &rt,
        r#"const r = await MCP.accounting.slow({ ms: 1500 }); return r.content[0].text;"#,
    )
    .await;
    let CellResult::Waiting(w) = &r else {
        panic!("expected waiting: {}", r.to_json())
    };
    assert_eq!(w.pending_tool_calls[0].method, "callValue");
    let mut result = rt.wait(WaitInput::new(&w.run_id)).await;
    for _ in 0..10 {
        let CellResult::Waiting(w) = &result else {
            break;
        };
        result = rt.wait(WaitInput::new(&w.run_id)).await;
    }
    assert_eq!(value(&result), json!("slept"));
    assert_eq!(
        result.untrusted_source(),
        Some("mcp"),
        "the mark survives parking"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_its_timeout_is_a_tool_error() {
    let rt = runtime_with(
        vec![accounting("accounting").with_timeout_ms(200)],
        Limits::default(),
    )
    .await;
    let r = exec(
        &rt,
        r#"try { await MCP.accounting.slow({ ms: 3000 }); } catch (e) { return e.message; }"#,
    )
    .await;
    assert_eq!(
        value(&r),
        json!("MCP server `accounting` did not answer `slow` within 200 ms")
    );
}

/// The fixture server over streamable HTTP on a free port.
fn http_fixture_server() -> HttpServer {
    HttpServer::spawn(|port| {
        let mut command = Command::new(python());
        command.args([SERVER, "--http", &port.to_string()]);
        command
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_server_is_called_like_a_stdio_one() {
    let server = http_fixture_server();
    let rt = runtime_with(
        vec![
            McpServerConfig::http("books", &server.url),
            McpServerConfig::http("offline", "http://127.0.0.1:9/mcp"),
        ],
        Limits::default(),
    )
    .await;
    let r = exec(
        &rt,
        r#"const r = await MCP.books.listInvoices({ customer: "http" }); return r.structuredContent.total;"#,
    )
    .await;
    assert_eq!(value(&r), json!(15050));
    assert_eq!(json(&r)["unavailableMcpServers"], json!(["offline"]));
}

#[test]
fn quickcell_serve_exposes_a_downstream_server_to_a_real_mcp_client() {
    let config = config_with_accounting();
    let dir = config.parent().unwrap().to_path_buf();
    let steps = json!([
        {"op": "call_tool", "name": "exec", "args": {"title": "downstream", "code":
            "const r = await MCP.accounting.listInvoices({ customer: 'mcp client' }); return r.structuredContent.invoices.map((i) => i.customer);"}},
    ]);
    let out = crate::mcp::run(
        steps,
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--state-dir",
            dir.join("state").to_str().unwrap(),
        ],
    );
    let result = crate::mcp::result(&out[0]);
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["value"], json!(["mcp client", "mcp client"]));
    let text = out[0]["text"][0].as_str().unwrap();
    assert!(
        text.starts_with("<<<EXTERNAL_UNTRUSTED_CONTENT") && text.contains("SECURITY NOTICE:"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config file naming the fixture server over stdio, in a fresh directory.
fn config_with_accounting() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("quickcell-mcpc-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("quickcell.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp.servers.accounting]\ncommand = {:?}\nargs = [{:?}]\n",
            python(),
            SERVER
        ),
    )
    .unwrap();
    config
}

#[test]
fn serve_mode_tools_offers_search_describe_and_call_over_the_same_catalog() {
    let config = config_with_accounting();
    let steps = json!([
        {"op": "list_tools"},
        {"op": "call_tool", "name": "tool_search", "args": {"query": "open invoices customer"}},
        {"op": "call_tool", "name": "tool_describe", "args": {"id": "mcp:accounting:list-invoices"}},
        {"op": "call_tool", "name": "tool_call", "args": {"id": "mcp:accounting:list-invoices", "arguments": {"customer": "tools mode"}}},
        {"op": "call_tool", "name": "tool_call", "args": {"id": "read", "path": "Cargo.toml", "limit": 1}},
        {"op": "call_tool", "name": "tool_call", "args": {"id": "no_such_tool"}},
        {"op": "call_tool", "name": "exec", "args": {"title": "t", "code": "return 1"}},
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
            "--workspace",
            env!("CARGO_MANIFEST_DIR"),
        ],
    );
    let names: Vec<&str> = out[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tool_search", "tool_describe", "tool_call"]);

    let search = &out[1];
    let hits = &search["structuredContent"]["results"][0]["hits"];
    assert_eq!(hits[0]["id"], "mcp:accounting:list-invoices", "{search}");
    assert_eq!(hits[0]["source"], "mcp");
    let text = search["text"][0].as_str().unwrap();
    assert!(
        text.contains("EXTERNAL_UNTRUSTED_CONTENT") && text.contains("SECURITY NOTICE:"),
        "MCP metadata is wrapped as untrusted: {text}"
    );

    let describe = &out[2]["structuredContent"];
    assert_eq!(describe["kind"], "mcp_api", "{describe}");
    assert_eq!(
        describe["schemas"]["listInvoices"]["required"],
        json!(["customer"])
    );

    let call = &out[3];
    assert_eq!(call["isError"], false, "{call}");
    assert_eq!(
        call["structuredContent"]["structuredContent"]["total"],
        15050
    );
    assert!(call["text"][0]
        .as_str()
        .unwrap()
        .contains("EXTERNAL_UNTRUSTED_CONTENT"));

    // A host tool, its arguments flattened beside the id (repaired).
    let read = &out[4];
    assert_eq!(read["isError"], false, "{read}");
    assert!(
        !read["text"][0]
            .as_str()
            .unwrap()
            .contains("EXTERNAL_UNTRUSTED_CONTENT"),
        "trusted host results are not wrapped"
    );
    assert!(
        read["structuredContent"].to_string().contains("[package]")
            || read["structuredContent"]
                .to_string()
                .contains("[workspace]"),
        "{read}"
    );

    let unknown = &out[5];
    assert_eq!(unknown["isError"], true, "{unknown}");
    assert!(
        unknown["text"][0]
            .as_str()
            .unwrap()
            .contains("Use tool_search"),
        "{unknown}"
    );

    assert_eq!(
        out[6]["ok"], false,
        "exec is not offered in tools mode: {}",
        out[6]
    );
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

/// The per-server tool cap and the startup deadline, each obeyed and
/// violated: a server at the cap serves all its tools, one over it and one
/// that never answers the handshake are unavailable with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_cap_and_the_connect_deadline_are_enforced() {
    use quickcell::mcp::{McpTransport, MAX_MCP_TOOLS_PER_SERVER, MCP_CONNECT_TIMEOUT_MS};
    let with_extra = |name: &str, extra: usize| {
        let mut server = accounting(name);
        if let McpTransport::Stdio { env, .. } = &mut server.transport {
            env.insert("EXTRA_TOOLS".into(), extra.to_string());
        }
        server
    };
    // The fixture has 6 tools of its own.
    let at_cap = with_extra("atCap", MAX_MCP_TOOLS_PER_SERVER - 6);
    let over_cap = with_extra("overCap", MAX_MCP_TOOLS_PER_SERVER - 5);
    let silent = McpServerConfig::stdio("silent", "/bin/sleep", &["60"]);
    let rt = runtime_with(vec![at_cap, over_cap, silent], Limits::default()).await;
    let r = exec(&rt, "return (await MCP.atcap.extra993({})).content[0].text").await;
    assert_eq!(value(&r), json!("extra"));
    let j = json(&r);
    assert_eq!(j["telemetry"]["sources"]["mcp"], MAX_MCP_TOOLS_PER_SERVER);
    assert_eq!(j["unavailableMcpServers"], json!(["overCap", "silent"]));
    let note = j["note"].as_str().unwrap();
    assert!(
        note.contains(&format!(
            "it lists {} tools; at most {MAX_MCP_TOOLS_PER_SERVER}",
            MAX_MCP_TOOLS_PER_SERVER + 1
        )),
        "{note}"
    );
    assert!(
        note.contains(&format!("no answer within {MCP_CONNECT_TIMEOUT_MS} ms")),
        "{note}"
    );
    // A cell that does not touch the namespace does not pay for its 1,000
    // tools (the namespace is built on first access): a trivial cell stays
    // near its usual ~100k fuel (building all of it costs ~25M).
    let trivial = exec(&rt, "return 1").await;
    let fuel = trivial.telemetry().fuel_used;
    assert!(fuel < 500_000, "fuel {fuel}");
}
