//! Faults (issue 33, item 5): a host process killed with SIGKILL in the
//! middle of a tool call, with the SQLite state store. (The same with
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
