//! Graceful shutdown (issue 33, item 4): SIGTERM or SIGINT on `serve` and
//! `exec` stops accepting, lets cells finish or park within the drain time,
//! ends the tool calls still running, writes the ledger and exits; and
//! [`quickcell::Runtime::shutdown`] in the library.

use crate::cancel::alive;
use crate::mcp::{result, run, HttpServer};
use crate::mcp_control::{eventually, pid_written, stored_runs_in};
use quickcell::{CellResult, ErrorCode, ExecInput, Runtime};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory whose config has the command tool `nap` (writes
/// its pid to `<dir>/nap`, then sleeps 30 s), not replay-safe, and cells
/// that would wait a minute before parking on their own.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("quickcell-shutdown-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let tools = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/tools");
        let config = format!(
            "[limits]\ntimeout_ms = 60000\n[host]\ndrain_timeout_ms = 20000\n[[tools]]\nname = \"nap\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [\"{tools}/pid_nap.sh\", {:?}, \"30\"]\ntimeout_ms = 60000\n",
            dir.join("nap").display().to_string()
        );
        std::fs::write(dir.join("config.toml"), config).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The pid the `nap` tool wrote, once written.
    fn nap_pid(&self) -> i32 {
        pid_written(&self.dir.join("nap"))
    }

    /// Runs parked in the state store.
    fn stored_runs(&self) -> usize {
        stored_runs_in(&self.dir.join("state"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn sigterm(pid: u32) {
    // SAFETY: kill(2) with a pid this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
}

/// SIGTERM while `quickcell exec` waits on a tool: the cell parks at once
/// (it would otherwise wait most of a minute), the result says `waiting`
/// with its run id (exit status 3), the tool's process is gone, and the
/// call is in the ledger. The run resumes in a new process, where the
/// killed call — not replay-safe — settles with an unknown effect.
#[test]
fn sigterm_on_exec_parks_the_waiting_cell_and_ends_its_tool() {
    let scratch = Scratch::new();
    let (config, state) = (scratch.path("config.toml"), scratch.path("state"));
    let child = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["exec", "--config", &config, "--state-dir", &state])
        .args([
            "--code",
            "try { return await nap({}); } catch (e) { return 'caught: ' + e.message; }",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let nap = scratch.nap_pid();
    let signalled = Instant::now();
    sigterm(child.id());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "exit status 3 (waiting): {stderr}"
    );
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "parked within the drain time, not after the tool"
    );
    let parked: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parked["status"], "waiting", "{parked}");
    assert!(stderr.contains("quickcell: shutting down"), "{stderr}");
    eventually("the tool's process is gone", || !alive(nap));
    assert_eq!(scratch.stored_runs(), 1);

    let (status, usage, _) = crate::quickcell(&["usage", "--state-dir", &state, "--json"]);
    assert_eq!(status, 0);
    assert_eq!(usage["calls"], 1, "the exec is in the ledger: {usage}");

    let run_id = parked["runId"].as_str().unwrap();
    let (status, resumed, stderr) =
        crate::quickcell(&["wait", "--config", &config, "--state-dir", &state, run_id]);
    assert_eq!(status, 0, "{resumed} {stderr}");
    let value = resumed["value"].as_str().unwrap_or_default();
    assert!(
        value.starts_with("caught: ") && value.contains("its effect is unknown"),
        "{resumed}"
    );
}

/// SIGTERM on `serve --http` with a cell waiting on a tool: the client's
/// `exec` gets `waiting` (the cell parked at once), the server exits 0,
/// the tool's process is gone and the run is parked in the state store.
#[test]
fn sigterm_on_serve_http_parks_cells_and_exits_zero() {
    let scratch = Scratch::new();
    let (config, state) = (scratch.path("config.toml"), scratch.path("state"));
    let mut server = HttpServer::spawn(|port| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--config", &config, "--state-dir", &state])
            .args(["--http", &format!("127.0.0.1:{port}")]);
        command
    });
    let url = server.url.clone();
    let client = std::thread::spawn(move || {
        run(
            // Tools listed first: the SDK checks a result against the
            // listed output schema, and would list them after the call,
            // when the server no longer takes requests.
            json!([
                {"op": "list_tools"},
                {"op": "call_tool", "name": "exec", "args": {"title": "nap", "code": "return await nap({})"}},
            ]),
            &["--no-terminate", "--http", &url],
        )
    });
    let nap = scratch.nap_pid();
    sigterm(server.pid());
    let out = client.join().unwrap();
    assert_eq!(result(&out[1])["status"], "waiting", "{}", out[1]);
    let status = server
        .exited_within(Duration::from_secs(20))
        .expect("the server exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
    eventually("the tool's process is gone", || !alive(nap));
    assert_eq!(scratch.stored_runs(), 1);
}

/// `started`: tells the test that the cell got this far, then answers.
struct Started(tokio::sync::mpsc::UnboundedSender<()>);

#[quickcell::tools::async_trait]
impl quickcell::tools::Tool for Started {
    fn name(&self) -> &str {
        "started"
    }
    fn description(&self) -> &str {
        "Says the cell started"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn call(
        &self,
        _args: Value,
        _cancel: quickcell::tools::CancelSignal,
    ) -> Result<Value, quickcell::tools::ToolError> {
        let _ = self.0.send(());
        Ok(json!(true))
    }
}

/// In the library: once `shutdown` has begun, calls are refused with
/// `runtime_unavailable` and run nothing; a cell still computing when the
/// drain time is over is aborted, and the shutdown says it did not drain.
#[tokio::test]
async fn shutdown_refuses_new_calls_and_aborts_what_outlives_the_drain() {
    let (tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let mut tools = quickcell::ToolRegistry::new();
    tools.add(std::sync::Arc::new(Started(tx))).unwrap();
    let rt = std::sync::Arc::new(
        Runtime::builder()
            .limits(quickcell::Limits::default().with_timeout_ms(60_000))
            .tools(tools)
            .build()
            .await
            .unwrap(),
    );
    let spinning = tokio::spawn({
        let rt = rt.clone();
        async move {
            rt.exec(ExecInput::new("spin", "await started({}); while (true) {}"))
                .await
        }
    });
    started.recv().await.unwrap();
    let done = rt.shutdown(Duration::from_millis(200)).await;
    assert!(!done.drained);
    let spun = spinning.await.unwrap();
    let CellResult::Failed(f) = &spun else {
        panic!("aborted: {}", spun.to_json())
    };
    assert_eq!(f.code, ErrorCode::Aborted, "{}", f.error);
    let refused = rt.exec(ExecInput::new("late", "return 1")).await;
    let CellResult::Failed(f) = &refused else {
        panic!("refused: {}", refused.to_json())
    };
    assert_eq!(f.code, ErrorCode::RuntimeUnavailable);
    assert!(f.error.contains("shutting down"), "{}", f.error);
    assert!(rt.is_shutting_down());
}

/// A runtime with nothing running shuts down at once and drained.
#[tokio::test]
async fn an_idle_runtime_shuts_down_drained() {
    let rt = Runtime::builder().build().await.unwrap();
    assert_eq!(
        crate::value(&rt.exec(ExecInput::new("one", "return 1")).await),
        json!(1)
    );
    let done = rt.shutdown(Duration::from_secs(10)).await;
    assert!(done.drained);
}
