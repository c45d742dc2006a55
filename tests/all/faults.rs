//! Faults (issue 33, item 5): a host process killed with SIGKILL in the
//! middle of tool calls — a CLI `exec` draining its parked run's call
//! (SQLite), and `serve --http` draining the calls of two MCP sessions'
//! parked runs (SQLite and PostgreSQL). (Hosts dying mid-`wait` on
//! PostgreSQL: `postgres::a_host_waiting_on_a_dead_hosts_call_applies_the_restart_rule`
//! and `postgres::a_run_whose_host_died_mid_wait_resumes_elsewhere_after_the_lease`.)

use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory with a config whose `count_nap` tool (replay-safe
/// or not) counts its runs in `<dir>/count`, then naps `nap_s` seconds;
/// cells park after 500 ms.
fn host_dir(root: &Path, name: &str, nap_s: u32, replay_safe: bool) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/count_nap.sh");
    std::fs::write(
        dir.join("quickcell.toml"),
        format!(
            "[limits]\ntimeout_ms = 500\n[[tools]]\nname = \"count_nap\"\ndescription = \"Counts and naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"{nap_s}\"]\nreplay_safe = {replay_safe}\ntimeout_ms = 60000\n",
            script.display().to_string(),
            root.join("count").display().to_string(),
        ),
    )
    .unwrap();
    dir
}

