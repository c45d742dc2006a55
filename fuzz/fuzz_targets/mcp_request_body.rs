//! An MCP request body (HTTP POST or one stdio line): JSON-RPC message
//! parsing and the `exec` / `wait` argument checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quickcell::testing::fuzz::mcp_request_body(data);
});
