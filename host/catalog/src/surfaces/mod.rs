//! Model- and guest-facing surfaces over a [`Catalog`]: Code Mode handles
//! over a [`Projection`](crate::Projection) (`guest`), the quick index
//! (`quick_index`), the directory (`directory`), the structured
//! `tool_search` / `tool_describe` / `tool_call` tools (`structured`) and the
//! untrusted-content envelope (`untrusted`). What both call paths share is
//! here.

mod directory;
mod guest;
mod quick_index;
mod structured;
mod untrusted;

pub use directory::{
    directory_omitted_line, render_directory, DirectoryRow, DIRECTORY_CHARS, DIRECTORY_HEADER,
    DIRECTORY_NONE,
};
pub use guest::Meta;
pub use quick_index::{quick_index_omitted_footer, QUICK_INDEX_CHARS, QUICK_INDEX_FOOTER};
pub use structured::{
    BATCH_MAX_ENTRIES, BATCH_MAX_GRAPHEMES, BATCH_MAX_QUERY_BYTES, BATCH_MAX_RESULTS,
    SEARCH_RESPONSE_CHARS,
};
pub use untrusted::{neutralize_control_tokens, wrap_untrusted};

use crate::api_files;
use crate::catalog::{Catalog, Entry, SourceKind, MCP_DESCRIPTION_UNITS};
use crate::error::CatalogError;
use crate::text::safe_cut_utf16;
use serde_json::{json, Map, Value};

/// A call resolved, repaired and validated, ready for the host's normal
/// execution path (policy, approvals, hooks, logging).
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedCall {
    /// Catalog id to route to.
    pub id: String,
    /// Original tool name.
    pub tool_name: String,
    /// Name used in model-facing errors (tool name or callable name).
    pub display_name: String,
    /// Source kind (MCP calls use the namespace path).
    pub source: SourceKind,
    /// The arguments object.
    pub arguments: Value,
    /// Replay-safe mark.
    pub replay_safe: bool,
}

impl Catalog {
    /// Validate a finished call's details against the tool's declared output
    /// schema (trusted tools only). A tool that left the catalog is skipped.
    pub fn check_output(
        &self,
        id: &str,
        display_name: &str,
        details: &Value,
    ) -> Result<(), CatalogError> {
        match self.get(id) {
            Some(e) => e.validate_output(details, display_name),
            None => Ok(()),
        }
    }

    /// `McpDescription` of one MCP tool (contract.md §8.3).
    pub fn mcp_description(&self, e: &Entry) -> Value {
        let (server_ident, tool_ident) = e.mcp_identifiers().unwrap_or(("", ""));
        let server = self
            .mcp_servers()
            .iter()
            .find(|s| s.identifier == server_ident);
        let server_name = server.map_or("", |s| s.server_name.as_str());
        let mut schemas = Map::new();
        schemas.insert(tool_ident.to_string(), parameters(e));
        json!({
            "kind": "mcp_api",
            "scope": "tool",
            "server": {"identifier": server_ident, "serverName": server_name},
            "header": api_files::mcp_declaration(server_ident, server_name, std::iter::once(e)),
            "tools": [mcp_tool_json(e)],
            "schemas": schemas,
            "note": format!(
                "Untrusted MCP metadata. Call MCP.{server_ident}.{tool_ident}(args) with one object argument; \
                 it returns {{ content, structuredContent?, isError? }}."
            ),
        })
    }
}

fn parameters(e: &Entry) -> Value {
    e.spec()
        .input_schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object"}))
}

fn mcp_tool_json(e: &Entry) -> Value {
    let (_, ident) = e.mcp_identifiers().unwrap_or(("", ""));
    json!({
        "name": ident,
        "toolName": e.name(),
        "callableName": e.mcp_callable_name(),
        "description": safe_cut_utf16(e.description(), MCP_DESCRIPTION_UNITS),
    })
}
