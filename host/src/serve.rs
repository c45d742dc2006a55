//! MCP front end: serves quickcell's two operations, `exec` and `wait`, as MCP
//! tools over stdio or streamable HTTP, using `rmcp` (the official Rust MCP SDK).
//!
//! # What clients see
//!
//! - `initialize` / `server/discover` answer with server name `quickcell`, this
//!   crate's version, the `tools` capability only, and a one-sentence
//!   instruction.
//! - `tools/list` returns exactly two tools: `exec` (its description comes from
//!   [`CellService::exec_description`], the quick index of tools) and `wait`.
//!   Their input schemas are fixed here ([`exec_input_schema`],
//!   [`wait_input_schema`]).
//! - With [`ServeMode::Tools`] (`quickcell serve --mode tools`) it returns
//!   `tool_search`, `tool_describe` and `tool_call` instead (tool-search.md
//!   §9–10), over the same catalog and tool implementations, without cells.
//!   Their text content is the compact JSON of the reply, wrapped in the
//!   untrusted-content envelope when it carries MCP or client tool content
//!   (search hits, descriptions, results, errors); `structuredContent` is
//!   the reply itself, unwrapped.
//! - `tools/call` for `exec` or `wait` hands the raw `arguments` object (`{}`
//!   when absent) to [`CellService`], which validates it and returns the
//!   result object. The tool result carries that object twice: as one text
//!   content block holding its compact JSON (inside the untrusted-content
//!   envelope when the cell may carry text from an MCP server or a client
//!   tool, see [`crate::CellResult::untrusted_source`]), and as
//!   `structuredContent`.
//!   `isError` is `true` exactly when the object's `"status"` is `"failed"`.
//!   Any other tool name, and `tools/call` params that do not parse (say,
//!   `arguments` that is not an object), are a JSON-RPC `-32602` (invalid
//!   params) error. A panic inside the service becomes a JSON-RPC `-32603`
//!   (internal error) for that call alone; the server keeps serving.
//!
//! # Session scoping
//!
//! [`CellService`] receives a session id, `mcp-<uuid v4>`, with every call, so
//! parked runs (and whatever else quickcell keys by session) belong to one MCP
//! session:
//!
//! - stdio: one id for the process's one connection;
//! - streamable HTTP: rmcp's session manager builds one handler per MCP
//!   session (created by `initialize`, named by the `Mcp-Session-Id` header),
//!   and each handler draws its own id when it is created.
//!
//! Protocol revision 2026-07-28 has no sessions. Over HTTP the server
//! therefore offers only revisions up to 2025-11-25, so every HTTP client
//! goes through `initialize` and is its own scope: parked runs and session
//! values are never shared between clients. (Should a sessionless request
//! reach a handler anyway, it uses one id drawn per [`serve_http`] call.)
//! Over stdio the connection is the scope whatever the revision.
//!
//! # Transports and robustness
//!
//! - [`serve_stdio`] reads newline-delimited JSON-RPC from stdin and writes to
//!   stdout until the client closes stdin. Nothing else may write to stdout:
//!   logs go to stderr. rmcp answers well-formed JSON that is not a valid
//!   message with `-32600` (invalid request) and, like the other official
//!   SDKs, ignores lines that are not JSON at all. Notifications and
//!   responses sent before the client's first `initialize` (or 2026-07-28
//!   request) are dropped here: rmcp would end the connection on them.
//! - [`serve_http`] serves the streamable HTTP transport at `/mcp` until the
//!   process is killed. A POST body that is not JSON gets HTTP 400 with a
//!   JSON-RPC `-32700` (parse error); JSON that is not a valid JSON-RPC
//!   message gets HTTP 400 with `-32600`; a body over `[http]
//!   max_body_bytes` gets HTTP 413 with `-32600`. Before any of that,
//!   [`guard`] checks the bearer token (401), `Host` and `Origin` (403,
//!   DNS-rebinding protection), a declared body size (413) and the session
//!   cap (503). rmcp adds `Accept`/`Content-Type` checks, and sessions end
//!   after `[http] session_idle_seconds` without traffic.
//!
//! Nothing here panics: schemas are built without unwrapping, and the service
//! runs in its own task so that its panic is caught.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::{
    body::Body,
    http::{header, Method, Request, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage,
        ClientRequest, CustomRequest, CustomResult, ErrorCode, GetMeta as _, Implementation,
        InitializeRequestParams, InitializeResult, JsonObject, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
        ServerJsonRpcMessage, Tool,
    },
    service::{RequestContext, ServerInitializeError},
    transport::{
        async_rw::AsyncRwTransport, streamable_http_server::session::local::LocalSessionManager,
        StreamableHttpServerConfig, StreamableHttpService, Transport,
    },
    ErrorData, RoleServer, ServerHandler, ServiceExt as _,
};
use serde_json::{json, Value};

