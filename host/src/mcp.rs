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

use crate::tools::{async_trait, CancelSignal, Tool, ToolError, ToolErrorCode};
use anyhow::{anyhow, bail, Context as _};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService, ServiceExt as _};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;

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
/// Longest reason shown in an outage note, in characters.
const MAX_REASON_CHARS: usize = 300;

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

/// One tool as a server listed it.
#[derive(Debug, Clone)]
pub(crate) struct ListedTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Option<Value>,
}

type Client = RunningService<RoleClient, ()>;

/// The live connection to one server, reconnected on demand.
pub(crate) struct McpConnection {
    config: McpServerConfig,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// Why the server is unavailable, while it is.
    down: StdMutex<Option<String>>,
    stderr_tail: Arc<StdMutex<Vec<u8>>>,
    /// The task copying a stdio server's stderr into `stderr_tail`.
    stderr_reader: StdMutex<Option<tokio::task::JoinHandle<()>>>,
    /// When the last reconnect failed: calls within
    /// [`RECONNECT_BACKOFF`] of it fail at once instead of queueing up
    /// behind another attempt.
    last_failed_reconnect: StdMutex<Option<std::time::Instant>>,
}

/// After a failed reconnect, calls fail at once for this long.
const RECONNECT_BACKOFF: Duration = Duration::from_secs(2);

impl McpConnection {
    fn new(config: McpServerConfig) -> Self {
        Self {
            config,
            client: tokio::sync::Mutex::new(None),
            down: StdMutex::new(None),
            stderr_tail: Arc::new(StdMutex::new(Vec::new())),
            stderr_reader: StdMutex::new(None),
            last_failed_reconnect: StdMutex::new(None),
        }
    }

    /// The server's configured name.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// Why the server is unavailable, if it is.
    pub(crate) fn down_reason(&self) -> Option<String> {
        self.down.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_down(&self, reason: Option<String>) {
        *self.down.lock().unwrap_or_else(|e| e.into_inner()) = reason;
    }

    /// Lets the stderr reader of a server that ended catch up (it ends
    /// when the pipe closes), so error messages include the last lines.
    async fn settle_stderr(&self) {
        let reader = self
            .stderr_reader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
        }
    }

