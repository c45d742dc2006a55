//! quickcell's integration tests: one test binary, one module per area.
//! Every test runs real cells through the library or the built binary.

mod api;
mod approvals;
mod bridge;
mod cancel;
mod catalog;
mod cli;
mod client_tools;
mod codex;
mod conformance;
mod exec;
mod faults;
mod fuzz;
// The artifact and compile-on-first-use checks need Cranelift.
#[cfg(feature = "compiler")]
mod guest;
mod hostile;
mod http;
mod limits;
mod mcp;
mod mcp_client;
mod mcp_control;
mod metering;
mod observability;
mod output;
mod policy;
mod postgres;
mod readme;
mod shutdown;
mod source;
mod store;
mod suspend;
mod usage;
// The guest module is embedded for tests only with Cranelift.
#[cfg(feature = "compiler")]
mod wit;

use quickcell::{CellResult, ExecInput, Limits, Runtime};
use serde_json::Value;

/// A runtime with the given limits (the engine is shared process-wide).
pub async fn runtime(limits: Limits) -> Runtime {
    Runtime::builder()
        .limits(limits)
        .build()
        .await
        .expect("runtime builds")
}

/// Runs `code` with default limits.
pub async fn run(code: &str) -> CellResult {
    run_with(Limits::default(), code).await
}

/// Runs `code` with `limits`.
pub async fn run_with(limits: Limits, code: &str) -> CellResult {
    runtime(limits)
        .await
        .exec(ExecInput::new("test cell", code))
        .await
}

/// The result as a JSON value (what a caller sees in the structured form,
/// e.g. MCP's `structuredContent`).
pub fn json(result: &CellResult) -> Value {
    serde_json::to_value(result).unwrap()
}

/// The completed value, panicking with the whole result otherwise.
pub fn value(result: &CellResult) -> Value {
    match result {
        CellResult::Completed(c) => c.value.clone(),
        other => panic!("expected completed, got {}", other.to_json()),
    }
}

/// The failed result, panicking otherwise.
pub fn failed(result: &CellResult) -> &quickcell::Failed {
    match result {
        CellResult::Failed(f) => f,
        other => panic!("expected failed, got {}", other.to_json()),
    }
}

/// The waiting result, panicking otherwise.
pub fn waiting(result: &CellResult) -> &quickcell::Waiting {
    match result {
        CellResult::Waiting(w) => w,
        other => panic!("expected waiting, got {}", other.to_json()),
    }
}

/// Texts of the result's `text` output entries.
pub fn texts(result: &CellResult) -> Vec<String> {
    result
        .output()
        .iter()
        .filter(|e| e["type"] == "text")
        .map(|e| e["text"].as_str().unwrap().to_string())
        .collect()
}

/// Runs the `quickcell` binary with `args`: its exit status, its stdout as
/// JSON (`null` when it is not), and its stderr.
pub fn quickcell(args: &[&str]) -> (i32, Value, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quickcell"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        serde_json::from_slice(&out.stdout).unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}
