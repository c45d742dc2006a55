//! Control of cells over MCP (operations.md §3.1–3.2), driven by the
//! official Python MCP SDK: `notifications/cancelled`, session close
//! (stdio EOF, HTTP `DELETE`, idle expiry) and progress notifications.

use crate::cancel::alive;
use crate::mcp::{result, run, HttpServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A scratch directory with a config of command tools: `nap_a` and `nap_b`
/// (write their pid to `<dir>/nap_a` / `<dir>/nap_b`, then sleep 30 s) and
/// `nap` (sleeps 0.4 s), and `extra` appended.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(extra: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("quickcell-mcpctl-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools");
        let mut config = String::new();
        for name in ["nap_a", "nap_b"] {
            config.push_str(&format!(
                "[[tools]]\nname = \"{name}\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"{tools}/pid_nap.sh\", {:?}, \"30\"]\ntimeout_ms = 60000\n",
                dir.join(name).display().to_string()
            ));
        }
        config.push_str(&format!(
            "[[tools]]\nname = \"nap\"\ndescription = \"Naps briefly\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"{tools}/nap.sh\", {:?}, \"0.4\"]\ntimeout_ms = 60000\n",
            dir.join("naps").display().to_string()
        ));
        config.push_str(extra);
        std::fs::write(dir.join("config.toml"), config).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The `quickcell serve` arguments over this scratch directory.
    fn serve_args(&self) -> Vec<String> {
        vec![
            "serve".into(),
            "--config".into(),
            self.path("config.toml"),
            "--state-dir".into(),
            self.path("state"),
        ]
    }

    /// Client arguments for `quickcell serve` over stdio.
    fn stdio(&self) -> Vec<String> {
        let mut args = vec![
            "--stdio".to_string(),
            env!("CARGO_BIN_EXE_quickcell").into(),
        ];
        args.extend(self.serve_args());
        args
    }

    /// `quickcell serve --http` over this scratch directory.
    fn http(&self) -> HttpServer {
        let args = self.serve_args();
        HttpServer::spawn(|port| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
            command
                .args(&args)
                .args(["--http", &format!("127.0.0.1:{port}")]);
            command
        })
    }

    /// The pid a `pid_nap` tool wrote, once written.
    fn pid(&self, tool: &str) -> i32 {
        pid_written(&self.dir.join(tool))
    }

    /// Runs parked or being resumed in the state store.
    fn stored_runs(&self) -> usize {
        stored_runs_in(Path::new(&self.path("state")))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// The pid a `pid_nap` tool wrote to `file`, once written (a whole line).
pub(crate) fn pid_written(file: &Path) -> i32 {
    let read = || {
        std::fs::read_to_string(file)
            .ok()
            .filter(|p| p.ends_with('\n'))
    };
    eventually("the tool wrote its pid", || read().is_some());
    read().unwrap().trim().parse().unwrap()
}

/// Runs parked or being resumed in the SQLite state store in `state`.
pub(crate) fn stored_runs_in(state: &Path) -> usize {
    let store = quickcell::store::SqliteStateStore::open(Some(state)).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(quickcell::store::RunStore::count_runs(&store))
        .unwrap()
}

/// Waits until `done` holds, polling; fails naming `what` after 20 s.
pub(crate) fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not within 20 s: {what}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn args(target: &[String]) -> Vec<&str> {
    target.iter().map(String::as_str).collect()
}

fn exec(code: &str) -> Value {
    json!({"title": "t", "code": code})
}

/// `notifications/cancelled` for a running `exec` (the SDK sends it when
/// the caller abandons the call): the cell is aborted, its tool's process
/// is gone, the one slot is free again, and the server keeps serving.
#[test]
fn an_mcp_cancel_aborts_the_running_cell() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 60000\n[host]\nmax_suspended_runs = 1\n");
    let out = run(
        json!([
            {"op": "call_tool", "name": "exec", "args": exec("return await nap_a({})"), "cancelAfter": 3},
            {"op": "sleep", "seconds": 1},
            {"op": "call_tool", "name": "exec", "args": exec("await yield_control(); return 2")},
            {"op": "call_tool", "name": "wait", "runIdFromLast": true},
        ]),
        &args(&scratch.stdio()),
    );
    assert_eq!(out[0]["cancelled"], true, "{}", out[0]);
    let pid = scratch.pid("nap_a");
    eventually("the tool's process is gone", || !alive(pid));
    // The slot the cancelled cell held is free: another cell parks.
    assert_eq!(result(&out[2])["status"], "waiting", "{}", out[2]);
    assert_eq!(result(&out[3])["value"], 2);
}

