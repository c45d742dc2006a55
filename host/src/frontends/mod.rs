//! Front ends: the protocols quickcell is driven by. Each is a folder of its
//! own, uses only [`crate::Runtime`]'s public API and the shared session and
//! run model, and imports no other front end; `Runtime` imports none.
//!
//! - [`mcp`]: the MCP server (`quickcell serve`), stdio and streamable HTTP.
//! - [`codex`]: the Codex code-mode host (`quickcell codex-host`), stdio.

pub(crate) mod codex;
#[cfg(feature = "mcp-server")]
pub(crate) mod mcp;