    fn stderr_suffix(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&tail);
        let text = text.trim();
        if text.is_empty() {
            String::new()
        } else {
            format!("; server stderr: {text}")
        }
    }

    /// Starts or reaches the server and completes the handshake.
    async fn connect(&self) -> anyhow::Result<Client> {
        match &self.config.transport {
            McpTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                // Killed when the transport is dropped, even while the Tokio
                // runtime shuts down (rmcp's own cleanup needs a live one).
                cmd.args(args).env_clear().kill_on_drop(true);
                for key in ["PATH", "HOME"] {
                    if let Some(v) = std::env::var_os(key) {
                        cmd.env(key, v);
                    }
                }
                cmd.envs(env);
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .with_context(|| format!("cannot start `{command}`"))?;
                if let Some(mut stderr) = stderr {
                    let tail = self.stderr_tail.clone();
                    tail.lock().unwrap_or_else(|e| e.into_inner()).clear();
                    let reader = tokio::spawn(async move {
                        let mut buf = [0u8; 1024];
                        while let Ok(n) = stderr.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                            t.extend_from_slice(&buf[..n]);
                            let excess = t.len().saturating_sub(SERVER_STDERR_TAIL_BYTES);
                            t.drain(..excess);
                        }
                    });
                    *self.stderr_reader.lock().unwrap_or_else(|e| e.into_inner()) = Some(reader);
                }
                Ok(().serve(transport).await?)
            }
            McpTransport::Http { url } => {
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
                Ok(().serve(transport).await?)
            }
        }
    }

    /// Connects (at most [`MCP_CONNECT_TIMEOUT_MS`]) and lists the tools.
    async fn start(&self) -> anyhow::Result<Vec<ListedTool>> {
        let timeout = Duration::from_millis(MCP_CONNECT_TIMEOUT_MS);
        let listed = tokio::time::timeout(timeout, async {
            let client = self.connect().await?;
            let tools = client.list_all_tools().await?;
            anyhow::Ok((client, tools))
        })
        .await
        .map_err(|_| anyhow!("no answer within {MCP_CONNECT_TIMEOUT_MS} ms"))?;
        let (client, tools) = match listed {
            Ok(x) => x,
            Err(e) => {
                self.settle_stderr().await;
                bail!("{e:#}{}", self.stderr_suffix());
            }
        };
        if tools.len() > MAX_MCP_TOOLS_PER_SERVER {
            bail!(
                "it lists {} tools; at most {MAX_MCP_TOOLS_PER_SERVER} are taken from one server",
                tools.len()
            );
        }
        *self.client.lock().await = Some(Arc::new(client));
        Ok(tools
            .into_iter()
            .map(|t| ListedTool {
                name: t.name.to_string(),
                description: t.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
                output_schema: t.output_schema.map(|s| Value::Object((*s).clone())),
            })
            .collect())
    }

    /// The current client, reconnecting when the last one closed.
    async fn client(&self) -> Result<Arc<Client>, String> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.is_transport_closed() {
                return Ok(client.clone());
            }
        }
        *slot = None;
        let recent_failure = *self
            .last_failed_reconnect
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if recent_failure.is_some_and(|t| t.elapsed() < RECONNECT_BACKOFF) {
            return Err(self
                .down_reason()
                .unwrap_or_else(|| "reconnecting failed moments ago".to_string()));
        }
        let timeout = Duration::from_millis(MCP_CONNECT_TIMEOUT_MS);
        let failed = || {
            *self
                .last_failed_reconnect
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        };
        let client = match tokio::time::timeout(timeout, self.connect()).await {
            Ok(Ok(client)) => Arc::new(client),
            Ok(Err(e)) => {
                self.settle_stderr().await;
                let reason = format!("reconnecting failed: {e:#}{}", self.stderr_suffix());
                self.set_down(Some(reason.clone()));
                failed();
                return Err(reason);
            }
            Err(_) => {
                let reason =
                    format!("reconnecting got no answer within {MCP_CONNECT_TIMEOUT_MS} ms");
                self.set_down(Some(reason.clone()));
                failed();
                return Err(reason);
            }
        };
        self.set_down(None);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Calls `tool` with `arguments`; the MCP result in its native shape.
    async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
        cancel: CancelSignal,
    ) -> Result<Value, ToolError> {
        let server = &self.config.name;
        let unavailable = |reason: String| {
            ToolError::new(
                ToolErrorCode::ToolError,
                format!("MCP server `{server}` is unavailable: {reason}"),
            )
        };
        let client = tokio::select! {
            c = self.client() => c.map_err(unavailable)?,
            _ = cancel.cancelled() => {
                return Err(ToolError::new(ToolErrorCode::ToolError, "the MCP call was cancelled"));
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let timeout = Duration::from_millis(self.config.timeout_ms);
        let outcome = tokio::select! {
            r = tokio::time::timeout(timeout, client.call_tool(params)) => r,
            _ = cancel.cancelled() => {
                return Err(ToolError::new(ToolErrorCode::ToolError, "the MCP call was cancelled"));
            }
        };
        match outcome {
            Err(_) => Err(ToolError::new(
                ToolErrorCode::ToolError,
                format!(
                    "MCP server `{server}` did not answer `{tool}` within {} ms",
                    self.config.timeout_ms
                ),
            )),
            Ok(Ok(result)) => {
                let mut out = serde_json::Map::new();
                out.insert(
                    "content".into(),
                    serde_json::to_value(&result.content).unwrap_or(json!([])),
                );
                if let Some(s) = result.structured_content {
                    out.insert("structuredContent".into(), s);
                }
                if let Some(e) = result.is_error {
                    out.insert("isError".into(), Value::Bool(e));
                }
                Ok(Value::Object(out))
            }
            Ok(Err(e)) => {
                if client.is_transport_closed() {
                    self.settle_stderr().await;
                    let reason = format!("the connection closed during the call ({e})");
                    self.set_down(Some(reason.clone()));
                    Err(ToolError::new(
                        ToolErrorCode::ToolError,
                        format!(
                            "MCP server `{server}` failed during `{tool}`: {reason}{}. \
                             The call's effect is unknown; the server is reconnected on next use.",
                            self.stderr_suffix()
                        ),
                    ))
                } else {
                    Err(ToolError::new(
                        ToolErrorCode::ToolError,
                        format!("MCP server `{server}` rejected `{tool}`: {e}"),
                    ))
                }
            }
        }
    }
}

/// A downstream MCP tool, as a [`Tool`].
pub(crate) struct McpTool {
    connection: Arc<McpConnection>,
    listed: ListedTool,
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.listed.name
    }
    fn description(&self) -> &str {
        &self.listed.description
    }
    fn input_schema(&self) -> Value {
        self.listed.input_schema.clone()
    }
    fn output_schema(&self) -> Option<Value> {
        self.listed.output_schema.clone()
    }
    async fn call(&self, args: Value, cancel: CancelSignal) -> Result<Value, ToolError> {
        let arguments = match args {
            Value::Null => JsonObject::new(),
            Value::Object(map) => map,
            other => {
                let kind = match other {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    _ => "a boolean",
                };
                return Err(ToolError::new(
                    ToolErrorCode::InvalidInput,
                    format!(
                        "MCP tools take one object argument; `{}` got {kind}",
                        self.listed.name
                    ),
                ));
            }
        };
        self.connection
            .call(&self.listed.name, arguments, cancel)
            .await
    }
}