/// The same over streamable HTTP: the SDK posts `notifications/cancelled`
/// in the session, the cell ends and its tool's process is gone.
#[test]
fn an_mcp_cancel_over_http_aborts_the_running_cell() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 60000\n[host]\nmax_suspended_runs = 1\n");
    let server = scratch.http();
    let out = run(
        json!([
            {"op": "call_tool", "name": "exec", "args": exec("return await nap_a({})"), "cancelAfter": 3},
            {"op": "sleep", "seconds": 1},
            {"op": "call_tool", "name": "exec", "args": exec("await yield_control(); return 2")},
        ]),
        &["--http", &server.url],
    );
    assert_eq!(out[0]["cancelled"], true, "{}", out[0]);
    let pid = scratch.pid("nap_a");
    eventually("the tool's process is gone", || !alive(pid));
    assert_eq!(result(&out[2])["status"], "waiting", "{}", out[2]);
}

/// Steps that leave a parked run (its tool `nap_a` running) and a running
/// cell (`nap_b`, held open by `awaitResults`) when the session ends.
fn park_and_run(scratch: &Scratch) -> Value {
    json!([
        {"op": "call_tool", "name": "exec", "args": {"title": "park", "code": "return await nap_a({})", "restartSafe": false}},
        {"op": "call_tool", "name": "exec", "args": {"title": "run", "code": "return await nap_b({})", "awaitResults": true}, "background": true},
        {"op": "wait_file", "path": scratch.path("nap_b")},
    ])
}

/// Checks that the session's parked run and running cell are gone with
/// their tools' processes.
fn released(scratch: &Scratch, out: &[Value]) {
    assert_eq!(result(&out[0])["status"], "waiting", "{}", out[0]);
    let (a, b) = (scratch.pid("nap_a"), scratch.pid("nap_b"));
    eventually("both tools' processes are gone", || !alive(a) && !alive(b));
    eventually("the parked run is removed", || scratch.stored_runs() == 0);
}

/// Closing stdin ends the session: its running cell is cancelled and its
/// parked run removed, and both tools' processes are gone.
#[test]
fn stdio_eof_releases_the_session() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 1000\n");
    let out = run(park_and_run(&scratch), &args(&scratch.stdio()));
    released(&scratch, &out);
}

/// HTTP `DELETE` of the session does the same, and the server goes on
/// serving other sessions.
#[test]
fn http_delete_releases_the_session() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 1000\n");
    let server = scratch.http();
    let out = run(park_and_run(&scratch), &["--http", &server.url]);
    released(&scratch, &out);
    let out = run(
        json!([{"op": "call_tool", "name": "exec", "args": exec("return 3")}]),
        &["--http", &server.url],
    );
    assert_eq!(result(&out[0])["value"], 3);
}

/// A session left open expires after `[http] session_idle_seconds` without
/// traffic, and is released as if deleted.
#[test]
fn an_idle_http_session_expires_and_is_released() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 1000\n[http]\nsession_idle_seconds = 2\n");
    let server = scratch.http();
    let out = run(
        json!([{"op": "call_tool", "name": "exec", "args": exec("return await nap_a({})")}]),
        &["--no-terminate", "--http", &server.url],
    );
    assert_eq!(result(&out[0])["status"], "waiting", "{}", out[0]);
    let pid = scratch.pid("nap_a");
    assert_eq!(scratch.stored_runs(), 1);
    eventually("the idle session's tool is gone", || !alive(pid));
    eventually("the idle session's run is removed", || {
        scratch.stored_runs() == 0
    });
}

