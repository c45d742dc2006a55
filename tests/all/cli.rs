//! The `quickcell` binary: exit codes, input forms and configuration.

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn quickcell() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quickcell"))
}

/// Runs `quickcell ARGS` with `input` on its standard input.
fn with_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = quickcell()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn run_json(args: &[&str]) -> (i32, Value, String) {
    let out = quickcell().args(args).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    assert!(
        stdout.trim().lines().count() <= 1,
        "one line of JSON: {stdout}"
    );
    (out.status.code().unwrap(), value, stderr)
}

#[test]
fn exec_code_prints_compact_json_and_exits_zero() {
    let (code, v, _) = run_json(&["exec", "--code", "text('hi'); return 1 + 1"]);
    assert_eq!(code, 0);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["value"], 2);
    assert_eq!(v["output"][0]["text"], "hi");
}

/// `exec` prints a lone surrogate as its JSON escape, as `JSON.stringify`
/// would (Python's `json` reads it back as the surrogate).
#[test]
fn exec_prints_a_lone_surrogate_as_its_escape() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(["exec", "--code", "text('\\udc00'); return '\\ud800'"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(r#""value":"\ud800""#), "{stdout}");
    assert!(
        stdout.contains(r#""output":[{"type":"text","text":"\udc00"}]"#),
        "{stdout}"
    );
    let read_back = std::process::Command::new(crate::mcp::python())
        .args([
            "-c",
            "import json,sys; r = json.loads(sys.stdin.read()); print(r['value'] == '\\ud800' and r['output'][0]['text'] == '\\udc00')",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(stdout.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&read_back.stdout).trim(), "True");
}

#[test]
fn failed_cell_exits_one() {
    let (code, v, _) = run_json(&["exec", "--title", "boom", "--code", "throw new Error('x')"]);
    assert_eq!(code, 1);
    assert_eq!(v["status"], "failed");
    assert_eq!(v["code"], "internal_error");
}

#[test]
fn usage_errors_exit_two() {
    let out = quickcell().args(["exec"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = quickcell().args(["exec", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn reads_source_from_file_and_stdin() {
    let dir = std::env::temp_dir().join(format!("quickcell-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cell.js");
    std::fs::write(&file, "return 'from file'").unwrap();
    let (code, v, _) = run_json(&["exec", "--file", file.to_str().unwrap()]);
    assert_eq!((code, v["value"].clone()), (0, Value::from("from file")));

    let out = with_stdin(&["exec", "-"], b"return 'from stdin'");
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], "from stdin");
}

#[test]
fn config_limits_apply_and_bad_config_is_named() {
    let dir = std::env::temp_dir().join(format!("quickcell-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(&good, "[limits]\ntimeout_ms = 200\nfuel = false\n").unwrap();
    let (code, v, _) = run_json(&[
        "exec",
        "--config",
        good.to_str().unwrap(),
        "--code",
        "while (true) {}",
    ]);
    assert_eq!(code, 1);
    assert_eq!(v["code"], "timeout");

    let bad_key = dir.join("bad.toml");
    std::fs::write(&bad_key, "[limits]\ntimeout_msec = 200\n").unwrap();
    let out = quickcell()
        .args([
            "exec",
            "--config",
            bad_key.to_str().unwrap(),
            "--code",
            "return 1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("limits.timeout_msec"));

    let malformed = dir.join("malformed.toml");
    std::fs::write(&malformed, "[limits\n").unwrap();
    let out = quickcell()
        .args([
            "exec",
            "--config",
            malformed.to_str().unwrap(),
            "--code",
            "return 1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(feature = "compiler")]
#[test]
fn corrupt_module_cache_is_rebuilt() {
    let dir = std::env::temp_dir().join(format!("quickcell-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The module cache is for machines the embedded precompiled guest does
    // not fit; QUICKCELL_IGNORE_PRECOMPILED makes this one such a machine.
    let run = || {
        quickcell()
            .env("QUICKCELL_CACHE_DIR", &dir)
            .env("QUICKCELL_IGNORE_PRECOMPILED", "1")
            .args(["exec", "--code", "return 41 + 1"])
            .output()
            .unwrap()
    };
    let first = run();
    assert_eq!(first.status.code(), Some(0));
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    // Corrupt the cached module: the next process discards it and rebuilds.
    std::fs::write(&entries[0], b"not a compiled module").unwrap();
    let second = run();
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let v: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(v["value"], 42);
    assert!(
        std::fs::metadata(&entries[0]).unwrap().len() > 1000,
        "the cache entry was rewritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory for state and fixtures.
fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("quickcell-cli-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_run_parked_by_exec_is_resumed_by_wait_in_another_process() {
    let dir = scratch();
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let code = "text('one'); await yield_control(); text('two'); return 'done';";
    let (status, v, _) = run_json(&["exec", "--state-dir", state, "--code", code]);
    assert_eq!(status, 3, "waiting exits 3: {v}");
    assert_eq!(v["status"], "waiting");
    assert_eq!(v["output"][0]["text"], "one");
    let run_id = v["runId"].as_str().unwrap().to_string();
    let (status, v, _) = run_json(&["wait", "--state-dir", state, &run_id]);
    assert_eq!((status, v["value"].clone()), (0, Value::from("done")));
    assert_eq!(v["output"][0]["text"], "two");
    let (status, v, _) = run_json(&["wait", "--state-dir", state, &run_id]);
    assert_eq!(status, 1);
    assert_eq!(v["error"], "code mode run is unavailable or expired.");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn run_waits_as_needed_and_prints_for_people() {
    let dir = scratch();
    let file = dir.join("cell.js");
    std::fs::write(
        &file,
        "text('first'); await yield_control(); text('second'); return {n: 2};",
    )
    .unwrap();
    let state = dir.join("state");
    let out = quickcell()
        .args([
            "run",
            file.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout, "first\nsecond\n=> completed: {\"n\":2}\n");
    let out = quickcell()
        .args([
            "run",
            "--json",
            file.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["status"], "waiting");
    assert_eq!(lines[1]["value"], serde_json::json!({"n": 2}));
    std::fs::remove_dir_all(&dir).ok();
}

/// A config with two command tools that nap for `seconds`, one of them
/// replay-safe; each logs its executions to its own file in `dir`.
fn nap_config(dir: &std::path::Path, seconds: &str) -> std::path::PathBuf {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools/nap.sh");
    let tool = |name: &str, replay_safe: bool| {
        format!(
            "[[tools]]\nname = \"{name}\"\ndescription = \"Naps\"\ninput_schema = {{ type = \"object\" }}\ncommand = [{:?}, {:?}, \"{seconds}\"]\nreplay_safe = {replay_safe}\ntimeout_ms = 20000\n\n",
            script.display().to_string(),
            dir.join(format!("{name}.log")).display().to_string(),
        )
    };
    let config = format!(
        "[limits]\ntimeout_ms = 400\n\n{}{}",
        tool("nap_safe", true),
        tool("nap_unsafe", false)
    );
    let path = dir.join("quickcell.toml");
    std::fs::write(&path, config).unwrap();
    path
}

const NAP_CELL: &str = "const [a, b] = await Promise.allSettled([nap_safe({q: 1}), nap_unsafe({q: 2})]); return [a.status, b.status, b.reason?.message ?? b.value];";

fn runs_logged(dir: &std::path::Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{name}.log")))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Waits the run until it is no longer waiting; returns the final result.
fn wait_until_done(config: &str, state: &str, run_id: &str) -> (i32, Value) {
    loop {
        let (status, v, _) = run_json(&["wait", "--config", config, "--state-dir", state, run_id]);
        if status != 3 {
            return (status, v);
        }
    }
}

#[test]
fn calls_settled_after_exec_parks_are_delivered_to_a_later_process() {
    let dir = scratch();
    let config = nap_config(&dir, "1");
    let (config, state) = (config.to_str().unwrap(), dir.join("state"));
    let state = state.to_str().unwrap();
    // exec parks at its deadline, then stays until its calls settle.
    let (status, v, _) = run_json(&[
        "exec",
        "--config",
        config,
        "--state-dir",
        state,
        "--code",
        NAP_CELL,
    ]);
    assert_eq!(status, 3, "{v}");
    assert_eq!(v["reason"], "pending_tools");
    let run_id = v["runId"].as_str().unwrap().to_string();
    let (status, v) = wait_until_done(config, state, &run_id);
    assert_eq!(status, 0, "{v}");
    assert_eq!(
        v["value"],
        serde_json::json!(["fulfilled", "fulfilled", {"napped": {"q": 2}}])
    );
    assert_eq!(
        (
            runs_logged(&dir, "nap_safe"),
            runs_logged(&dir, "nap_unsafe")
        ),
        (1, 1)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_killed_host_replays_only_replay_safe_calls() {
    use std::io::BufRead;
    let dir = scratch();
    let config = nap_config(&dir, "2");
    let (config, state) = (config.to_str().unwrap(), dir.join("state"));
    let state = state.to_str().unwrap();
    let mut child = quickcell()
        .args([
            "exec",
            "--config",
            config,
            "--state-dir",
            state,
            "--code",
            NAP_CELL,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // The cell parked with both calls in flight: kill the host now.
    child.kill().unwrap();
    child.wait().unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["status"], "waiting", "{v}");
    let run_id = v["runId"].as_str().unwrap().to_string();
    let (status, v) = wait_until_done(config, state, &run_id);
    assert_eq!(status, 0, "{v}");
    assert_eq!(v["value"][0], "fulfilled", "{v}");
    assert_eq!(v["value"][1], "rejected", "{v}");
    assert!(
        v["value"][2]
            .as_str()
            .unwrap()
            .contains("effect is unknown"),
        "{v}"
    );
    assert_eq!(
        runs_logged(&dir, "nap_safe"),
        2,
        "the replay-safe call ran again"
    );
    assert_eq!(runs_logged(&dir, "nap_unsafe"), 1, "the other did not");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sessions_scope_the_store_and_who_may_wait() {
    let dir = scratch();
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let (status, v, _) = run_json(&[
        "exec",
        "--state-dir",
        state,
        "--session",
        "alpha",
        "--code",
        "await store('greeting', 'hello'); await yield_control(); return await load('greeting');",
    ]);
    assert_eq!(status, 3, "{v}");
    let run_id = v["runId"].as_str().unwrap().to_string();
    let (status, v, _) = run_json(&["wait", "--state-dir", state, "--session", "beta", &run_id]);
    assert_eq!(
        (status, v["error"].clone()),
        (
            1,
            Value::from("code mode run belongs to a different session.")
        )
    );
    let (status, v, _) = run_json(&["wait", "--state-dir", state, "--session", "alpha", &run_id]);
    assert_eq!((status, v["value"].clone()), (0, Value::from("hello")));
    // Committed: a later process of the same session loads it; another session does not.
    let load = "return (await load('greeting')) ?? 'missing'";
    let (_, v, _) = run_json(&[
        "exec",
        "--state-dir",
        state,
        "--session",
        "alpha",
        "--code",
        load,
    ]);
    assert_eq!(v["value"], "hello");
    let (_, v, _) = run_json(&[
        "exec",
        "--state-dir",
        state,
        "--session",
        "beta",
        "--code",
        load,
    ]);
    assert_eq!(v["value"], "missing");
    std::fs::remove_dir_all(&dir).ok();
}

/// `exec --input` and `wait --input` take the contract's whole input object
/// as JSON text, `@FILE` or `-`; the contract's rules apply to it as over
/// MCP (a failed result, exit 1), while input that is not a JSON object is
/// a usage error (exit 2).
#[test]
fn exec_and_wait_take_the_whole_contract_input() {
    let dir = scratch();
    let state = dir.join("state");
    let state = state.to_str().unwrap();
    let exec_input = |input: &str| run_json(&["exec", "--state-dir", state, "--input", input]);

    // `command` is the alias of `code`; `restartSafe` is accepted.
    let (status, v, _) =
        exec_input(r#"{"title":"alias","command":"return 6 * 7","restartSafe":true}"#);
    assert_eq!((status, v["value"].clone()), (0, Value::from(42)), "{v}");

    // `awaitResults`: a yield resolves at once instead of parking.
    let yielding = r#"{"title":"yields","code":"await yield_control(); return 'went on'","awaitResults":true}"#;
    let (status, v, _) = exec_input(yielding);
    assert_eq!(
        (status, v["value"].clone()),
        (0, Value::from("went on")),
        "{v}"
    );
    let parks = r#"{"title":"yields","code":"await yield_control(); return 'resumed'"}"#;
    let (status, v, _) = exec_input(parks);
    assert_eq!(status, 3, "{v}");
    let run_id = v["runId"].as_str().unwrap().to_string();

    // `wait --input` from a file.
    let file = dir.join("wait.json");
    std::fs::write(&file, format!(r#"{{"runId":"{run_id}"}}"#)).unwrap();
    let (status, v, _) = run_json(&[
        "wait",
        "--state-dir",
        state,
        "--input",
        &format!("@{}", file.display()),
    ]);
    assert_eq!(
        (status, v["value"].clone()),
        (0, Value::from("resumed")),
        "{v}"
    );

    // From standard input.
    let out = with_stdin(
        &["exec", "--state-dir", state, "--input", "-"],
        br#"{"title":"stdin","code":"return 'piped'"}"#,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], "piped");

    // The contract's rules: retired fields, mismatched aliases, bad flags.
    let (status, v, _) = exec_input(r#"{"title":"t","code":"return 1","language":"typescript"}"#);
    assert_eq!(
        (status, v["code"].clone()),
        (1, Value::from("invalid_input"))
    );
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("Code Mode accepts JavaScript only."),
        "{v}"
    );
    let (status, v, _) = exec_input(r#"{"title":"t","code":"1","command":"2"}"#);
    assert_eq!(status, 1);
    assert_eq!(
        v["error"],
        "code and command must match when both are provided."
    );
    let (status, v, _) = exec_input(r#"{"title":"t","code":"1","awaitResults":"yes"}"#);
    assert_eq!(status, 1);
    assert_eq!(v["error"], "awaitResults must be a boolean.");
    let (status, v, _) = run_json(&["wait", "--state-dir", state, "--input", r#"{"runId":" "}"#]);
    assert_eq!(status, 1);
    assert_eq!(v["error"], "runId must be a non-empty string.");

    // Not a JSON object: usage errors, nothing runs.
    for (bad, needle) in [
        ("{\"title\":", "--input is not JSON"),
        ("[1, 2]", "--input must be a JSON object"),
        (
            "@/nonexistent/input.json",
            "cannot read /nonexistent/input.json",
        ),
    ] {
        let (status, _, stderr) = exec_input(bad);
        assert_eq!(status, 2, "{bad}");
        assert!(stderr.contains(needle), "{bad}: {stderr}");
    }
    // The cap: an input of exactly 2 MiB is read (the padding is a field
    // the contract ignores); one byte more is a usage error.
    let at_cap = |bytes: usize| {
        let frame = r#"{"title":"t","code":"return 'at the cap'","pad":""}"#.len();
        format!(
            r#"{{"title":"t","code":"return 'at the cap'","pad":"{}"}}"#,
            "x".repeat(bytes - frame)
        )
    };
    let big = dir.join("big.json");
    std::fs::write(&big, at_cap(2 * 1024 * 1024)).unwrap();
    let (status, v, stderr) = exec_input(&format!("@{}", big.display()));
    assert_eq!(
        (status, v["value"].clone()),
        (0, Value::from("at the cap")),
        "{stderr}"
    );
    std::fs::write(&big, at_cap(2 * 1024 * 1024 + 1)).unwrap();
    let (status, _, stderr) = exec_input(&format!("@{}", big.display()));
    assert_eq!(status, 2);
    assert!(stderr.contains("is over 2097152 bytes"), "{stderr}");
    // Flags and --input do not mix.
    let out = quickcell()
        .args(["exec", "--input", "{}", "--code", "return 1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

/// `--version` names quickcell's version, the guest build it carries and
/// the engines.
#[test]
fn version_names_the_guest_build_and_the_engines() {
    let out = quickcell().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("quickcell {} (guest ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains(&quickcell::guest_build()[..16]), "{text}");
    assert!(text.contains(quickcell::ENGINE_VERSIONS), "{text}");
}

/// The engine versions `--version` prints are the ones the lock files pin.
#[test]
fn the_engine_versions_are_the_locked_ones() {
    let locked = |lock: &str, name: &str| -> String {
        let text = std::fs::read_to_string(lock).unwrap();
        let entry = format!("name = \"{name}\"\nversion = \"");
        let at = text
            .find(&entry)
            .unwrap_or_else(|| panic!("{name} in {lock}"))
            + entry.len();
        text[at..].split('"').next().unwrap().to_string()
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let expected = [
        format!(
            "Wasmtime {}",
            locked(&format!("{root}/Cargo.lock"), "wasmtime")
        ),
        format!(
            "rquickjs {}",
            locked(&format!("{root}/guest/Cargo.lock"), "rquickjs")
        ),
    ];
    for version in expected {
        assert!(
            quickcell::ENGINE_VERSIONS.contains(&version),
            "quickcell::ENGINE_VERSIONS ({}) does not say {version}; update it (and the \
             QuickJS-ng release rquickjs bundles)",
            quickcell::ENGINE_VERSIONS
        );
    }
}

/// `quickcell init` writes a starter configuration that runs as it is, whose
/// commented keys are real keys at their defaults, and never overwrites a
/// file.
#[test]
fn init_writes_a_starter_config_once() {
    let dir = std::env::temp_dir().join(format!("quickcell-init-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = quickcell().current_dir(&dir).arg("init").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let path = dir.join("quickcell.toml");
    let written = std::fs::read_to_string(&path).unwrap();

    // It runs as it is.
    let (code, v, stderr) = run_json(&[
        "exec",
        "--config",
        path.to_str().unwrap(),
        "--state-dir",
        dir.join("state").to_str().unwrap(),
        "--code",
        "return 6 * 7",
    ]);
    assert_eq!((code, &v["value"]), (0, &serde_json::json!(42)), "{stderr}");

    // Every commented `key = value` and table is real: uncommented, the file
    // loads, and the limits it shows are the defaults.
    let uncommented: String = written
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    }) =>
            {
                rest
            }
            _ => line,
        })
        .fold(String::new(), |text, line| text + line + "\n");
    assert!(uncommented.contains("\n[[tools]]\n"), "{uncommented}");
    let full = dir.join("full.toml");
    std::fs::write(&full, &uncommented).unwrap();
    let config = quickcell::Config::load(&full).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
    assert_eq!(config.limits, quickcell::Limits::default());

    // A second init refuses, and leaves the file as it was.
    std::fs::write(&path, "# mine\n").unwrap();
    let out = quickcell().current_dir(&dir).arg("init").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not overwrite"),
        "{out:?}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# mine\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Shell completions and the manual page come from the command's own
/// definition.
#[test]
fn completions_and_the_manual_page_are_generated() {
    let out = quickcell().args(["completions", "bash"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let script = String::from_utf8(out.stdout).unwrap();
    assert!(script.contains("_quickcell()"), "{script}");
    for command in ["exec", "wait", "serve", "init"] {
        assert!(script.contains(command), "{command} in {script}");
    }
    let out = quickcell().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );

    let out = quickcell().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.contains(&format!(
            ".TH quickcell 1  \"quickcell {}",
            env!("CARGO_PKG_VERSION")
        )),
        "{page}"
    );
    assert!(page.contains("exec"), "{page}");
}