fn runs(root: &Path) -> usize {
    std::fs::read_to_string(root.join("count"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// `quickcell ARGS --config <dir>/quickcell.toml --state-dir STATE --session s`.
fn quickcell(dir: &Path, state: &Path, args: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(args)
        .arg("--config")
        .arg(dir.join("quickcell.toml"))
        .arg("--state-dir")
        .arg(state)
        .args(["--session", "s"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&out.stderr).into_owned())),
    )
}

/// SIGKILL of the process that parked a run while it runs the run's tool
/// call (it stays to drain it): the run stays parked and intact, a write
/// an earlier cell committed is intact, and the half-done call is either
/// run again once (replay-safe: two runs in all, the second's result
/// delivered) or fails clearly (not replay-safe: the cell catches the
/// unknown-effect error; the tool ran once).
#[test]
fn sigkill_mid_tool_call_keeps_parked_runs_and_committed_writes() {
    for replay_safe in [true, false] {
        let root = std::env::temp_dir().join(format!("quickcell-faults-{}", uuid::Uuid::new_v4()));
        let state = root.join("state");
        // A naps 30 s (killed long before); B's call answers at once.
        let a = host_dir(&root, "a", 30, replay_safe);
        let b = host_dir(&root, "b", 0, replay_safe);
        let (status, done) = quickcell(
            &a,
            &state,
            &["exec", "--code", "await store('k', 'kept'); return 1"],
        );
        assert_eq!((status, &done["value"]), (0, &json!(1)), "{done}");

        let mut parking = Command::new(env!("CARGO_BIN_EXE_quickcell"))
            .args([
                "exec",
                "--code",
                "try { return (await count_nap({})).runs; } catch (e) { return e.message; }",
            ])
            .arg("--config")
            .arg(a.join("quickcell.toml"))
            .arg("--state-dir")
            .arg(&state)
            .args(["--session", "s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(parking.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let parked: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(parked["status"], "waiting", "{parked}");
        let run_id = parked["runId"].as_str().unwrap().to_string();
        let started = Instant::now();
        while runs(&root) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the tool starts"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The process drains the call (it would wait 30 s for it): killed.
        parking.kill().unwrap();
        assert!(!parking.wait().unwrap().success());

        let (status, resumed) = quickcell(&b, &state, &["wait", &run_id]);
        assert_eq!(status, 0, "replay_safe {replay_safe}: {resumed}");
        if replay_safe {
            assert_eq!(resumed["value"], json!(2), "run again once: {resumed}");
            assert_eq!(runs(&root), 2);
        } else {
            let message = resumed["value"].as_str().unwrap_or_default();
            assert!(message.contains("its effect is unknown"), "{resumed}");
            assert_eq!(runs(&root), 1, "not run again");
        }
        let (status, loaded) = quickcell(&b, &state, &["exec", "--code", "return await load('k')"]);
        assert_eq!((status, &loaded["value"]), (0, &json!("kept")), "{loaded}");
        // The killed host's orphaned `sleep` ends with the scratch files.
        let _ = std::fs::remove_dir_all(&root);
    }
}

/// Where a killed server's state lives.
enum State {
    /// A SQLite state directory.
    Dir(PathBuf),
    /// A PostgreSQL database, with the state key file the hosts share.
    Postgres { url: String, key: PathBuf },
}

impl State {
    /// `--state-…` arguments of `quickcell serve`.
    fn args(&self) -> Vec<String> {
        match self {
            Self::Dir(dir) => vec!["--state-dir".into(), dir.display().to_string()],
            Self::Postgres { url, key } => vec![
                "--state-url".into(),
                url.clone(),
                "--state-key-file".into(),
                key.display().to_string(),
            ],
        }
    }

    /// A runtime over this state with the tools of `config`.
    async fn runtime(&self, config: &Path) -> quickcell::Runtime {
        let config = quickcell::Config::parse(&std::fs::read_to_string(config).unwrap()).unwrap();
        let builder = quickcell::Runtime::builder()
            .tools(quickcell::ToolRegistry::from_config(&config).unwrap());
        let builder = match self {
            Self::Dir(dir) => builder.state_dir(dir),
            Self::Postgres { url, key } => builder
                .state_url(url)
                .state_key(quickcell::StateKey::from_file(key).unwrap()),
        };
        builder.build().await.unwrap()
    }

    /// The runs in the store, with their owners (an MCP session's runs
    /// belong to `mcp-<uuid>`, which only the server knows).
    fn runs(&self) -> Vec<(String, quickcell::Owner)> {
        let rows: Vec<(String, String, String)> = match self {
            Self::Dir(dir) => {
                let db = rusqlite::Connection::open(dir.join(quickcell::STATE_FILE)).unwrap();
                let mut stmt = db
                    .prepare("SELECT run_id, agent_run, session FROM runs ORDER BY run_id")
                    .unwrap();
                stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap()
            }
            Self::Postgres { url, .. } => {
                let out = Command::new("psql")
                    .args(["-At", "-F", "\t", "-c"])
                    .arg("SELECT run_id, agent_run, session FROM runs ORDER BY run_id")
                    .arg(url)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8(out.stdout)
                    .unwrap()
                    .lines()
                    .map(|line| {
                        let f: Vec<&str> = line.split('\t').collect();
                        (f[0].into(), f[1].into(), f[2].into())
                    })
                    .collect()
            }
        };
        rows.into_iter()
            .map(|(id, agent_run, session)| (id, quickcell::Owner { agent_run, session }))
            .collect()
    }
}

/// A config whose tools `safe_nap` (replay-safe) and `unsafe_nap` count
/// their runs in `<root>/safe` and `<root>/unsafe`, then nap `nap_s`
/// seconds; cells park after 500 ms.
fn serve_config(root: &Path, name: &str, nap_s: u32) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/count_nap.sh");
    let mut config = "[limits]\ntimeout_ms = 500\n".to_string();
    for (tool, replay_safe) in [("safe_nap", true), ("unsafe_nap", false)] {
        config.push_str(&format!(
            "[[tools]]\nname = \"{tool}\"\ndescription = \"Counts and naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"{nap_s}\"]\nreplay_safe = {replay_safe}\ntimeout_ms = 60000\n",
            script.display().to_string(),
            root.join(tool).display().to_string(),
        ));
    }
    let path = root.join(name);
    std::fs::write(&path, config).unwrap();
    path
}

/// Lines in `<root>/<tool>`: how often the tool started.
fn started(root: &Path, tool: &str) -> usize {
    std::fs::read_to_string(root.join(tool))
        .unwrap_or_default()
        .lines()
        .count()
}

/// `quickcell serve --http` over `state` with `config`.
fn serve(config: &Path, state: &State) -> crate::mcp::HttpServer {
    crate::mcp::HttpServer::spawn(|port| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--config"])
            .arg(config)
            .args(state.args())
            .args(["--http", &format!("127.0.0.1:{port}")]);
        command
    })
}

/// The `exec` results of `codes`, run one after another in one MCP
/// session of the server at `url` (left open).
fn exec_in_one_session(url: &str, codes: &[&str]) -> Vec<Value> {
    let steps: Vec<Value> = codes
        .iter()
        .map(
            |code| json!({"op": "call_tool", "name": "exec", "args": {"title": "t", "code": code}}),
        )
        .collect();
    crate::mcp::run(json!(steps), &["--no-terminate", "--http", url])
        .iter()
        .map(|step| crate::mcp::result(step).clone())
        .collect()
}

/// SIGKILL of `serve --http` while two MCP sessions' parked runs have
/// their tool calls running in it:
/// both runs stay parked and intact in the store, the committed session
/// value is intact, the server starts again over the same store and
/// serves, and each half-done call is run again once (replay-safe) or
/// fails clearly with an unknown effect (not replay-safe).
fn sigkill_of_serve_http(state: State, root: &Path) {
    let config = serve_config(root, "serve.toml", 30);
    let mut server = serve(&config, &state);
    let url = server.url.clone();
    let catching = |tool: &str| {
        format!("try {{ return (await {tool}({{}})).runs; }} catch (e) {{ return e.message; }}")
    };
    let first = exec_in_one_session(
        &url,
        &["await store('k', 'kept'); return 1", &catching("safe_nap")],
    );
    assert_eq!(first[0]["value"], 1, "{}", first[0]);
    assert_eq!(first[1]["status"], "waiting", "{}", first[1]);
    let second = exec_in_one_session(&url, &[&catching("unsafe_nap")]);
    assert_eq!(second[0]["status"], "waiting", "{}", second[0]);
    let until = Instant::now() + Duration::from_secs(20);
    while started(root, "safe_nap") + started(root, "unsafe_nap") < 2 {
        assert!(Instant::now() < until, "the tools start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on the server's pid, a child of this process.
    assert_eq!(unsafe { libc::kill(server.pid() as i32, libc::SIGKILL) }, 0);
    assert!(server.exited_within(Duration::from_secs(10)).is_some());

    let parked = state.runs();
    assert_eq!(parked.len(), 2, "both runs stay parked: {parked:?}");
    let ids: Vec<&str> = [&first[1], &second[0]]
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    for id in &ids {
        assert!(
            parked.iter().any(|(run, _)| run == id),
            "{id} in {parked:?}"
        );
    }

    // The server starts again over the same store and serves.
    let server = serve(&config, &state);
    let again = exec_in_one_session(&server.url, &["return 2"]);
    assert_eq!(again[0]["value"], 2, "{}", again[0]);
    drop(server);

    // Each run resumes as its owner (the tools answer at once now).
    let resume_config = serve_config(root, "resume.toml", 0);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let runtime = state.runtime(&resume_config).await;
        for (run_id, owner) in &parked {
            let r = runtime
                .wait(quickcell::WaitInput::new(run_id.clone()).with_owner(owner.clone()))
                .await;
            let value = crate::value(&r);
            if run_id == ids[0] {
                assert_eq!(value, json!(2), "the replay-safe call ran again once");
                let r = runtime
                    .exec(
                        quickcell::ExecInput::new("load", "return await load('k')")
                            .with_owner(owner.clone()),
                    )
                    .await;
                assert_eq!(crate::value(&r), json!("kept"), "the committed write");
            } else {
                let message = value.as_str().unwrap_or_default();
                assert!(message.contains("its effect is unknown"), "{value}");
            }
        }
    });
    assert_eq!(started(root, "safe_nap"), 2);
    assert_eq!(started(root, "unsafe_nap"), 1, "not run again");
}

#[test]
fn sigkill_of_serve_http_with_the_sqlite_store() {
    let root = std::env::temp_dir().join(format!("quickcell-kill-http-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&root).unwrap();
    sigkill_of_serve_http(State::Dir(root.join("state")), &root);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn sigkill_of_serve_http_with_the_postgres_store() {
    let root = std::env::temp_dir().join(format!("quickcell-kill-http-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&root).unwrap();
    let key = root.join("state.key");
    std::fs::write(&key, uuid::Uuid::new_v4().simple().to_string()).unwrap();
    let url = quickcell::testing::postgres_database();
    sigkill_of_serve_http(State::Postgres { url, key }, &root);
    let _ = std::fs::remove_dir_all(&root);
}
