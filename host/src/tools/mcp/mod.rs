//! MCP client: the tools of downstream MCP servers as catalog tools.
//!
//! Servers are declared in the configuration as `[mcp.servers.NAME]` with
//! either `command` (+ optional `args` and `env`; stdio transport) or `url`
//! (streamable HTTP). [`RuntimeBuilder::build`](crate::RuntimeBuilder::build)
//! connects to every server at once, lists its tools, and adds them to the
//! catalog as untrusted `mcp` tools: cells call them as
//! `MCP.<server>.<tool>(args)` or through `catalog.search` handles, with the
//! same dispatch, limits and telemetry as other tools, and get the MCP
//! result in its native shape `{ content, structuredContent?, isError? }`.
//!
//! # Secure defaults
//!
//! - A stdio server runs without a shell, with an empty environment except
//!   `PATH` and `HOME` (the host's) plus the entries of its `env` table,
//!   its stderr captured (the last [`SERVER_STDERR_TAIL_BYTES`] bytes appear
//!   in error messages), and in its own process, killed when the runtime or
//!   the connection is dropped.
//! - MCP tools are untrusted: never replay-safe (a `restartSafe` cell cannot
//!   call them), their schemas are never indexed, and their descriptions are
//!   cut to 512 UTF-16 code units wherever they are shown.
//!
//! # Caps
//!
//! | cap | unit | default |
//! | --- | --- | --- |
//! | connecting and listing tools at startup | ms per server | [`MCP_CONNECT_TIMEOUT_MS`] = 10,000 |
//! | one tool call (`timeout_ms`) | ms per call | [`DEFAULT_MCP_CALL_TIMEOUT_MS`] = 60,000, at most [`MAX_MCP_CALL_TIMEOUT_MS`] = 600,000 |
//! | tools taken from one server | tools | [`MAX_MCP_TOOLS_PER_SERVER`] = 1,000 (more fails that server) |
//! | one message from a server | bytes | 16 MiB (rmcp's line limit over stdio, JSON body limit over HTTP) |
//!
//! A result that reaches a cell is further bounded by the cell's reply inbox
//! (`min(memoryLimitBytes, maxSnapshotBytes)`).
//!
//! # Outages
//!
//! A server that cannot be reached at startup contributes no tools and is
//! reported on every result as `unavailableMcpServers` with a `note`; cells
//! that do not use it run normally. Its tools join the catalog only when a
//! new runtime is built (the catalog, and the callable names parked cells
//! rely on, never change under a running runtime). A server whose
//! connection breaks during a call rejects that call with a `tool_error`
//! naming the server; it is reported as unavailable until the next call to
//! it reconnects.

#[cfg(feature = "mcp-client")]
mod client;
#[cfg(not(feature = "mcp-client"))]
mod disabled;

#[cfg(feature = "mcp-client")]
pub(crate) use client::McpClients;
#[cfg(not(feature = "mcp-client"))]
pub(crate) use disabled::McpClients;

use std::collections::BTreeMap;

/// Time allowed to start or reach a server, complete the MCP handshake and
/// list its tools, in milliseconds.
pub const MCP_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Default wall-clock limit of one MCP tool call, in milliseconds.
pub const DEFAULT_MCP_CALL_TIMEOUT_MS: u64 = 60_000;
/// Largest `timeout_ms` a server may configure, in milliseconds.
pub const MAX_MCP_CALL_TIMEOUT_MS: u64 = 600_000;
/// Most tools taken from one server; a server listing more is unavailable.
pub const MAX_MCP_TOOLS_PER_SERVER: usize = 1_000;
/// Bytes of a stdio server's stderr kept for error messages (the tail).
pub const SERVER_STDERR_TAIL_BYTES: usize = 2_048;

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// Start `command` with `args` and speak MCP over its stdin/stdout.
    Stdio {
        /// Program to run (looked up in `PATH` when it has no `/`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment entries added to `PATH` and `HOME`.
        env: BTreeMap<String, String>,
    },
    /// Speak MCP over streamable HTTP at this URL (`http://` or `https://`).
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:8000/mcp`.
        url: String,
    },
}

/// One `[mcp.servers.NAME]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// The server's name: the `NAME` of the table. Its camel-cased form is
    /// the `MCP.<server>` identifier cells use.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Wall-clock limit of one call, in milliseconds
    /// ([`DEFAULT_MCP_CALL_TIMEOUT_MS`], at most [`MAX_MCP_CALL_TIMEOUT_MS`]).
    pub timeout_ms: u64,
}

impl McpServerConfig {
    /// A stdio server with no extra environment and the default timeout.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: &[&str]) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Stdio {
                command: command.into(),
                args: args.iter().map(|s| s.to_string()).collect(),
                env: BTreeMap::new(),
            },
            timeout_ms: DEFAULT_MCP_CALL_TIMEOUT_MS,
        }
    }

    /// A streamable HTTP server with the default timeout.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Http { url: url.into() },
            timeout_ms: DEFAULT_MCP_CALL_TIMEOUT_MS,
        }
    }

    /// Sets the per-call timeout (clamped to 1–[`MAX_MCP_CALL_TIMEOUT_MS`]).
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = ms.clamp(1, MAX_MCP_CALL_TIMEOUT_MS);
        self
    }
}

/// The server of one `[mcp.servers.NAME]` table, from its keys as the
/// configuration parser ([`crate::Config`]) read them; the error names the
/// key.
pub(crate) fn server_from_keys(
    name: &str,
    command: Option<String>,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    url: Option<String>,
    timeout_ms: Option<i64>,
) -> Result<McpServerConfig, String> {
    let at = format!("mcp.servers.{name}");
    if name.trim().is_empty() {
        return Err("an MCP server name must not be empty".into());
    }
    let timeout_ms = match timeout_ms {
        None => DEFAULT_MCP_CALL_TIMEOUT_MS,
        Some(n) if n > 0 => (n as u64).min(MAX_MCP_CALL_TIMEOUT_MS),
        Some(_) => return Err(format!("`{at}.timeout_ms` must be a positive integer")),
    };
    let transport = match (command, url) {
        (Some(command), None) if !command.is_empty() => McpTransport::Stdio { command, args, env },
        (None, Some(url)) => {
            if !args.is_empty() || !env.is_empty() {
                return Err(format!(
                    "`{at}`: `args` and `env` apply to `command` servers only"
                ));
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("`{at}.url` must start with http:// or https://"));
            }
            McpTransport::Http { url }
        }
        (Some(_), Some(_)) => return Err(format!("`{at}`: set `command` or `url`, not both")),
        _ => return Err(format!("`{at}` needs a non-empty `command` or a `url`")),
    };
    Ok(McpServerConfig {
        name: name.to_owned(),
        transport,
        timeout_ms,
    })
}
