//! Per-cell client tools (operations.md §3.5): `clientTools` on `exec`, the
//! `client_tools` park, and `wait {toolResults}` — in the library, across a
//! restart through the CLI, and over MCP with the Python SDK.

use crate::{failed, json, value, waiting};
use quickcell::{
    ClientToolResult, ClientToolSpec, Config, ErrorCode, ExecInput, Limits, Runtime, ToolRegistry,
    WaitInput, WaitReason,
};
use serde_json::{json, Value};

fn ask_user() -> ClientToolSpec {
    ClientToolSpec::new(
        "ask_user",
        "Ask the user a question",
        json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    )
}

/// The `pendingToolCalls` of a waiting result, as the caller sees them.
fn pending(result: &quickcell::CellResult) -> Value {
    json(result)["pendingToolCalls"].clone()
}

/// A client tool called twice in a row parks the cell for each call; the
/// answers resolve the calls in turn, and the cell sees them as values.
/// Calls made together park together.
#[tokio::test]
async fn a_client_tool_called_several_times_parks_for_each_answer() {
    let rt = crate::runtime(Limits::default()).await;
    let r = rt
        .exec(
            ExecInput::new(
                "ask",
                "const a = await ask_user({q: 'one'}); const b = await ask_user({q: 'two'}); return [a, b]",
            )
            .with_client_tools(vec![ask_user()]),
        )
        .await;
    let w = waiting(&r);
    assert_eq!(w.reason, WaitReason::ClientTools);
    assert_eq!(json(&r)["reason"], "client_tools");
    assert_eq!(
        pending(&r),
        json!([{"id": "bridge:clientTool:1", "method": "clientTool", "tool": "ask_user", "input": {"q": "one"}}])
    );
    let id = w.run_id.clone();
    let r = rt
        .wait(
            WaitInput::new(&id).with_tool_results(vec![ClientToolResult::value(
                "bridge:clientTool:1",
                json!("first"),
            )]),
        )
        .await;
    assert_eq!(waiting(&r).run_id, id);
    assert_eq!(pending(&r)[0]["input"], json!({"q": "two"}));
    let second = pending(&r)[0]["id"].as_str().unwrap().to_string();
    let r = rt
        .wait(
            WaitInput::new(&id)
                .with_tool_results(vec![ClientToolResult::value(second, json!({"n": 2}))]),
        )
        .await;
    assert_eq!(value(&r), json!(["first", {"n": 2}]));

    let r = rt
        .exec(
            ExecInput::new(
                "all",
                "return await Promise.all([1, 2, 3].map((n) => ask_user({q: String(n)})))",
            )
            .with_client_tools(vec![ask_user()]),
        )
        .await;
    let calls = pending(&r);
    assert_eq!(calls.as_array().unwrap().len(), 3, "{calls}");
    let answers = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| ClientToolResult::value(c["id"].as_str().unwrap(), c["input"]["q"].clone()))
        .collect();
    let r = rt
        .wait(WaitInput::new(&waiting(&r).run_id).with_tool_results(answers))
        .await;
    assert_eq!(value(&r), json!(["1", "2", "3"]));
}

/// An error answer rejects the guest's call with a catchable `tool_error`.
#[tokio::test]
async fn an_error_answer_rejects_the_call() {
    let rt = crate::runtime(Limits::default()).await;
    let r = rt
        .exec_json(&json!({
            "title": "ask",
            "code": "try { return await ask_user({q: 'x'}) } catch (e) { return {name: e.name, code: e.code, message: e.message} }",
            "clientTools": [{"name": "ask_user", "description": "Ask", "inputSchema": {"type": "object"}}],
        }))
        .await;
    let id = waiting(&r).run_id.clone();
    let r = rt
        .wait_json(&json!({"runId": id, "toolResults": [{"id": "bridge:clientTool:1", "error": "the user is away"}]}))
        .await;
    let v = value(&r);
    assert_eq!(v["code"], "tool_error", "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("the user is away"),
        "{v}"
    );
}