/// What the MCP server needs from quickcell.
#[async_trait::async_trait]
pub(crate) trait CellService: Send + Sync + 'static {
    /// Runs `exec` with raw MCP arguments for the given MCP session id.
    async fn exec(&self, session: &str, args: serde_json::Value) -> crate::result::CellResult;
    /// Runs `wait` likewise.
    async fn wait(&self, session: &str, args: serde_json::Value) -> crate::result::CellResult;
    /// The `exec` tool's description (it carries a quick index of tools and changes rarely).
    fn exec_description(&self) -> String;
    /// Runs a structured Tool Search operation (`--mode tools`).
    async fn catalog_operation(
        &self,
        operation: CatalogOperation,
        args: serde_json::Value,
    ) -> crate::runtime::CatalogReply;
}

/// Which tools `quickcell serve` offers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ServeMode {
    /// Code Mode: `exec` and `wait` (the default).
    #[default]
    Code,
    /// Structured Tool Search: `tool_search`, `tool_describe` and
    /// `tool_call` over the same catalog, no cells.
    Tools,
}

/// The structured Tool Search operations of [`ServeMode::Tools`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatalogOperation {
    /// `tool_search`.
    Search,
    /// `tool_describe`.
    Describe,
    /// `tool_call`.
    Call,
}

/// `tool_search`'s description.
const TOOL_SEARCH_DESCRIPTION: &str = "Search the tool catalog in English words. Pass `query` \
(and optionally `limit`), or a batch as `queries: [{query, limit?}]` (at most 16 entries, 50 \
results in all). Each hit has an `id` to pass to tool_describe or tool_call, a name, a \
description, its source and a compact input hint.";
/// `tool_describe`'s description.
const TOOL_DESCRIBE_DESCRIPTION: &str = "The full definition of one tool: pass the `id` from \
tool_search (a tool name works too). Returns its description and complete input schema.";
/// `tool_call`'s description.
const TOOL_CALL_DESCRIPTION: &str = "Call one tool: pass the `id` from tool_search and the \
tool's `arguments` object. Trusted tools validate the arguments first; the result is the \
tool's value.";

/// The server's `instructions`, sent with `initialize` and `server/discover`.
const INSTRUCTIONS: &str =
    "Use exec to run JavaScript that calls tools, and wait to resume a parked cell by its runId.";

/// The `wait` tool's description.
const WAIT_DESCRIPTION: &str = "Resumes a parked cell. When exec (or an earlier wait) returns \
{\"status\":\"waiting\",\"runId\":...}, the cell was checkpointed while its tool calls keep \
running; call wait with that runId to restore it, deliver what settled meanwhile and continue. \
Only the session that started the run may wait it. Returns the same result union as exec: \
completed, waiting again, or failed.";

/// How the HTTP front end is guarded (operations.md §2): its caps and the
/// bearer token every request must carry.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Body, session and idle caps, and the accepted origins and hosts.
    pub limits: crate::config::HttpLimits,
    /// The token (`Authorization: Bearer <token>`); `None` serves without
    /// authentication, which only a loopback address may do.
    pub auth_token: Option<String>,
}

