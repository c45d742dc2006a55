//! The README's first command and its MCP client example, run as a newcomer
//! would run them (its Rust examples are doc tests of the library).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const README: &str = include_str!("../../README.md");
const CHECKOUT: &str = env!("CARGO_MANIFEST_DIR");

/// The body of the README's first code block fenced as `lang`.
fn readme_block(lang: &str) -> &'static str {
    let fence = format!("\n```{lang}\n");
    let start = README.find(&fence).expect("the README has the block") + fence.len();
    let len = README[start..].find("\n```\n").expect("the block ends");
    &README[start..start + len + 1]
}

#[test]
fn the_first_command_runs_the_demo_cell() {
    // `scripts/setup && cargo run -q -- exec --workspace . --file fixtures/demo.js`
    let command = readme_block("sh").lines().next().unwrap();
    assert!(
        command.ends_with("-- exec --workspace . --file fixtures/demo.js"),
        "{command}"
    );
    let state = tempdir();
    let out = Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .current_dir(CHECKOUT)
        .args(["exec", "--workspace", ".", "--file", "fixtures/demo.js"])
        .args(["--state-dir", state.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(
        result["value"],
        serde_json::json!({"readmePage": "truncated", "sandbox": ["undefined", "undefined"]})
    );
    let output = result["output"].as_array().unwrap();
    let found = output[0]["text"].as_str().unwrap();
    assert!(
        found.starts_with("find found ") && found.ends_with(" Rust files in host/src"),
        "{found}"
    );
    assert_eq!(output[1]["text"], "README starts with: # quickcell");
    let caps = output[2]["value"].as_array().unwrap();
    assert_eq!(caps.len(), 3, "{caps:?}");
    assert!(caps
        .iter()
        .all(|c| c.as_str().unwrap().starts_with("host/src/")));
    assert_eq!(result["telemetry"]["callCount"], 3);
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn the_python_sdk_example_talks_to_quickcell_serve() {
    let script = readme_block("python");
    let dir = tempdir();
    std::fs::write(dir.join("client.py"), script).unwrap();
    // The example starts `quickcell` from the PATH, as an installed one is.
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_quickcell")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(crate::mcp::python())
        .current_dir(&dir)
        .env("PATH", path)
        .arg("client.py")
        .output()
        .expect("run the Python MCP SDK (scripts/setup-tests installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "6\n");
    // `quickcell serve` kept its state in the working directory.
    assert!(dir.join(".quickcell").is_dir());
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("quickcell-readme-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
