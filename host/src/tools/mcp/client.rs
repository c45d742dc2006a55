//! The client side (feature `mcp-client`): connections to downstream
//! servers over rmcp, their tools as [`Tool`]s, and their availability.

use super::*;
use crate::tools::{async_trait, CancelSignal, Tool, ToolError, ToolErrorCode};
use anyhow::{anyhow, bail, Context as _};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{RoleClient, RunningService, ServiceExt as _};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::io::AsyncReadExt as _;

/// Longest reason shown in an outage note, in characters.
const MAX_REASON_CHARS: usize = 300;

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
                crate::tls::install_default_provider();
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