impl HttpOptions {
    /// Why serving on `addr` with these options is refused: a non-loopback
    /// address without a token would be reachable by others unauthenticated.
    pub fn refusal(&self, addr: SocketAddr) -> Option<String> {
        (self.auth_token.is_none() && !addr.ip().is_loopback()).then(|| format!(
            "refusing to serve on {addr} without authentication: a non-loopback address is reachable by others. Give a token with --auth-token-file FILE (or QUICKCELL_AUTH_TOKEN), or bind a loopback address such as 127.0.0.1"
        ))
    }

    /// Reads the token from `file` (surrounding whitespace removed).
    ///
    /// # Errors
    ///
    /// When the file cannot be read or holds no token.
    pub fn token_from_file(path: &std::path::Path) -> Result<String, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the auth token file {}: {e}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("the auth token file {} is empty", path.display()));
        }
        Ok(token.to_string())
    }
}

/// The `exec` tool's input schema.
pub(crate) fn exec_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "description": "Short intent, 3–7 words; display only."},
            "code": {
                "type": "string",
                "description": "JavaScript: the body of an async function. Top-level await and return work."
            },
            "restartSafe": {"type": "boolean"},
            "awaitResults": {"type": "boolean"}
        },
        "required": ["title", "code"],
        "additionalProperties": false
    })
}

/// The `wait` tool's input schema.
pub(crate) fn wait_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "runId": {"type": "string", "description": "The runId of a waiting result."}
        },
        "required": ["runId"],
        "additionalProperties": false
    })
}

/// A fresh MCP session id: `mcp-` and a random UUID.
fn new_session_id() -> Arc<str> {
    format!("mcp-{}", uuid::Uuid::new_v4()).into()
}

/// A schema value as the JSON object rmcp's [`Tool`] holds (an empty object
/// for a non-object, which the schemas above never are).
fn schema_object(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The operations a tool call can name.
#[derive(Clone, Copy, Debug)]
enum Operation {
    Exec,
    Wait,
    Catalog(CatalogOperation),
}

impl Operation {
    /// The operations `mode` offers, in `tools/list` order.
    fn offered(mode: ServeMode) -> &'static [Operation] {
        match mode {
            ServeMode::Code => &[Self::Exec, Self::Wait],
            ServeMode::Tools => &[
                Self::Catalog(CatalogOperation::Search),
                Self::Catalog(CatalogOperation::Describe),
                Self::Catalog(CatalogOperation::Call),
            ],
        }
    }

    /// The operation a tool name names in `mode`, if any.
    fn from_tool_name(mode: ServeMode, name: &str) -> Option<Self> {
        Self::offered(mode)
            .iter()
            .copied()
            .find(|op| op.name() == name)
    }

    /// The tool name.
    fn name(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Wait => "wait",
            Self::Catalog(CatalogOperation::Search) => "tool_search",
            Self::Catalog(CatalogOperation::Describe) => "tool_describe",
            Self::Catalog(CatalogOperation::Call) => "tool_call",
        }
    }
}

/// `tool_search`'s input schema.
fn tool_search_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in English words."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most hits for `query`."},
            "queries": {
                "type": "array",
                "maxItems": 16,
                "items": {
                    "type": "object",
                    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
                    "required": ["query"]
                }
            }
        }
    })
}

/// `tool_describe`'s input schema.
fn tool_describe_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"id": {"type": "string", "description": "A tool id from tool_search."}},
        "required": ["id"]
    })
}

/// `tool_call`'s input schema.
fn tool_call_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "A tool id from tool_search."},
            "arguments": {"type": "object", "description": "The tool's arguments."}
        },
        "required": ["id"]
    })
}

/// The MCP tool result of a structured Tool Search operation.
fn catalog_result(reply: crate::runtime::CatalogReply) -> CallToolResult {
    let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(reply.text)]);
    result.structured_content = Some(reply.value);
    result.is_error = Some(reply.is_error);
    result
}

