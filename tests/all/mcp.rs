//! `quickcell serve`: MCP over stdio and streamable HTTP, driven by the
//! official Python MCP SDK (`fixtures/mcp/client.py`, installed into
//! `.venv-mcp` by `scripts/setup-tests`).

use serde_json::{json, Value};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn python() -> String {
    std::env::var("QUICKCELL_MCP_PYTHON").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-mcp/bin/python").to_string()
    })
}

const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/mcp/client.py");

/// Runs the client with `steps` against `target`; one JSON value per step.
pub(crate) fn run(steps: Value, target: &[&str]) -> Vec<Value> {
    use std::io::Write;
    let mut child = Command::new(python())
        .arg(CLIENT)
        .args(["--timeout", "20", "--steps", "-"])
        .args(target)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the Python MCP client (scripts/setup-tests installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(steps.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn scratch_state() -> String {
    let dir = std::env::temp_dir().join(format!("quickcell-mcp-{}", uuid::Uuid::new_v4()));
    dir.to_str().unwrap().to_string()
}

fn stdio(steps: Value) -> Vec<Value> {
    stdio_in(&scratch_state(), steps)
}

/// Like [`stdio`], with the server's state directory given (so two
/// connections can share one state store).
fn stdio_in(state: &str, steps: Value) -> Vec<Value> {
    run(
        steps,
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--workspace",
            env!("CARGO_MANIFEST_DIR"),
            "--state-dir",
            state,
        ],
    )
}

/// The parsed result object of a `call_tool` step.
pub(crate) fn result(step: &Value) -> &Value {
    assert_eq!(step["ok"], true, "{step}");
    &step["structuredContent"]
}

const PARK: &str = "text('before'); await yield_control(); return 'after';";

/// A lone surrogate in a cell's value reaches an MCP client as its JSON
/// escape inside the text block, and as U+FFFD in `structuredContent`,
/// which every client must be able to parse.
#[test]
fn a_lone_surrogate_is_escaped_in_the_text_block() {
    let steps = json!([
        {"op": "call_tool", "name": "exec", "args": {"title": "s", "code": "return '\\ud800x'"}},
    ]);
    let out = stdio(steps);
    assert_eq!(result(&out[0])["value"], "\u{FFFD}x");
    let text = out[0]["text"][0].as_str().unwrap();
    assert!(text.contains(r#""value":"\ud800x""#), "{text}");
}

#[test]
fn stdio_lists_calls_and_reports_errors() {
    let steps = json!([
        {"op": "list_tools"},
        {"op": "call_tool", "name": "exec", "args": {"title": "read readme", "code": "const r = await read({path: 'README.md', limit: 1}); return r.content.trim();"}},
        {"op": "call_tool", "name": "exec", "args": {"title": "park", "code": PARK}},
        {"op": "call_tool", "name": "exec", "args": {"title": "bad", "code": "throw new Error('boom')"}},
        {"op": "call_tool", "name": "nope", "args": {}},
        {"op": "call_tool", "name": "exec", "args": {"code": 42}},
    ]);
    let out = stdio(steps);
    let tools: Vec<&str> = out[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["exec", "wait"]);
    let exec_description = out[0]["tools"][0]["description"].as_str().unwrap();
    assert!(
        exec_description.contains("- read "),
        "the quick index lists the tools: {exec_description}"
    );
    assert_eq!(
        out[0]["tools"][0]["inputSchema"]["required"],
        json!(["title", "code"])
    );
    assert_eq!(result(&out[1])["value"], "# quickcell");
    assert_eq!(out[1]["isError"], false);
    let parked = result(&out[2]);
    assert_eq!(parked["status"], "waiting");
    assert_eq!(
        out[2]["text"][0]
            .as_str()
            .map(|t| serde_json::from_str::<Value>(t).unwrap()),
        Some(parked.clone())
    );
    assert_eq!(out[3]["isError"], true);
    assert_eq!(result(&out[3])["code"], "internal_error");
    assert_eq!(
        out[4]["ok"], false,
        "an unknown tool is a JSON-RPC error: {}",
        out[4]
    );
    assert_eq!(result(&out[5])["code"], "invalid_input");
}

#[test]
fn a_parked_run_is_resumed_in_the_same_session_only() {
    let state = scratch_state();
    let out = stdio_in(
        &state,
        json!([
            {"op": "call_tool", "name": "exec", "args": {"title": "park", "code": PARK}},
        ]),
    );
    let run_id = result(&out[0])["runId"].as_str().unwrap().to_string();
    // Another connection on the same state store cannot resume it: the
    // first connection's end closed its session, which released the run
    // (operations.md §3.1). Over HTTP, where two sessions can be open at
    // once, another session is refused as another agent run.
    let other = stdio_in(
        &state,
        json!([{"op": "call_tool", "name": "wait", "args": {"runId": run_id}}]),
    );
    assert_eq!(
        result(&other[0])["error"],
        "code mode run is unavailable or expired."
    );

    // Within one connection: exec parks, wait resumes.
    let out = stdio(json!([
        {"op": "call_tool", "name": "exec", "args": {"title": "park", "code": PARK}},
        {"op": "call_tool", "name": "wait", "args": {}, "runIdFromLast": true},
    ]));
    assert_eq!(result(&out[0])["status"], "waiting");
    assert_eq!(result(&out[0])["output"][0]["text"], "before");
    assert_eq!(result(&out[1])["value"], "after");
    assert!(
        result(&out[1]).get("output").is_none(),
        "the text before the park was delivered once"
    );
}

/// A process serving MCP over streamable HTTP on a free local port; killed
/// on drop.
pub(crate) struct HttpServer {
    child: Child,
    pub url: String,
}

impl HttpServer {
    /// Starts the command `with_port` builds for a free port and waits until
    /// the port accepts connections.
    pub(crate) fn spawn(with_port: impl FnOnce(u16) -> Command) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = with_port(port)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the HTTP MCP server");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the HTTP MCP server did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }

    /// Waits up to 20 s for the server to exit on its own; whether it did.
    pub(crate) fn exits(&mut self) -> bool {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `within` for the server to exit; its exit status, or
    /// `None` while it still runs.
    pub(crate) fn exited_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// `quickcell serve --http` with a scratch state directory.
    fn start() -> Self {
        let state = scratch_state();
        Self::spawn(|port| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
            command.args([
                "serve",
                "--http",
                &format!("127.0.0.1:{port}"),
                "--state-dir",
                &state,
            ]);
            command
        })
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn http_parks_and_waits_within_a_session_and_rejects_malformed_requests() {
    let server = HttpServer::start();
    // The first session stays open (no DELETE), so its run stays parked.
    let first = run(
        json!([{"op": "call_tool", "name": "exec", "args": {"title": "park", "code": PARK}}]),
        &["--no-terminate", "--http", &server.url],
    );
    let run_id = result(&first[0])["runId"].as_str().unwrap().to_string();
    // A new MCP session does not see the run.
    let other = run(
        json!([{"op": "call_tool", "name": "wait", "args": {"runId": run_id}}]),
        &["--http", &server.url],
    );
    assert_eq!(
        result(&other[0])["error"],
        "code mode run belongs to a different agent run."
    );
    // Exec and wait in one session.
    let out = run(
        json!([
            {"op": "call_tool", "name": "exec", "args": {"title": "park", "code": PARK}},
            {"op": "call_tool", "name": "wait", "args": {}, "runIdFromLast": true},
            {"op": "raw", "data": "this is not json"},
            {"op": "raw", "data": "{\"jsonrpc\": \"2.0\", \"id\": 7}", "session": true},
        ]),
        &["--http", &server.url],
    );
    assert_eq!(result(&out[0])["status"], "waiting");
    assert_eq!(result(&out[1])["value"], "after");
    assert_eq!(out[2]["status"], 400, "{}", out[2]);
    assert_eq!(out[2]["messages"][0]["error"]["code"], -32700);
    assert!(out[3]["messages"][0]["error"].is_object(), "{}", out[3]);
}

/// `serve --mode directory`: the Tool Search tools, and the bounded
/// directory of host tools in the server's instructions.
#[test]
fn directory_mode_puts_the_directory_in_the_instructions() {
    let state = scratch_state();
    let out = run(
        json!([{"op": "info"}, {"op": "list_tools"}]),
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--mode",
            "directory",
            "--workspace",
            env!("CARGO_MANIFEST_DIR"),
            "--state-dir",
            &state,
        ],
    );
    let instructions = out[0]["instructions"].as_str().unwrap();
    assert!(
        instructions.starts_with("Use tool_search to find tools"),
        "{instructions}"
    );
    assert!(
        instructions.contains("\n\nAvailable deferred-schema tools:\n- find (core): "),
        "{instructions}"
    );
    let names: Vec<&str> = out[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tool_search", "tool_describe", "tool_call"]);
}

/// `[tool_search] lean = true` with no `--mode`: Tool Search (mode
/// `tools`) with the lean limits, at most 10 hits however many are asked.
#[test]
fn the_lean_profile_selects_tools_mode_and_its_limits() {
    let dir = std::env::temp_dir().join(format!("quickcell-lean-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = String::from("[tool_search]\nlean = true\n");
    for i in 0..20 {
        config.push_str(&format!(
            "[[tools]]\nname = \"report_{i}\"\ndescription = \"Make report number {i}\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"true\"]\n"
        ));
    }
    std::fs::write(dir.join("config.toml"), config).unwrap();
    let out = run(
        json!([
            {"op": "list_tools"},
            {"op": "call_tool", "name": "tool_search", "args": {"query": "report", "limit": 50}},
            {"op": "call_tool", "name": "tool_search", "args": {"query": "report"}},
        ]),
        &[
            "--stdio",
            env!("CARGO_BIN_EXE_quickcell"),
            "serve",
            "--config",
            dir.join("config.toml").to_str().unwrap(),
            "--state-dir",
            dir.join("state").to_str().unwrap(),
        ],
    );
    assert_eq!(out[0]["tools"][0]["name"], "tool_search", "{}", out[0]);
    let hits = |step: &Value| result(step)["results"][0]["hits"].as_array().unwrap().len();
    assert_eq!(hits(&out[1]), 10);
    assert_eq!(hits(&out[2]), 5);
    std::fs::remove_dir_all(&dir).ok();
}

/// The official Python SDK speaks MCP 2026-07-28 to `serve --http` (no
/// `initialize`, no session), and a client that `initialize`s speaks
/// 2025-11-25 to the same server. A 2026-07-28 run is its principal's, not
/// its connection's: a second client process resumes a run the first
/// parked; a client with another principal's token cannot.
#[test]
fn the_python_sdk_speaks_2026_07_28_and_2025_11_25_to_one_http_server() {
    let dir = std::env::temp_dir().join(format!("quickcell-modern-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "alice token-a\nbob token-b\n").unwrap();
    let server = HttpServer::spawn(|port| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--http", &format!("127.0.0.1:{port}")])
            .arg("--auth-token-file")
            .arg(&tokens)
            .arg("--state-dir")
            .arg(dir.join("state"));
        command
    });
    let as_client = |token: &str, era: &str, steps: Value| {
        run(
            steps,
            &[
                "--era",
                era,
                "--header",
                &format!("Authorization: Bearer {token}"),
                "--http",
                &server.url,
            ],
        )
    };
    let exec = |code: &str| json!({"op": "call_tool", "name": "exec", "args": {"title": "t", "code": code}});
    let out = as_client(
        "token-a",
        "modern",
        json!([{"op": "info"}, {"op": "list_tools"}, exec("await yield_control(); return 'later';")]),
    );
    assert_eq!(out[0]["protocolVersion"], "2026-07-28", "{}", out[0]);
    let names: Vec<&str> = out[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["exec", "wait"]);
    let parked = &out[2]["structuredContent"];
    assert_eq!(parked["status"], "waiting", "{}", out[2]);
    let run_id = parked["runId"].as_str().unwrap();
    let wait = json!([{"op": "call_tool", "name": "wait", "args": {"runId": run_id}}]);
    // Another principal: no such run.
    let refused = as_client("token-b", "modern", wait.clone());
    assert_eq!(
        refused[0]["structuredContent"]["error"], "code mode run is unavailable or expired.",
        "{}",
        refused[0]
    );
    // The same principal, from a new connection.
    let done = as_client("token-a", "modern", wait);
    assert_eq!(
        done[0]["structuredContent"]["value"], "later",
        "{}",
        done[0]
    );
    // A 2025-11-25 client of the same server has a session of its own.
    let legacy = as_client(
        "token-a",
        "legacy",
        json!([{"op": "info"}, exec("return 1 + 1;")]),
    );
    assert_eq!(legacy[0]["protocolVersion"], "2025-11-25", "{}", legacy[0]);
    assert_eq!(legacy[1]["structuredContent"]["value"], 2, "{}", legacy[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Over stdio, 2026-07-28 requests are `[mcp] principal`'s when one is
/// configured: a run parked through one connection resumes through
/// another. Without it, each connection is its own scope.
#[test]
fn a_configured_stdio_principal_owns_2026_07_28_runs_across_connections() {
    let dir = std::env::temp_dir().join(format!(
        "quickcell-stdio-principal-{}",
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let with_principal = dir.join("principal.toml");
    std::fs::write(&with_principal, "[mcp]\nprincipal = \"ci-bot\"\n").unwrap();
    let without = dir.join("none.toml");
    std::fs::write(&without, "").unwrap();
    let connect = |config: &std::path::Path, steps: Value| {
        run(
            steps,
            &[
                "--era",
                "modern",
                "--stdio",
                env!("CARGO_BIN_EXE_quickcell"),
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
            ],
        )
    };
    let park = json!([{"op": "call_tool", "name": "exec", "args": {"title": "t", "code": "await yield_control(); return 'again';"}}]);
    for (config, resumes) in [(&with_principal, true), (&without, false)] {
        let parked = connect(config, park.clone());
        let run_id = result(&parked[0])["runId"].as_str().unwrap().to_string();
        let waited = connect(
            config,
            json!([{"op": "call_tool", "name": "wait", "args": {"runId": run_id}}]),
        );
        if resumes {
            assert_eq!(result(&waited[0])["value"], "again", "{}", waited[0]);
        } else {
            assert_eq!(result(&waited[0])["status"], "failed", "{}", waited[0]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