/// A call that runs past a second with a progress token gets
/// `notifications/progress`: none before a second, the count of settled
/// tool calls (only growing) and the latest tool's name. A quick call gets
/// none.
#[test]
fn a_long_exec_reports_progress() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 60000\n");
    let out = run(
        json!([
            {"op": "call_tool", "name": "exec", "args": exec("for (let i = 0; i < 6; i++) await nap({}); return 'done'"), "progress": true},
            {"op": "call_tool", "name": "exec", "args": exec("return 1"), "progress": true},
        ]),
        &args(&scratch.stdio()),
    );
    assert_eq!(result(&out[0])["value"], "done");
    let progress = out[0]["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "{}", out[0]);
    let mut last = -1.0;
    for note in progress {
        assert!(note["at"].as_f64().unwrap() >= 1.0, "{note}");
        let value = note["progress"].as_f64().unwrap();
        assert!(value > last && value <= 6.0, "{progress:?}");
        last = value;
        if value > 0.0 {
            assert_eq!(note["message"], "nap");
        }
    }
    assert_eq!(out[1]["progress"], json!([]));
}

/// Under MCP 2026-07-28 over HTTP (no session) a long `exec` with a
/// progress token reports progress in its own response stream, as the
/// official Python SDK receives it.
#[test]
fn a_long_2026_07_28_exec_reports_progress_over_http() {
    let scratch = Scratch::new("[limits]\ntimeout_ms = 60000\n");
    let server = scratch.http();
    let out = run(
        json!([
            {"op": "info"},
            {"op": "call_tool", "name": "exec", "args": exec("for (let i = 0; i < 6; i++) await nap({}); return 'done'"), "progress": true},
        ]),
        &["--era", "modern", "--http", &server.url],
    );
    assert_eq!(out[0]["protocolVersion"], "2026-07-28", "{}", out[0]);
    assert_eq!(result(&out[1])["value"], "done", "{}", out[1]);
    let progress = out[1]["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "{}", out[1]);
    let values: Vec<f64> = progress
        .iter()
        .map(|note| note["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]) && values.iter().all(|v| *v <= 6.0),
        "{values:?}"
    );
}

/// `[mcp.servers.everything]`: the reference MCP server from npm
/// (`@modelcontextprotocol/server-everything`, run by Node 22 from
/// `.npm-mcp`, which `scripts/setup-tests` installs).
fn everything_server() -> String {
    let npm = concat!(env!("CARGO_MANIFEST_DIR"), "/.npm-mcp/node_modules");
    format!(
        "[mcp.servers.everything]\ncommand = \"{npm}/.bin/node\"\nargs = [\"{npm}/@modelcontextprotocol/server-everything/dist/index.js\", \"stdio\"]\ntimeout_ms = 60000\n"
    )
}

/// A cell waiting on a slow tool of a real third-party MCP server
/// downstream is cancelled by the client's `notifications/cancelled`
/// (quickcell cancels the downstream request in turn): the cell ends, its
/// slot is free, and the downstream server keeps serving.
#[test]
fn a_cell_waiting_on_a_downstream_mcp_tool_is_cancelled() {
    let scratch = Scratch::new(&format!(
        "[limits]\ntimeout_ms = 60000\n[host]\nmax_suspended_runs = 1\n{}",
        everything_server()
    ));
    let out = run(
        json!([
            {"op": "call_tool", "name": "exec", "args": exec("return await MCP.everything.triggerLongRunningOperation({duration: 60, steps: 6})"), "cancelAfter": 3},
            {"op": "sleep", "seconds": 1},
            {"op": "call_tool", "name": "exec", "args": exec("await yield_control(); return (await MCP.everything.echo({message: 'still here'})).content[0].text")},
            {"op": "call_tool", "name": "wait", "runIdFromLast": true},
        ]),
        &args(&scratch.stdio()),
    );
    assert_eq!(out[0]["cancelled"], true, "{}", out[0]);
    assert_eq!(result(&out[2])["status"], "waiting", "{}", out[2]);
    assert_eq!(result(&out[3])["value"], "Echo: still here", "{}", out[3]);
}