/// The MCP tool result for a quickcell result: its compact JSON as the one
/// text block (wrapped in the untrusted-content envelope when the cell may
/// carry MCP or client content), the result object as `structuredContent`,
/// and `isError` when it failed.
fn tool_result(result: crate::result::CellResult) -> CallToolResult {
    let untrusted = result.untrusted_source();
    let failed = result.status() == "failed";
    let value = serde_json::to_value(&result).unwrap_or(Value::Null);
    let text = value.to_string();
    let text = match untrusted {
        Some(source) => quickcell_catalog::wrap_untrusted(source, &text),
        None => text,
    };
    let mut out = CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
    out.structured_content = Some(value);
    out.is_error = Some(failed);
    out
}

/// The rmcp handler: one per stdio connection, one per HTTP MCP session (and
/// one per sessionless HTTP request).
struct McpServer<S> {
    service: Arc<S>,
    /// Which tools this server offers.
    mode: ServeMode,
    /// This handler's own session id, drawn when it is created.
    session: Arc<str>,
    /// Set once this handler has answered `initialize`, i.e. it is bound to a
    /// (pre-2026-07-28) MCP session and lives as long as that session.
    initialized: AtomicBool,
    /// HTTP only: the id shared by requests served without an MCP session.
    sessionless: Option<Arc<str>>,
}

impl<S: CellService> McpServer<S> {
    /// A handler with a fresh session id.
    fn new(service: Arc<S>, mode: ServeMode, sessionless: Option<Arc<str>>) -> Self {
        Self {
            service,
            mode,
            session: new_session_id(),
            initialized: AtomicBool::new(false),
            sessionless,
        }
    }

    /// The session id to hand to the service for a call on this handler.
    fn scope(&self) -> Arc<str> {
        match &self.sessionless {
            Some(shared) if !self.initialized.load(Ordering::Acquire) => shared.clone(),
            _ => self.session.clone(),
        }
    }

    /// The tool definition of one operation.
    fn tool(&self, operation: Operation) -> Tool {
        match operation {
            Operation::Exec => Tool::new(
                "exec",
                self.service.exec_description(),
                schema_object(exec_input_schema()),
            ),
            Operation::Wait => {
                Tool::new("wait", WAIT_DESCRIPTION, schema_object(wait_input_schema()))
            }
            Operation::Catalog(op) => {
                let (description, schema) = match op {
                    CatalogOperation::Search => {
                        (TOOL_SEARCH_DESCRIPTION, tool_search_input_schema())
                    }
                    CatalogOperation::Describe => {
                        (TOOL_DESCRIBE_DESCRIPTION, tool_describe_input_schema())
                    }
                    CatalogOperation::Call => (TOOL_CALL_DESCRIPTION, tool_call_input_schema()),
                };
                Tool::new(operation.name(), description, schema_object(schema))
            }
        }
    }
}

impl<S: CellService> ServerHandler for McpServer<S> {
    /// Over HTTP only revisions with MCP sessions (up to 2025-11-25) are
    /// offered, so every client is its own scope: parked runs and the
    /// session store are never shared between HTTP clients. Over stdio the
    /// connection is the scope, so every revision is fine.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.sessionless.is_some() {
            std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("quickcell", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // The default body, plus marking this handler as session-bound.
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        self.initialized.store(true, Ordering::Release);
        tracing::debug!(
            session = %self.session,
            client = %request.client_info.name,
            protocol = %result.protocol_version,
            "MCP session initialized"
        );
        Ok(result)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            Operation::offered(self.mode)
                .iter()
                .map(|&op| self.tool(op))
                .collect(),
        ))
    }

    /// rmcp hands over a request whose params do not parse as its method's
    /// as a custom request: answer those of the tools methods with `-32602`
    /// (invalid params) rather than `-32601` (method not found).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        match request.method.as_str() {
            "tools/call" => {
                let params = request.params.unwrap_or(Value::Null);
                let reason = match serde_json::from_value::<CallToolRequestParams>(params) {
                    Err(error) => error.to_string(),
                    Ok(_) => "unexpected shape".to_string(),
                };
                Err(ErrorData::invalid_params(
                    format!("invalid tools/call params: {reason}"),
                    None,
                ))
            }
            "tools/list" => Err(ErrorData::invalid_params("invalid tools/list params", None)),
            _ => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            )),
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        Operation::from_tool_name(self.mode, name).map(|operation| self.tool(operation))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(operation) = Operation::from_tool_name(self.mode, &request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        let session = self.scope();
        let service = self.service.clone();
        // Its own task, so that a panic in the service fails this call alone
        // instead of leaving it unanswered.
        let task = tokio::spawn(async move {
            match operation {
                Operation::Exec => tool_result(service.exec(&session, args).await),
                Operation::Wait => tool_result(service.wait(&session, args).await),
                Operation::Catalog(op) => catalog_result(service.catalog_operation(op, args).await),
            }
        });
        match task.await {
            Ok(result) => Ok(result.into()),
            Err(error) => {
                tracing::error!(tool = operation.name(), %error, "the cell service failed");
                Err(ErrorData::internal_error(
                    format!("{} failed inside the server", operation.name()),
                    None,
                ))
            }
        }
    }
}