/// Unknown and repeated ids are `invalid_input` and change nothing: the
/// run stays parked and a right answer still resumes it; an id answered
/// once cannot be answered again.
#[tokio::test]
async fn unknown_and_repeated_ids_change_nothing() {
    let rt = crate::runtime(Limits::default()).await;
    let r = rt
        .exec(
            ExecInput::new(
                "ask",
                "const a = await ask_user({}); const b = await ask_user({}); return [a, b]",
            )
            .with_client_tools(vec![ask_user()]),
        )
        .await;
    let id = waiting(&r).run_id.clone();
    let answer = |call: &str, v: Value| ClientToolResult::value(call, v);
    for (results, error) in [
        (
            vec![answer("bridge:clientTool:9", json!(1))],
            "toolResults[0].id `bridge:clientTool:9` is not a client tool call this run waits on (answered already, or never made). Nothing was answered.",
        ),
        (
            vec![answer("bridge:clientTool:1", json!(1)), answer("nope", json!(2))],
            "toolResults[1].id `nope` is not a client tool call this run waits on (answered already, or never made). Nothing was answered.",
        ),
        (
            vec![answer("bridge:clientTool:1", json!(1)), answer("bridge:clientTool:1", json!(2))],
            "toolResults answers `bridge:clientTool:1` twice; answer each call once.",
        ),
    ] {
        let r = rt.wait(WaitInput::new(&id).with_tool_results(results)).await;
        let f = failed(&r);
        assert_eq!((f.code, f.error.as_str()), (ErrorCode::InvalidInput, error));
    }
    // Intact: the first answer is taken.
    let r = rt
        .wait(
            WaitInput::new(&id).with_tool_results(vec![answer("bridge:clientTool:1", json!("a"))]),
        )
        .await;
    let second = pending(&r)[0]["id"].as_str().unwrap().to_string();
    assert_ne!(second, "bridge:clientTool:1");
    // Answered once: not again.
    let r = rt
        .wait(
            WaitInput::new(&id)
                .with_tool_results(vec![answer("bridge:clientTool:1", json!("again"))]),
        )
        .await;
    assert_eq!(failed(&r).code, ErrorCode::InvalidInput);
    let r = rt
        .wait(WaitInput::new(&id).with_tool_results(vec![answer(&second, json!("b"))]))
        .await;
    assert_eq!(value(&r), json!(["a", "b"]));
}

