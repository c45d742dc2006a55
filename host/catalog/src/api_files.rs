//! `API.read(path)` virtual declaration files (contract.md §8.4).
//!
//! Scheme: `results.d.ts`, `tools/<callableName>.d.ts` for every native and
//! client tool global, `mcp/<server>.d.ts` for every MCP server identifier.

use crate::catalog::{Catalog, Entry, MCP_DESCRIPTION_UNITS};
use crate::error::{CatalogError, ErrorKind};
use crate::projection::{Projection, MAX_API_PATH_BYTES};
use crate::text::safe_cut_utf16;

/// The static `results.d.ts` file.
pub const RESULTS_DTS: &str = r#"/** Saved results: detached JSON copies kept for this agent run and catalog. */
declare namespace results {
  /** Descriptor returned by save(); at most 768 bytes serialized. */
  type Descriptor = {
    id: string;            // "result_<uuid>"
    bytes: number;         // UTF-8 bytes of the saved JSON
    count: number;         // array length, object key count, or 1
    shape: string;         // one-line sampled shape
    preview: unknown;      // the JSON itself if <= 256 bytes, else a sample
    previewTruncated: boolean;
  };
  /** Store a detached JSON copy. Limits: 64 entries; min(memoryLimitBytes, maxSnapshotBytes) bytes; no eviction. */
  function save(value: unknown): Promise<Descriptor>;
  /** A fresh detached copy. Missing/expired ids reject. */
  function load(id: string): Promise<unknown>;
  /** Delete a saved result; resolves true. */
  function delete(id: string): Promise<true>;
}
// Lifetime: later cells of the same agent run can load saved results; they are
// cleared on abort, owner replacement or a permission change, and unavailable in
// restartSafe cells.
"#;

fn comment(text: &str) -> String {
    text.replace("*/", "*\\/")
}

fn doc_comment(lines: &[String]) -> String {
    let mut s = String::from("/**\n");
    for l in lines {
        for part in l.lines() {
            s.push_str(" * ");
            s.push_str(&comment(part));
            s.push('\n');
        }
    }
    s.push_str(" */\n");
    s
}

/// `tools/<callableName>.d.ts` for one native or client tool.
pub fn tool_declaration(callable_name: &str, entry: &Entry) -> String {
    let mut lines = Vec::new();
    if !entry.description().is_empty() {
        lines.push(entry.description().to_string());
    }
    lines.push(format!(
        "Tool \"{}\" ({} tool{}).",
        entry.name(),
        entry.kind().as_str(),
        if entry.replay_safe() {
            ", replay-safe"
        } else {
            ""
        }
    ));
    if entry.output_hint().is_none() {
        lines.push("Output shape unknown: inspect the value before relying on fields.".to_string());
    }
    let input = entry.input_hint().unwrap_or("unknown");
    let output = entry.output_hint().unwrap_or("unknown");
    format!(
        "{}declare function {callable_name}(input?: {input}): Promise<{output}>;\n",
        doc_comment(&lines)
    )
}

/// `mcp/<server>.d.ts` (also the `$api` header) for the given tools of one
/// server. MCP metadata is untrusted: descriptions are safe-cut to 512 code
/// units and input types are not derived from their schemas.
pub fn mcp_declaration<'a>(
    server_ident: &str,
    server_name: &str,
    entries: impl Iterator<Item = &'a Entry>,
) -> String {
    let mut s = format!(
        "// MCP server \"{}\" (untrusted metadata). Each method takes one object argument.\n\
         // Use MCP.{server_ident}.$api(method, {{ schema: true }}) for input schemas.\n\
         type McpResult = {{ content: unknown[]; structuredContent?: unknown; isError?: boolean }};\n\
         declare namespace MCP.{server_ident} {{\n",
        comment(server_name).replace('\n', " ")
    );
    for e in entries {
        let (_, ident) = e.mcp_identifiers().unwrap_or(("", ""));
        let mut lines = Vec::new();
        let d = safe_cut_utf16(e.description(), MCP_DESCRIPTION_UNITS);
        if !d.is_empty() {
            lines.push(d.to_string());
        }
        lines.push(format!("MCP tool \"{}\".", e.name()));
        for l in doc_comment(&lines).lines() {
            s.push_str("  ");
            s.push_str(l);
            s.push('\n');
        }
        s.push_str(&format!(
            "  function {ident}(args: Record<string, unknown>): Promise<McpResult>;\n"
        ));
    }
    s.push_str("}\n");
    s
}

impl Catalog {
    /// Every readable `API.read` path, sorted.
    pub fn api_files(&self, projection: &Projection) -> Vec<String> {
        let mut v = vec!["results.d.ts".to_string()];
        v.extend(
            projection
                .bindings()
                .iter()
                .map(|b| format!("tools/{}.d.ts", b.callable_name)),
        );
        v.extend(
            self.mcp_servers()
                .iter()
                .map(|s| format!("mcp/{}.d.ts", s.identifier)),
        );
        v.sort();
        v
    }

    /// `API.read(path)`. Paths with a `.` or `..` segment are rejected with
    /// `invalid API file path`; unknown paths with `Unknown API file: <path>`.
    ///
    /// A path longer than [`crate::MAX_API_PATH_BYTES`] is rejected as
    /// unknown at once (the error states its length, not the path).
    pub fn api_read(&self, projection: &Projection, path: &str) -> Result<String, CatalogError> {
        if path.len() > MAX_API_PATH_BYTES {
            return Err(CatalogError::new(
                ErrorKind::UnknownApiFile,
                format!(
                    "Unknown API file: the path is {} bytes long; API file paths are at most {MAX_API_PATH_BYTES} bytes.",
                    path.len()
                ),
            ));
        }
        if path.split(['/', '\\']).any(|seg| seg == "." || seg == "..") {
            return Err(CatalogError::new(
                ErrorKind::InvalidApiPath,
                "invalid API file path",
            ));
        }
        let unknown = || {
            CatalogError::new(
                ErrorKind::UnknownApiFile,
                format!("Unknown API file: {path}"),
            )
        };
        if path == "results.d.ts" {
            return Ok(RESULTS_DTS.to_string());
        }
        if let Some(name) = path
            .strip_prefix("tools/")
            .and_then(|r| r.strip_suffix(".d.ts"))
        {
            let b = projection.resolve(name).ok_or_else(unknown)?;
            let e = self.get(&b.id).ok_or_else(unknown)?;
            return Ok(tool_declaration(&b.callable_name, e));
        }
        if let Some(server) = path
            .strip_prefix("mcp/")
            .and_then(|r| r.strip_suffix(".d.ts"))
        {
            let s = self
                .mcp_servers()
                .iter()
                .find(|s| s.identifier == server)
                .ok_or_else(unknown)?;
            return Ok(mcp_declaration(
                &s.identifier,
                &s.server_name,
                self.mcp_server_entries(s),
            ));
        }
        Err(unknown())
    }
}
