//! The `quickcell` binary: exit codes, input forms and configuration.

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn quickcell() -> Command {
    Command::new(env!("CARGO_BIN_EXE_quickcell"))
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

    let mut child = quickcell()
        .args(["exec", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"return 'from stdin'")
        .unwrap();
    let out = child.wait_with_output().unwrap();
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

#[test]
fn corrupt_module_cache_is_rebuilt() {
    let dir = std::env::temp_dir().join(format!("quickcell-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let run = || {
        quickcell()
            .env("QUICKCELL_CACHE_DIR", &dir)
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