/// A client tool shadows the host tool of the same name: the call goes to
/// the caller, the host tool never runs, and the catalog lists the client
/// tool. Client tools are never replay-safe: a `restartSafe` cell cannot
/// call one. Another cell of the runtime sees the host tool again.
#[tokio::test]
async fn a_client_tool_shadows_a_host_tool_and_is_never_replay_safe() {
    let dir = std::env::temp_dir().join(format!("quickcell-client-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let runs = dir.join("runs");
    let config = Config::parse(&format!(
        "[[tools]]\nname = \"lookup\"\ndescription = \"Host lookup\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"0\"]\n",
        concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools/nap.sh"),
        runs.display().to_string()
    ))
    .unwrap();
    let rt = Runtime::builder()
        .tools(ToolRegistry::from_config(&config).unwrap())
        .build()
        .await
        .unwrap();
    let lookup = ClientToolSpec::new("lookup", "Client lookup", json!({"type": "object"}));
    let r = rt
        .exec(
            ExecInput::new(
                "shadow",
                "text(JSON.stringify(catalog.all().map((t) => [t.name, t.source]))); return await lookup({k: 1})",
            )
            .with_client_tools(vec![lookup.clone()]),
        )
        .await;
    assert_eq!(waiting(&r).reason, WaitReason::ClientTools);
    assert_eq!(crate::texts(&r), [r#"[["lookup","client"]]"#]);
    let id = waiting(&r).run_id.clone();
    let r = rt
        .wait(
            WaitInput::new(id).with_tool_results(vec![ClientToolResult::value(
                "bridge:clientTool:1",
                json!("from the caller"),
            )]),
        )
        .await;
    assert_eq!(value(&r), json!("from the caller"));
    assert!(!runs.exists(), "the host tool ran");

    let mut restart_safe =
        ExecInput::new("safe", "return await lookup({})").with_client_tools(vec![lookup]);
    restart_safe.restart_safe = true;
    let r = rt.exec(restart_safe).await;
    assert!(
        failed(&r).error.contains("not proven replay-safe"),
        "{}",
        failed(&r).error
    );
    let r = rt
        .exec(ExecInput::new("host", "return await lookup({k: 2})"))
        .await;
    assert_eq!(value(&r), json!({"napped": {"k": 2}}));
    std::fs::remove_dir_all(&dir).ok();
}

/// A client tool call's arguments are handed to the caller, so they are
/// capped: 64 KiB passes, more rejects that call (catchably) with
/// `invalid_input`.
#[tokio::test]
async fn a_client_tool_calls_arguments_are_capped() {
    let rt = crate::runtime(Limits::default()).await;
    let code = |n: usize| {
        // `{"q":"…"}` is 8 bytes around the text.
        format!(
            "try {{ await ask_user({{q: 'x'.repeat({n})}}); return 'parked' }} catch (e) {{ return [e.code, e.message] }}"
        )
    };
    let r = rt
        .exec(
            ExecInput::new("big", code(quickcell::MAX_CLIENT_TOOL_INPUT_BYTES - 8))
                .with_client_tools(vec![ask_user()]),
        )
        .await;
    assert_eq!(waiting(&r).reason, WaitReason::ClientTools);
    let r = rt
        .exec(
            ExecInput::new("bigger", code(quickcell::MAX_CLIENT_TOOL_INPUT_BYTES - 7))
                .with_client_tools(vec![ask_user()]),
        )
        .await;
    let v = value(&r);
    assert_eq!(v[0], "invalid_input", "{v}");
    assert!(v[1].as_str().unwrap().contains("at most 65536"), "{v}");
}

/// Declarations are checked before anything runs: a bad one is
/// `invalid_input` naming the entry.
#[tokio::test]
async fn bad_declarations_are_refused_before_the_cell_runs() {
    let rt = crate::runtime(Limits::default()).await;
    let r = rt
        .exec_json(&json!({"title": "t", "code": "text('ran')", "clientTools": [{"name": "a b"}]}))
        .await;
    let f = failed(&r);
    assert_eq!(f.code, ErrorCode::InvalidInput);
    assert!(
        f.error
            .starts_with("clientTools[0].name `a b` is not a JavaScript identifier"),
        "{}",
        f.error
    );
    assert!(f.output.is_empty());
    let r = rt
        .exec(ExecInput::new("t", "return 1").with_client_tools(vec![ask_user(), ask_user()]))
        .await;
    assert_eq!(failed(&r).error, "clientTools declares `ask_user` twice.");
}

/// Through the CLI, in separate processes sharing a state directory: `exec
/// --input` declares the tool and parks; `wait --input` in a new process
/// answers it (the cell's declared tools come back with its snapshot).
#[test]
fn a_client_tool_call_is_answered_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("quickcell-client-cli-{}", uuid::Uuid::new_v4()));
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let run = |args: &[&str]| {
        let (status, v, _) = crate::quickcell(args);
        (status, v)
    };
    let input = json!({
        "title": "ask",
        "code": "const n = await ask_user({q: 'n?'}); return n * 2",
        "clientTools": [{"name": "ask_user", "description": "Ask the user a question", "inputSchema": {"type": "object"}}],
    });
    let (status, v) = run(&["exec", "--state-dir", state, "--input", &input.to_string()]);
    assert_eq!(status, 3, "{v}");
    assert_eq!(v["reason"], "client_tools");
    assert_eq!(v["pendingToolCalls"][0]["input"], json!({"q": "n?"}));
    let id = v["runId"].as_str().unwrap();
    let answer = json!({"runId": id, "toolResults": [{"id": "bridge:clientTool:1", "value": 21}]});
    let (status, v) = run(&["wait", "--state-dir", state, "--input", &answer.to_string()]);
    assert_eq!((status, v["value"].clone()), (0, json!(42)), "{v}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Over MCP (stdio, the Python SDK): `exec` with `clientTools`, then
/// `wait` with `toolResults`; the tool's text reaches the model inside the
/// untrusted-content envelope.
#[test]
fn client_tools_over_mcp() {
    let state = std::env::temp_dir().join(format!("quickcell-client-mcp-{}", uuid::Uuid::new_v4()));
    let out = crate::mcp::run(
        json!([
            {"op": "call_tool", "name": "exec", "args": {
                "title": "ask",
                "code": "return 'answer: ' + await ask_user({q: 'why?'})",
                "clientTools": [{"name": "ask_user", "description": "Ask the user", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}],
            }},
            {"op": "call_tool", "name": "wait", "runIdFromLast": true, "args": {"toolResults": [{"id": "bridge:clientTool:1", "value": "because"}]}},
        ]),
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--state-dir",
            state.to_str().unwrap(),
        ],
    );
    let parked = crate::mcp::result(&out[0]);
    assert_eq!(parked["reason"], "client_tools", "{parked}");
    assert_eq!(parked["pendingToolCalls"][0]["tool"], "ask_user");
    let done = crate::mcp::result(&out[1]);
    assert_eq!(done["value"], "answer: because", "{done}");
    let text = out[1]["text"][0].as_str().unwrap();
    assert!(
        text.starts_with("<<<EXTERNAL_UNTRUSTED_CONTENT source=\"client\">>>"),
        "{text}"
    );
    std::fs::remove_dir_all(&state).ok();
}