/// Serves MCP over stdin/stdout until the client closes stdin. The connection
/// is one MCP session with one session id.
pub(crate) async fn serve_stdio<S: CellService>(
    service: Arc<S>,
    mode: ServeMode,
) -> anyhow::Result<()> {
    let server = McpServer::new(service, mode, None);
    let session = server.session.clone();
    tracing::debug!(%session, "serving MCP over stdio");
    let (stdin, stdout) = rmcp::transport::stdio();
    let transport = LenientStart {
        inner: AsyncRwTransport::new_server(stdin, stdout),
        started: false,
    };
    let running = match server.serve(transport).await {
        Ok(running) => running,
        // The client left before opening a session: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::debug!(%session, "stdin closed before the MCP handshake");
            return Ok(());
        }
        Err(error) => return Err(anyhow::anyhow!("MCP stdio handshake failed: {error}")),
    };
    let reason = running
        .waiting()
        .await
        .context("the MCP stdio service stopped abnormally")?;
    tracing::debug!(%session, ?reason, "MCP stdio connection closed");
    Ok(())
}

/// A transport that drops the notifications and responses a client sends
/// before its first lifecycle-opening request: rmcp's handshake would end
/// the connection on them.
struct LenientStart<T> {
    inner: T,
    /// Whether a request that opens the lifecycle has gone through.
    started: bool,
}