/// One configured server after startup: its tools, or why it has none.
pub(crate) struct ConnectedServer {
    pub connection: Arc<McpConnection>,
    /// The server's tools (empty when it was unavailable at startup).
    pub tools: Vec<Arc<dyn Tool>>,
}

/// The runtime's MCP servers and their current availability.
#[derive(Default)]
pub(crate) struct McpClients {
    servers: Vec<Arc<McpConnection>>,
}

impl McpClients {
    /// Connects to every server concurrently and lists its tools. A server
    /// that fails is kept (as unavailable, with the reason) and contributes
    /// no tools.
    pub(crate) async fn start(configs: Vec<McpServerConfig>) -> (Self, Vec<ConnectedServer>) {
        let mut tasks = Vec::new();
        for config in configs {
            let connection = Arc::new(McpConnection::new(config));
            let c = connection.clone();
            tasks.push((
                connection,
                tokio::spawn(async move { c.start().await.map_err(|e| format!("{e:#}")) }),
            ));
        }
        let mut servers = Vec::new();
        let mut connected = Vec::new();
        for (connection, task) in tasks {
            let listed = task
                .await
                .unwrap_or_else(|_| Err("connecting panicked".to_string()));
            let tools = match listed {
                Ok(listed) => listed
                    .into_iter()
                    .map(|listed| {
                        Arc::new(McpTool {
                            connection: connection.clone(),
                            listed,
                        }) as Arc<dyn Tool>
                    })
                    .collect(),
                Err(reason) => {
                    tracing::warn!(server = connection.name(), %reason, "MCP server unavailable");
                    connection.set_down(Some(reason));
                    Vec::new()
                }
            };
            servers.push(connection.clone());
            connected.push(ConnectedServer { connection, tools });
        }
        (Self { servers }, connected)
    }

    /// The servers unavailable right now, by configured name, and a note
    /// saying why (`None` when all are available).
    pub(crate) fn outage(&self) -> Option<(Vec<String>, String)> {
        let down: Vec<(String, String)> = self
            .servers
            .iter()
            .filter_map(|s| s.down_reason().map(|r| (s.name().to_owned(), r)))
            .collect();
        if down.is_empty() {
            return None;
        }
        let reasons: Vec<String> = down
            .iter()
            .map(|(name, reason)| {
                let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
                format!("`{name}`: {reason}")
            })
            .collect();
        let note = format!(
            "Unavailable MCP servers: {}. Their tools cannot be called right now; cells that do not use them are unaffected.",
            reasons.join("; ")
        );
        Some((down.into_iter().map(|(n, _)| n).collect(), note))
    }
}
