//! The MCP conformance suite (`@modelcontextprotocol/conformance`, pinned
//! and installed into `.npm-mcp` by `scripts/setup-tests`, run by its Node
//! 22) against `quickcell serve --http`: every scenario that the revisions
//! 2026-07-28 and 2025-11-25 require passes, but for the checks that do
//! not apply to quickcell, each named with its reason in
//! `fixtures/mcp/conformance-expected-failures.yml`. A listed check whose
//! scenario passes whole fails the run (a stale entry).

use crate::mcp::HttpServer;
use std::process::Command;

const NPM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.npm-mcp/node_modules");

fn run_suite(revision: &str) {
    let server = HttpServer::spawn(|port| {
        let state =
            std::env::temp_dir().join(format!("quickcell-conformance-{}", uuid::Uuid::new_v4()));
        let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
        command
            .args(["serve", "--http", &format!("127.0.0.1:{port}")])
            .arg("--state-dir")
            .arg(state);
        command
    });
    let results = std::env::temp_dir().join(format!(
        "quickcell-conformance-out-{}",
        uuid::Uuid::new_v4()
    ));
    let out = Command::new(format!("{NPM}/.bin/node"))
        .arg(format!(
            "{NPM}/@modelcontextprotocol/conformance/dist/index.js"
        ))
        .args(["server", "--url", &server.url, "--requirements", revision])
        .arg("--expected-failures")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/fixtures/mcp/conformance-expected-failures.yml"
        ))
        .arg("-o")
        .arg(&results)
        .output()
        .expect("run the conformance suite (scripts/setup-tests installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or(&stdout)
        .to_string();
    eprintln!("conformance --requirements {revision}:{summary}");
    assert!(
        out.status.success(),
        "the conformance suite failed for {revision}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(summary.contains("Baseline check passed"), "{summary}");
    let _ = std::fs::remove_dir_all(&results);
}

#[test]
fn the_mcp_conformance_suite_passes_for_2026_07_28() {
    run_suite("2026-07-28");
}

#[test]
fn the_mcp_conformance_suite_passes_for_2025_11_25() {
    run_suite("2025-11-25");
}