/// Whether rmcp's handshake, meeting `request`, starts serving: `initialize`,
/// or a request other than `ping` and `server/discover` that carries the
/// 2026-07-28 per-request metadata.
fn opens_lifecycle(request: &ClientRequest) -> bool {
    match request {
        ClientRequest::InitializeRequest(_) => true,
        ClientRequest::PingRequest(_) | ClientRequest::DiscoverRequest(_) => false,
        other => other
            .get_meta()
            .missing_required_keys(&ProtocolVersion::V_2026_07_28)
            .is_empty(),
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for LenientStart<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let message = self.inner.receive().await?;
            if !self.started {
                let ClientJsonRpcMessage::Request(request) = &message else {
                    tracing::debug!("ignoring a notification or response before the MCP handshake");
                    continue;
                };
                self.started = opens_lifecycle(&request.request);
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Serves streamable HTTP MCP at `addr`, path `/mcp`, until the process is
/// killed. Each MCP session gets its own session id; requests made without a
/// session (protocol 2026-07-28) share one id drawn here.
///
/// Every request passes [`guard`] first: the bearer token, then `Host` and
/// `Origin`, then the body and session caps — all before the body is read.
///
/// # Errors
///
/// When `addr` is not a loopback address and no token is set (refused
/// before binding), or when the address cannot be bound.
pub(crate) async fn serve_http<S: CellService>(
    service: Arc<S>,
    addr: SocketAddr,
    mode: ServeMode,
    options: HttpOptions,
) -> anyhow::Result<()> {
    if let Some(refusal) = options.refusal(addr) {
        anyhow::bail!(refusal);
    }
    let limits = options.limits.clone();
    let sessionless = new_session_id();
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(Duration::from_secs(limits.session_idle_seconds()));
    let sessions = Arc::new(sessions);
    let mut config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(limits.max_body_bytes() as usize);
    // rmcp checks `Host` again (it accepts loopback names only, unless told
    // more); the guard has already refused everything else.
    let ip = addr.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        config.allowed_hosts.push(ip.to_string());
    }
    config
        .allowed_hosts
        .extend(limits.allowed_hosts().iter().cloned());
    if ip.is_unspecified() {
        // Bound to every interface: the guard decides which names pass.
        config.allowed_hosts.clear();
    }
    let mcp = StreamableHttpService::new(
        move || {
            Ok(McpServer::new(
                service.clone(),
                mode,
                Some(sessionless.clone()),
            ))
        },
        sessions.clone(),
        config,
    );
    let guard_state = Arc::new(Guard {
        token_digest: options.auth_token.as_deref().map(token_digest),
        limits,
        bind: addr,
        sessions,
        opening: std::sync::atomic::AtomicUsize::new(0),
    });
    let app = axum::Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn_with_state(
            guard_state.clone(),
            reject_malformed_json_rpc,
        ))
        .layer(axum::middleware::from_fn_with_state(guard_state, guard));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr().unwrap_or(addr);
    tracing::info!(%local, "serving MCP over streamable HTTP at http://{local}/mcp");
    axum::serve(listener, app)
        .await
        .context("the MCP HTTP server stopped")
}

/// How long a request body may take to arrive once its headers are in.
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What [`guard`] checks requests against.
struct Guard {
    /// SHA-256 of the bearer token, compared in constant time.
    token_digest: Option<[u8; 32]>,
    limits: crate::config::HttpLimits,
    /// The address the server is bound to (its name is an accepted `Host`).
    bind: SocketAddr,
    sessions: Arc<LocalSessionManager>,
    /// Requests without a session id in progress (each may open one).
    opening: std::sync::atomic::AtomicUsize,
}

fn token_digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

impl Guard {
    /// Whether the request carries the token (always, when none is set).
    fn authorized(&self, request: &Request<Body>) -> bool {
        let Some(expected) = &self.token_digest else {
            return true;
        };
        // The scheme is case-insensitive (RFC 9110 §11.1).
        let Some(given) = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token)
        else {
            return false;
        };
        // Digests have one length, and every byte is compared.
        let given = token_digest(given.trim());
        given
            .iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Whether the `Host` header names this server: a loopback name, the
    /// bound address, or a configured host (with or without a port).
    fn host_allowed(&self, request: &Request<Body>) -> bool {
        let Some(host) = request.headers().get(header::HOST) else {
            // Without `Host` (HTTP/1.0) there is no name to rebind.
            return true;
        };
        let Ok(host) = host.to_str() else {
            return false;
        };
        let name = host_name(host);
        let bound = match self.bind.ip() {
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        is_loopback_name(name)
            || name.eq_ignore_ascii_case(&bound)
            || self.limits.allowed_hosts().iter().any(|allowed| {
                allowed.eq_ignore_ascii_case(host) || allowed.eq_ignore_ascii_case(name)
            })
    }

    /// Whether the `Origin` header, if any, is a loopback origin or a
    /// configured one.
    fn origin_allowed(&self, request: &Request<Body>) -> bool {
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        if self
            .limits
            .allowed_origins()
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
        {
            return true;
        }
        let Some(rest) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        !rest.contains('/') && is_loopback_name(host_name(rest))
    }
}

/// The host part of a `Host` header or origin authority (`[::1]:8080` →
/// `[::1]`, `localhost:80` → `localhost`).
fn host_name(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .find(']')
            .map_or(authority, |end| &authority[..=end]);
    }
    authority.split(':').next().unwrap_or(authority)
}

fn is_loopback_name(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name == "[::1]"
        || name.eq_ignore_ascii_case("[0:0:0:0:0:0:0:1]")
        || name
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The outermost check of every HTTP request, in this order and before the
/// body is read: the bearer token (HTTP 401), `Host` and `Origin` (HTTP
/// 403, DNS-rebinding protection), a declared body over the cap (HTTP 413),
/// and a new session over the session cap (HTTP 503). Each answer is a
/// JSON-RPC error; nothing of the request reaches a session.
async fn guard(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if !guard.authorized(&request) {
        let mut response = json_rpc_error(
            StatusCode::UNAUTHORIZED,
            Value::Null,
            ErrorCode(-32001),
            "Unauthorized: send `Authorization: Bearer <token>` with the server's token".into(),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer"),
        );
        return response;
    }
    if !guard.host_allowed(&request) {
        return json_rpc_error(
            StatusCode::FORBIDDEN,
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            "Forbidden: the Host header does not name this server (add it to [http] allowed_hosts)"
                .into(),
        );
    }
    if !guard.origin_allowed(&request) {
        return json_rpc_error(
            StatusCode::FORBIDDEN,
            Value::Null,
            ErrorCode::INVALID_REQUEST,
            "Forbidden: requests from this Origin are not accepted (add it to [http] allowed_origins)".into(),
        );
    }
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > guard.limits.max_body_bytes()) {
        return body_too_large(guard.limits.max_body_bytes(), "declared by Content-Length");
    }
    let new_session =
        request.method() == Method::POST && !request.headers().contains_key("mcp-session-id");
    if new_session {
        // Requests that may be creating a session right now count too, so
        // concurrent `initialize`s cannot overshoot the cap.
        let opening = guard.opening.fetch_add(1, Ordering::AcqRel);
        let _opening = Opening(&guard.opening);
        let open = guard.sessions.sessions.read().await.len();
        if (open + opening) as u64 >= guard.limits.max_sessions() {
            return json_rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                Value::Null,
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "Too many open MCP sessions ({open}; at most {}). Close an unused session or try again later; open sessions are unaffected.",
                    guard.limits.max_sessions()
                ),
            );
        }
        return next.run(request).await;
    }
    next.run(request).await
}

/// One request that may be opening a session; counted down on drop.
struct Opening<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// HTTP 413 with a JSON-RPC error.
fn body_too_large(max: u64, how: &str) -> Response {
    json_rpc_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        Value::Null,
        ErrorCode::INVALID_REQUEST,
        format!("Invalid request: body over {max} bytes ({how})"),
    )
}

/// A JSON-RPC error response for request `id` (`null` when unknown), sent
/// with HTTP `status`.
fn json_rpc_error(status: StatusCode, id: Value, code: ErrorCode, message: String) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Answers a POST whose body is not a JSON-RPC message with a JSON-RPC error
/// (rmcp would answer with plain text), and passes everything else on.
async fn reject_malformed_json_rpc(
    axum::extract::State(guard): axum::extract::State<Arc<Guard>>,
    request: Request<Body>,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let max = guard.limits.max_body_bytes();
    let (parts, body) = request.into_parts();
    // A client that declares a body and never sends it does not hold the
    // connection (and its buffer) for ever.
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, max as usize));
    let bytes = match read.await {
        Ok(Ok(bytes)) => bytes,
        // Over the limit (or unreadable, when the client is likely gone).
        Ok(Err(error)) => return body_too_large(max, &format!("or unreadable: {error}")),
        Err(_) => {
            return json_rpc_error(
                StatusCode::REQUEST_TIMEOUT,
                Value::Null,
                ErrorCode::INVALID_REQUEST,
                format!(
                    "Invalid request: the body did not arrive within {} seconds",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            )
        }
    };
    if let Err(error) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        return match serde_json::from_slice::<Value>(&bytes) {
            Err(error) => json_rpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                ErrorCode::PARSE_ERROR,
                format!("Parse error: {error}"),
            ),
            Ok(value) => {
                let id = match value.get("id") {
                    Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
                    _ => Value::Null,
                };
                json_rpc_error(
                    StatusCode::BAD_REQUEST,
                    id,
                    ErrorCode::INVALID_REQUEST,
                    format!("Invalid request: {error}"),
                )
            }
        };
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
